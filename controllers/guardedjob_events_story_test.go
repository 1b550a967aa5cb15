package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// A finished Job deleted by a history limit is announced with JobDeleted, naming
// the Job and the limit, so a user who looks for a Job that is gone learns why.
func TestHistoryLimitDeletionEmitsJobDeleted(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.guardedJob("history", h.ns+":history")
	gj.Spec.FailedJobsHistoryLimit = ptr.To(int32(0))
	h.create(gj)

	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.fail(&job)

	h.g.Eventually(func() bool {
		cur := &batchv1.Job{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(&job), cur); err != nil {
			return true // gone
		}
		return !cur.DeletionTimestamp.IsZero()
	}).WithTimeout(20*time.Second).Should(BeTrue(), "the failed Job is deleted: failedJobsHistoryLimit is 0")
	h.g.Eventually(func() []string { return h.events(gj) }).WithTimeout(20 * time.Second).Should(
		ContainElement("JobDeleted: Deleted Job " + job.Name + ": failedJobsHistoryLimit is 0"))
	// The event is emitted in the pass whose status write records the run's end.
	h.g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(
		And(Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultFailed)))
}
