package controllers_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// poke changes an annotation of the object so that the manager looks at it again
// (the harness clock was moved).
func (h *harness) poke(gj *batchv1alpha1.GuardedJob) {
	h.t.Helper()
	h.g.Eventually(func() error {
		cur := &batchv1alpha1.GuardedJob{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(gj), cur); err != nil {
			return err
		}
		patch := client.MergeFrom(cur.DeepCopy())
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations["test.guardedjob.dev/poke"] = strconv.FormatInt(time.Now().UnixNano(), 10)
		return k8s.Patch(context.Background(), cur, patch)
	}).Should(Succeed())
}

// TestScheduleJitterStartsAnOccurrenceAtItsOwnOffset: with scheduleJitter, an
// occurrence does not start at its scheduled time but at the offset its object and
// scheduled time give it; status says when; the run is still the occurrence of its
// scheduled time, and its start deadline counts from the offset start.
func TestScheduleJitterStartsAnOccurrenceAtItsOwnOffset(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	gj := h.guardedJob("spread", h.ns+":spread")
	jitter := 2 * time.Minute
	gj.Spec.ScheduleJitter = &metav1.Duration{Duration: jitter}
	// The harness clock jumps to next New Year: the Job, created now, must not look
	// as if its Pods never started.
	gj.Spec.Lock.PodStartTimeout = &metav1.Duration{Duration: 24 * 400 * time.Hour}
	h.clock.SetTime(time.Now())
	h.create(gj)
	gj = h.get(gj)
	occurrence := time.Date(time.Now().UTC().Year()+1, 1, 1, 0, 0, 0, 0, time.UTC) // "0 0 1 1 *"
	offset := schedule.JitterOffset(string(gj.UID), occurrence, jitter)
	start := occurrence.Add(offset)
	g.Expect(offset).To(And(BeNumerically(">=", 0), BeNumerically("<", jitter)))
	g.Eventually(func() *metav1.Time { return h.get(gj).Status.NextScheduleTime }).Should(
		HaveField("Time", BeTemporally("==", start.Truncate(time.Second))), "the next run is due at its jittered start (status keeps whole seconds)")

	// At the scheduled time, and until just before the offset start: no run.
	h.clock.SetTime(start.Add(-time.Second))
	if offset < time.Second {
		h.clock.SetTime(occurrence)
	}
	h.poke(gj)
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(2 * time.Second).Should(BeEmpty())
	g.Expect(h.get(gj).Status.Active).To(BeEmpty())

	// At its start, the occurrence runs: the occurrence of its scheduled time, its
	// start deadline counted from the offset start.
	h.clock.SetTime(start.Add(time.Second))
	h.poke(gj)
	job := h.waitJobs(1)[0]
	g.Expect(job.Annotations).To(HaveKeyWithValue(batchv1alpha1.ScheduledTimeAnnotation, occurrence.Format(time.RFC3339)))
	h.waitRecorded(gj)
	st := h.get(gj).Status
	g.Expect(st.LastScheduleTime.Time).To(BeTemporally("==", occurrence))
	g.Expect(st.Active).To(ConsistOf(HaveField("StartDeadline.Time", BeTemporally("==", start.Add(gj.Spec.StartingDeadline()).Truncate(time.Second)))), "last run: %+v", st.LastRun)
	g.Eventually(func() *metav1.Time { return h.get(gj).Status.NextScheduleTime }).Should(
		HaveField("Time", BeTemporally(">", occurrence.AddDate(1, 0, 0).Add(-time.Second))), "then the next year's")
}
