package due_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// TestABackfillStartsItsOccurrencesAfterWhatComesFirst: what a pass does about
// a running backfill of the hours 00:00 to 03:00, two at a time.
func TestABackfillStartsItsOccurrencesAfterWhatComesFirst(t *testing.T) {
	sched, err := schedule.Parse("0 * * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	request := now.Add(-time.Minute).Format(time.RFC3339Nano)
	at := func(h int) metav1.Time { return metav1.Time{Time: from.Add(time.Duration(h) * time.Hour)} }
	backfill := func(mut func(gj *batchv1alpha1.GuardedJob)) *batchv1alpha1.GuardedJob {
		next := at(0)
		gj := &batchv1alpha1.GuardedJob{}
		gj.Status.Backfill = &batchv1alpha1.BackfillStatus{Request: request, State: batchv1alpha1.BackfillRunning, From: at(0), To: at(3),
			Next: &next, Parallelism: 2, StartedAt: metav1.Time{Time: now.Add(-time.Minute)}}
		if mut != nil {
			mut(gj)
		}
		return gj
	}
	scheduled := batchv1alpha1.ActiveRun{JobName: "settle-9", ScheduledTime: at(9)}
	for _, c := range []struct {
		name      string
		gj        *batchv1alpha1.GuardedJob
		ahead     due.Ahead
		want      due.BackfillStep
		current   int
		remaining int32
	}{
		{"no backfill", &batchv1alpha1.GuardedJob{}, due.Ahead{}, due.BackfillStep{}, 0, 0},
		{"the first occurrence starts", backfill(nil), due.Ahead{}, due.BackfillStep{Act: due.BackfillStart, Occurrence: at(0).Time}, 1, 4},
		{"a scheduled run comes first", backfill(func(gj *batchv1alpha1.GuardedJob) { gj.Status.Active = []batchv1alpha1.ActiveRun{scheduled} }),
			due.Ahead{}, due.BackfillStep{}, 0, 4},
		{"with Allow it does not", backfill(func(gj *batchv1alpha1.GuardedJob) {
			gj.Status.Active = []batchv1alpha1.ActiveRun{scheduled}
			gj.Spec.ConcurrencyPolicy = batchv1alpha1.AllowConcurrent
		}), due.Ahead{}, due.BackfillStep{Act: due.BackfillStart, Occurrence: at(0).Time}, 1, 4},
		{"a Job no run claims has Pods left", backfill(nil), due.Ahead{Unclaimed: "settle-x"}, due.BackfillStep{RetryAfter: time.Second}, 0, 4},
		{"an occurrence waits for its retry; a slot is free", backfill(func(gj *batchv1alpha1.GuardedJob) {
			b := gj.Status.Backfill
			b.Current = []batchv1alpha1.BackfillOccurrence{{ScheduledTime: at(0), RetryAt: &metav1.Time{Time: now.Add(time.Minute)}}}
			b.Next = &metav1.Time{Time: at(1).Time}
		}), due.Ahead{}, due.BackfillStep{Act: due.BackfillStart, Occurrence: at(1).Time, LookAt: now.Add(time.Minute)}, 2, 4},
		{"an occurrence whose retry time passed starts again", backfill(func(gj *batchv1alpha1.GuardedJob) {
			b := gj.Status.Backfill
			b.Current = []batchv1alpha1.BackfillOccurrence{{ScheduledTime: at(0), RetryAt: &metav1.Time{Time: now}}}
			b.Next = &metav1.Time{Time: at(1).Time}
		}), due.Ahead{}, due.BackfillStep{Act: due.BackfillStart, Occurrence: at(0).Time}, 1, 4},
		{"two wait for their retries: the earliest is when to look", backfill(func(gj *batchv1alpha1.GuardedJob) {
			b := gj.Status.Backfill
			b.Current = []batchv1alpha1.BackfillOccurrence{{ScheduledTime: at(0), RetryAt: &metav1.Time{Time: now.Add(2 * time.Minute)}},
				{ScheduledTime: at(1), RetryAt: &metav1.Time{Time: now.Add(time.Minute)}}}
			b.Next = &metav1.Time{Time: at(2).Time}
		}), due.Ahead{}, due.BackfillStep{LookAt: now.Add(time.Minute)}, 2, 4},
		{"the last occurrence of the range", backfill(func(gj *batchv1alpha1.GuardedJob) { gj.Status.Backfill.Next = &metav1.Time{Time: at(3).Time} }),
			due.Ahead{}, due.BackfillStep{Act: due.BackfillStart, Occurrence: at(3).Time}, 1, 1},
		{"both slots taken", backfill(func(gj *batchv1alpha1.GuardedJob) {
			b := gj.Status.Backfill
			b.Current = []batchv1alpha1.BackfillOccurrence{{ScheduledTime: at(0)}, {ScheduledTime: at(1)}}
			b.Next = &metav1.Time{Time: at(2).Time}
			gj.Status.Active = []batchv1alpha1.ActiveRun{{JobName: "a", ScheduledTime: at(0), Backfill: request}, {JobName: "b", ScheduledTime: at(1), Backfill: request}}
		}), due.Ahead{}, due.BackfillStep{}, 2, 4},
		{"the schedule runs that very occurrence", backfill(func(gj *batchv1alpha1.GuardedJob) {
			gj.Status.Active = []batchv1alpha1.ActiveRun{{JobName: "s", ScheduledTime: at(0), RunNow: "x"}}
			gj.Spec.ConcurrencyPolicy = batchv1alpha1.AllowConcurrent
		}), due.Ahead{}, due.BackfillStep{}, 1, 4},
		{"every occurrence ended", backfill(func(gj *batchv1alpha1.GuardedJob) { gj.Status.Backfill.Next = nil }), due.Ahead{},
			due.BackfillStep{Act: due.BackfillFinished}, 0, 0},
		{"at the very moment it stops starting occurrences, it still starts one", backfill(func(gj *batchv1alpha1.GuardedJob) {
			gj.Status.Backfill.Request = now.Add(-batchv1alpha1.BackfillDoneMarkerTTL).Format(time.RFC3339Nano)
		}), due.Ahead{}, due.BackfillStep{Act: due.BackfillStart, Occurrence: at(0).Time}, 1, 4},
		{"every occurrence ended while a Job no run claims has Pods left: it finishes", backfill(func(gj *batchv1alpha1.GuardedJob) { gj.Status.Backfill.Next = nil }),
			due.Ahead{Unclaimed: "settle-x"}, due.BackfillStep{Act: due.BackfillFinished}, 0, 0},
		{"out of time while a Job waits for adoption: it stops", backfill(func(gj *batchv1alpha1.GuardedJob) {
			gj.Status.Backfill.Request = now.Add(-batchv1alpha1.BackfillDoneMarkerTTL - time.Second).Format(time.RFC3339Nano)
		}), due.Ahead{Adopting: true}, due.BackfillStep{Act: due.BackfillExpired, Until: now.Add(-time.Second).Truncate(0)}, 0, 4},
		{"out of time to start occurrences", backfill(func(gj *batchv1alpha1.GuardedJob) {
			gj.Status.Backfill.Request = now.Add(-batchv1alpha1.BackfillDoneMarkerTTL - time.Second).Format(time.RFC3339Nano)
		}), due.Ahead{}, due.BackfillStep{Act: due.BackfillExpired, Until: now.Add(-time.Second).Truncate(0)}, 0, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			got := due.NextBackfill(c.gj, sched, c.ahead, now)
			if c.want.Act == due.BackfillExpired {
				g.Expect(got.Act).To(Equal(due.BackfillExpired))
				g.Expect(got.Until).To(BeTemporally("~", c.want.Until, time.Millisecond))
			} else {
				g.Expect(got).To(Equal(c.want))
			}
			b := c.gj.Status.Backfill
			if b == nil {
				return
			}
			g.Expect(b.Current).To(HaveLen(c.current))
			g.Expect(b.Remaining).To(Equal(c.remaining))
			if got.Act != due.BackfillStart {
				return
			}
			g.Expect(b.Message).To(Equal("running " + got.Occurrence.UTC().Format(time.RFC3339)))
			for _, e := range b.Current {
				if e.ScheduledTime.Time.Equal(got.Occurrence) {
					g.Expect(e.RetryAt).To(BeNil(), "the occurrence it starts waits for no retry")
				}
			}
			switch got.Occurrence {
			case at(3).Time:
				g.Expect(b.Next).To(BeNil(), "the range is done")
			case at(0).Time:
				if len(b.Current) == 1 && b.Current[0].RetryAt == nil && c.name != "an occurrence whose retry time passed starts again" {
					g.Expect(b.Next).To(HaveField("Time", BeTemporally("==", at(1).Time)), "the next occurrence of the range")
				}
			}
		})
	}
}
