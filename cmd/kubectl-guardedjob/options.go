package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/clustername"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/storeconfig"
)

// options are the flags every command shares, and its I/O.
type options struct {
	namespace     string
	allNamespaces bool
	kubeconfig    string
	kubeContext   string
	redisSecret   string
	clusterName   string
	wait          bool
	timeout       time.Duration
	force         bool
	yes           bool

	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	k8s client.Client
}

type command struct {
	args  int
	flags func(fs *flag.FlagSet, o *options)
	run   func(ctx context.Context, o *options, args []string) error
}

var commands = map[string]command{
	"run":     {args: 1, flags: runFlags, run: runCmd},
	"suspend": {args: 1, run: func(ctx context.Context, o *options, a []string) error { return setSuspend(ctx, o, a[0], true) }},
	"resume":  {args: 1, run: func(ctx context.Context, o *options, a []string) error { return setSuspend(ctx, o, a[0], false) }},
	"status":  {args: 1, flags: storeFlags, run: statusCmd},
	"locks":   {args: 0, flags: locksFlags, run: locksCmd},
	"unlock":  {args: 1, flags: unlockFlags, run: unlockCmd},
}

func runFlags(fs *flag.FlagSet, o *options) {
	fs.BoolVar(&o.wait, "wait", false, "wait until the run ends and show its result")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the manager (and, with --wait, for the run)")
}

func storeFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.redisSecret, "redis-secret", "", "NAMESPACE/NAME of the manager's store Secret")
	fs.StringVar(&o.clusterName, "cluster-name", "", "this cluster's name in lease holders")
}

func locksFlags(fs *flag.FlagSet, o *options) {
	storeFlags(fs, o)
	fs.BoolVar(&o.allNamespaces, "A", false, "every namespace")
	fs.BoolVar(&o.allNamespaces, "all-namespaces", false, "every namespace")
}

func unlockFlags(fs *flag.FlagSet, o *options) {
	storeFlags(fs, o)
	fs.BoolVar(&o.force, "force", false, "required: unlock deletes keys other holders rely on")
	fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation")
}

// parse reads flags anywhere among the arguments (kubectl style: NAME may come
// first), and connects to the API server.
func (o *options) parse(name string, args []string, extra func(*flag.FlagSet, *options)) ([]string, error) {
	fs := flag.NewFlagSet("kubectl guardedjob "+name, flag.ContinueOnError)
	fs.SetOutput(o.stderr)
	fs.StringVar(&o.namespace, "n", "", "namespace")
	fs.StringVar(&o.namespace, "namespace", "", "namespace")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file")
	fs.StringVar(&o.kubeContext, "context", "", "kubeconfig context")
	if extra != nil {
		extra(fs, o)
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return positional, nil
}

// connect builds the API client from the kubeconfig, as kubectl would.
func (o *options) connect() error {
	if o.k8s != nil {
		return nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.kubeconfig != "" {
		rules.ExplicitPath = o.kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.kubeContext})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	if o.namespace == "" {
		if o.namespace, _, err = cc.Namespace(); err != nil {
			return fmt.Errorf("kubeconfig namespace: %w", err)
		}
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(batchv1alpha1.AddToScheme(scheme))
	cfg.UserAgent = "kubectl-guardedjob"
	o.k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	return err
}

func (o *options) get(ctx context.Context, name string) (*batchv1alpha1.GuardedJob, error) {
	if err := o.connect(); err != nil {
		return nil, err
	}
	gj := &batchv1alpha1.GuardedJob{}
	if err := o.k8s.Get(ctx, client.ObjectKey{Namespace: o.namespace, Name: name}, gj); err != nil {
		return nil, err
	}
	return gj, nil
}

// stores dials lock stores on demand and keeps one client per store.
type stores struct {
	o       *options
	clients map[string]*lockclient.Client
}

func newStores(o *options) *stores { return &stores{o: o, clients: map[string]*lockclient.Client{}} }

func (s *stores) close() {
	for _, c := range s.clients {
		_ = c.Close()
	}
}

// forJob returns the store a GuardedJob's locks live in: its storeRef Secret, or
// the manager's store from --redis-secret or GUARDEDJOB_REDIS_URL. Errors never
// hold the URL or password.
func (s *stores) forJob(ctx context.Context, gj *batchv1alpha1.GuardedJob) (*lockclient.Client, error) {
	if ref := gj.Spec.Lock.StoreRef; ref != nil {
		return s.fromSecret(ctx, gj.Namespace, ref.Name, "spec.lock.storeRef")
	}
	if s.o.redisSecret != "" {
		ns, name, ok := strings.Cut(s.o.redisSecret, "/")
		if !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("--redis-secret %q must be NAMESPACE/NAME", s.o.redisSecret)
		}
		return s.fromSecret(ctx, ns, name, "--redis-secret")
	}
	url := s.o.getenv("GUARDEDJOB_REDIS_URL")
	if url == "" {
		return nil, errors.New("no lock store: pass --redis-secret NAMESPACE/NAME (the manager's store Secret) or set GUARDEDJOB_REDIS_URL")
	}
	if c, ok := s.clients["env"]; ok {
		return c, nil
	}
	c, err := lockclient.Dial(lockclient.Config{URL: url}, lockclient.WithIdentity(lockclient.Redact(url)))
	if err != nil {
		return nil, fmt.Errorf("GUARDEDJOB_REDIS_URL: %w", err)
	}
	s.clients["env"] = c
	return c, nil
}

func (s *stores) fromSecret(ctx context.Context, namespace, name, what string) (*lockclient.Client, error) {
	id := "secret:" + namespace + "/" + name
	if c, ok := s.clients[id]; ok {
		return c, nil
	}
	secret := &corev1.Secret{}
	if err := s.o.k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret); err != nil {
		return nil, fmt.Errorf("read %s Secret %s/%s: %w", what, namespace, name, err)
	}
	cfg, err := storeconfig.FromSecret(fmt.Sprintf("%s Secret %s/%s", what, namespace, name), secret.Data)
	if err != nil {
		return nil, err
	}
	if cfg.InsecureSkipVerify {
		_, _ = fmt.Fprintf(s.o.stderr, "warning: %s Secret %s/%s turns TLS server verification off (insecureSkipVerify)\n", what, namespace, name)
	}
	c, err := lockclient.Dial(cfg, lockclient.WithIdentity(id+" ("+lockclient.Redact(cfg.URL)+")"))
	if err != nil {
		return nil, fmt.Errorf("%s Secret %s/%s: %w", what, namespace, name, err)
	}
	s.clients[id] = c
	return c, nil
}

// thisCluster is --cluster-name, or the name the manager derives from the
// kube-system namespace UID; empty if neither is known (the user may not read
// namespaces).
func (o *options) thisCluster(ctx context.Context) string {
	if o.clusterName != "" {
		return o.clusterName
	}
	ns := &corev1.Namespace{}
	if err := o.k8s.Get(ctx, client.ObjectKey{Name: clustername.Namespace}, ns); err != nil {
		return ""
	}
	o.clusterName = clustername.FromNamespaceUID(string(ns.UID))
	return o.clusterName
}

// exitCoder lets a command choose its exit code (run --wait: 1 when the run did
// not succeed).
type exitCoder interface{ ExitCode() int }

func asExitCoder(err error, target *exitCoder) bool { return errors.As(err, target) }
