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
// release otherwise, or a guarded lease left to expire; then the Job's lease
// finalizer goes and the run moves to status.lastRun. The core decides each
// step (runcore.NewRelease); this loop performs its effects and delivers their
// answers. A store that does not answer keeps the run Releasing (and its lease
// renewed) until it does.
func (r *GuardedJobReconciler) release(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client) error {
	gj := s.gj
	m := runcore.NewRelease(run, r.ownsRun(gj, run))
	for {
		effect := m.Next()
		if step := effect.Step(); step != "" && effect != runcore.EndRun {
			logStep(ctx, step, "job", run.JobName) // finish is logged with its result (endRun)
		}
		switch effect {
		case runcore.Quiesce:
			if err := r.quiesce(ctx, run.Token); err != nil {
				return err
			}
			m.Deliver(runcore.ReleaseOutcome{HeldNow: r.heldNow(run.Token)})
		case runcore.ReadGuardedJob:
			job, err := r.getJobConfirmed(ctx, gj.Namespace, run.JobName)
			if err != nil {
				return err
			}
			m.Deliver(runcore.ReleaseOutcome{Job: jobView(job, runcore.ReadLive)}) // a miss is the API server's (getJobConfirmed)
		case runcore.CompleteLease, runcore.ReleaseLease:
			var released bool
			var err error
			if effect == runcore.CompleteLease {
				released, err = r.completeLease(ctx, store, run, markerTTLForRun(gj, run, s.now))
			} else {
				err = r.releaseLease(ctx, store, run)
				released = err == nil
			}
			var nh *lockclient.NotHeldError
			switch {
			case errors.As(err, &nh):
				m.Deliver(runcore.ReleaseOutcome{NotHeld: true, Holder: nh.Holder})
			case errors.Is(err, lockclient.ErrStore):
				runcore.SetStoreReachable(gj, err, s.now)
				m.Deliver(runcore.ReleaseOutcome{StoreDown: true})
			case err != nil:
				return fmt.Errorf("release lock %s: %w", run.Key, err)
			default:
				m.Deliver(runcore.ReleaseOutcome{Released: released})
			}
		case runcore.WaitForStore:
			s.requeueAfter(storeRetry)
			return nil
		default: // runcore.EndRun
			return r.endRun(ctx, s, run, m.Ended(s.now, r.ClockSkew))
		}
	}
}

// endRun records the end of a released run: its Job's lease finalizer goes,
// its lease is no longer renewed, and status.lastRun, the ledger and the lock
// say how it ended, with its events.
func (r *GuardedJobReconciler) endRun(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, end runcore.RunEnd) error {
	gj := s.gj
	if err := r.dropLeaseFinalizer(ctx, gj.Namespace, run.JobName); err != nil {
		return err
	}
	r.untrack(run.Token)
	if end.MarkerLostTo != "" {
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.LockLostReason,
			"Job %s completed, but lock %s is held by %s: the done-marker was not written", run.JobName, run.Key, leasetoken.HolderOf(end.MarkerLostTo))
	}
	if end.Result == batchv1alpha1.RunResultSucceeded {
		if end.OccurrenceDone {
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.OccurrenceDoneReason, "Marked occurrence %s done", run.OccurrenceKey)
		}
		gj.Status.LastSuccessfulTime = runcore.PtrTime(r.successTime(ctx, gj.Namespace, run.JobName, s.now))
	}
	if end.Released {
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.LockReleasedReason, "Released lock %s held by %s%s", run.Key, run.Holder, runcore.FenceSuffix(run.Fence))
		runcore.SetLock(gj, batchv1alpha1.LockStateFree, run.Key, "", 0)
	}
	logStep(ctx, runcore.Finish, "job", run.JobName, "result", end.Result)
	runcore.FinishRun(gj, *run, end.Lease, end.Result, "", end.Message, s.now)
	runcore.SetLockHeld(gj, "", "", s.now)
	return r.applyHistoryLimits(ctx, gj)
}

