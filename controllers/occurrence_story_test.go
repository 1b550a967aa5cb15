package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// raceForOneOccurrence sets up the headline topology: the same GuardedJob
// applied in two clusters (cluster-a and cluster-b, one manager each) sharing
// one store. Cluster B's run of the occurrence takes the lock and is running;
// cluster A's run of the same occurrence then finds the lock held by it and
// ends Busy. It returns A's harness (serving metrics), A's and B's objects and
// B's Job.
func raceForOneOccurrence(t *testing.T) (a, b *harness, m *scraper, gjA, gjB *batchv1alpha1.GuardedJob, jobB batchv1.Job) {
	t.Helper()
	a, b = newHarnessAlone(t), newHarnessAlone(t)
	b.clusterName = "cluster-b"
	m = a.serveMetrics()
	// The manager that starts last serves the per-object series of its cache.
	b.start()
	a.start()
	key := "shared:" + a.ns + ":settle"
	objects := make([]*batchv1alpha1.GuardedJob, 2)
	for i, h := range []*harness{a, b} {
		h.sharedStore(a.redis)
		gj := h.guardedJob("settle", key)
		gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "shared-store"}
		gj.Spec.Lock.TTL = &metav1.Duration{Duration: 10 * time.Second}
		gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
		objects[i] = h.create(gj)
	}
	gjA, gjB = objects[0], objects[1]

	b.trigger(gjB)
	jobB = b.waitJobs(1)[0]
	b.waitRecorded(gjB)
	a.trigger(gjA)
	g := a.g
	g.Eventually(func() *batchv1alpha1.RunRecord { return a.get(gjA).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultBusy), HaveField("HeldBy", "cluster-b/"+b.ns+"/"+jobB.Name)))
	g.Expect(a.jobs()).To(BeEmpty(), "cluster A lost the race: no Job there")
	g.Expect(a.get(gjA).Status.LastOccurrenceDone).To(BeNil(), "not known yet: B's run is still running")
	return a, b, m, gjA, gjB, jobB
}

// The same GuardedJob in two clusters sharing the store: cluster B runs the
// occurrence, cluster A's run of it finds the lock held by B's run (Busy) and
// then learns that B completed it, by the done-marker. A's status and metrics
// say the occurrence was done, by B: no alert of A's has reason to fire.
func TestOccurrence_AClusterThatLostTheRaceRecordsTheOccurrenceDoneByTheOther(t *testing.T) {
	a, b, m, gjA, gjB, jobB := raceForOneOccurrence(t)
	g := a.g
	obj := []string{"namespace", a.ns, "name", "settle"}
	holderB := "cluster-b/" + b.ns + "/" + jobB.Name
	scheduled := a.get(gjA).Status.LastRun.ScheduledTime

	b.complete(&jobB)
	g.Eventually(func() *batchv1alpha1.OccurrenceDone { return b.get(gjB).Status.LastOccurrenceDone }).Should(And(Not(BeNil()),
		HaveField("By", holderB), HaveField("ScheduledTime.Time", BeTemporally("==", scheduled.Time))), "B did it itself")

	var done *batchv1alpha1.OccurrenceDone
	g.Eventually(func() *batchv1alpha1.OccurrenceDone { done = a.get(gjA).Status.LastOccurrenceDone; return done }).
		WithTimeout(30*time.Second).Should(Not(BeNil()), "A reads the done-marker at the latest when B's lease would have expired")
	g.Expect(done.By).To(Equal(holderB))
	g.Expect(done.ScheduledTime.Time).To(BeTemporally("==", scheduled.Time))
	st := a.get(gjA).Status
	g.Expect(st.LastRun.Result).To(Equal(batchv1alpha1.RunResultBusy), "A's own run still says what happened to it")
	g.Expect(st.LastSuccessfulTime).To(BeNil(), "and A's cluster ran nothing")
	g.Eventually(func() []string { return a.events(gjA) }).Should(ContainElement(And(
		HavePrefix("OccurrenceDoneElsewhere: Occurrence "+scheduled.UTC().Format(time.RFC3339)+" was done by "+holderB),
		ContainSubstring(st.LastRun.JobName))))

	// A's metrics: the occurrence done (by B), and its Busy run not a busy streak.
	g.Eventually(func() float64 { return m.value("guardedjob_last_occurrence_done_time_seconds", obj...) }).Should(Equal(unix(&done.At)))
	g.Expect(m.value("guardedjob_busy_runs_done_elsewhere_total", obj...)).To(Equal(1.0))
	g.Expect(m.value("guardedjob_object_runs_total", append(obj, "result", "Busy")...)).To(Equal(1.0))
	g.Expect(m.value("guardedjob_busy_runs_in_a_row", obj...)).To(Equal(-1.0), "no busy streak")
	g.Expect(m.value("guardedjob_last_success_time_seconds", obj...)).To(Equal(-1.0))
	g.Expect(m.last).NotTo(ContainSubstring(jobB.Name), "the series name no holder")
}

// When the other cluster's run fails, the occurrence was done nowhere: the
// cluster that lost the race records nothing, and its Busy run stays a busy
// streak.
func TestOccurrence_NothingIsRecordedDoneWhenTheOtherClustersRunFails(t *testing.T) {
	a, b, m, gjA, gjB, jobB := raceForOneOccurrence(t)
	g := a.g
	obj := []string{"namespace", a.ns, "name", "settle"}

	b.fail(&jobB)
	g.Eventually(func() *batchv1alpha1.RunRecord { return b.get(gjB).Status.LastRun }).Should(HaveField("Result", batchv1alpha1.RunResultFailed))
	g.Expect(a.rdb.Exists(context.Background(), "shared:"+a.ns+":settle").Val()).To(BeZero(), "B released the lock")
	a.annotateOther(gjA, "nudge", "1") // a pass of A's reads the keys again
	g.Consistently(func() *batchv1alpha1.OccurrenceDone { return a.get(gjA).Status.LastOccurrenceDone }).WithTimeout(2 * time.Second).Should(BeNil())
	g.Expect(a.events(gjA)).NotTo(ContainElement(HavePrefix("OccurrenceDoneElsewhere")))
	g.Expect(m.value("guardedjob_busy_runs_in_a_row", obj...)).To(Equal(1.0))
	g.Expect(m.value("guardedjob_busy_runs_done_elsewhere_total", obj...)).To(Equal(-1.0))
	g.Expect(m.value("guardedjob_last_occurrence_done_time_seconds", obj...)).To(Equal(-1.0))
}
