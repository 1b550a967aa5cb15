package controllers

import (
	"context"
	"errors"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// Sharding. Several managers, each with its own leader election, serve disjoint
// sets of GuardedJobs: a manager started with --watch-label-selector caches, and so
// reconciles, only the GuardedJobs its selector matches. Jobs and Pods are cached
// by every shard (a moved GuardedJob's Job keeps its labels), but a shard acts only
// on the Jobs of the GuardedJobs in its own cache.
//
// Relabelling a GuardedJob moves it, with its runs in flight:
//   - the API server tells the old shard's watch that the object is gone, and the
//     new shard's that it was added. Every status write is made with a
//     resourceVersion precondition and the relabel changed the resourceVersion, so
//     a pass of the old shard still in flight can write nothing more: the new
//     shard is the only writer from the relabel on;
//   - the old shard stops renewing the object's leases (it never releases them),
//     and neither deletes nor stops its Jobs: a GuardedJob missing from a shard's
//     cache is not taken for deleted until the API server says so;
//   - the new shard renews the recorded leases (one pipeline per store) before it
//     acts on the object, as a new leader does, then resumes the runs from status.
// Both shards may renew the same token for a moment; that is harmless (compare
// token, then PEXPIRE). The lease lapses only if the new shard's first pass comes
// later than the lease has left (ttl - renewInterval at worst).

// CacheOptionsFor is CacheOptions for a manager that serves only the GuardedJobs
// selector matches; nil or empty serves every GuardedJob.
func CacheOptionsFor(selector labels.Selector) cache.Options {
	o := CacheOptions()
	if selector != nil && !selector.Empty() {
		o.ByObject[&batchv1alpha1.GuardedJob{}] = cache.ByObject{Label: selector}
	}
	return o
}

// ParseShardSelector parses --watch-label-selector: a label selector in kubectl's
// syntax (sharding.guardedjob.dev/key=a, !sharding.guardedjob.dev/key); empty
// selects every GuardedJob.
func ParseShardSelector(s string) (labels.Selector, error) {
	if s == "" {
		return labels.Everything(), nil
	}
	return labels.Parse(s)
}

// inShard says whether a GuardedJob's labels match a shard's selector (nil: every
// GuardedJob).
func inShard(selector labels.Selector, gj *batchv1alpha1.GuardedJob) bool {
	return selector == nil || selector.Matches(labels.Set(gj.Labels))
}

// judgesOrphans says whether a shard stops a Job whose GuardedJob is not in its
// cache when the API server confirms that GuardedJob gone: the shard whose
// selector matches the Job's labels (which carry the ShardLabel of the GuardedJob
// that created it), so exactly one shard does, and the others never ask the API
// server about Jobs of other shards.
func judgesOrphans(selector labels.Selector, job *batchv1.Job) bool {
	return selector == nil || selector.Matches(labels.Set(job.Labels))
}

// shardLabelOnJob copies the GuardedJob's ShardLabel onto its new Job (see
// judgesOrphans).
func shardLabelOnJob(gj *batchv1alpha1.GuardedJob, job *batchv1.Job) {
	v, ok := gj.Labels[batchv1alpha1.ShardLabel]
	if !ok {
		delete(job.Labels, batchv1alpha1.ShardLabel)
		return
	}
	if job.Labels == nil {
		job.Labels = map[string]string{}
	}
	job.Labels[batchv1alpha1.ShardLabel] = v
}

// firstSight renews, before anything else is done with a GuardedJob this manager
// has not reconciled since it became the leader, the leases of its runs that the
// keeper does not renew yet: the object has just moved into this shard, and the
// shard it came from stops renewing them. Leases of objects present at the start
// are already renewed by resumeLeases. A lease found lost is reported as any
// renewal is, and the run's pass handles it.
func (r *GuardedJobReconciler) firstSight(ctx context.Context, gj *batchv1alpha1.GuardedJob) {
	key := types.NamespacedName{Namespace: gj.Namespace, Name: gj.Name}
	if _, seen := r.known.LoadOrStore(key, struct{}{}); seen {
		return
	}
	var reqs []lockclient.TrackRequest
	for i := range gj.Status.Active {
		run := &gj.Status.Active[i]
		if !r.ownsRun(gj, run) || run.Phase == batchv1alpha1.RunPhaseAcquiring {
			continue
		}
		if _, tracked := r.Keeper.Get(run.Token); tracked {
			continue
		}
		store, err := r.runStore(ctx, gj, run)
		if err != nil {
			continue // advanceRun stops a run whose store cannot be resolved
		}
		reqs = append(reqs, r.trackRequest(gj, run, store, resumed))
	}
	if len(reqs) == 0 {
		return
	}
	started := r.Clock.Now()
	lost, failed := 0, 0
	for _, err := range r.Keeper.ResumeAll(ctx, reqs) {
		switch {
		case errors.Is(err, lockclient.ErrNotHeld):
			lost++
		case err != nil:
			failed++
		}
	}
	ctrl.LoggerFrom(ctx).Info("Resumed the leases of a GuardedJob new to this manager", "runs", len(reqs), "lost", lost, "storeErrors", failed,
		"took", r.Clock.Since(started).Round(time.Millisecond).String())
}

// leftShard handles a GuardedJob that is not in this manager's cache: deleted,
// or moved to another shard. Either way this manager no longer renews its leases;
// it neither releases them nor stops the Jobs (the new shard renews and resumes
// them; the stop controller stops the Job of a GuardedJob the API server says is
// gone).
func (r *GuardedJobReconciler) leftShard(key types.NamespacedName) {
	r.superseded.Delete(key)
	guardedJobMetrics.forget(key)
	if _, ok := r.known.LoadAndDelete(key); ok {
		r.untrackOwner(key.Namespace, key.Name)
	}
}

// untrackMissing stops renewing the leases resumed at the start for GuardedJobs
// that the cache does not hold once it has synced: they left this shard between
// the resume's list and the cache's, so no watch event would ever say so.
func (r *GuardedJobReconciler) untrackMissing(ctx context.Context, resumedObjects []types.NamespacedName) {
	for _, key := range resumedObjects {
		err := r.Get(ctx, key, &batchv1alpha1.GuardedJob{})
		if apierrors.IsNotFound(err) {
			r.leftShard(key)
		}
	}
}
