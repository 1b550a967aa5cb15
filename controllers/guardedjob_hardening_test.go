package controllers_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

func TestAFailClosedStoreBlipThatRecoversBeforeTheDeadlineStopsNothing(t *testing.T) {
	h := newHarness(t)
	proxy := h.storeViaProxy()
	h.start()
	// Deadline: last good renewal + 12s - 2s grace - 5s margin = +5s.
	gj := h.guardedJob("blip", h.ns+":blip")
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 12 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	gj.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(2))
	job, pod := h.runningJob(gj)
	token := h.get(gj).Status.Active[0].Token

	proxy.Blackhole()
	g := h.g
	g.Eventually(func() lockclient.LeaseState { st, _ := h.keeper.Get(token); return st.State }).Should(Equal(lockclient.StateFailing))
	time.Sleep(1500 * time.Millisecond) // the rest of the blip, well short of the deadline
	proxy.Restore(t)
	g.Eventually(func() lockclient.LeaseState { st, _ := h.keeper.Get(token); return st.State }).Should(Equal(lockclient.StateHeld), "recovered")
	st, _ := h.keeper.Get(token)
	g.Expect(st.Failures).To(BeZero())
	g.Expect(st.DeadlineReached).To(BeFalse())
	g.Expect(h.keeper.Stats().RenewalsFailed).To(BeNumerically(">", 0), "renewals did fail during the blip")

	g.Consistently(func() bool { return h.jobDeleted(job) || h.podDeletion(pod) != nil }).WithTimeout(6*time.Second).Should(BeFalse(),
		"nothing is stopped, now or at the deadline the blip would have led to")
	g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix("StoreUnavailable:")))
}

func TestStrictFencesRiseAboveTheLastFenceEvenWhenRedisClockIsBehindIt(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	key := h.ns + ":strict-floor"
	gj := h.guardedJob("strict-floor", key)
	gj.Spec.Fencing = &batchv1alpha1.FencingSpec{Policy: batchv1alpha1.FencingStrict}
	h.create(gj)
	// A fence handed out before, far above what Redis' clock gives (ms x 1024 is
	// about 1.8e15 today): only the floor can keep the next fence above it.
	const floor = int64(1) << 52
	cur := h.get(gj)
	cur.Status.LastFence = floor
	h.g.Expect(k8s.Status().Update(ctx, cur)).To(Succeed())
	h.start()
	h.trigger(gj)

	job := h.waitJobs(1)[0]
	g := h.g
	g.Expect(envOf(&job, "GUARDEDJOB_FENCE")).To(Equal(strconv.FormatInt(floor+1, 10)))
	g.Expect(h.rdb.Get(ctx, key+":fence").Val()).To(Equal(strconv.FormatInt(floor+1, 10)), "written back to the counter")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(And(
		HavePrefix(batchv1alpha1.FenceRaisedReason+":"), ContainSubstring("raised to "+strconv.FormatInt(floor+1, 10)))))
	g.Eventually(func() int64 { return h.get(gj).Status.LastFence }).Should(Equal(floor + 1))
}
