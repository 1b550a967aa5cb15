package controllers

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// Tries of an occurrence no cluster has done yet (spec.retryOccurrence): what
// they are and when they stop is decided in internal/due; here the retry is
// started, or given up with its event and series.

// retryUntil is when tries of the occurrence at scheduled stop (due.RetryUntil).
func retryUntil(gj *batchv1alpha1.GuardedJob, scheduled, now time.Time) time.Time {
	sched, _ := schedule.Parse(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	return due.RetryUntil(&gj.Spec, sched, scheduled, now)
}

// retryBusyUntil is how long a run that finds its key busy waits for it: with
// spec.retryOccurrence, until its occurrence's tries stop (the holder's run
// may fail, and then this cluster's run does the occurrence); ok is false
// without it, and for backfill and run-now runs, which wait as onBusy says.
func retryBusyUntil(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, now time.Time) (time.Time, bool) {
	if !due.Retries(&gj.Spec, run) {
		return time.Time{}, false
	}
	return retryUntil(gj, run.ScheduledTime.Time, now), true
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
		s.abandoned = true // counted once the status says so (countWritten)
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
