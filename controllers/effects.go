package controllers

import (
	"context"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// The effects of a GuardedJob's pass. Every write the pass makes goes through
// this file: to the API server (a run's Job and its Pods, the GuardedJob and its
// status), to a lock store (acquire, confirm, complete, release, unlock), to the
// keeper (which leases it renews) and to events. The decisions that ask for them
// live in internal/runcore and internal/due; the other actors (the stop
// controller, a shard's hand-over and resume, the identity heartbeat, the
// request objects) write on their own. While the manager is not known to lead,
// the leadership guard refuses every API server write, every event and every
// store write here but a renewal of a run's own lease (it wraps the client, the
// recorder and the stores); the keeper's bookkeeping is this process's own.
// None of these calls back into the pass.
// TestTheControllersCallOneWay keeps it so.

// acquireLease takes a run's lease: SET NX PX with its token and the fence
// counter's INCR in one script.
func (r *GuardedJobReconciler) acquireLease(ctx context.Context, store *lockclient.Client, req lockclient.AcquireRequest) (lockclient.Lease, error) {
	return store.Acquire(ctx, req)
}

// renewLease confirms a run's lease with a renewal sent now.
func (r *GuardedJobReconciler) renewLease(ctx context.Context, store *lockclient.Client, run *batchv1alpha1.ActiveRun) error {
	return store.Renew(ctx, leaseOf(run))
}

// completeLease records the run's occurrence done (its marker lives markerTTL)
// and deletes its key if it still holds the run's token. released says the
// key was deleted.
func (r *GuardedJobReconciler) completeLease(ctx context.Context, store *lockclient.Client, run *batchv1alpha1.ActiveRun, markerTTL time.Duration) (released bool, err error) {
	return store.Complete(ctx, leaseOf(run), markerTTL)
}

// releaseLease deletes the run's key if it still holds the run's token.
func (r *GuardedJobReconciler) releaseLease(ctx context.Context, store *lockclient.Client, run *batchv1alpha1.ActiveRun) error {
	return store.Release(ctx, leaseOf(run))
}

// unlockKey is a person's unlock of a key (or a done-marker) that holds holder.
func (r *GuardedJobReconciler) unlockKey(ctx context.Context, store *lockclient.Client, key, holder string, kind lockclient.UnlockKind) error {
	return store.Unlock(ctx, key, holder, kind)
}

// keep has the keeper renew a lease.
func (r *GuardedJobReconciler) keep(req lockclient.TrackRequest) error {
	return r.Keeper.Track(req)
}

// untrack stops renewing a lease.
func (r *GuardedJobReconciler) untrack(token string) {
	r.Keeper.Untrack(token)
}

// quiesce waits until no renewal of a lease is in flight, and stops renewing
// it: what the store holds afterwards is what the release finds.
func (r *GuardedJobReconciler) quiesce(ctx context.Context, token string) error {
	return r.Keeper.Quiesce(ctx, token)
}

// createJob creates a run's Job.
func (r *GuardedJobReconciler) createJob(ctx context.Context, job *batchv1.Job) error {
	return r.Create(ctx, job)
}

// patchJob patches a run's Job (its lease finalizer; its start gate where the
// manager may not update Jobs).
func (r *GuardedJobReconciler) patchJob(ctx context.Context, job *batchv1.Job, patch client.Patch) error {
	return r.Patch(ctx, job, patch)
}

// updateJob writes a run's Job whole (to open its start gate), with its
// resourceVersion as precondition: about a quarter cheaper for the API server
// than a merge patch, which it turns into JSON, merges and decodes again
// (docs/benchmarks.md, "What a write costs the API server"). The Job comes from
// the create's answer, a live read or the cache, which keeps no managedFields
// (the API server keeps its own when an update sends none).
func (r *GuardedJobReconciler) updateJob(ctx context.Context, job *batchv1.Job) error {
	return r.Update(ctx, job)
}

// deleteJob deletes a Job of the GuardedJob.
func (r *GuardedJobReconciler) deleteJob(ctx context.Context, job *batchv1.Job, opts ...client.DeleteOption) error {
	return r.Delete(ctx, job, opts...)
}

// patchPod patches a Pod of a run's Job (its scheduling gate).
func (r *GuardedJobReconciler) patchPod(ctx context.Context, pod *corev1.Pod, patch client.Patch) error {
	return r.Patch(ctx, pod, patch)
}

// patchGuardedJob patches the GuardedJob itself (its finalizer, a pause moved
// out of its spec).
func (r *GuardedJobReconciler) patchGuardedJob(ctx context.Context, gj *batchv1alpha1.GuardedJob, patch client.Patch) error {
	return r.Patch(ctx, gj, patch)
}

// updateStatus writes the GuardedJob's status with its resourceVersion as
// precondition.
func (r *GuardedJobReconciler) updateStatus(ctx context.Context, gj *batchv1alpha1.GuardedJob) error {
	return r.Status().Update(ctx, gj)
}

// patchGuardedJobStatus patches the GuardedJob's status.
func (r *GuardedJobReconciler) patchGuardedJobStatus(ctx context.Context, gj *batchv1alpha1.GuardedJob, patch client.Patch) error {
	return r.Status().Patch(ctx, gj, patch)
}

// event records an event about the GuardedJob (and the Job it concerns, if any).
func (r *GuardedJobReconciler) event(gj *batchv1alpha1.GuardedJob, job *batchv1.Job, eventType, reason, format string, args ...any) {
	if r.Recorder == nil {
		return
	}
	var related runtime.Object
	if job != nil {
		related = job
	}
	r.Recorder.Eventf(gj, related, eventType, reason, reason, format, args...)
}

// leaseOf rebuilds the lease of a run from its status snapshot.
func leaseOf(run *batchv1alpha1.ActiveRun) lockclient.Lease {
	return lockclient.Lease{
		Keys:  lockclient.Keys{Lock: run.Key, Occurrence: run.OccurrenceKey, Fence: run.FenceKey},
		Token: run.Token, TTL: run.TTL.Duration, Fence: run.Fence,
	}
}
