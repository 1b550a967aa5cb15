package controllers

import (
	"context"
	"text/template"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/schedule"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// compiledSpec is what a valid spec turns into: parsed schedule and templates, and
// the store the lease lives in.
type compiledSpec struct {
	schedule *schedule.Schedule
	lockKey  *template.Template
	occKey   *template.Template
	fenceKey *template.Template
	store    *lockclient.Client
	// confined is true for the manager's shared store, where keys must stay inside
	// the namespace's prefix or a granted one.
	confined bool
}

// keys renders the keys of the occurrence at scheduled and checks them against the
// store's rules. Errors are *specerror.Error.
func (c *compiledSpec) keys(r *GuardedJobReconciler, gj *batchv1alpha1.GuardedJob, scheduled KeyData) (lockclient.Keys, error) {
	var k lockclient.Keys
	var err error
	if k.Lock, err = RenderKey("spec.lock.key", c.lockKey, scheduled); err != nil {
		return k, err
	}
	scheduled.Key = k.Lock
	if k.Occurrence, err = RenderKey("spec.lock.occurrenceKey", c.occKey, scheduled); err != nil {
		return k, err
	}
	if gj.Spec.Fencing.PolicyOrDefault() != batchv1alpha1.FencingNone {
		if k.Fence, err = RenderKey("spec.fencing.key", c.fenceKey, scheduled); err != nil {
			return k, err
		}
	}
	if k.Lock == k.Occurrence || k.Lock == k.Fence || k.Occurrence == k.Fence {
		return k, &specerror.Error{Reason: batchv1alpha1.InvalidKeyReason,
			Message: "spec.lock.key, spec.lock.occurrenceKey and spec.fencing.key must render to different keys, got " + k.Lock + ", " + k.Occurrence + ", " + k.Fence}
	}
	if c.confined {
		if err := r.KeyGrants.CheckKeys(gj.Namespace, k.Lock, k.Occurrence, k.Fence); err != nil {
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
	if c.schedule, err = schedule.Parse(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault()); err != nil {
		return nil, err
	}
	if c.lockKey, err = ParseKeyTemplate("spec.lock.key", gj.Spec.Lock.Key); err != nil {
		return nil, err
	}
	if c.occKey, err = ParseKeyTemplate("spec.lock.occurrenceKey", gj.Spec.Lock.OccurrenceKeyTemplate()); err != nil {
		return nil, err
	}
	if c.fenceKey, err = ParseKeyTemplate("spec.fencing.key", gj.Spec.Fencing.KeyTemplate()); err != nil {
		return nil, err
	}
	if c.store, c.confined, err = r.storeFor(ctx, gj); err != nil {
		return nil, err
	}
	timing := LeaseTiming{
		TTL: gj.Spec.Lock.TTLOrDefault(), RenewInterval: gj.Spec.Lock.RenewIntervalOrDefault(), PodGrace: gj.Spec.PodGracePeriod(),
		CallTimeout:    c.store.Timeout(),
		LeaderElection: r.LeaderElection, LeaderLeaseDuration: r.LeaderLeaseDuration, LeaderRetryPeriod: r.LeaderRetryPeriod,
	}
	if err := timing.Check(); err != nil {
		return nil, err
	}
	// Render once with a sample occurrence so that a bad key is reported now, not
	// at 3 a.m. when the run is due.
	sample := KeyData{ScheduledTime: c.schedule.Next(gj.CreationTimestamp.Time), Namespace: gj.Namespace, Name: gj.Name}
	if _, err := c.keys(r, gj, sample); err != nil {
		return nil, err
	}
	return c, nil
}
