package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// TestMarker_AnOccurrencesDoneMarkerOutlivesEveryLateStartAnyClusterMayMake:
// two clusters run the same hourly GuardedJob with concurrencyPolicy
// BufferOne on one per-occurrence key. Cluster B's 10:00 run succeeds and
// writes the occurrence's done-marker. Cluster A's 10:00 waits behind A's
// 09:00 run, which may hold its lease until lock.maxHold: it may start hours
// later, and it must then find the marker, or it runs 10:00 a second time. So
// the marker lives until the latest start of its occurrence that any cluster
// running the same spec may make, not merely until the next occurrence.
func TestMarker_AnOccurrencesDoneMarkerOutlivesEveryLateStartAnyClusterMayMake(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	g := h.g
	gj := h.guardedJob("buffered", h.ns+":buffered")
	gj.Spec.Schedule = "0 * * * *"
	gj.Spec.ConcurrencyPolicy = batchv1alpha1.BufferOneConcurrent
	h.create(gj)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	h.complete(&job)
	var last *batchv1alpha1.RunRecord
	g.Eventually(func() *batchv1alpha1.RunRecord { last = h.get(gj).Status.LastRun; return last }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultSucceeded)))
	g.Expect(last.OccurrenceKey).NotTo(BeEmpty())
	maxHold := gj.Spec.Lock.MaxHoldOrDefault()
	nextOccurrence := last.ScheduledTime.Truncate(time.Hour).Add(time.Hour)
	g.Expect(h.rdb.PTTL(ctx, last.OccurrenceKey).Val()).To(BeNumerically(">", time.Until(nextOccurrence)+maxHold),
		"a run waiting behind one that holds its lease for lock.maxHold (%s) may start that much later than the next occurrence", maxHold)
}

// TestMarker_ABufferedRunLaterThanItsOccurrencesLatestStartIsSkippedNotRun: a
// run waits behind one that held its lease far longer than lock.maxHold allows
// (its manager was cut off, or stopped it late). When the run ahead ends, the
// waiting run is past the latest start of its occurrence that any cluster
// computes from the spec: the done-marker another cluster's run of it wrote
// may have expired, so it is skipped, never run.
func TestMarker_ABufferedRunLaterThanItsOccurrencesLatestStartIsSkippedNotRun(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	gj := h.minutely("late-buffered", h.ns+":late-buffered")
	gj.Spec.ConcurrencyPolicy = batchv1alpha1.BufferOneConcurrent
	h.create(gj)
	m1, m2 := h.occurrence(gj, 1), h.occurrence(gj, 2)

	h.clock.SetTime(m1.Add(2 * time.Second))
	h.poke(gj)
	first := h.jobFor(gj, m1)
	h.waitRecorded(gj)
	h.clock.SetTime(m2.Add(2 * time.Second))
	h.poke(gj)
	g.Eventually(func() []batchv1alpha1.BufferedRun { return h.get(gj).Status.Buffered }).Should(ConsistOf(
		HaveField("ScheduledTime.Time", BeTemporally("==", m2))))

	late := m2.Add(gj.Spec.Lock.MaxHoldOrDefault() + 2*time.Hour)
	h.clock.SetTime(late)
	h.complete(first)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(20 * time.Second).Should(And(Not(BeNil()),
		HaveField("ScheduledTime.Time", BeTemporally("==", m2)), HaveField("Result", batchv1alpha1.RunResultSkipped),
		HaveField("Message", ContainSubstring("the latest start of its occurrence the spec allows in any cluster"))))
	for _, j := range h.jobs() {
		g.Expect(j.Annotations[batchv1alpha1.ScheduledTimeAnnotation]).NotTo(Equal(m2.UTC().Format(time.RFC3339)), "no Job for the late run")
	}
}
