package controllers_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// spec.retryOccurrence: an occurrence that no cluster sharing the lock store
// has done is tried again, until spec.retryOccurrence.within after its
// scheduled time, and given up with an OccurrenceAbandoned event and series
// after that.

// hourlyRetrying is an hourly GuardedJob whose occurrences are tried for
// within, with short backoffs.
func (h *harness) hourlyRetrying(name string, within time.Duration) *batchv1alpha1.GuardedJob {
	gj := h.guardedJob(name, h.ns+":"+name)
	gj.Spec.Schedule = "0 * * * *"
	gj.Spec.StartingDeadlineSeconds = new(int64(60))
	gj.Spec.RetryOccurrence = &batchv1alpha1.OccurrenceRetry{Within: metav1.Duration{Duration: within}}
	// The manager's clock runs up to an hour ahead of the API server's, which
	// stamps the Jobs: no Pod start is due in that time.
	gj.Spec.Lock.PodStartTimeout = &metav1.Duration{Duration: 3 * time.Hour}
	gj.Spec.Lock.BusyRetry = &batchv1alpha1.BusyRetry{Initial: &metav1.Duration{Duration: 5 * time.Second}, Max: &metav1.Duration{Duration: 20 * time.Second}}
	return gj
}

// nextHour is the first hourly occurrence after gj's creation.
func (h *harness) nextHour(gj *batchv1alpha1.GuardedJob) time.Time {
	return h.get(gj).CreationTimestamp.Truncate(time.Hour).Add(time.Hour)
}

// firstTryFails creates gj, lets its first hourly occurrence come and its run
// start, and fails that run's Job. It returns the occurrence and the Job.
func (h *harness) firstTryFails(gj *batchv1alpha1.GuardedJob) (time.Time, *batchv1.Job) {
	h.t.Helper()
	h.create(gj)
	occ := h.nextHour(gj)
	h.clock.SetTime(occ.Add(2 * time.Second))
	h.poke(gj)
	first := h.unfinishedJobFor(gj, occ)
	h.g.Expect(envOf(first, batchv1alpha1.TriggerEnv)).To(Equal(batchv1alpha1.TriggerSchedule))
	h.waitRecorded(gj)
	h.fail(first)
	return occ, first
}

// unfinishedJobFor waits for a Job of gj's occurrence at that has not ended.
func (h *harness) unfinishedJobFor(gj *batchv1alpha1.GuardedJob, at time.Time, except ...string) *batchv1.Job {
	h.t.Helper()
	return h.jobOf(gj, at, func(j batchv1.Job) bool { return len(j.Status.Conditions) == 0 && !slices.Contains(except, j.Name) }, "a new Job")
}

func TestRetryOccurrence_ARunThatFailedIsTriedAgainUntilItSucceeds(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	gj := h.hourlyRetrying("settle", 30*time.Minute)
	occ, first := h.firstTryFails(gj)

	// The occurrence waits for its backoff, then runs again: same scheduled
	// time, a new Job, told it is retry 1.
	g.Eventually(func() *batchv1alpha1.OccurrenceRetryStatus { return h.get(gj).Status.Retry }).Should(And(Not(BeNil()),
		HaveField("ScheduledTime.Time", BeTemporally("==", occ)), HaveField("Attempts", BeZero()),
		HaveField("LastResult", batchv1alpha1.RunResultFailed), HaveField("Until.Time", BeTemporally("==", occ.Add(30*time.Minute)))))
	g.Consistently(func() int { return len(h.jobs()) }).WithTimeout(time.Second).Should(Equal(1), "not before its backoff")
	h.clock.Step(6 * time.Second)
	h.poke(gj)
	second := h.unfinishedJobFor(gj, occ, first.Name)
	g.Expect(envOf(second, batchv1alpha1.TriggerEnv)).To(Equal(batchv1alpha1.TriggerRetry))
	g.Expect(envOf(second, batchv1alpha1.RequestEnv)).To(Equal("1"))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix(
		"OccurrenceRetrying: Trying occurrence " + occ.UTC().Format(time.RFC3339) + " again (retry 1, until ")))

	// It succeeds: the retry is over, and history shows both runs of the occurrence.
	h.waitRecorded(gj)
	h.complete(second)
	g.Eventually(func() *batchv1alpha1.OccurrenceRetryStatus { return h.get(gj).Status.Retry }).Should(BeNil())
	g.Eventually(func() []batchv1alpha1.RunResult {
		var out []batchv1alpha1.RunResult
		for _, r := range h.get(gj).Status.RecentRuns {
			if r.ScheduledTime.Equal(&metav1.Time{Time: occ}) {
				out = append(out, r.Result)
			}
		}
		return out
	}).Should(Equal([]batchv1alpha1.RunResult{batchv1alpha1.RunResultSucceeded, batchv1alpha1.RunResultFailed}))
}

