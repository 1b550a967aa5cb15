package controllers_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
)

// podFor plays the Job controller and the scheduler: a Pod of the Job, bound to a
// node, so that deleting it leaves it terminating (no kubelet confirms it) until
// the test removes it.
func (h *harness) podFor(job *batchv1.Job) *corev1.Pod {
	h.t.Helper()
	pod := podOf(job, h.ns)
	pod.Spec.NodeName = "node-1"
	h.g.Expect(k8s.Create(context.Background(), pod)).To(Succeed())
	return pod
}

// podOf is the Pod the Job controller would make for job: its labels, its
// owner and the template's spec.
func podOf(job *batchv1.Job, namespace string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: job.Name + "-pod", Namespace: namespace,
			Labels: map[string]string{
				batchv1.JobNameLabel:          job.Name,
				batchv1alpha1.GuardedJobLabel: job.Labels[batchv1alpha1.GuardedJobLabel],
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
}

// podDeletion returns the Pod when it is being deleted (its deletion timestamp
// and grace), or nil when it has not been deleted. A failed read fails the test,
// and so does a Pod that is gone: only kubeletRemoves removes one (the manager
// never force-deletes, which would leave its containers running).
func (h *harness) podDeletion(pod *corev1.Pod) *corev1.Pod {
	h.t.Helper()
	cur := &corev1.Pod{}
	h.g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), cur)).To(Succeed(), "read Pod %s", pod.Name)
	if cur.DeletionTimestamp == nil {
		return nil
	}
	return cur
}

// kubeletRemoves plays the kubelet: the Pod's containers stopped, the Pod goes.
func (h *harness) kubeletRemoves(pod *corev1.Pod) {
	h.t.Helper()
	h.g.Expect(client.IgnoreNotFound(k8s.Delete(context.Background(), pod, client.GracePeriodSeconds(0)))).To(Succeed())
}

// jobDeleted says whether the Job is being deleted or gone. A failed read fails
// the test: it says neither.
func (h *harness) jobDeleted(job *batchv1.Job) bool {
	h.t.Helper()
	cur := &batchv1.Job{}
	err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), cur)
	if apierrors.IsNotFound(err) {
		return true
	}
	h.g.Expect(err).NotTo(HaveOccurred(), "read Job %s", job.Name)
	return cur.DeletionTimestamp != nil
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

// gateOpened waits until a run's Job has left its start gate and returns it as
// the API server has it then.
func (h *harness) gateOpened(job *batchv1.Job) *batchv1.Job {
	h.t.Helper()
	cur := &batchv1.Job{}
	h.g.Eventually(func() (bool, error) {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), cur)
		return err == nil && !jobbuild.Gated(cur), err
	}).Should(BeTrue(), "the Job's start gate opens")
	return cur
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
	g.Expect(h.rdb.Get(ctx, key).Result()).To(Equal(thief), "the thief's key is untouched")
	g.Expect(h.rdb.Keys(ctx, key+":done:*").Result()).To(BeEmpty(), "no done-marker for a run that lost its lease")
}

func TestWhenRedisDiesAFailClosedRunIsStoppedBeforeItsLeaseCouldExpire(t *testing.T) {
	h := newHarness(t)
	h.start()
	const ttl = 10 * time.Second
	key := h.ns + ":redisdown"
	gj := h.guardedJob("redisdown", key)
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: ttl}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	gj.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(2))
	job, pod := h.runningJob(gj)
	// Let a renewal go through, then kill Redis right after reading the key's TTL.
	validUntil := h.leaseValidUntil(key, 8*time.Second)
	h.redis.Kill()

	g := h.g
	var deleted *corev1.Pod
	g.Eventually(func() *corev1.Pod { deleted = h.podDeletion(pod); return deleted }).WithTimeout(ttl).ShouldNot(BeNil())
	// A Pod's containers are stopped by the end of its grace period, which must come
	// before anyone else can take the key.
	podDeadline := graceEnd(deleted)
	g.Expect(podDeadline).To(BeTemporally("<", validUntil), "the Pod's containers are stopped before the lease could expire")
	g.Expect(h.jobDeleted(job)).To(BeTrue())
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("StoreUnavailable: Stopping " + job.Name)))
	t.Logf("Pod deletion deadline %s before the lease could expire", validUntil.Sub(podDeadline).Round(time.Millisecond))

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
	g.Eventually(func() (string, error) { return h.rdb.Get(ctx, key).Result() }).WithTimeout(10*time.Second).Should(Equal(token),
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
	g.Consistently(func() (string, error) { return h.rdb.Get(ctx, key).Result() }).WithTimeout(2 * time.Second).ShouldNot(BeEmpty())
	h.kubeletRemoves(pod)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultMaxHoldExceeded)))
	g.Expect(h.rdb.Exists(ctx, key).Result()).To(BeZero(), "released once the Pods are gone")
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

