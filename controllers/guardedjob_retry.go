package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// Trying a scheduled occurrence again until some cluster has done it
// (spec.retryOccurrence). A retry is an ordinary run of the same occurrence:
// it acquires through the lock like any run, so it never runs beside another
// cluster's run, and the done-marker a successful run writes (in any cluster)
// turns every later try into a skip. Tries stop at the next occurrence at the
// latest: the done-marker lives until the latest start of its occurrence any
// cluster may make (latestStart), which counts from the next occurrence, so no
// retry can start after the marker that would refuse it has expired.

// maxRetryMessage bounds status.retry.lastMessage.
const maxRetryMessage = 256

// retryUntil is when tries of the occurrence at scheduled stop: its scheduled
// time plus spec.retryOccurrence.within, or the next occurrence, whichever is
// first.
func retryUntil(gj *batchv1alpha1.GuardedJob, scheduled, now time.Time) time.Time {
	until := scheduled.Add(gj.Spec.RetryOccurrence.Within.Duration)
	sched, _ := schedule.Parse(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	if next := leasetiming.NextOccurrence(sched, scheduled, now); next.After(scheduled) && next.Before(until) {
		until = next
	}
	return until
}

// retryBusyUntil is how long a run that finds its key busy waits for it: with
// spec.retryOccurrence, until its occurrence's tries stop (the holder's run
// may fail, and then this cluster's run does the occurrence); ok is false
// without it. Backfill and run-now runs wait as onBusy says.
func retryBusyUntil(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, now time.Time) (time.Time, bool) {
	if gj.Spec.RetryOccurrence == nil || run.Backfill != "" || run.RunNow != "" {
		return time.Time{}, false
	}
	return retryUntil(gj, run.ScheduledTime.Time, now), true
}

// retryable says whether a run that ended with result leaves its occurrence to
// be tried again: it did not succeed, and nobody chose to end it (a run that
// concurrencyPolicy Replace replaced, or whose Job a person deleted, or whose
// GuardedJob is being deleted).
func retryable(run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult) bool {
	switch result {
	case batchv1alpha1.RunResultMaxHoldExceeded, batchv1alpha1.RunResultLockLost,
		batchv1alpha1.RunResultGuardStopped, batchv1alpha1.RunResultStoreUnavailable:
		return true
	case batchv1alpha1.RunResultFailed:
		return run.StopCause != batchv1alpha1.JobStoppedReason && run.StopCause != batchv1alpha1.JobDeletedReason
	}
	return false
}

// noteRetry is told of every scheduled run that ends (noteRunEnd): a run that
// did its occurrence, or found it done, ends the retry, and so does a run a
// person ended (its Job deleted, or replaced); a run that ended without
// success leaves the occurrence to be tried again after a backoff; a run that
// waited for a busy key until the tries stopped leaves it to be abandoned.
func noteRetry(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult, now time.Time) {
	rt := gj.Status.Retry
	same := rt != nil && rt.ScheduledTime.Equal(&run.ScheduledTime)
	if result != batchv1alpha1.RunResultBusy && !retryable(run, result) {
		if same {
			gj.Status.Retry = nil
		}
		return
	}
	if !same {
		if rt != nil && rt.ScheduledTime.After(run.ScheduledTime.Time) {
			return // a newer occurrence is being tried
		}
		rt = &batchv1alpha1.OccurrenceRetryStatus{ScheduledTime: run.ScheduledTime, Until: metav1.Time{Time: retryUntil(gj, run.ScheduledTime.Time, now)}}
	}
	rt.NotBefore = &metav1.Time{Time: now.Add(retryBackoff(gj, rt.Attempts))}
	rt.LastResult, rt.LastMessage = result, ""
	if lr := gj.Status.LastRun; lr != nil {
		rt.LastMessage = clip(lr.Message, maxRetryMessage)
	}
	gj.Status.Retry = rt
}

// retryBackoff is the wait before retry attempts+1: lock.busyRetry's initial
// wait, doubled for each retry already made, at most its max.
func retryBackoff(gj *batchv1alpha1.GuardedJob, attempts int32) time.Duration {
	d, limit := gj.Spec.Lock.BusyRetryInitial(), gj.Spec.Lock.BusyRetryMax()
	for range attempts {
		if d >= limit {
			break
		}
		d *= 2
	}
	return min(d, limit)
}

// startRetry starts the next try of the occurrence in status.retry when its
// backoff has passed and no run is active (nor while suspended), or abandons
// it once its tries have stopped: its until passed, a newer occurrence was
// scheduled, or spec.retryOccurrence was removed. It reports whether a retry
// waits (a backfill then waits for it).
func (r *GuardedJobReconciler) startRetry(ctx context.Context, s *scope, spec *compiledSpec) (bool, error) {
	gj := s.gj
	rt := gj.Status.Retry
	if rt == nil {
		return false, nil
	}
	occurrence := rt.ScheduledTime.UTC().Format(time.RFC3339)
	abandon := func(why string) (bool, error) {
		gj.Status.Retry = nil
		guardedJobMetrics.occurrenceAbandoned(gj)
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.OccurrenceAbandonedReason,
			"Gave up occurrence %s: %s, and no cluster sharing the lock store has done it (%d retries; the last run ended %s: %s)",
			occurrence, why, rt.Attempts, rt.LastResult, rt.LastMessage)
		return false, nil
	}
	switch {
	case gj.Spec.RetryOccurrence == nil:
		return abandon("spec.retryOccurrence was removed")
	case gj.Status.LastScheduleTime != nil && gj.Status.LastScheduleTime.After(rt.ScheduledTime.Time):
		return abandon("the occurrence at " + gj.Status.LastScheduleTime.UTC().Format(time.RFC3339) + " is due")
	case slices.ContainsFunc(gj.Status.Active, func(a batchv1alpha1.ActiveRun) bool { return a.ScheduledTime.Equal(&rt.ScheduledTime) }):
		return true, nil // a run of it goes on: its end decides, and brings the next pass
	case !s.now.Before(rt.Until.Time):
		return abandon("its tries stopped at " + rt.Until.UTC().Format(time.RFC3339) + " (spec.retryOccurrence.within, or the next occurrence)")
	case len(gj.Status.Active) > 0 || gj.SuspendedAt(s.now):
		s.requeueAt(rt.Until.Time)
		return true, nil // a run's end or the resume brings the next pass
	case rt.NotBefore != nil && s.now.Before(rt.NotBefore.Time):
		s.requeueAt(rt.NotBefore.Time)
		return true, nil
	}
	rt.Attempts++
	rt.NotBefore = nil
	r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.OccurrenceRetryingReason,
		"Trying occurrence %s again (retry %d, until %s): its last run ended %s: %s",
		occurrence, rt.Attempts, rt.Until.UTC().Format(time.RFC3339), rt.LastResult, rt.LastMessage)
	return true, r.recordIntent(ctx, s, spec, rt.ScheduledTime.Time, s.now, false, "", runExtras{retry: rt.Attempts})
}

// retryMessage describes status.retry for a message: "; occurrence T is tried
// again from U (retry n, until V)".
func retryMessage(rt *batchv1alpha1.OccurrenceRetryStatus) string {
	if rt == nil || rt.NotBefore == nil {
		return ""
	}
	return fmt.Sprintf("; occurrence %s is tried again from %s (retry %d, until %s)", rt.ScheduledTime.UTC().Format(time.RFC3339),
		rt.NotBefore.UTC().Format(time.RFC3339), rt.Attempts+1, rt.Until.UTC().Format(time.RFC3339))
}
