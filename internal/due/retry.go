// Package due decides, from the spec, the status and now, which start of a
// GuardedJob comes next and what stops it: pauses and their requests, and the
// retries of an occurrence no cluster has done yet. It is pure (its callers
// hand it every input, now included), so that the controllers only read,
// call and write.
package due

import (
	"time"

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
// cluster may make (leasetiming.LatestStart), which counts from the next
// occurrence, so no retry can start after the marker that would refuse it has
// expired.

// MaxRetryMessage bounds status.retry.lastMessage.
const MaxRetryMessage = 256

// RetryUntil is when tries of the occurrence at scheduled stop: its scheduled
// time plus spec.retryOccurrence.within, or the next occurrence of sched,
// whichever is first (a nil sched, one that no longer parses, counts a day).
func RetryUntil(spec *batchv1alpha1.GuardedJobSpec, sched *schedule.Schedule, scheduled, now time.Time) time.Time {
	until := scheduled.Add(spec.RetryOccurrence.Within.Duration)
	if next := leasetiming.NextOccurrence(sched, scheduled, now); next.After(scheduled) && next.Before(until) {
		until = next
	}
	return until
}

// Retries says whether run's occurrence is tried until its tries stop:
// spec.retryOccurrence is set, and the run is a scheduled one or a retry
// (backfill and run-now runs are not retried).
func Retries(spec *batchv1alpha1.GuardedJobSpec, run *batchv1alpha1.ActiveRun) bool {
	return spec.RetryOccurrence != nil && run.Backfill == "" && run.RunNow == ""
}

// Retryable says whether a run that ended with result leaves its occurrence to
// be tried again: it did not succeed, and nobody chose to end it (a run that
// concurrencyPolicy Replace replaced, or whose Job a person deleted, or whose
// GuardedJob is being deleted).
func Retryable(run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult) bool {
	switch result {
	case batchv1alpha1.RunResultMaxHoldExceeded, batchv1alpha1.RunResultLockLost,
		batchv1alpha1.RunResultGuardStopped, batchv1alpha1.RunResultStoreUnavailable:
		return true
	case batchv1alpha1.RunResultFailed:
		return run.StopCause != batchv1alpha1.JobStoppedReason && run.StopCause != batchv1alpha1.JobDeletedReason
	}
	return false
}

// NoteRetry updates status.retry for a scheduled run that ended: a run that
// did its occurrence, or found it done, ends the retry, and so does a run a
// person ended (its Job deleted, or replaced); a run that ended without
// success leaves the occurrence to be tried again after a backoff; a run that
// waited for a busy key until the tries stopped leaves it to be abandoned.
// message is why the run ended, at most MaxRetryMessage bytes.
func NoteRetry(gj *batchv1alpha1.GuardedJob, sched *schedule.Schedule, run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult, message string, now time.Time) {
	rt := gj.Status.Retry
	same := rt != nil && rt.ScheduledTime.Equal(&run.ScheduledTime)
	if result != batchv1alpha1.RunResultBusy && !Retryable(run, result) {
		if same {
			gj.Status.Retry = nil
		}
		return
	}
	if same {
		countRetry(rt, run) // a try that ends before any pass counted it
	}
	if !same {
		if rt != nil && rt.ScheduledTime.After(run.ScheduledTime.Time) {
			return // a newer occurrence is being tried
		}
		rt = &batchv1alpha1.OccurrenceRetryStatus{ScheduledTime: run.ScheduledTime,
			Until: metav1.Time{Time: RetryUntil(&gj.Spec, sched, run.ScheduledTime.Time, now)}}
	}
	rt.NotBefore = &metav1.Time{Time: now.Add(RetryBackoff(&gj.Spec.Lock, rt.Attempts))}
	rt.LastResult, rt.LastMessage = result, message
	gj.Status.Retry = rt
}

// RetryAct is what a pass does about the occurrence status.retry tries.
type RetryAct int

const (
	// NoRetry: status.retry is empty.
	NoRetry RetryAct = iota
	// RetryAbandon: its tries stopped (Why says why); no cluster has done it.
	RetryAbandon
	// RetryRunning: a run of it is active; its end decides.
	RetryRunning
	// RetryWaits: runs are active or the GuardedJob is suspended, or its
	// backoff has not passed; a pass looks again at At.
	RetryWaits
	// RetryStart: its next try starts now (once nothing outside status stands
	// in the way: AdmitWaiting).
	RetryStart
)

// RetryStep is the act and its reason or time.
type RetryStep struct {
	Act RetryAct
	Why string
	At  time.Time
}

// NextRetry is what a pass at now does about status.retry: abandon the
// occurrence once its tries have stopped (spec.retryOccurrence removed, a newer
// occurrence scheduled, its until passed), wait while a run of it or another
// run is active, the GuardedJob is suspended or the backoff runs, else start
// its next try. A try status has not counted yet is counted (RetryGoesOn).
func NextRetry(gj *batchv1alpha1.GuardedJob, now time.Time) RetryStep {
	rt := gj.Status.Retry
	switch {
	case rt == nil:
		return RetryStep{Act: NoRetry}
	case gj.Spec.RetryOccurrence == nil:
		return RetryStep{Act: RetryAbandon, Why: "spec.retryOccurrence was removed"}
	case gj.Status.LastScheduleTime != nil && gj.Status.LastScheduleTime.After(rt.ScheduledTime.Time):
		return RetryStep{Act: RetryAbandon, Why: "the occurrence at " + gj.Status.LastScheduleTime.UTC().Format(time.RFC3339) + " is due"}
	case RetryGoesOn(gj):
		return RetryStep{Act: RetryRunning}
	case !now.Before(rt.Until.Time):
		return RetryStep{Act: RetryAbandon, Why: "its tries stopped at " + rt.Until.UTC().Format(time.RFC3339) + " (spec.retryOccurrence.within, or the next occurrence)"}
	case len(gj.Status.Active) > 0 || gj.SuspendedAt(now):
		return RetryStep{Act: RetryWaits, At: rt.Until.Time} // a run's end or the resume brings a pass sooner
	case rt.NotBefore != nil && now.Before(rt.NotBefore.Time):
		return RetryStep{Act: RetryWaits, At: rt.NotBefore.Time}
	}
	return RetryStep{Act: RetryStart}
}

// RetryGoesOn says whether a run of the occurrence status.retry tries is
// active: its end decides what comes next. A retry whose start status has not
// counted yet (the write that recorded it was lost, and a later pass took its
// Job up) is counted now, by the retry number its run carries (bound into its
// lease token, so never taken from an annotation alone): the backoff after it
// and the abandonment count every run made. A run-now of the same occurrence
// is no try of it.
func RetryGoesOn(gj *batchv1alpha1.GuardedJob) bool {
	rt := gj.Status.Retry
	if rt == nil {
		return false
	}
	goesOn := false
	for i := range gj.Status.Active {
		if run := &gj.Status.Active[i]; run.ScheduledTime.Equal(&rt.ScheduledTime) {
			goesOn = true
			countRetry(rt, run)
		}
	}
	return goesOn
}

// countRetry counts run in rt when it is a try of rt's occurrence that rt has
// not counted: it started after the last try ended.
func countRetry(rt *batchv1alpha1.OccurrenceRetryStatus, run *batchv1alpha1.ActiveRun) {
	if run.Retry > rt.Attempts && run.RunNow == "" && run.Backfill == "" {
		rt.Attempts, rt.NotBefore = run.Retry, nil
	}
}

// RetryBackoff is the wait before retry attempts+1: lock.busyRetry's initial
// wait, doubled for each retry already made, at most its max.
func RetryBackoff(lock *batchv1alpha1.LockSpec, attempts int32) time.Duration {
	d, limit := lock.BusyRetryInitial(), lock.BusyRetryMax()
	for range attempts {
		if d >= limit {
			break
		}
		d *= 2
	}
	return min(d, limit)
}
