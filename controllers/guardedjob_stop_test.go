package controllers_test

import (
	"context"
	"fmt"
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
)

// podFor plays the Job controller and the scheduler: a Pod of the Job, bound to a
// node, so that deleting it leaves it terminating (no kubelet confirms it) until
// the test removes it.
func (h *harness) podFor(job *batchv1.Job) *corev1.Pod {
	h.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: job.Name + "-pod", Namespace: h.ns,
			Labels: map[string]string{
				batchv1.JobNameLabel:          job.Name,
				batchv1alpha1.GuardedJobLabel: job.Labels[batchv1alpha1.GuardedJobLabel],
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = "node-1"
	h.g.Expect(k8s.Create(context.Background(), pod)).To(Succeed())
	return pod
}

// podDeletion returns the Pod's deletion timestamp and grace, or nil when it has
// not been deleted.
func (h *harness) podDeletion(pod *corev1.Pod) *corev1.Pod {
	cur := &corev1.Pod{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), cur); err != nil || cur.DeletionTimestamp == nil {
		return nil
	}
	return cur
}

// kubeletRemoves plays the kubelet: the Pod's containers stopped, the Pod goes.
func (h *harness) kubeletRemoves(pod *corev1.Pod) {
	h.t.Helper()
	h.g.Expect(client.IgnoreNotFound(k8s.Delete(context.Background(), pod, client.GracePeriodSeconds(0)))).To(Succeed())
}

// jobDeleted says whether the Job is being deleted or gone; a failed read says
// neither.
func (h *harness) jobDeleted(job *batchv1.Job) bool {
	cur := &batchv1.Job{}
	err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), cur)
	return apierrors.IsNotFound(err) || err == nil && cur.DeletionTimestamp != nil
}

// runningJob creates gj, triggers it and waits until its Job exists and is
// recorded, with one Pod.
func (h *harness) runningJob(gj *batchv1alpha1.GuardedJob) (*batchv1.Job, *corev1.Pod) {
	h.t.Helper()
	h.create(gj)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	return &job, h.podFor(&job)
}

func TestAStolenLeaseStopsTheJobAndItsPodsAndLeavesTheThiefAlone(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":theft"
	gj := h.guardedJob("theft", key)
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 10 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	// Longer than the 1s a lost lease gets, so the test sees which grace was chosen.
	gj.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(2))
	job, pod := h.runningJob(gj)

	thief := "cluster-b/" + h.ns + "/theft-1-abcdef#ffffffffffffffffffffffffffffffff"
	h.g.Expect(h.rdb.Set(ctx, key, thief, time.Minute).Err()).To(Succeed())

	g := h.g
	g.Eventually(func() bool { return h.jobDeleted(job) }).WithTimeout(10 * time.Second).Should(BeTrue())
	g.Eventually(func() *corev1.Pod { return h.podDeletion(pod) }).Should(HaveField("DeletionGracePeriodSeconds", HaveValue(Equal(int64(1)))),
		"another holder may be running: the Pods get the shortest grace")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(
		HavePrefix("LockLost: Stopping " + job.Name + ": lock " + key + " was lost: it is held by cluster-b/" + h.ns + "/theft-1-abcdef")))
	// The event goes out during the pass, its status write at the pass's end.
	g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).Should(
		ConsistOf(HaveField("Phase", batchv1alpha1.RunPhaseStopping)), "the run waits for its Pods")
	st := h.get(gj).Status
	g.Expect(st.Lock).To(And(HaveField("State", batchv1alpha1.LockStateLost), HaveField("Holder", "cluster-b/"+h.ns+"/theft-1-abcdef")))
	g.Expect(findCond(st.Conditions, batchv1alpha1.LockHeldCondition)).To(HaveField("Status", metav1.ConditionFalse))

	h.kubeletRemoves(pod)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultLockLost)))
	g.Expect(h.get(gj).Status.Active).To(BeEmpty())
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(thief), "the thief's key is untouched")
	g.Expect(h.rdb.Keys(ctx, key+":done:*").Val()).To(BeEmpty(), "no done-marker for a run that lost its lease")
}

