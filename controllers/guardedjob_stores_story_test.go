package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// A store that asks for replica acknowledgement, whose replica does not answer:
// the acquisition is a store error like any other. A FailClosed run starts no
// Job and leaves no key behind until the replica answers again; a FailOpen run
// starts at once, unfenced.
func TestARunWhoseLeaseNoReplicaAcknowledgedIsAStoreError(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	master := redisserver.Start(t)
	replica := redisserver.Start(t, redisserver.WithReplicaOf(master))
	rdb := master.Client(t)
	h.g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "acks", Namespace: h.ns},
		StringData: map[string]string{"url": master.URL() + "?minReplicaAcks=1&replicaAckTimeout=100ms"},
	})).To(Succeed())
	closed := h.guardedJob("acks-closed", "acks:closed")
	closed.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "acks"}
	open := h.guardedJob("acks-open", "acks:open")
	open.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "acks"}
	open.Spec.Lock.StoreFailurePolicy = batchv1alpha1.FailOpen
	h.create(closed)
	h.create(open)

	replica.Pause()
	resumed := false
	defer func() {
		if !resumed {
			replica.Resume()
		}
	}()
	h.trigger(closed)
	h.trigger(open)

	g := h.g
	g.Eventually(func() *metav1.Condition {
		return findCond(h.get(closed).Status.Conditions, batchv1alpha1.StoreReachableCondition)
	}).WithTimeout(20 * time.Second).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse),
		HaveField("Message", ContainSubstring("0 of 1 within 100ms; released it"))))
	// The run keeps retrying, and each attempt holds the key for up to the 100ms
	// it waits for the replica; a key left behind would stay for the whole ttl (60s).
	g.Eventually(func() (int64, error) { return rdb.Exists(ctx, "acks:closed").Result() }).
		WithTimeout(5*time.Second).WithPolling(10*time.Millisecond).Should(BeZero(), "the unacknowledged lease was released")
	var openJob batchv1.Job
	g.Eventually(func() bool {
		for _, j := range h.jobs() {
			if strings.HasPrefix(j.Name, "acks-open-") {
				openJob = j
				return true
			}
		}
		return false
	}).WithTimeout(20 * time.Second).Should(BeTrue())
	g.Expect(openJob.Annotations[batchv1alpha1.FenceAnnotation]).To(Equal("unfenced"))
	for _, j := range h.jobs() {
		g.Expect(j.Name).NotTo(HavePrefix("acks-closed-"), "no FailClosed Job without an acknowledged lease")
	}

	replica.Resume()
	resumed = true
	g.Eventually(func() int64 {
		return h.get(closed).Status.LastFence
	}).WithTimeout(20 * time.Second).Should(BeNumerically(">", 0))
	g.Expect(replica.Client(t).Exists(ctx, "acks:closed").Val()).To(BeEquivalentTo(1), "the replica has the lease the run holds")
	g.Eventually(func() []batchv1.Job { return h.jobs() }).WithTimeout(20 * time.Second).Should(ContainElement(
		HaveField("ObjectMeta.Name", HavePrefix("acks-closed-"))))
}

// In Redis Cluster, a run whose keys hash to different slots starts nothing,
// and the object says how to fix it.
func TestARunWhoseKeysSpanClusterSlotsStartsNothing(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	cl := redisserver.StartCluster(t, 3)
	h.g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster", Namespace: h.ns},
		StringData: map[string]string{"url": "redis+cluster://" + strings.Join(cl.Addrs(), ",")},
	})).To(Succeed())
	gj := h.guardedJob("slots", "slots:lock") // no {hash tag}: lock, marker and fence keys land apart
	gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "cluster"}
	h.create(gj)
	h.trigger(gj)

	g := h.g
	g.Eventually(func() *metav1.Condition { return findCond(h.get(gj).Status.Conditions, batchv1alpha1.ReadyCondition) }).
		WithTimeout(20 * time.Second).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse),
		HaveField("Reason", batchv1alpha1.InvalidKeyReason), HaveField("Message", ContainSubstring("use a {hash tag} in lock.key"))))
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(2 * time.Second).Should(BeEmpty())
	g.Expect(h.events(gj)).To(ContainElement(ContainSubstring("hash to different Redis Cluster slots")))
	g.Expect(cl.Client(t).Exists(ctx, "slots:lock").Val()).To(BeZero())
}

// The articles' failover timeline, end to end: a run takes its lease on a
// Sentinel-managed master whose replica does not have the key yet, the master
// dies, and Sentinel promotes the replica. The first renewal on the new master
// finds no key: the lease is Lost, the Job and its Pods are stopped with the
// shortest grace, and the run ends as LockLost, long before the key could have
// expired on the dead master.
func TestASentinelFailoverThatLostTheKeyStopsTheJob(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	grp := redisserver.StartSentinelGroup(t)
	h.g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sentinel", Namespace: h.ns},
		StringData: map[string]string{"url": grp.URL("")},
	})).To(Succeed())
	const ttl = 30 * time.Second
	gj := h.guardedJob("failover", "failover:settlement")
	gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "sentinel"}
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: ttl}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}

	grp.CutReplication(t)
	resumed := false
	defer func() {
		if !resumed {
			grp.Replica.Resume()
		}
	}()
	job, pod := h.runningJob(gj)
	token := h.get(gj).Status.Active[0].Token
	g := h.g
	g.Expect(grp.Master.Client(t).Get(ctx, "failover:settlement").Val()).To(Equal(token))

	grp.Master.Kill()
	killed := time.Now()
	grp.Replica.Resume()
	resumed = true
	grp.WaitMaster(t, grp.Replica)

	g.Eventually(func() bool { return h.jobDeleted(job) }).WithTimeout(ttl/2).Should(BeTrue(),
		"stopped well before the key could have expired on the dead master")
	g.Eventually(func() *corev1.Pod { return h.podDeletion(pod) }).Should(HaveField("DeletionGracePeriodSeconds", HaveValue(Equal(int64(1)))),
		"another holder may take the key on the new master: the Pods get the shortest grace")
	t.Logf("Job deleted %s after the master was killed", time.Since(killed).Round(time.Millisecond))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("LockLost: Stopping " + job.Name)))
	h.kubeletRemoves(pod)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(20 * time.Second).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultLockLost)))
	g.Expect(grp.Replica.Client(t).Exists(ctx, "failover:settlement").Val()).To(BeZero(), "the promoted replica never had the key")
}
