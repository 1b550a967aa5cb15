package controllers_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
)

// A GuardedJob whose Jobs a queue starts (jobTemplate.spec.suspend: true, as
// with Kueue): the run takes its lease, its Job is created suspended and stays
// so until the queue starts it. Meanwhile the GuardedJob says Queued, the lease
// is held and renewed, and lock.podStartTimeout does not count: the run is not
// failed with "no Pod was created" while it waits. Once the queue starts the
// Job (the test plays the queue and the Job controller), podStartTimeout counts
// from then.
func TestQueued_AJobKeptSuspendedByItsQueueIsQueuedAndPodStartTimeoutCountsFromItsStart(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	ctx := context.Background()
	key := h.ns + ":queued"
	gj := h.guardedJob("queued", key)
	gj.Spec.JobTemplate.Spec.Suspend = ptr.To(true)
	gj.Spec.JobTemplate.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "batch"}
	gj.Spec.Lock.PodStartTimeout = &metav1.Duration{Duration: 30 * time.Second}
	h.create(gj)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	g.Expect(job.Spec.Suspend).To(Equal(ptr.To(true)), "the template's suspend: the queue starts the Job")
	g.Expect(job.Annotations).NotTo(HaveKey(batchv1alpha1.StartGateAnnotation), "the manager does not gate a Job its queue starts")
	// The Job controller marks it suspended.
	h.setJobStatus(&job, batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue,
		Reason: "JobSuspended", Message: "Job suspended", LastTransitionTime: metav1.Now()}}})

	queued := func() *metav1.Condition { return h.condition(gj, batchv1alpha1.QueuedCondition) }
	g.Eventually(queued).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", batchv1alpha1.JobQueuedReason),
		HaveField("Message", ContainSubstring("Job "+job.Name+" is suspended, waiting for its queue to start it"))))
	run := h.get(gj).Status.Active[0]
	g.Expect(run.QueuedSince).NotTo(BeNil())
	g.Expect(h.condition(gj, batchv1alpha1.LockHeldCondition).Status).To(Equal(metav1.ConditionTrue), "the run holds its lease while it waits")

	// Long past podStartTimeout of the Job's creation, it still waits: not failed,
	// its lease held.
	nudge := 0
	poke := func() { nudge++; h.annotateOther(gj, "nudge", strconv.Itoa(nudge)) }
	h.clock.SetTime(job.CreationTimestamp.Add(5 * time.Minute))
	poke()
	g.Consistently(func() bool { return h.jobDeleted(&job) }).WithTimeout(2 * time.Second).Should(BeFalse())
	g.Expect(h.get(gj).Status.Active).To(HaveLen(1))
	g.Expect(h.get(gj).Status.LastRun).To(BeNil())
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(run.Token))

	// The queue starts the Job; the Job controller resumes it.
	resumed := metav1.NewTime(h.clock.Now().Truncate(time.Second))
	cur := &batchv1.Job{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&job), cur)).To(Succeed())
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Suspend = ptr.To(false)
	g.Expect(k8s.Patch(ctx, cur, patch)).To(Succeed())
	h.setJobStatus(&job, batchv1.JobStatus{StartTime: &resumed, Conditions: []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionFalse,
		Reason: "JobResumed", Message: "Job resumed", LastTransitionTime: resumed}}})
	g.Eventually(queued).Should(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", batchv1alpha1.NotQueuedReason)))
	g.Expect(h.get(gj).Status.Active[0].QueuedSince).To(BeNil())

	// Within podStartTimeout of the start, nothing happens; past it, no Pod
	// having started, the run is stopped as any other whose Pods do not start.
	h.clock.SetTime(resumed.Add(20 * time.Second))
	poke()
	g.Consistently(func() bool { return h.jobDeleted(&job) }).WithTimeout(2*time.Second).Should(BeFalse(), "counted from the start, not the creation")
	h.clock.SetTime(resumed.Add(31 * time.Second))
	poke()
	g.Eventually(func() bool { return h.jobDeleted(&job) }).Should(BeTrue())
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultFailed),
		HaveField("Message", ContainSubstring("started within lock.podStartTimeout 30s since it was resumed at "+resumed.UTC().Format(time.RFC3339))),
		HaveField("Message", ContainSubstring("no Pod was created"))))

	// One JobQueued event for the one time it waited.
	var queuedEvents []string
	for _, e := range h.events(gj) {
		if strings.HasPrefix(e, batchv1alpha1.JobQueuedReason+": ") {
			queuedEvents = append(queuedEvents, e)
		}
	}
	g.Expect(queuedEvents).To(HaveExactElements(And(ContainSubstring("Job "+job.Name+" is suspended, waiting for its queue batch to start it"),
		ContainSubstring("holds its lease "+key))))
}

