package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/buildinfo"
)

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(batchv1alpha1.AddToScheme(s))
	return s
}()

// options are what every command shares: the kubeconfig flags, I/O, and the
// command's own flags.
type options struct {
	config *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	getenv func(string) string

	allNamespaces bool
	// timeout is the running command's --timeout.
	timeout    time.Duration
	wait       bool
	force, yes bool
	// params are run --param's values.
	params map[string]string
	// Direct store access (break-glass).
	redisSecret, clusterName, storeAllow string

	k8s       client.WithWatch
	namespace string
}

func newOptions(streams genericiooptions.IOStreams, getenv func(string) string) *options {
	return &options{
		config:    genericclioptions.NewConfigFlags(true),
		IOStreams: streams,
		getenv:    getenv,
	}
}

// connect builds the API client from the kubeconfig flags, as kubectl does.
func (o *options) connect() error {
	if o.k8s != nil {
		return nil
	}
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return err
	}
	if o.namespace, _, err = o.config.ToRawKubeConfigLoader().Namespace(); err != nil {
		return err
	}
	cfg.UserAgent = "kubectl-guardedjob/" + buildinfo.Resolve(version, commit).Version
	o.k8s, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme})
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

// annotate sets annotations on a GuardedJob with one merge patch of its
// metadata only, so the patch never carries a stale copy of anything else.
func (o *options) annotate(ctx context.Context, gj *batchv1alpha1.GuardedJob, kv map[string]string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": kv}})
	if err != nil {
		return err
	}
	return o.k8s.Patch(ctx, gj, client.RawPatch(types.MergePatchType, patch))
}

// requestValue is the value of a new inspect-now or unlock request: now, to the
// nanosecond, so that no two requests share one.
func requestValue() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// errNoAnswer says the manager did not answer a request in time.
type errNoAnswer struct{ timeout time.Duration }

func (e errNoAnswer) Error() string {
	return fmt.Sprintf("the manager did not answer within %s (is it running? see the manager's log, or raise --timeout)", e.timeout)
}

// waitFor watches one GuardedJob until done says so, and returns it then. It
// lists and watches as an informer does, so a watch that ends early is resumed.
func (o *options) waitFor(ctx context.Context, namespace, name string, done func(*batchv1alpha1.GuardedJob) (bool, error)) (*batchv1alpha1.GuardedJob, error) {
	var last *batchv1alpha1.GuardedJob
	_, err := watchtools.UntilWithSync(ctx, o.listWatch(&batchv1alpha1.GuardedJobList{}, namespace, name), &batchv1alpha1.GuardedJob{}, nil,
		func(ev watch.Event) (bool, error) {
			switch ev.Type {
			case watch.Deleted:
				return false, fmt.Errorf("guardedjob %s/%s was deleted", namespace, name)
			case watch.Added, watch.Modified:
				gj, ok := ev.Object.(*batchv1alpha1.GuardedJob)
				if !ok {
					return false, nil
				}
				last = gj
				return done(gj)
			}
			return false, nil
		})
	return last, err
}

// watchAll watches the GuardedJobs of a namespace ("" for all) until done says so.
func (o *options) watchAll(ctx context.Context, namespace string, done func(*batchv1alpha1.GuardedJob) (bool, error)) error {
	_, err := watchtools.UntilWithSync(ctx, o.listWatch(&batchv1alpha1.GuardedJobList{}, namespace, ""), &batchv1alpha1.GuardedJob{}, nil,
		func(ev watch.Event) (bool, error) {
			gj, ok := ev.Object.(*batchv1alpha1.GuardedJob)
			if !ok || ev.Type == watch.Deleted {
				return false, nil
			}
			return done(gj)
		})
	return err
}

// listWatch lists and watches objects of list's kind in namespace, one of them
// when name is set.
func (o *options) listWatch(list client.ObjectList, namespace, name string) cache.ListerWatcher {
	selector := func(opts *metav1.ListOptions) *client.ListOptions {
		if name != "" {
			opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}
		return &client.ListOptions{Namespace: namespace, Raw: opts}
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			l := list.DeepCopyObject().(client.ObjectList)
			return l, o.k8s.List(ctx, l, selector(&opts))
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return o.k8s.Watch(ctx, list.DeepCopyObject().(client.ObjectList), selector(&opts))
		},
	}
}

