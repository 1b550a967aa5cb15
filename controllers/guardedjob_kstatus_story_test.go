package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// kstatusOf reads the object from the API server as Flux does
// (unstructured) and computes its kstatus.
func (h *harness) kstatusOf(gj *batchv1alpha1.GuardedJob) status.Status {
	h.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(batchv1alpha1.GroupVersion.WithKind("GuardedJob"))
	h.g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(gj), u)).To(Succeed())
	res, err := status.Compute(u)
	h.g.Expect(err).NotTo(HaveOccurred())
	return res.Status
}

// A GitOps tool waiting on a GuardedJob fails fast on a spec error, succeeds
// once it is fixed, and is not held up by a run in progress.
func TestKstatusStory(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()

	gj := h.guardedJob("nightly", h.ns+":nightly")
	gj.Spec.Schedule = "every day"
	h.create(gj)
	h.g.Eventually(func() status.Status { return h.kstatusOf(gj) }).WithTimeout(20 * time.Second).Should(Equal(status.FailedStatus))
	stalled := findCond(h.get(gj).Status.Conditions, batchv1alpha1.StalledCondition)
	h.g.Expect(stalled).NotTo(BeNil())
	h.g.Expect(stalled.Reason).To(Equal(batchv1alpha1.InvalidScheduleReason))
	h.g.Expect(stalled.Message).To(ContainSubstring("every day"))

	h.g.Eventually(func() error {
		cur := h.get(gj)
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Spec.Schedule = "0 0 1 1 *"
		return k8s.Patch(ctx, cur, patch)
	}).Should(Succeed())
	h.g.Eventually(func() status.Status { return h.kstatusOf(gj) }).WithTimeout(20 * time.Second).Should(Equal(status.CurrentStatus))
	cur := h.get(gj)
	h.g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
	h.g.Expect(findCond(cur.Status.Conditions, batchv1alpha1.StalledCondition)).To(BeNil())
	h.g.Expect(findCond(cur.Status.Conditions, batchv1alpha1.ReconcilingCondition)).To(BeNil())

	// A run holding its lease is normal operation.
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.g.Eventually(func() string {
		if l := h.get(gj).Status.Lock; l != nil {
			return string(l.State)
		}
		return ""
	}).WithTimeout(20 * time.Second).Should(Equal(string(batchv1alpha1.LockStateHeld)))
	h.g.Consistently(func() status.Status { return h.kstatusOf(gj) }).WithTimeout(time.Second).Should(Equal(status.CurrentStatus))

	h.complete(&job)
	h.g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(20 * time.Second).Should(
		HaveField("Result", batchv1alpha1.RunResultSucceeded))
	h.g.Expect(h.kstatusOf(gj)).To(Equal(status.CurrentStatus))
}