// Two hundred leases lost at once (Redis flushed): the Pods of every run are
// stopped before its lease could have expired, though the stop controller has
// two hundred runs to stop at once.
func TestTwoHundredLostLeasesAreAllStoppedPromptly(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 200 GuardedJobs")
	}
	const n = 200
	h := newHarnessAlone(t)
	h.start()
	ctx := context.Background()
	started := time.Now()
	h.startMany(n, "many", 20*time.Second, 2*time.Second, func(*batchv1alpha1.GuardedJob) {})
	t.Logf("%d runs started in %s", n, time.Since(started).Round(time.Second))
	var pods []*corev1.Pod
	for _, job := range h.jobs() {
		pods = append(pods, h.podFor(&job))
	}
	h.g.Expect(pods).To(HaveLen(n))

	// The latest each lease could still be held, read just before it is lost.
	validUntil := map[string]time.Time{} // by GuardedJob name
	sent := time.Now()
	pipe := h.rdb.Pipeline()
	pttls := map[string]*redis.DurationCmd{}
	for i := range n {
		name := fmt.Sprintf("many-%d", i)
		pttls[name] = pipe.PTTL(ctx, h.ns+":"+name)
	}
	_, err := pipe.Exec(ctx)
	h.g.Expect(err).NotTo(HaveOccurred())
	for name, cmd := range pttls {
		h.g.Expect(cmd.Val()).To(BeNumerically(">", 0), "the lease of %s is held", name)
		validUntil[name] = sent.Add(cmd.Val())
	}
	lost := time.Now()
	h.g.Expect(h.rdb.FlushAll(ctx).Err()).To(Succeed())

	var deleted []corev1.Pod
	h.g.Eventually(func() ([]corev1.Pod, error) {
		list := &corev1.PodList{}
		if err := k8s.List(ctx, list, client.InNamespace(h.ns)); err != nil {
			return nil, err
		}
		deleted = slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp == nil })
		return deleted, nil
	}).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(HaveLen(n), "every run's Pod is being deleted")
	var last time.Time
	margin := time.Duration(math.MaxInt64)
	for _, pod := range deleted {
		name := pod.Labels[batchv1alpha1.GuardedJobLabel]
		deadline := graceEnd(&pod)
		h.g.Expect(deadline).To(BeTemporally("<", validUntil[name]), "the containers of %s are stopped before its lease could expire", pod.Name)
		margin = min(margin, validUntil[name].Sub(deadline))
		if deadline.After(last) {
			last = deadline
		}
	}
	t.Logf("%d lost leases: the last Pod deadline %s after the loss, the closest %s before its lease could expire",
		n, last.Sub(lost).Round(time.Millisecond), margin.Round(time.Millisecond))
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
	latest := time.Now()
	for i := range n {
		gj := h.guardedJob(fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("%s:%s-%d", h.ns, prefix, i))
		gj.Spec.Lock.TTL = &metav1.Duration{Duration: ttl}
		gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: interval}
		// A moment ahead, so that it is not older than the object it is created with.
		at := time.Now().Add(2 * time.Second).Truncate(time.Second)
		gj.Annotations = map[string]string{batchv1alpha1.RunNowAnnotation: at.UTC().Format(time.RFC3339)}
		shape(gj)
		objs = append(objs, h.create(gj))
		if created := gj.CreationTimestamp.Time; created.After(at) {
			// The create took longer than the moment (two busy cores): a
			// trigger older than its object is refused, so it moves up to
			// the object's creation.
			at = created
			h.annotate(gj, at.UTC().Format(time.RFC3339))
		}
		latest = maxTime(latest, at)
	}
	h.clock.SetTime(maxTime(time.Now().Add(2*time.Second), latest))
	var waiting []*batchv1alpha1.GuardedJob
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		waiting = waiting[:0]
		for _, gj := range objs {
			if a := h.get(gj).Status.Active; len(a) != 1 || a[0].JobUID == "" {
				waiting = append(waiting, gj)
			}
		}
		if len(waiting) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, gj := range waiting {
		st := h.get(gj).Status
		h.t.Logf("%s has not started: active %+v, lastRun %+v, events %q", gj.Name, st.Active, st.LastRun, h.events(gj))
	}
	h.g.Expect(waiting).To(BeEmpty(), "every run started within 3 minutes")
}

// leaseValidUntil waits until key's lease has more than atLeast left and returns
// the earliest moment it could expire in Redis: when the PTTL read was sent plus
// the PTTL it answered (Redis ran the command at that moment or later).
func (h *harness) leaseValidUntil(key string, atLeast time.Duration) time.Time {
	h.t.Helper()
	var validUntil time.Time
	h.g.Eventually(func() (time.Duration, error) {
		sent := time.Now()
		pttl, err := h.rdb.PTTL(context.Background(), key).Result()
		validUntil = sent.Add(pttl)
		return pttl, err
	}).Should(BeNumerically(">", atLeast))
	return validUntil
}

// graceEnd returns when a deleted Pod's grace period ends: its deletionTimestamp,
// which the API server stores in whole seconds, rounded down.
func graceEnd(pod *corev1.Pod) time.Time {
	return pod.DeletionTimestamp.Add(time.Second)
}