// watchJob watches a Job and calls seen with each version of it until ctx ends.
// It says nothing when the user may not watch Jobs: it only adds detail.
func (o *options) watchJob(ctx context.Context, namespace, name string, seen func(*batchv1.Job)) {
	_, _ = watchtools.UntilWithSync(ctx, o.listWatch(&batchv1.JobList{}, namespace, name), &batchv1.Job{}, nil,
		func(ev watch.Event) (bool, error) {
			if job, ok := ev.Object.(*batchv1.Job); ok && ev.Type != watch.Deleted {
				seen(job)
			}
			return false, nil
		})
}

// isForbidden says whether the API server refused a request for lack of rights.
func isForbidden(err error) bool { return apierrors.IsForbidden(err) }

// deadlineOr turns a wait that ended with its deadline into errNoAnswer.
func deadlineOr(ctx context.Context, err error, timeout time.Duration) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return errNoAnswer{timeout: timeout}
	}
	return err
}

// timeoutFlag adds --timeout, how long a command waits, and returns where the
// value goes (each command has its own default).
func timeoutFlag(cmd *cobra.Command, def time.Duration, what string) *time.Duration {
	t := new(time.Duration)
	cmd.Flags().DurationVar(t, "timeout", def, what)
	return t
}

// addStoreFlags adds the flags of direct store access (break-glass).
func (o *options) addStoreFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.redisSecret, "redis-secret", "", "read the lock store directly with the manager's store Secret NAMESPACE/NAME (admins; needs get on that Secret) instead of asking the manager; or set GUARDEDJOB_REDIS_URL")
	cmd.Flags().StringVar(&o.clusterName, "cluster-name", "", "with direct store access: this cluster's name in lease holders (default: derived from the kube-system namespace UID, as the manager does)")
	cmd.Flags().StringVar(&o.storeAllow, "store-allow", "", "with direct store access: the hosts storeRef stores may have (host patterns and CIDRs, as the manager's --store-allow); a GuardedJob's store outside them is not dialled")
}

// output is a command's -o and --no-headers.
type output struct {
	flags     *genericclioptions.PrintFlags
	noHeaders bool
}

// outputFlags adds -o and --no-headers to a command.
func outputFlags(cmd *cobra.Command) *output {
	out := &output{flags: genericclioptions.NewPrintFlags("").WithTypeSetter(scheme)}
	out.flags.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "Output format: wide, or one of json, yaml, name, go-template, go-template-file, template, templatefile, jsonpath, jsonpath-as-json, jsonpath-file, kyaml"
	cmd.Flags().BoolVar(&out.noHeaders, "no-headers", false, "When using the default or wide output, don't print headers")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return append([]string{"wide"}, out.flags.AllowedFormats()...), cobra.ShellCompDirectiveNoFileComp
	})
	return out
}

// human says whether the output is the plugin's own text (default or wide).
func (p *output) human() bool {
	f := *p.flags.OutputFormat
	return (f == "" || f == "wide") && !p.templateOnly()
}

// templateOnly is --template without -o, which kubectl reads as go-template.
func (p *output) templateOnly() bool {
	t := p.flags.TemplatePrinterFlags.TemplateArgument
	return *p.flags.OutputFormat == "" && t != nil && *t != ""
}

// wide says whether -o wide was asked for.
func (p *output) wide() bool { return *p.flags.OutputFormat == "wide" }

// check rejects an output format no printer handles, before anything is done.
func (p *output) check() error {
	if p.human() {
		return nil
	}
	if _, err := p.flags.ToPrinter(); err != nil {
		return usageError{msg: err.Error()}
	}
	return nil
}

// printObj prints an object (or a list) with the -o printer.
func (p *output) printObj(obj runtime.Object, w io.Writer) error {
	printer, err := p.flags.ToPrinter()
	if err != nil {
		return err
	}
	return printer.PrintObj(obj, w)
}