// successTime is when a successful run finished: its Job's completionTime (as
// CronJob reports it), or now when the Job has none or is gone. The release may
// come later than the Job's end (a store outage), and lastSuccessfulTime says when
// the work was done.
func (r *GuardedJobReconciler) successTime(ctx context.Context, namespace, jobName string, now time.Time) time.Time {
	job := &batchv1.Job{}
	if err := r.getJob(ctx, client.ObjectKey{Namespace: namespace, Name: jobName}, job); err != nil || job.Status.CompletionTime == nil {
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
	if err := r.patchJob(ctx, job, patch); err != nil && !apierrors.IsNotFound(err) {
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
			err := r.deleteJob(ctx, set.jobs[i], client.PropagationPolicy(metav1.DeletePropagationForeground))
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

// beginStop marks a run Stopping. The stop controller deletes its Job and Pods;
// the lease is kept (and renewed, where still ours) until the Pods are gone.
func (r *GuardedJobReconciler) beginStop(s *scope, run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult, msg, reason string, lock batchv1alpha1.LockState, holder string) error {
	run.Phase = batchv1alpha1.RunPhaseStopping
	runcore.SetStop(run, result, msg)
	run.StopCause = reason
	runcore.SetLock(s.gj, lock, run.Key, holder, run.Fence)
	eventType := corev1.EventTypeWarning
	if result == batchv1alpha1.RunResultFailed && reason == batchv1alpha1.JobDeletedReason {
		eventType = corev1.EventTypeNormal
	}
	runcore.SetLockHeld(s.gj, reason, msg, s.now)
	r.event(s.gj, nil, eventType, reason, "Stopping %s: %s", run.JobName, msg)
	r.pokeStopper(s.gj.Namespace, run.JobName)
	return nil
}

// stopping waits until the run's Pods are gone (the stop controller deletes them),
// then releases, as the core decides it (runcore.NewStopping).
func (r *GuardedJobReconciler) stopping(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client) error {
	r.track(s.gj, run, store, resumed)
	m := runcore.NewStopping()
	for {
		var (
			out runcore.StopOutcome
			err error
		)
		switch m.Next() {
		case runcore.CountPods:
			out.Pods, err = r.podsLeft(ctx, s.gj.Namespace, run.JobName)
		case runcore.CountPodsLive:
			out.Pods, err = r.podsLeftUncached(ctx, s.gj.Namespace, run.JobName)
		case runcore.ReadStoppedJob:
			var job *batchv1.Job
			job, err = r.getJobConfirmed(ctx, s.gj.Namespace, run.JobName)
			out.Job = jobView(job, runcore.ReadLive)
		case runcore.WaitForPods:
			s.requeueAfter(activeResync)
			return nil
		case runcore.WaitForStopper:
			return nil // the stop controller has not deleted the Job yet
		default: // runcore.GoRelease
			run.Phase = batchv1alpha1.RunPhaseReleasing
			return s.next(run)
		}
		if err != nil {
			return err
		}
		m.Deliver(out)
	}
}

// skipLate ends a run that is past its starting deadline without a Job: it was
// never attempted in time, or it holds a lease but its Job was not created in
// time. It is Skipped, and any lease it may hold is released.
func (r *GuardedJobReconciler) skipLate(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client, msg string) error {
	note, end := r.releaseUnconfirmed(ctx, s.gj, run, store, s.now)
	runcore.FinishRun(s.gj, *run, end, batchv1alpha1.RunResultSkipped, "", msg+note, s.now)
	runcore.SetLockHeld(s.gj, "", "", s.now)
	r.event(s.gj, nil, corev1.EventTypeWarning, batchv1alpha1.StartingDeadlineExceededReason, "Skipped %s: %s", run.JobName, msg)
	return nil
}

// releaseUnconfirmed carries out runcore.NewUnconfirmed: the release of a lease
// a run without a Job may hold. It returns a note for the run's message, or "",
// and the lease's end.
func (r *GuardedJobReconciler) releaseUnconfirmed(ctx context.Context, gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, store *lockclient.Client, now time.Time) (string, runcore.LeaseEnd) {
	m := runcore.NewUnconfirmed(run, r.ownsRun(gj, run))
	for {
		switch m.Next() {
		case runcore.QuiesceLease:
			ok := r.quiesce(ctx, run.Token) == nil
			if ok {
				r.untrack(run.Token)
			}
			m.Deliver(ok)
		case runcore.DeleteKey:
			err := r.releaseLease(ctx, store, run)
			m.Deliver(err == nil || errors.Is(err, lockclient.ErrNotHeld))
		default:
			return m.Ended(now, r.ClockSkew)
		}
	}
}
