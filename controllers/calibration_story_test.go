package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gstruct"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// Lease calibration from the durations of past runs: five runs of 10s are
// recorded; a run that has gone on for 90s is unusually long (once), and when it
// ends its 90s are over 80% of its 100s maxHold, so MaxHoldAtRisk turns True,
// without making the object look unhealthy to GitOps tools. Raising maxHold
// clears it.
func TestRunDurationsCalibrateMaxHold(t *testing.T) {
	h := newHarnessAlone(t)
	g := h.g
	ctx := context.Background()
	gj := h.guardedJob("calibrated", h.ns+":calibrated")
	gj.Spec.Lock.MaxHold = &metav1.Duration{Duration: 100 * time.Second}
	h.create(gj)
	// The history of five earlier runs, as an earlier manager recorded it.
	past := &batchv1alpha1.RunDurations{Count: 5, P50: &metav1.Duration{Duration: 10 * time.Second}, P99: &metav1.Duration{Duration: 10 * time.Second}}
	for range 5 {
		past.Recent = append(past.Recent, metav1.Duration{Duration: 10 * time.Second})
	}
	cur := h.get(gj)
	cur.Status.RunDurations = past
	g.Expect(k8s.Status().Update(ctx, cur)).To(Succeed())

	h.start()
	g.Eventually(func() *metav1.Condition {
		return findCond(h.get(gj).Status.Conditions, batchv1alpha1.MaxHoldAtRiskCondition)
	}).Should(
		And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", batchv1alpha1.RunDurationWithinMaxHoldReason)))

	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	// The Job controller started it 90s ago (by the Job's clock).
	started := metav1.NewTime(time.Now().Add(-90 * time.Second).Truncate(time.Second))
	h.setJobStatus(&job, batchv1.JobStatus{StartTime: &started, Active: 1})
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(
		MatchRegexp(`^RunUnusuallyLong: Job ` + job.Name + ` has run for 1m[23]\ds, over 3 times the p99 \(10s\) of the last 5 runs; lock.maxHold is 1m40s$`)))
	g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).Should(
		ConsistOf(HaveField("UnusuallyLong", true)), "said once per run")

	completed := metav1.NewTime(started.Add(90 * time.Second))
	h.setJobStatus(&job, batchv1.JobStatus{
		StartTime: &started, CompletionTime: &completed, Succeeded: 1,
		Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: completed},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: completed},
		},
	})
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(
		And(Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultSucceeded)))
	st := h.get(gj).Status
	g.Expect(st.RunDurations).To(gstruct.PointTo(gstruct.MatchAllFields(gstruct.Fields{
		"Count":  BeEquivalentTo(6),
		"P50":    Equal(&metav1.Duration{Duration: 10 * time.Second}),
		"P99":    Equal(&metav1.Duration{Duration: 90 * time.Second}),
		"Recent": HaveExactElements(append(past.Recent, metav1.Duration{Duration: 90 * time.Second})),
	})))
	g.Expect(findCond(st.Conditions, batchv1alpha1.MaxHoldAtRiskCondition)).To(And(
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", batchv1alpha1.RunDurationNearMaxHoldReason),
		HaveField("Message", ContainSubstring("the p99 of the last 6 run durations is 1m30s, over 80% of lock.maxHold 1m40s"))))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("RunDurationNearMaxHold: the p99 of the last 6 run durations is 1m30s")))
	unusual := 0
	for _, e := range h.events(gj) {
		if strings.HasPrefix(e, "RunUnusuallyLong:") {
			unusual++
		}
	}
	g.Expect(unusual).To(Equal(1), "RunUnusuallyLong once per run, not again when it ends")
	g.Expect(h.kstatusOf(gj)).To(Equal(status.CurrentStatus), "a risk to recalibrate is not a health problem")

	// Raising maxHold clears the risk at once.
	g.Eventually(func() error {
		cur := h.get(gj)
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Spec.Lock.MaxHold = &metav1.Duration{Duration: 200 * time.Second}
		return k8s.Patch(ctx, cur, patch)
	}).Should(Succeed())
	g.Eventually(func() *metav1.Condition {
		return findCond(h.get(gj).Status.Conditions, batchv1alpha1.MaxHoldAtRiskCondition)
	}).Should(
		HaveField("Status", metav1.ConditionFalse))
}