func TestWhenRedisDiesAFailClosedRunIsStoppedBeforeItsLeaseCouldExpire(t *testing.T) {
	h := newHarness(t)
	h.start()
	const ttl = 10 * time.Second
	gj := h.guardedJob("redisdown", h.ns+":redisdown")
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: ttl}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	gj.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(2))
	job, pod := h.runningJob(gj)
	// Let a renewal go through, then kill Redis.
	h.g.Eventually(func() time.Duration { return h.rdb.PTTL(context.Background(), h.ns+":redisdown").Val() }).Should(BeNumerically(">", 8*time.Second))
	killed := time.Now()
	h.redis.Kill()

	g := h.g
	var deleted *corev1.Pod
	g.Eventually(func() *corev1.Pod { deleted = h.podDeletion(pod); return deleted }).WithTimeout(ttl).ShouldNot(BeNil())
	// The last renewal was sent at most a renew interval before the kill, so the
	// lease was valid until at least killed + ttl - 1s. The Pod's deadline (the
	// deletion time plus its grace) must come before that.
	podGone := deleted.DeletionTimestamp.Time
	g.Expect(podGone).To(BeTemporally("<", killed.Add(ttl-time.Second)))
	g.Expect(h.jobDeleted(job)).To(BeTrue())
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("StoreUnavailable: Stopping " + job.Name)))
	t.Logf("Pod deletion deadline %s after Redis died (lease valid for at least %s)", podGone.Sub(killed).Round(time.Millisecond), ttl-time.Second)

	h.kubeletRemoves(pod)
	// The release waits for the store; the run stays Releasing meanwhile.
	g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).Should(ConsistOf(HaveField("Phase", batchv1alpha1.RunPhaseReleasing)))
	g.Expect(findCond(h.get(gj).Status.Conditions, batchv1alpha1.StoreReachableCondition)).To(HaveField("Status", metav1.ConditionFalse))
	h.redis.Restart(t)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(20 * time.Second).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultStoreUnavailable)))
}

func TestAFailOpenRunKeepsRunningThroughARedisRestartAndTakesItsKeyBack(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":failopen"
	gj := h.guardedJob("failopen", key)
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 9 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	gj.Spec.Lock.StoreFailurePolicy = batchv1alpha1.FailOpen
	job, pod := h.runningJob(gj)
	token := h.get(gj).Status.Active[0].Token

	h.redis.Kill()
	g := h.g
	g.Consistently(func() *corev1.Pod { return h.podDeletion(pod) }).WithTimeout(10*time.Second).Should(BeNil(), "FailOpen keeps running")
	h.redis.Restart(t) // empty: the key is gone
	g.Eventually(func() string { return h.rdb.Get(ctx, key).Val() }).WithTimeout(10*time.Second).Should(Equal(token),
		"the run takes its key again with its own token")
	g.Expect(h.jobDeleted(job)).To(BeFalse())
	g.Expect(h.get(gj).Status.Active).To(ConsistOf(HaveField("Phase", batchv1alpha1.RunPhaseRunning)))
}

func TestAFailOpenRunStartsUnfencedWhenRedisIsDownAtItsStart(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.guardedJob("unguarded", h.ns+":unguarded")
	gj.Spec.Lock.StoreFailurePolicy = batchv1alpha1.FailOpen
	h.create(gj)
	h.redis.Kill()
	h.trigger(gj)

	job := h.waitJobs(1)[0]
	g := h.g
	g.Expect(job.Annotations).To(HaveKeyWithValue(batchv1alpha1.FenceAnnotation, batchv1alpha1.UnfencedValue))
	g.Expect(envOf(&job, "GUARDEDJOB_FENCE")).To(Equal(""))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("Unguarded: Starting " + job.Name + " WITHOUT a lease")))
	g.Expect(h.get(gj).Status.Active).To(ConsistOf(HaveField("Unguarded", true)))
}

func TestAFailClosedRunDoesNotStartWhileRedisIsDownAndGivesUpAtTheDeadline(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.guardedJob("closed", h.ns+":closed")
	gj.Spec.StartingDeadlineSeconds = ptr.To(int64(8))
	h.create(gj)
	h.redis.Kill()
	h.trigger(gj)

	g := h.g
	g.Eventually(func() []metav1.Condition { return h.get(gj).Status.Conditions }).Should(ContainElement(And(
		HaveField("Type", batchv1alpha1.StoreReachableCondition), HaveField("Status", metav1.ConditionFalse))))
	g.Expect(h.get(gj).Status.Lock.State).To(Equal(batchv1alpha1.LockStateStoreDown))
	// The start deadline passes (the manager reads the injected clock).
	h.clock.Step(10 * time.Second)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(15 * time.Second).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultStoreUnavailable)))
	g.Expect(h.jobs()).To(BeEmpty())
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("StoreUnavailable: Did not start")))
}

