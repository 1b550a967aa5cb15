package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/clustername"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/storeconfig"
)

// Direct store access: the plugin dials Redis itself with the manager's store
// Secret (--redis-secret) or GUARDEDJOB_REDIS_URL. Only for people who may have
// the store's credentials anyway; everyone else asks the manager.

// direct says whether the user asked for direct store access.
func (o *options) direct() bool {
	return o.redisSecret != "" || o.getenv("GUARDEDJOB_REDIS_URL") != ""
}

// stores dials lock stores on demand and keeps one client per store.
type stores struct {
	o       *options
	allow   *lockclient.AllowList
	clients map[string]*lockclient.Client
}

func newStores(o *options) (*stores, error) {
	s := &stores{o: o, clients: map[string]*lockclient.Client{}}
	if o.storeAllow != "" {
		allow, err := lockclient.ParseAllowList(o.storeAllow)
		if err != nil {
			return nil, usageError{msg: fmt.Sprintf("--store-allow: %v", err)}
		}
		// Only the manager finds the cluster's ranges; here the item would admit
		// nothing, and silently.
		if allow.WantsClusterRanges() {
			return nil, usageError{msg: "--store-allow: " + lockclient.ClusterRanges + " is the manager's; list the cluster's Service and Pod CIDRs instead"}
		}
		s.allow = allow
	}
	return s, nil
}

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
	source := fmt.Sprintf("%s Secret %s/%s", what, namespace, name)
	cfg, err := storeconfig.FromSecret(source, secret.Data)
	if err != nil {
		return nil, err
	}
	if what == "spec.lock.storeRef" && s.allow != nil {
		// A tenant names this store: dial only hosts --store-allow admits, as the
		// manager does (checked again at every connection).
		switch err := s.allow.Check(ctx, cfg.URL); {
		case errors.Is(err, lockclient.ErrNotAllowed):
			var na *lockclient.NotAllowedError
			addr := "its host"
			if errors.As(err, &na) {
				addr = na.Addr
			}
			return nil, fmt.Errorf("%s: %s is outside --store-allow; not dialled", source, addr)
		case err != nil && !errors.Is(err, lockclient.ErrInvalid):
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		cfg.Tenant, cfg.Allow = true, s.allow
	}
	if cfg.InsecureSkipVerify {
		_, _ = fmt.Fprintf(s.o.ErrOut, "warning: %s turns TLS server verification off (insecureSkipVerify)\n", source)
	}
	c, err := lockclient.Dial(cfg, lockclient.WithIdentity(id+" ("+lockclient.Redact(cfg.URL)+")"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
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

// directView reads a GuardedJob's keys in its store, as the manager would answer
// inspect-now: holders only, in the same shape (status.storeView).
func directView(ctx context.Context, st *stores, cluster string, gj *batchv1alpha1.GuardedJob) (*batchv1alpha1.StoreView, error) {
	now := time.Now()
	view := &batchv1alpha1.StoreView{ObservedAt: metav1.Time{Time: now}}
	keys := keysOf(gj, now)
	if len(keys) == 0 {
		return view, nil // nothing to look at
	}
	store, err := st.forJob(ctx, gj)
	if err != nil {
		return nil, err
	}
	view.Store = store.Identity()
	for _, k := range keys {
		state, err := store.Inspect(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("inspect %s in %s: %w", k.Lock, store.Identity(), err)
		}
		e := batchv1alpha1.StoreViewEntry{Lock: batchv1alpha1.StoreLockView{Key: k.Lock}}
		for _, r := range gj.Status.Active {
			if r.Key == k.Lock && r.OccurrenceKey == k.Occurrence {
				e.JobName, e.ScheduledTime = r.JobName, r.ScheduledTime.DeepCopy()
			}
		}
		if state.Holder != "" {
			e.Lock.Holder = leasetoken.HolderOf(state.Holder)
			e.Lock.Whose = whoseOf(state.Holder, cluster, gj)
			if state.TTL > 0 {
				e.Lock.ExpiresAt = &metav1.Time{Time: now.Add(state.TTL)}
			} else {
				e.Lock.NoExpiry = true
			}
		}
		if k.Fence != "" {
			e.Fence = &batchv1alpha1.StoreFenceView{Key: k.Fence, Value: state.Fence}
		}
		if k.Occurrence != "" {
			e.DoneMarker = &batchv1alpha1.StoreDoneMarkerView{Key: k.Occurrence, Holder: leasetoken.HolderOf(state.Done)}
		}
		view.Entries = append(view.Entries, e)
	}
	return view, nil
}

// whoseOf says whose a lease value is, as the manager says it: an active run of
// this GuardedJob, this cluster, another cluster, or a process that does not
// write GuardedJob tokens.
func whoseOf(value, cluster string, gj *batchv1alpha1.GuardedJob) batchv1alpha1.LockWhose {
	holder := leasetoken.HolderOf(value)
	for _, r := range gj.Status.Active {
		if r.Holder != "" && r.Holder == holder {
			return batchv1alpha1.LockWhoseThisGuardedJob
		}
	}
	c, _, _, ok := leasetoken.ParseHolder(value)
	switch {
	case !ok:
		return batchv1alpha1.LockWhoseForeign
	case cluster != "" && c == cluster:
		return batchv1alpha1.LockWhoseThisCluster
	default:
		return batchv1alpha1.LockWhoseOtherCluster
	}
}
