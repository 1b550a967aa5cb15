package controllers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// Stories of a manager acting on a view older than the world: a deposed leader's
// cache from before its pause, or a cache that has not seen a Job yet.

// TestStaleCache_ARunWhoseJobTheCacheHasNotSeenIsNeverSkippedAndItsLeaseNeverReleased:
// a run whose Job a queue starts is recorded before its Job exists, and its
// Job's UID by the pass after the one that created it. The manager dies in
// between. The next pass reads the run from a cache that has not seen the Job,
// after the run's start deadline: a run with no Job that is too late is
// skipped and its lease released. But its Job exists, and a Pod of it may run:
// the missing Job must be confirmed with a live read before any skip, stop or
// release, whatever status says of its UID.
func TestStaleCache_ARunWhoseJobTheCacheHasNotSeenIsNeverSkippedAndItsLeaseNeverReleased(t *testing.T) {
	h := newHarness(t)
	var hidden atomic.Bool
	h.hideJobsFromCache(&hidden)
	h.start()
	ctx := context.Background()
	g := h.g
	key := h.ns + ":stale"
	gj := h.guardedJob("stale", key)
	gj.Spec.JobTemplate.Spec.Suspend = ptr.To(true) // a queue starts it: status first, then the Job
	h.create(gj)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	h.stop()

	// As the manager that died after the create left it: status names the run
	// without its Job's UID. Its start deadline has passed since.
	g.Eventually(func() error {
		cur := h.get(gj)
		cur.Status.Active[0].JobUID = ""
		cur.Status.Active[0].StartDeadline = &metav1.Time{Time: time.Now().Add(-time.Minute)}
		return k8s.Status().Update(ctx, cur)
	}).Should(Succeed())
	run := h.get(gj).Status.Active[0]
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(run.Token))

	hidden.Store(true) // the cache has not seen the Job
	h.start()
	g.Consistently(func() string { return h.rdb.Get(ctx, key).Val() }).WithTimeout(4*time.Second).WithPolling(100*time.Millisecond).
		Should(Equal(run.Token), "the lease of a run whose Job exists is kept")
	cur := h.get(gj)
	g.Expect(cur.Status.Active).To(HaveLen(1), "the run goes on")
	g.Expect(cur.Status.Active[0].JobUID).To(Equal(job.UID), "its Job, read from the API server, is recorded")
	if lr := cur.Status.LastRun; lr != nil {
		g.Expect(lr.JobName).NotTo(Equal(run.JobName), "it was not skipped")
	}
	g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix(batchv1alpha1.StartingDeadlineExceededReason)))
}
