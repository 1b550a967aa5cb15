package due

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// Occurrences is what the schedule says at a pass: the occurrence due now,
// if any, the next start, and the occurrences missed by more than the
// starting deadline.
type Occurrences struct {
	// Occurrence is the scheduled time of the occurrence due now, and DueAt
	// when it was due to start (its scheduled time, or later with
	// scheduleJitter); both zero when none is due.
	Occurrence, DueAt time.Time
	// Next is the next start to come: status.nextScheduleTime, and when the
	// next pass is due. Suspended: the GuardedJob is suspended (spec or a
	// pause), and nothing is due or next.
	Next      time.Time
	Suspended bool
	// Missed counts the occurrences missed since the last one, each more than
	// startingDeadlineSeconds late; MissedLast is the latest of them, which
	// status records as skipped (and as the last schedule time). Zero when
	// none was missed, an occurrence is due now, or the schedule has no
	// occurrence that late.
	Missed     int
	MissedLast time.Time
}

// Scheduled decides what the schedule says at now: the first occurrence after
// status.lastScheduleTime (or the object's creation) that may still start,
// within startingDeadlineSeconds of its start (its scheduled time plus the
// object's jitter offset, schedule.JitterOffset, with scheduleJitter); or else
// how many were missed. Nothing is due while the GuardedJob is suspended (spec
// or a pause); its missed occurrences are not counted then either.
func Scheduled(gj *batchv1alpha1.GuardedJob, sched *schedule.Schedule, now time.Time) Occurrences {
	var o Occurrences
	if gj.SuspendedAt(now) {
		o.Suspended = true
		return o
	}
	deadline := gj.Spec.StartingDeadline()
	from := gj.CreationTimestamp.Time
	if gj.Status.LastScheduleTime != nil {
		from = gj.Status.LastScheduleTime.Time
	}
	jitter := gj.Spec.ScheduleJitterOrDefault()
	startOf := func(t time.Time) time.Time { return t.Add(schedule.JitterOffset(string(gj.UID), t, jitter)) }
	scheduled, ok, missed := sched.Due(from, now, deadline+jitter)
	if missed > 0 && !ok {
		if latest, found := sched.Prev(now.Add(-deadline)); found {
			o.Missed, o.MissedLast = missed, latest
		}
	}
	o.Next = startOf(sched.Next(now))
	if ok {
		if start := startOf(scheduled); now.Before(start) {
			o.Next = start // its jittered start is still to come
		} else {
			o.Occurrence, o.DueAt = scheduled, start
		}
	}
	return o
}

// MissedMessage says why the missed occurrences were skipped.
func (o Occurrences) MissedMessage(deadline time.Duration) string {
	return fmt.Sprintf("missed %d run(s), the last due at %s: more than startingDeadlineSeconds (%s) late", o.Missed, o.MissedLast.UTC().Format(time.RFC3339), deadline)
}

// NoteScheduled is the one writer of status.lastScheduleTime: the schedule's
// last occurrence started, skipped, buffered or carried by a Job moves it, and
// only forward (an adopted Job or a backfill of an older occurrence moves
// nothing back). It reports whether it moved.
func NoteScheduled(st *batchv1alpha1.GuardedJobStatus, occurrence time.Time) bool {
	if st.LastScheduleTime != nil && !occurrence.After(st.LastScheduleTime.Time) {
		return false
	}
	st.LastScheduleTime = &metav1.Time{Time: occurrence}
	return true
}
