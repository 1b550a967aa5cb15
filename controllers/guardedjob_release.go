package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// release ends a run whose Pods are gone: done-marker + release on success,
// release otherwise; then the Job's lease finalizer goes and the run moves to
// status.lastRun. A store that does not answer keeps the run Releasing (and its
// lease renewed) until it does.
func (r *GuardedJobReconciler) release(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client) error {
	gj := s.gj
	result, msg := stopOf(run)
	lease := leaseOf(run)
	// A lease that re-acquires (FailOpen) must not have a renewal in flight while
	// it is released: that renewal could take the key again right after the DEL.
	if err := r.Keeper.Quiesce(ctx, run.Token); err != nil {
		return err
	}
	// An unguarded run holds a lease only if the keeper took the key for it since.
	st, tracked := r.Keeper.Get(run.Token)
	heldNow := tracked && st.Confirmed && st.State == lockclient.StateHeld
	// A guarded run that did not end cleanly may have a Pod the API server no
	// longer shows: its lease is left to expire, so that the Pod's guard stops it
	// before another holder can start.
	leaveToExpire, err := r.guardedEndUnclean(ctx, gj.Namespace, run)
	if err != nil {
		return err
	}
	released := false
	switch {
	case !r.ownsRun(s.gj, run):
		// Minted under another cluster name: never released or completed here.
	case leaveToExpire:
		note := fmt.Sprintf("lease %s left to expire (within its ttl %s): a Pod of this run may still run where the API server does not show it, and its pod guard stops it first",
			run.Key, run.TTL.Duration)
		if result == batchv1alpha1.RunResultSucceeded {
			note += "; the done-marker was not written"
		}
		if msg == "" {
			msg = note
		} else {
			msg += "; " + note
		}
	case run.Unguarded && !heldNow:
	case result == batchv1alpha1.RunResultSucceeded:
		released, err = store.Complete(ctx, lease, markerTTLForRun(gj, run, s.now))
	default:
		err = store.Release(ctx, lease)
		released = err == nil
	}
	var nh *lockclient.NotHeldError
	switch {
	case errors.As(err, &nh):
		// Someone else holds the key now or it expired: nothing of ours to delete.
		if result == batchv1alpha1.RunResultSucceeded && nh.Holder != "" {
			r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.LockLostReason,
				"Job %s completed, but lock %s is held by %s: the done-marker was not written", run.JobName, run.Key, leasetoken.HolderOf(nh.Holder))
		}
	case errors.Is(err, lockclient.ErrStore):
		runcore.SetStoreReachable(gj, err, s.now)
		s.requeueAfter(storeRetry)
		return nil
	case err != nil:
		return fmt.Errorf("release lock %s: %w", run.Key, err)
	}

	if err := r.dropLeaseFinalizer(ctx, gj.Namespace, run.JobName); err != nil {
		return err
	}
	r.Keeper.Untrack(run.Token)
	if result == batchv1alpha1.RunResultSucceeded {
		if nh == nil && !leaveToExpire && r.ownsRun(gj, run) && (!run.Unguarded || heldNow) {
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.OccurrenceDoneReason, "Marked occurrence %s done", run.OccurrenceKey)
		}
		gj.Status.LastSuccessfulTime = runcore.PtrTime(r.successTime(ctx, gj.Namespace, run.JobName, s.now))
	}
	if released {
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.LockReleasedReason, "Released lock %s held by %s%s", run.Key, run.Holder, runcore.FenceSuffix(run.Fence))
		runcore.SetLock(gj, batchv1alpha1.LockStateFree, run.Key, "", 0)
	}
	end := runcore.Released
	switch {
	case !r.ownsRun(gj, run) || run.Unguarded && !heldNow:
		end = runcore.NeverHeld // not this manager's token, or it never took the key
	case leaveToExpire:
		end = runcore.LeftToExpire(run, s.now, r.ClockSkew)
	}
	logStep(ctx, runcore.Finish, "job", run.JobName, "result", result)
	runcore.FinishRun(gj, *run, end, result, "", msg, s.now)
	runcore.SetLockHeld(gj, "", "", s.now)
	return r.applyHistoryLimits(ctx, gj)
}