func TestMaxHoldStopsTheRunAndReleasesOnceItsPodsAreGone(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":maxhold"
	gj := h.guardedJob("maxhold", key)
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 9 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	gj.Spec.Lock.MaxHold = &metav1.Duration{Duration: 10 * time.Second}
	job, pod := h.runningJob(gj)
	g := h.g
	g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(10)))

	g.Eventually(func() *corev1.Pod { return h.podDeletion(pod) }).WithTimeout(20 * time.Second).ShouldNot(BeNil())
	g.Expect(h.jobDeleted(job)).To(BeTrue())
	// The lease is kept while the Pod terminates.
	g.Consistently(func() string { return h.rdb.Get(ctx, key).Val() }).WithTimeout(2 * time.Second).ShouldNot(BeEmpty())
	h.kubeletRemoves(pod)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultMaxHoldExceeded)))
	g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero(), "released once the Pods are gone")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("MaxHoldExceeded:")))
}

func TestUnsafeLeaseTimingIsRejectedWithTheTTLThatWouldBeSafe(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.guardedJob("unsafe", h.ns+":unsafe")
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 30 * time.Second}
	gj.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(60))
	h.create(gj)
	h.trigger(gj)

	g := h.g
	g.Eventually(func() *metav1.Condition { return findCond(h.get(gj).Status.Conditions, batchv1alpha1.ReadyCondition) }).Should(And(
		Not(BeNil()),
		HaveField("Status", metav1.ConditionFalse),
		HaveField("Reason", batchv1alpha1.UnsafeLeaseTimingReason),
		HaveField("Message", ContainSubstring("use lock.ttl >= 77s"))))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("UnsafeLeaseTiming:")))
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(2 * time.Second).Should(BeEmpty())
}

// Two hundred leases lost at once (Redis flushed) are all stopped within one
// renew interval plus the stop budget: the stop controller does not wait behind
// status writes.
func TestTwoHundredLostLeasesAreAllStoppedPromptly(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 200 GuardedJobs")
	}
	const n = 200
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	started := time.Now()
	h.startMany(n, "many", 20*time.Second, 2*time.Second, func(*batchv1alpha1.GuardedJob) {})
	t.Logf("%d runs started in %s", n, time.Since(started).Round(time.Second))

	lost := time.Now()
	h.g.Expect(h.rdb.FlushAll(ctx).Err()).To(Succeed())
	h.g.Eventually(func() int {
		list := &batchv1.JobList{}
		h.g.Expect(k8s.List(ctx, list, client.InNamespace(h.ns))).To(Succeed())
		stopped := 0
		for _, j := range list.Items {
			if j.DeletionTimestamp != nil {
				stopped++
			}
		}
		return stopped
	}).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Equal(n))
	took := time.Since(lost)
	t.Logf("%d lost leases: every Job deleted %s after the loss (renew interval 2s + stop budget)", n, took.Round(time.Millisecond))
	// Generous bound for a busy 2-core machine; the figure above is the measurement.
	h.g.Expect(took).To(BeNumerically("<", 30*time.Second))
}

func findCond(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// startMany creates n GuardedJobs named prefix-i, each triggered at once with the
// given lease (shape adjusts each before it is created), and waits until every
// run has its Job.
func (h *harness) startMany(n int, prefix string, ttl, interval time.Duration, shape func(*batchv1alpha1.GuardedJob)) {
	h.t.Helper()
	var objs []*batchv1alpha1.GuardedJob
	for i := range n {
		gj := h.guardedJob(fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("%s:%s-%d", h.ns, prefix, i))
		gj.Spec.Lock.TTL = &metav1.Duration{Duration: ttl}
		gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: interval}
		// A moment ahead, so that it is not older than the object it is created with.
		gj.Annotations = map[string]string{batchv1alpha1.RunNowAnnotation: time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339)}
		shape(gj)
		objs = append(objs, h.create(gj))
	}
	h.clock.SetTime(time.Now().Add(2 * time.Second))
	h.g.Eventually(func() int {
		started := 0
		for _, gj := range objs {
			if a := h.get(gj).Status.Active; len(a) == 1 && a[0].JobUID != "" {
				started++
			}
		}
		return started
	}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Equal(n))
}
