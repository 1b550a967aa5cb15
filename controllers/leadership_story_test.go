package controllers_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
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

// TestPausedLeader_ALateJobOfAGuardedRunThatLeftItsLeaseToExpireNeverStarts: a
// run with a pod guard ends uncleanly (its Pod's node was cut off): its lease is
// left to expire, so that the guard stops the workload before another holder
// can start. Its Job is stopped and goes. Then the Job create of a manager that
// was paused before sending it lands: the same run's Job again. Its Pods' own
// start gate (the pod guard) would accept the lease, which still holds the
// run's token. The Job must wait at the manager's start gate, and never open:
// its run is over.
func TestPausedLeader_ALateJobOfAGuardedRunThatLeftItsLeaseToExpireNeverStarts(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	g := h.g
	gj := h.guardedJobWithPodGuard("latecreate", h.ns+":latecreate")
	run, job := h.leftToExpire(gj)
	g.Expect(k8s.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	h.gcRemoves(job)

	late, _ := jobbuild.Build(h.get(gj), &run)
	raw, err := json.Marshal(run)
	g.Expect(err).NotTo(HaveOccurred())
	late.Annotations[batchv1alpha1.RunAnnotation] = string(raw)
	g.Expect(k8s.Create(ctx, late)).To(Succeed())
	g.Expect(ptr.Deref(late.Spec.Suspend, false)).To(BeTrue(), "created at the start gate")
	suspended := func() bool {
		cur := &batchv1.Job{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(late), cur); err != nil {
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			return true
		}
		return ptr.Deref(cur.Spec.Suspend, false)
	}
	g.Consistently(suspended).WithTimeout(3*time.Second).Should(BeTrue(), "its gate never opens")
	g.Eventually(func() bool { return h.jobDeleted(late) }).Should(BeTrue(), "and it is deleted")
	g.Expect(suspended()).To(BeTrue())
	g.Expect(h.rdb.Get(ctx, run.Key).Val()).To(Equal(run.Token), "the lease is still left to expire, nobody renews it")
}