// successTime is when a successful run finished: its Job's completionTime (as
// CronJob reports it), or now when the Job has none or is gone. The release may
// come later than the Job's end (a store outage), and lastSuccessfulTime says when
// the work was done.
func (r *GuardedJobReconciler) successTime(ctx context.Context, namespace, jobName string, now time.Time) time.Time {
	job := &batchv1.Job{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: jobName}, job); err != nil || job.Status.CompletionTime == nil {
		return now
	}
	return job.Status.CompletionTime.Time
}

// dropLeaseFinalizer removes the lease finalizer from a Job, once its lease is
// released.
func (r *GuardedJobReconciler) dropLeaseFinalizer(ctx context.Context, namespace, name string) error {
	job, err := r.getJobConfirmed(ctx, namespace, name)
	if err != nil || job == nil {
		return err
	}
	if !controllerutil.ContainsFinalizer(job, batchv1alpha1.LeaseFinalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(job.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(job, batchv1alpha1.LeaseFinalizer)
	if err := r.Patch(ctx, job, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove lease finalizer from job %s: %w", name, err)
	}
	return nil
}

// applyHistoryLimits deletes the oldest finished Jobs beyond the history limits.
// Jobs being deleted or still part of a run are left alone.
func (r *GuardedJobReconciler) applyHistoryLimits(ctx context.Context, gj *batchv1alpha1.GuardedJob) error {
	jobs, err := r.ownedJobs(ctx, gj)
	if err != nil {
		return err
	}
	var succeeded, failed []*batchv1.Job
	for i := range jobs {
		j := &jobs[i]
		if !j.DeletionTimestamp.IsZero() || runcore.RunByName(gj, j.Name) != nil {
			continue
		}
		switch kind, ok := jobFinished(j); {
		case ok && kind == batchv1.JobComplete:
			succeeded = append(succeeded, j)
		case ok:
			failed = append(failed, j)
		}
	}
	for _, set := range []struct {
		jobs  []*batchv1.Job
		limit int32
		field string
	}{{succeeded, gj.Spec.SuccessfulHistoryLimit(), "successfulJobsHistoryLimit"}, {failed, gj.Spec.FailedHistoryLimit(), "failedJobsHistoryLimit"}} {
		sortJobsByAge(set.jobs)
		for i := 0; i < len(set.jobs)-int(set.limit); i++ {
			err := r.Delete(ctx, set.jobs[i], client.PropagationPolicy(metav1.DeletePropagationForeground))
			if apierrors.IsNotFound(err) {
				continue // someone else deleted it
			}
			if err != nil {
				return fmt.Errorf("delete old job %s: %w", set.jobs[i].Name, err)
			}
			r.event(gj, set.jobs[i], corev1.EventTypeNormal, batchv1alpha1.JobDeletedReason,
				"Deleted Job %s: %s is %d", set.jobs[i].Name, set.field, set.limit)
		}
	}
	return nil
}

// ownedJobs lists the Jobs controlled by gj.
func (r *GuardedJobReconciler) ownedJobs(ctx context.Context, gj *batchv1alpha1.GuardedJob) ([]batchv1.Job, error) {
	list := &batchv1.JobList{}
	if err := r.List(ctx, list, client.InNamespace(gj.Namespace), client.MatchingFields{jobOwnerKey: gj.Name}); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	out := list.Items[:0]
	for _, j := range list.Items {
		if metav1.IsControlledBy(&j, gj) {
			out = append(out, j)
		}
	}
	return out, nil
}

// sortJobsByAge orders Jobs oldest first. Creation times have a one-second
// resolution, so ties go by the occurrence the Job ran for, then by name.
func sortJobsByAge(jobs []*batchv1.Job) {
	slices.SortFunc(jobs, func(a, b *batchv1.Job) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		if c := strings.Compare(a.Annotations[batchv1alpha1.ScheduledTimeAnnotation], b.Annotations[batchv1alpha1.ScheduledTimeAnnotation]); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}
