package due

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// The occurrences of a running backfill (status.backfill) start one pass at a
// time, up to its parallelism, after everything that comes first: runs of the
// schedule and run-now requests (unless concurrencyPolicy is Allow), and what
// AdmitWaiting holds back. An occurrence the schedule itself is running waits
// for that run, whose end decides through the done-marker whether the backfill
// runs it. The backfill finishes when every occurrence has ended, and stops
// starting occurrences once its done-markers may no longer outlive the same
// backfill in another cluster (BackfillStartsUntil).

// BackfillAct is what a pass does about a running backfill.
type BackfillAct int

const (
	// BackfillIdle: nothing to do now (no backfill runs, or nothing of it
	// may start in this pass).
	BackfillIdle BackfillAct = iota
	// BackfillFinished: every occurrence has ended.
	BackfillFinished
	// BackfillExpired: it may start no more occurrences (Until says since
	// when); those running go on.
	BackfillExpired
	// BackfillStart: the occurrence at Occurrence starts.
	BackfillStart
)

// BackfillStep is what a pass does about status.backfill, and when it looks
// again.
type BackfillStep struct {
	Act BackfillAct
	// Until is when the backfill stopped starting occurrences
	// (BackfillExpired).
	Until time.Time
	// Occurrence is the scheduled time to start (BackfillStart).
	Occurrence time.Time
	// LookAt, when set, is when an occurrence waiting for its retry may
	// start; RetryAfter, when set, is how soon to look again.
	LookAt     time.Time
	RetryAfter time.Duration
}

// NextBackfill decides what a pass at now does about gj's running backfill,
// sched being its schedule and ahead what stands outside status (AdmitWaiting).
// It keeps status.backfill's count of what remains, takes the next occurrence
// of the range into its current ones when a slot is free, and marks the one it
// starts as running.
func NextBackfill(gj *batchv1alpha1.GuardedJob, sched *schedule.Schedule, ahead Ahead, now time.Time) BackfillStep {
	b := gj.Status.Backfill
	if b == nil || b.State != batchv1alpha1.BackfillRunning {
		return BackfillStep{}
	}
	b.Remaining = int32(len(b.Current)) //nolint:gosec // at most 10
	if b.Next != nil {
		b.Remaining += int32(sched.CountBetween(b.Next.Time, b.To.Time, batchv1alpha1.MaxBackfillOccurrences)) //nolint:gosec // at most 1001
	}
	if len(b.Current) == 0 && b.Next == nil {
		return BackfillStep{Act: BackfillFinished}
	}
	if until, ok := BackfillStartsUntil(b); ok && now.After(until) {
		return BackfillStep{Act: BackfillExpired, Until: until}
	}
	for _, run := range gj.Status.Active {
		if run.Backfill == "" && gj.Spec.ConcurrencyPolicyOrDefault() != batchv1alpha1.AllowConcurrent {
			return BackfillStep{} // its end brings the next pass
		}
	}
	if admit := AdmitWaiting(ahead); admit.Act == Wait {
		return BackfillStep{RetryAfter: admit.RetryAfter}
	}
	step := BackfillStep{}
	var pick *batchv1alpha1.BackfillOccurrence
	for i := range b.Current {
		e := &b.Current[i]
		if BackfillOccurrenceRunning(gj, b.Request, e.ScheduledTime) {
			continue
		}
		if e.RetryAt != nil && now.Before(e.RetryAt.Time) {
			if step.LookAt.IsZero() || e.RetryAt.Time.Before(step.LookAt) {
				step.LookAt = e.RetryAt.Time
			}
			continue
		}
		pick = e
		break
	}
	if pick == nil && len(b.Current) < int(b.Parallelism) && b.Next != nil {
		occurrence := b.Next.Time
		b.Current = append(b.Current, batchv1alpha1.BackfillOccurrence{ScheduledTime: metav1.Time{Time: occurrence}})
		if next := sched.Next(occurrence); next.IsZero() || next.After(b.To.Time) {
			b.Next = nil
		} else {
			b.Next = &metav1.Time{Time: next}
		}
		pick = &b.Current[len(b.Current)-1]
	}
	if pick == nil {
		return step
	}
	for _, run := range gj.Status.Active {
		if run.ScheduledTime.Equal(&pick.ScheduledTime) {
			return step // the schedule (or a run-now) runs this occurrence: its end decides
		}
	}
	pick.RetryAt = nil
	b.Message = "running " + pick.ScheduledTime.UTC().Format(time.RFC3339)
	step.Act, step.Occurrence = BackfillStart, pick.ScheduledTime.Time
	return step
}

// BackfillOccurrenceRunning says whether a run of the backfill request's occurrence at
// scheduled is active.
func BackfillOccurrenceRunning(gj *batchv1alpha1.GuardedJob, request string, scheduled metav1.Time) bool {
	for i := range gj.Status.Active {
		if run := &gj.Status.Active[i]; run.Backfill == request && run.ScheduledTime.Equal(&scheduled) {
			return true
		}
	}
	return false
}
