package due_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// TestTheScheduleSaysWhichOccurrenceIsDueAndWhatWasMissed: the occurrence due
// at a pass, when it was due to start, the next start, and the occurrences
// missed by more than the starting deadline, as CronJob counts them; with
// scheduleJitter an occurrence starts at its object's offset; nothing while
// suspended.
func TestTheScheduleSaysWhichOccurrenceIsDueAndWhatWasMissed(t *testing.T) {
	at := func(h, m, s int) time.Time { return time.Date(2026, 12, 7, h, m, s, 0, time.UTC) }
	jitter := 2 * time.Minute
	offset := schedule.JitterOffset("uid-1", at(2, 0, 0), jitter)
	if offset <= 0 || offset >= jitter {
		t.Fatalf("the jitter offset %s of the test's object is not inside (0, %s)", offset, jitter)
	}
	for _, c := range []struct {
		name     string
		last     time.Time // status.lastScheduleTime; zero: none (counted from the creation, 01:30)
		now      time.Time
		jitter   bool
		suspend  bool
		paused   bool
		want     due.Occurrences
		missedAt string
	}{
		{name: "the first occurrence after the creation", now: at(2, 0, 5),
			want: due.Occurrences{Occurrence: at(2, 0, 0), DueAt: at(2, 0, 0), Next: at(3, 0, 0)}},
		{name: "nothing due between occurrences", last: at(2, 0, 0), now: at(2, 30, 0), want: due.Occurrences{Next: at(3, 0, 0)}},
		{name: "late, within the starting deadline", last: at(1, 0, 0), now: at(2, 4, 59),
			want: due.Occurrences{Occurrence: at(2, 0, 0), DueAt: at(2, 0, 0), Next: at(3, 0, 0)}},
		{name: "two missed past the deadline", last: at(1, 0, 0), now: at(3, 30, 0),
			want: due.Occurrences{Next: at(4, 0, 0), Missed: 2, MissedLast: at(3, 0, 0)}, missedAt: "2026-12-07T03:00:00Z"},
		{name: "a jittered start still to come", last: at(1, 0, 0), now: at(2, 0, 0).Add(offset - time.Second), jitter: true,
			want: due.Occurrences{Next: at(2, 0, 0).Add(offset)}},
		{name: "a jittered start that came", last: at(1, 0, 0), now: at(2, 0, 0).Add(offset), jitter: true,
			want: due.Occurrences{Occurrence: at(2, 0, 0), DueAt: at(2, 0, 0).Add(offset), Next: at(3, 0, 0).Add(schedule.JitterOffset("uid-1", at(3, 0, 0), jitter))}},
		{name: "suspended by spec", last: at(1, 0, 0), now: at(3, 30, 0), suspend: true, want: due.Occurrences{Suspended: true}},
		{name: "paused", last: at(1, 0, 0), now: at(2, 0, 5), paused: true, want: due.Occurrences{Suspended: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			gj := &batchv1alpha1.GuardedJob{Spec: batchv1alpha1.GuardedJobSpec{Schedule: "0 * * * *", StartingDeadlineSeconds: ptr.To(int64(300))}}
			gj.UID, gj.CreationTimestamp = "uid-1", metav1.NewTime(at(1, 30, 0))
			if !c.last.IsZero() {
				gj.Status.LastScheduleTime = &metav1.Time{Time: c.last}
			}
			if c.jitter {
				gj.Spec.ScheduleJitter = &metav1.Duration{Duration: jitter}
			}
			gj.Spec.Suspend = ptr.To(c.suspend)
			if c.paused {
				gj.Status.Pause = &batchv1alpha1.Pause{Since: metav1.NewTime(at(1, 0, 0))}
			}
			got := due.Scheduled(gj, parsed(t, &gj.Spec), c.now)
			g.Expect(got).To(Equal(c.want))
			if c.missedAt != "" {
				g.Expect(got.MissedMessage(gj.Spec.StartingDeadline())).To(Equal("missed 2 run(s), the last due at " + c.missedAt + ": more than startingDeadlineSeconds (5m0s) late"))
			}
		})
	}
}

// TestTheLastScheduleTimeOnlyMovesForward: status.lastScheduleTime is set from
// none, moves to a later occurrence, and never back to an earlier or the same
// one (an adopted Job or a backfill of an older occurrence).
func TestTheLastScheduleTimeOnlyMovesForward(t *testing.T) {
	g := NewWithT(t)
	at := func(h int) time.Time { return time.Date(2026, 12, 7, h, 0, 0, 0, time.UTC) }
	st := &batchv1alpha1.GuardedJobStatus{}
	g.Expect(due.NoteScheduled(st, at(2))).To(BeTrue())
	g.Expect(st.LastScheduleTime.Time).To(Equal(at(2)))
	g.Expect(due.NoteScheduled(st, at(3))).To(BeTrue())
	g.Expect(due.NoteScheduled(st, at(1))).To(BeFalse())
	g.Expect(due.NoteScheduled(st, at(3))).To(BeFalse())
	g.Expect(st.LastScheduleTime.Time).To(Equal(at(3)))
}