// TestQueued_APodOfAQueuesJobIsScheduledOnlyOnceItsRunsLeaseIsConfirmed: a
// queue may start a Job whenever it admits it: also a Job a paused manager
// created after its run ended, or one admitted while the manager is cut off
// from the API server. So the Pods of a Job a queue starts wait at the lease's
// scheduling gate; the manager lets a Pod be scheduled only once it confirmed,
// after the Pod existed, that the Pod's run still holds its lease. A Job no
// run claims keeps its Pods gated until the stop controller deletes it.
func TestQueued_APodOfAQueuesJobIsScheduledOnlyOnceItsRunsLeaseIsConfirmed(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	ctx := context.Background()
	key := h.ns + ":queuegate"
	gj, job := h.queuedRun("queuegate", key)
	g.Expect(job.Spec.Template.Spec.SchedulingGates).To(ContainElement(corev1.PodSchedulingGate{Name: batchv1alpha1.LeaseSchedulingGate}),
		"the Pods of a Job a queue starts wait for the manager")
	run := h.get(gj).Status.Active[0]

	h.queueStarts(&job)
	pod := h.gatedPodFor(&job)
	g.Eventually(func() []corev1.PodSchedulingGate { return h.podNow(pod).Spec.SchedulingGates }).
		ShouldNot(ContainElement(corev1.PodSchedulingGate{Name: batchv1alpha1.LeaseSchedulingGate}), "the run's lease confirmed: scheduled")
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(run.Token))

	// The run ends. A Job of the same template that no run claims (created
	// late by a manager that was paused) is started by the queue: its Pod is
	// never scheduled, and the Job is stopped.
	h.complete(&job)
	g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).Should(BeEmpty())
	late, _ := jobbuild.Build(h.get(gj), &run)
	late.Name = run.JobName + "-late"
	g.Expect(k8s.Create(ctx, late)).To(Succeed())
	h.queueStarts(late)
	latePod := h.gatedPodFor(late)
	stillGated := h.stillGated(latePod)
	g.Consistently(stillGated).WithTimeout(2*time.Second).Should(BeTrue(), "its Pod is never let through")
	g.Eventually(func() bool { return h.jobDeleted(late) }).Should(BeTrue(), "the stop controller stops a Job no run claims")
	g.Expect(stillGated()).To(BeTrue())
}

// queuedRun starts a run of a new GuardedJob whose template asks for suspend
// (a queue starts its Job) and returns them once status records the run.
func (h *harness) queuedRun(name, key string) (*batchv1alpha1.GuardedJob, batchv1.Job) {
	h.t.Helper()
	gj := h.guardedJob(name, key)
	gj.Spec.JobTemplate.Spec.Suspend = ptr.To(true)
	h.create(gj)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	return gj, job
}

// queueStarts plays the queue: it unsuspends the Job.
func (h *harness) queueStarts(job *batchv1.Job) {
	h.t.Helper()
	cur := &batchv1.Job{}
	h.g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(job), cur)).To(Succeed())
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Suspend = ptr.To(false)
	h.g.Expect(k8s.Patch(context.Background(), cur, patch)).To(Succeed())
}

// gatedPodFor plays the Job controller: a Pod of the Job, with the template's
// scheduling gates, not yet bound to a node.
func (h *harness) gatedPodFor(job *batchv1.Job) *corev1.Pod {
	h.t.Helper()
	pod := podOf(job, h.ns)
	h.g.Expect(k8s.Create(context.Background(), pod)).To(Succeed())
	return pod
}

// stillGated says whether a Pod still waits at the lease's scheduling gate, or
// was deleted before it was ever scheduled.
func (h *harness) stillGated(pod *corev1.Pod) func() bool {
	return func() bool {
		cur := &corev1.Pod{}
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), cur)
		if apierrors.IsNotFound(err) {
			return true
		}
		h.g.Expect(err).NotTo(HaveOccurred())
		return slices.Contains(cur.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: batchv1alpha1.LeaseSchedulingGate})
	}
}

// podNow reads a Pod as the API server has it.
func (h *harness) podNow(pod *corev1.Pod) *corev1.Pod {
	h.t.Helper()
	cur := &corev1.Pod{}
	h.g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), cur)).To(Succeed())
	return cur
}

// TestQueued_APodWhoseRunLostItsLeaseBeforeTheQueueStartedItIsNeverScheduled:
// the key is taken by someone else while the Job waits in its queue; the queue
// then starts it. The manager confirms the lease for the Pod, finds it gone, and
// stops the run: the Pod never loses its scheduling gate.
func TestQueued_APodWhoseRunLostItsLeaseBeforeTheQueueStartedItIsNeverScheduled(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	ctx := context.Background()
	key := h.ns + ":queuelost"
	gj, job := h.queuedRun("queuelost", key)

	g.Expect(h.rdb.Set(ctx, key, "someone-else", time.Minute).Err()).To(Succeed())
	h.queueStarts(&job)
	pod := h.gatedPodFor(&job)
	stillGated := h.stillGated(pod)
	g.Consistently(stillGated).WithTimeout(2*time.Second).Should(BeTrue(), "a Pod whose run holds no lease is never let through")
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultLockLost)))
	g.Expect(stillGated()).To(BeTrue())
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal("someone-else"), "the other holder's key is left alone")
}
