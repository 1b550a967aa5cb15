package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/gjspec"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runparams"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// compiledSpec is what a valid spec turns into: parsed schedule and templates, and
// the store the lease lives in.
type compiledSpec struct {
	rules *gjspec.Rules
	store *lockclient.Client
	// confined is true for the manager's shared store, where keys must stay inside
	// the namespace's prefix or a granted one.
	confined bool
	// guard is the pod guard a run gets (lock.podGuard), or nil.
	guard *batchv1alpha1.RunPodGuard
}

// keys renders the keys of the occurrence at scheduled and checks them against the
// store's rules. Errors are *specerror.Error.
func (c *compiledSpec) keys(r *GuardedJobReconciler, gj *batchv1alpha1.GuardedJob, scheduled time.Time) (lockclient.Keys, error) {
	k, err := c.rules.Keys(scheduled)
	if err != nil {
		return k, err
	}
	if c.confined {
		if err := r.KeyGrants.CheckKeys(gj.Namespace, k.Lock, k.Occurrence, k.Fence); err != nil {
			return k, err
		}
		if err := r.Grants.Agree(gj.Namespace, k.Lock, k.Occurrence, k.Fence); err != nil {
			return k, err
		}
	}
	return k, nil
}

// compile checks everything about the spec that the CRD schema cannot: cron syntax,
// time zone, templates, key rules and lease timing. Errors are *specerror.Error (the
// user must fix the spec) or plain errors (retry).
func (r *GuardedJobReconciler) compile(ctx context.Context, gj *batchv1alpha1.GuardedJob) (*compiledSpec, error) {
	c := &compiledSpec{}
	var err error
	if c.rules, err = gjspec.Compile(gj); err != nil {
		return nil, err
	}
	if err := checkParameters(gj); err != nil {
		return nil, err
	}
	if c.store, c.confined, err = r.storeFor(ctx, gj); err != nil {
		return nil, err
	}
	timing := leasetiming.Timing{
		TTL: gj.Spec.Lock.TTLOrDefault(), RenewInterval: gj.Spec.Lock.RenewIntervalOrDefault(), PodGrace: gj.Spec.PodGracePeriod(),
		CallTimeout:    c.store.Timeout(),
		LeaderElection: r.LeaderElection, LeaderLeaseDuration: r.LeaderLeaseDuration, LeaderRetryPeriod: r.LeaderRetryPeriod,
	}
	if err := timing.Check(); err != nil {
		return nil, err
	}
	if c.guard, err = r.compilePodGuard(ctx, gj); err != nil {
		return nil, err
	}
	// Render once with a sample occurrence so that a bad key is reported now, not
	// at 3 a.m. when the run is due.
	if _, err := c.keys(r, gj, c.rules.Schedule.Next(gj.CreationTimestamp.Time)); err != nil {
		return nil, err
	}
	return c, nil
}

// warnFixedKeyWithAllow warns (once per spec generation) when concurrencyPolicy
// Allow meets a lock key that is the same for every occurrence: the runs then
// wait for each other's lease, so Allow behaves like Forbid.
func (r *GuardedJobReconciler) warnFixedKeyWithAllow(gj *batchv1alpha1.GuardedJob, spec *compiledSpec) {
	if gj.Spec.ConcurrencyPolicyOrDefault() != batchv1alpha1.AllowConcurrent {
		return
	}
	at := func(t time.Time) string {
		k, _ := spec.rules.LockKey(t)
		return k
	}
	first := spec.rules.Schedule.Next(gj.CreationTimestamp.Time)
	if key := at(first); key == at(spec.rules.Schedule.Next(first)) {
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.FixedKeyWithAllowReason,
			"concurrencyPolicy Allow with lock.key %q, which is the same for every occurrence: overlapping runs wait for each other's lease (onBusy applies), as with Forbid; use {{ .ScheduledTime }} in lock.key to let them overlap", key)
	}
}

// checkParameters reports what the schema cannot check of spec.parameters: a
// pattern that does not compile (Ready=False, InvalidParameters).
func checkParameters(gj *batchv1alpha1.GuardedJob) error {
	if err := runparams.CheckDeclarations(gj.Spec.Parameters); err != nil {
		return specerror.Errorf(batchv1alpha1.InvalidParametersReason, "%v", err)
	}
	return nil
}
