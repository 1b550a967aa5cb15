package controllers_test

// Stories for the self-fence deadline's evidence: it counts only from times the
// lease is known to have been valid (a renewal's send time, a recorded acquisition
// less the clock-skew allowance). Each fails when the deadline counts from a later
// time, by stopping the Pods after the key could have expired.

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// podGoneBefore waits for pod's deletion and checks that its grace period ends
// before expires: deletionTimestamp is that end rounded down to the second, so the
// Pod is gone before it + 1s.
func (h *harness) podGoneBefore(pod *corev1.Pod, expires time.Time, within time.Duration) time.Time {
	h.t.Helper()
	var deleted *corev1.Pod
	h.g.Eventually(func() *corev1.Pod { deleted = h.podDeletion(pod); return deleted }).WithTimeout(within).WithPolling(100 * time.Millisecond).
		ShouldNot(BeNil())
	podGone := deleted.DeletionTimestamp.Add(time.Second)
	h.g.Expect(podGone).To(BeTemporally("<", expires),
		"the Pod's grace period ends %s after the key could have expired", podGone.Sub(expires))
	return podGone
}

func TestWindowClockSkew_ALeaseResumedFromAFastClocksRecordStopsThePodsBeforeTheKeyCouldExpire(t *testing.T) {
	h := newHarnessAlone(t)
	proxy := h.storeViaProxy()
	// The replicas' clocks may differ by up to 10s (--clock-skew-allowance).
	h.clockSkew = 10 * time.Second
	h.start()
	ctx := context.Background()
	const ttl, interval = 20 * time.Second, 4 * time.Second
	key := h.ns + ":skew"
	gj := h.guardedJob("skew", key)
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: ttl}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: interval}
	gj.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(2))
	job, pod := h.runningJob(gj)

	// The manager dies right after a renewal and a new one starts cut off from
	// Redis, from a status whose acquisition time another replica wrote with a
	// clock 9.5s ahead of this one: as far as the new manager can know, the lease
	// was taken then, and it may expire ttl after the true moment.
	h.waitRenewal(key, ttl-interval/2, ttl-interval/4)
	h.stop()
	proxy.Blackhole()
	pttl, err := h.rdb.PTTL(ctx, key).Result()
	h.g.Expect(err).NotTo(HaveOccurred())
	expires := time.Now().Add(pttl)
	cur := h.get(gj)
	h.g.Expect(cur.Status.Active).To(HaveLen(1))
	cur.Status.Active[0].AcquiredAt = &metav1.Time{Time: expires.Add(-ttl + 9500*time.Millisecond)}
	h.g.Expect(k8s.Status().Update(ctx, cur)).To(Succeed())
	h.start()

	podGone := h.podGoneBefore(pod, expires, ttl)
	h.g.Expect(h.jobDeleted(job)).To(BeTrue())
	h.g.Expect(h.rdb.Get(ctx, key).Val()).To(HavePrefix("cluster-a/"), "nobody else took the key meanwhile")
	h.g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("StoreUnavailable: Stopping " + job.Name)))
	t.Logf("Pods gone %s before the key could expire", expires.Sub(podGone).Round(time.Millisecond))
}

func TestWindowSlowRenewal_TheDeadlineCountsFromARenewalsSendTimeNotItsLateReply(t *testing.T) {
	h := newHarnessAlone(t)
	// A call timeout long enough for a reply 9s late to count as an answer:
	// ttl 30s > renewInterval 5s + timeout 12s + grace 5s + 5s.
	proxy := h.storeViaProxyWithTimeout(12 * time.Second)
	h.start()
	ctx := context.Background()
	const ttl, interval, late = 30 * time.Second, 5 * time.Second, 9 * time.Second
	key := h.ns + ":slow"
	gj := h.guardedJob("slow", key)
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: ttl}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: interval}
	gj.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(5))
	job, pod := h.runningJob(gj)
	token := h.get(gj).Status.Active[0].Token

	// The next renewal reaches Redis at once, but its reply comes 9s late, and
	// nothing sent after it arrives. The key was extended when the request
	// arrived, so the lease may end ttl after the renewal was sent, not after its
	// reply.
	h.waitRenewal(key, ttl-interval/2, ttl-interval/4)
	h.g.Eventually(func() time.Duration { return h.rdb.PTTL(ctx, key).Val() }).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).
		Should(BeNumerically("<", ttl-interval+400*time.Millisecond))
	before, ok := h.keeper.Get(token)
	h.g.Expect(ok).To(BeTrue())
	proxy.HoldReplies()
	h.g.Eventually(func() time.Duration { return h.rdb.PTTL(ctx, key).Val() }).WithTimeout(10*time.Second).WithPolling(5*time.Millisecond).
		Should(BeNumerically(">", ttl-200*time.Millisecond), "the renewal reached Redis")
	pttl, err := h.rdb.PTTL(ctx, key).Result()
	h.g.Expect(err).NotTo(HaveOccurred())
	expires := time.Now().Add(pttl)
	time.Sleep(late) // the reply is on its way for this long
	proxy.DropRequests()
	proxy.UnholdReplies()
	h.g.Eventually(func() time.Time {
		st, _ := h.keeper.Get(token)
		return st.LastRenewed
	}).WithTimeout(5*time.Second).WithPolling(5*time.Millisecond).Should(BeTemporally(">", before.LastRenewed), "the late reply was taken as a renewal")
	h.g.Expect(time.Now().Add(h.rdb.PTTL(ctx, key).Val())).To(BeTemporally("~", expires, 100*time.Millisecond), "no later renewal reached Redis")

	podGone := h.podGoneBefore(pod, expires, ttl)
	h.g.Expect(h.jobDeleted(job)).To(BeTrue())
	h.g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("StoreUnavailable: Stopping " + job.Name)))
	t.Logf("Pods gone %s before the key could expire", expires.Sub(podGone).Round(time.Millisecond))
}
