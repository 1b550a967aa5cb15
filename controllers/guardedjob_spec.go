package controllers

import (
	"context"
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/gjspec"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
	"github.com/guardedjob/guardedjob/internal/lockclient"
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
	if err := checkParameters(gj); err != nil { // guardedjob_params.go
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