func TestRetryOccurrence_ARunWaitsForTheClusterThatWonAndDoesTheOccurrenceWhenThatRunFails(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	gj := h.create(h.hourlyRetrying("settle", 30*time.Minute))
	key := gj.Spec.Lock.Key
	occ := h.nextHour(gj)
	// Another cluster won the occurrence.
	g.Expect(h.rdb.Set(context.Background(), key, "cluster-b/"+h.ns+"/settle-29400000-a1b2c3#0123456789abcdef", time.Hour).Err()).To(Succeed())
	h.clock.SetTime(occ.Add(2 * time.Second))
	h.poke(gj)
	g.Eventually(func() *batchv1alpha1.LockStatus { return h.get(gj).Status.Lock }).Should(And(Not(BeNil()), HaveField("State", batchv1alpha1.LockStateBusy)))

	// Past its starting deadline it still waits: without retryOccurrence it
	// would have been recorded Busy, and the occurrence lost if the winner fails.
	h.clock.SetTime(occ.Add(5 * time.Minute))
	h.poke(gj)
	g.Consistently(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).WithTimeout(2 * time.Second).Should(HaveLen(1))
	g.Expect(h.get(gj).Status.LastRun).To(BeNil())

	// The winner's run failed: its lease is released, and no done-marker was
	// written. This cluster's run takes the occurrence.
	g.Expect(h.rdb.Del(context.Background(), key).Err()).To(Succeed())
	h.clock.Step(30 * time.Second)
	h.poke(gj)
	job := h.unfinishedJobFor(gj, occ)
	h.waitRecorded(gj)
	h.complete(job)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultSucceeded), HaveField("ScheduledTime.Time", BeTemporally("==", occ))))

	// The next occurrence, won by the other cluster whose run succeeds: the
	// waiting run finds the done-marker and skips it, and nothing is retried.
	next := occ.Add(time.Hour)
	g.Expect(h.rdb.Set(context.Background(), key, "cluster-b/"+h.ns+"/settle-29400060-d4e5f6#0123456789abcdef", time.Hour).Err()).To(Succeed())
	h.clock.SetTime(next.Add(2 * time.Second))
	h.poke(gj)
	g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).Should(HaveLen(1))
	g.Expect(h.rdb.Set(context.Background(), key+":done:"+itoa(next.Unix()), "cluster-b/"+h.ns+"/settle-29400060-d4e5f6", time.Hour).Err()).To(Succeed())
	g.Expect(h.rdb.Del(context.Background(), key).Err()).To(Succeed())
	h.clock.Step(30 * time.Second)
	h.poke(gj)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		HaveField("Result", batchv1alpha1.RunResultSkipped), HaveField("ScheduledTime.Time", BeTemporally("==", next))))
	g.Expect(h.get(gj).Status.Retry).To(BeNil())
	g.Expect(h.jobs()).To(HaveLen(1), "the other cluster did it")
}

