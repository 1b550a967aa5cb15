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

func parsed(t *testing.T, spec *batchv1alpha1.GuardedJobSpec) *schedule.Schedule {
	t.Helper()
	sched, err := schedule.Parse(spec.Schedule, spec.TimeZoneOrDefault())
	if err != nil {
		t.Fatal(err)
	}
	return sched
}

// A scheduled run of an occurrence that is retried may start (and wait for a
// busy key) until the occurrence's tries stop, which is never after the spec's
// latest start of it, when its done-marker expires; a run-now run keeps its
// own start deadline.
func TestRetryDeadlinesOfARunFollowTheOccurrencesTries(t *testing.T) {
	g := NewWithT(t)
	occ := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	started := &metav1.Time{Time: occ.Add(5 * time.Minute)}
	for _, cron := range []string{"0 * * * *", "0 2 * * *", "*/5 * * * *"} {
		gj := retrying(3 * time.Hour)
		gj.Spec.Schedule = cron
		sched := parsed(t, &gj.Spec)
		until := due.RetryUntil(&gj.Spec, sched, occ, occ)
		g.Expect(due.LatestStart(&gj.Spec, sched, occ, occ)).To(BeTemporally(">=", until), cron)

		scheduled := &batchv1alpha1.ActiveRun{ScheduledTime: metav1.Time{Time: occ}, StartDeadline: started}
		want := until
		if started.After(until) {
			want = started.Time
		}
		g.Expect(due.StartDeadline(&gj.Spec, sched, scheduled)).To(BeTemporally("==", want), cron)
		manual := &batchv1alpha1.ActiveRun{ScheduledTime: metav1.Time{Time: occ}, StartDeadline: started, RunNow: "2026-12-05T02:00:00Z"}
		g.Expect(due.StartDeadline(&gj.Spec, sched, manual)).To(BeTemporally("==", started.Time), cron)
	}
}

// TestLateRunsAreSkippedNeverRun: a run about to acquire is skipped once it is
// past its own start deadline (unless it tried already and waits to try again),
// and always once it is past the latest start of its occurrence that any
// cluster computes from the spec, after which the occurrence's done-marker may
// be gone: a buffered run that waited behind a run held far past lock.maxHold
// is the case. A backfill run is bounded by its backfill instead.
func TestLateRunsAreSkippedNeverRun(t *testing.T) {
	occ := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	spec := &batchv1alpha1.GuardedJobSpec{Schedule: "0 2 * * *", ConcurrencyPolicy: batchv1alpha1.BufferOneConcurrent}
	sched := parsed(t, spec)
	deadline := occ.Add(spec.StartingDeadline())
	latest := due.LatestStart(spec, sched, occ, occ)
	if !latest.After(deadline.Add(time.Hour)) {
		t.Fatalf("latest start %s should be long after the start deadline %s with a buffer", latest, deadline)
	}
	run := func(mod func(*batchv1alpha1.ActiveRun)) *batchv1alpha1.ActiveRun {
		r := &batchv1alpha1.ActiveRun{JobName: "settle-1", ScheduledTime: metav1.Time{Time: occ}}
		if mod != nil {
			mod(r)
		}
		return r
	}
	buffered := func(r *batchv1alpha1.ActiveRun) { r.StartDeadline = &metav1.Time{Time: latest.Add(time.Hour)} }
	for _, c := range []struct {
		name      string
		run       *batchv1alpha1.ActiveRun
		attempted bool
		now       time.Time
		late      string // a part of the reason, "" when it may start
	}{
		{"on time", run(nil), false, occ.Add(time.Second), ""},
		{"past its start deadline", run(nil), false, deadline, "did not start before its starting deadline"},
		{"past its start deadline, waiting to try again", run(nil), true, deadline.Add(time.Minute), ""},
		{"a buffered run within its occurrence's latest start", run(buffered), false, latest, ""},
		{"a buffered run past its occurrence's latest start", run(buffered), false, latest.Add(time.Second), "the latest start of its occurrence the spec allows in any cluster"},
		{"a run waiting to try again past its occurrence's latest start", run(buffered), true, latest.Add(time.Second), "its done-marker may have expired"},
		{"a backfill run past its occurrence's latest start", run(func(r *batchv1alpha1.ActiveRun) {
			buffered(r)
			r.Backfill = batchv1alpha1.BackfillRequestPrefix + "9f"
		}), false, latest.Add(time.Second), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			why := due.Late(spec, sched, c.run, c.attempted, c.now)
			if c.late == "" {
				g.Expect(why).To(BeEmpty())
			} else {
				g.Expect(why).To(ContainSubstring(c.late))
			}
		})
	}
}

// A backfill starts occurrences while the done-markers of its runs live:
// BackfillDoneMarkerTTL from the time its annotation named, or from when a
// GuardedJobBackfill was accepted.
// TestABackfillStartsNothingInThePassThatAcceptsIt: only a backfill accepted
// by the pass itself waits for the next one.
func TestABackfillStartsNothingInThePassThatAcceptsIt(t *testing.T) {
	g := NewWithT(t)
	running := func(request string) *batchv1alpha1.BackfillStatus {
		return &batchv1alpha1.BackfillStatus{Request: request, State: batchv1alpha1.BackfillRunning}
	}
	done := &batchv1alpha1.BackfillStatus{Request: "r1", State: batchv1alpha1.BackfillComplete}
	g.Expect(due.BackfillAcceptedNow(nil, running("r1"))).To(BeTrue(), "the first backfill")
	g.Expect(due.BackfillAcceptedNow(done, running("r2"))).To(BeTrue(), "the next one, after another finished")
	g.Expect(due.BackfillAcceptedNow(running("r1"), running("r1"))).To(BeFalse(), "accepted by an earlier pass")
	g.Expect(due.BackfillAcceptedNow(nil, nil)).To(BeFalse(), "no backfill")
	g.Expect(due.BackfillAcceptedNow(running("r1"), done)).To(BeFalse(), "one that ended")
}

func TestABackfillStartsOccurrencesOnlyWhileItsMarkersLive(t *testing.T) {
	g := NewWithT(t)
	accepted := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	until, ok := due.BackfillStartsUntil(&batchv1alpha1.BackfillStatus{Request: batchv1alpha1.BackfillRequestPrefix + "9f", StartedAt: metav1.NewTime(accepted)})
	g.Expect(ok).To(BeTrue())
	g.Expect(until).To(BeTemporally("==", accepted.Add(batchv1alpha1.BackfillDoneMarkerTTL)))
	until, ok = due.BackfillStartsUntil(&batchv1alpha1.BackfillStatus{Request: "2026-12-05T01:00:00Z", StartedAt: metav1.NewTime(accepted)})
	g.Expect(ok).To(BeTrue())
	g.Expect(until).To(BeTemporally("==", accepted.Add(-time.Hour+batchv1alpha1.BackfillDoneMarkerTTL)))
	_, ok = due.BackfillStartsUntil(&batchv1alpha1.BackfillStatus{Request: "yesterday"})
	g.Expect(ok).To(BeFalse())
}
