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