func TestRetryOccurrence_AnOccurrenceNoClusterDidIsAbandonedWithAnEventAndASeries(t *testing.T) {
	h := newHarnessAlone(t)
	m := h.serveMetrics()
	h.start()
	g := h.g
	gj := h.hourlyRetrying("settle", 2*time.Minute)
	occ, first := h.firstTryFails(gj)
	g.Eventually(func() *batchv1alpha1.OccurrenceRetryStatus { return h.get(gj).Status.Retry }).ShouldNot(BeNil())
	h.clock.Step(6 * time.Second)
	h.poke(gj)
	second := h.unfinishedJobFor(gj, occ, first.Name)
	h.waitRecorded(gj)
	h.fail(second)
	g.Eventually(func() int32 {
		if rt := h.get(gj).Status.Retry; rt != nil && rt.NotBefore != nil {
			return rt.Attempts
		}
		return -1
	}).Should(Equal(int32(1)))

	// Its tries stop at the scheduled time + 2m.
	h.clock.SetTime(occ.Add(2*time.Minute + time.Second))
	h.poke(gj)
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(And(
		HavePrefix("OccurrenceAbandoned: Gave up occurrence "+occ.UTC().Format(time.RFC3339)+": its tries stopped at "),
		ContainSubstring("(1 retries; the last run ended Failed: "))))
	g.Eventually(func() *batchv1alpha1.OccurrenceRetryStatus { return h.get(gj).Status.Retry }).Should(BeNil())
	g.Consistently(func() int { return len(h.jobs()) }).WithTimeout(time.Second).Should(Equal(2))
	g.Eventually(func() float64 {
		return m.value("guardedjob_occurrences_abandoned_total", "namespace", h.ns, "name", "settle")
	}).Should(Equal(1.0))
}

// TestRetryOccurrence_ARetryWhoseRecordWasLostIsStillCounted: the status write
// that records a retry (its Job already created, behind its gate) fails once,
// as a conflict does when the GuardedJob changed meanwhile. The next pass
// takes up the retry's Job; status.retry must still count the try, so that
// its backoff and its abandonment say how many runs were made.
func TestRetryOccurrence_ARetryWhoseRecordWasLostIsStillCounted(t *testing.T) {
	h := newHarness(t)
	var failed atomic.Bool
	h.intercept = &interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if gj, ok := obj.(*batchv1alpha1.GuardedJob); ok && slices.ContainsFunc(gj.Status.Active, func(a batchv1alpha1.ActiveRun) bool { return a.Retry > 0 }) && failed.CompareAndSwap(false, true) {
				return apierrors.NewConflict(batchv1alpha1.GroupVersion.WithResource("guardedjobs").GroupResource(), gj.Name, errors.New("injected: the object has been modified"))
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	}
	h.start()
	g := h.g
	gj := h.hourlyRetrying("settle", 30*time.Minute)
	occ, first := h.firstTryFails(gj)
	g.Eventually(func() *batchv1alpha1.OccurrenceRetryStatus { return h.get(gj).Status.Retry }).Should(HaveField("NotBefore", Not(BeNil())))
	h.clock.Step(6 * time.Second)
	h.poke(gj)
	second := h.unfinishedJobFor(gj, occ, first.Name)
	h.waitRecorded(gj)
	g.Expect(failed.Load()).To(BeTrue(), "the retry's first record was refused")
	g.Eventually(func() *batchv1alpha1.OccurrenceRetryStatus { return h.get(gj).Status.Retry }).Should(And(
		HaveField("Attempts", int32(1)), HaveField("NotBefore", BeNil())), "the running retry is counted")
	h.fail(second)
	g.Eventually(func() *batchv1alpha1.OccurrenceRetryStatus { return h.get(gj).Status.Retry }).Should(And(
		HaveField("Attempts", int32(1)), HaveField("NotBefore", Not(BeNil()))))
	g.Expect(h.jobs()).To(HaveLen(2), "one Job for the retry")
}
