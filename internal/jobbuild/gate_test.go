package jobbuild

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// No Pod of a run that holds a lease may start before the manager has confirmed
// the lease after the Job exists: a paused manager's late create, or a queue that
// admits the Job later, must find the lease still held.
func TestEveryJobOfARunThatHoldsALeaseStartsGated(t *testing.T) {
	g := NewWithT(t)

	job, _ := Build(testObject(corev1.RestartPolicyNever), testRun(batchv1alpha1.FencingStrict))
	g.Expect(Gated(job)).To(BeTrue(), "a plain run's Job waits at the start gate")

	job, _ = Build(testObject(corev1.RestartPolicyNever), guardedRun())
	g.Expect(Gated(job)).To(BeTrue(), "a pod guard's Job waits at the start gate too: the guard would accept a lease its ended run left to expire")

	queued := testObject(corev1.RestartPolicyNever)
	queued.Spec.JobTemplate.Spec.Suspend = ptr.To(true)
	job, _ = Build(queued, testRun(batchv1alpha1.FencingStrict))
	g.Expect(Gated(job)).To(BeFalse(), "a queue unsuspends this Job: the start gate would be opened by the queue, not the manager")
	pod := &corev1.Pod{Spec: job.Spec.Template.Spec}
	g.Expect(PodGated(pod)).To(BeTrue(), "the Pods of a Job a queue starts wait at the lease's scheduling gate")
	job, _ = Build(queued, testRun(batchv1alpha1.FencingStrict))
	g.Expect(job.Spec.Template.Spec.SchedulingGates).To(HaveLen(1), "one gate, whatever the template had")

	unguarded := testRun(batchv1alpha1.FencingStrict)
	unguarded.Unguarded = true
	job, _ = Build(testObject(corev1.RestartPolicyNever), unguarded)
	g.Expect(Gated(job)).To(BeFalse(), "a FailOpen run started without a lease has nothing to confirm")
	g.Expect(PodGated(&corev1.Pod{Spec: job.Spec.Template.Spec})).To(BeFalse())
}
