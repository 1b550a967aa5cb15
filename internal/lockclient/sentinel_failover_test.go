package lockclient_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// heldAndRenewedSince waits until the Keeper holds tok and has renewed it with
// a call sent after since.
func heldAndRenewedSince(t *testing.T, k *lockclient.Keeper, tok string, since time.Time) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		st, _ := k.Get(tok)
		if st.State != lockclient.StateHeld || !st.LastRenewed.After(since) {
			return fmt.Errorf("state %s, last renewed %s, last error %v", st.State, st.LastRenewed.Format(time.StampMilli), st.LastError)
		}
		return nil
	}).WithTimeout(20 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())
}

// A lease whose key reached the replica survives a forced failover and then a
// crash of the new master: the client follows Sentinel to each new master and
// the Keeper keeps renewing; the lease is never reported lost, and it never
// stays unrenewed for anything near its TTL.
func TestSentinelFailoverKeepsAReplicatedLease(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	start := time.Now()
	grp := redisserver.StartSentinelGroup(t)
	t.Logf("started in %s", time.Since(start).Round(time.Millisecond))
	// The acquisition waits until the replica has the key, so no failover can lose it.
	acks := dialConfig(t, lockclient.Config{URL: grp.URL("?minReplicaAcks=1&replicaAckTimeout=2s"), Timeout: time.Second})
	c := dialConfig(t, lockclient.Config{URL: grp.URL(""), Timeout: time.Second})
	const ttl = 10 * time.Second
	k := lockclient.NewKeeper(c)
	startKeeper(t, k)
	keysA := keys("failover-kept")
	keysA.Occurrence = ""
	lease, err := acks.Acquire(ctx, lockclient.AcquireRequest{Keys: keysA, Token: token(t, "a"), TTL: ttl, Policy: lockclient.FenceStrict})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k.Track(lockclient.TrackRequest{Lease: lease, RenewInterval: 200 * time.Millisecond, SelfFence: true, StopBudget: 2 * time.Second})).To(Succeed())

	// 1. A forced failover (SENTINEL FAILOVER): the replica becomes the master.
	before := time.Now()
	g.Expect(grp.Sentinels[0].Client(t).Failover(ctx, "mymaster").Err()).To(Succeed())
	grp.WaitMaster(t, grp.Replica)
	heldAndRenewedSince(t, k, lease.Token, time.Now())
	newMaster := grp.Replica.Client(t)
	g.Expect(newMaster.Get(ctx, keysA.Lock).Val()).To(Equal(lease.Token))
	t.Logf("forced failover: renewing on the new master %s after %s", grp.Replica.Addr(), time.Since(before).Round(time.Millisecond))

	// 2. The old master replicates the new one (what Sentinel tells it on its next
	// 10 s check, done here at once); SIGKILL the new master.
	before = time.Now()
	g.Expect(grp.Master.Client(t).ReplicaOf(ctx, "127.0.0.1", fmt.Sprint(grp.Replica.Port())).Err()).To(Succeed())
	redisserver.WaitReplicating(t, grp.Master)
	t.Logf("the old master replicates the new one after %s", time.Since(before).Round(time.Millisecond))
	before = time.Now()
	grp.Replica.Kill()
	grp.WaitMaster(t, grp.Master)
	heldAndRenewedSince(t, k, lease.Token, time.Now())
	t.Logf("master killed: renewing on %s after %s", grp.Master.Addr(), time.Since(before).Round(time.Millisecond))
	g.Expect(grp.Master.Client(t).Get(ctx, keysA.Lock).Val()).To(Equal(lease.Token))

	st, _ := k.Get(lease.Token)
	g.Expect(st.State).To(Equal(lockclient.StateHeld))
	g.Expect(st.DeadlineReached).To(BeFalse(), "renewals resumed well before the self-fence deadline")
	drainReports(k, func(r lockclient.Report) {
		g.Expect(r.Kind).NotTo(Equal(lockclient.ReportLost), "a replicated lease is never reported lost")
	})
}

// drainReports calls f with every report queued so far.
func drainReports(k *lockclient.Keeper, f func(lockclient.Report)) {
	for {
		select {
		case r := <-k.Reports():
			f(r)
		case <-time.After(100 * time.Millisecond):
			return
		}
	}
}

// The seeds' failover timeline: a lease is taken on the master, the master
// crashes before the replica has it, and Sentinel promotes the replica. The
// lease is reported Lost on the next renewal (the new master answers "absent",
// never "held"), a lease taken earlier that did replicate keeps renewing, and a
// Strict fence taken afterwards on the new master is above the lost lease's,
// although the new master's counter never saw it. An Inject fence, a plain
// INCR, is handed out twice in the same story.
func TestSentinelFailoverLosesAKeyThatDidNotReplicate(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	grp := redisserver.StartSentinelGroup(t)
	acks := dialConfig(t, lockclient.Config{URL: grp.URL("?minReplicaAcks=1&replicaAckTimeout=2s"), Timeout: time.Second})
	c := dialConfig(t, lockclient.Config{URL: grp.URL(""), Timeout: time.Second})
	k := lockclient.NewKeeper(c)
	startKeeper(t, k)
	const ttl = 10 * time.Second
	track := func(l lockclient.Lease) {
		g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: 200 * time.Millisecond, SelfFence: true, StopBudget: 2 * time.Second})).To(Succeed())
	}
	req := func(k lockclient.Keys, p lockclient.FencePolicy) lockclient.AcquireRequest {
		k.Occurrence = ""
		return lockclient.AcquireRequest{Keys: k, Token: token(t, "j"), TTL: ttl, Policy: p}
	}

	kept, err := acks.Acquire(ctx, req(keys("failover-replicated"), lockclient.FenceStrict))
	g.Expect(err).NotTo(HaveOccurred())
	track(kept)

	grp.CutReplication(t)
	strictKeys, injectKeys := keys("failover-strict"), keys("failover-inject")
	lost, err := c.Acquire(ctx, req(strictKeys, lockclient.FenceStrict))
	g.Expect(err).NotTo(HaveOccurred())
	injected, err := c.Acquire(ctx, req(injectKeys, lockclient.FenceInject))
	g.Expect(err).NotTo(HaveOccurred())
	track(lost)
	track(injected)
	grp.Master.Kill()
	grp.Replica.Resume()

	grp.WaitMaster(t, grp.Replica)
	promoted := time.Now()
	NewWithT(t).Eventually(func() lockclient.LeaseState {
		st, _ := k.Get(lost.Token)
		return st.State
	}).WithPolling(20 * time.Millisecond).Should(Equal(lockclient.StateLost))
	t.Logf("the lost lease was reported %s after the promotion", time.Since(promoted).Round(time.Millisecond))
	st, _ := k.Get(lost.Token)
	g.Expect(st.Holder).To(BeEmpty(), "the new master never had the key")
	heldAndRenewedSince(t, k, kept.Token, promoted)

	var reported []string
	drainReports(k, func(r lockclient.Report) {
		if r.Kind == lockclient.ReportLost {
			reported = append(reported, r.Token)
		}
	})
	g.Expect(reported).To(ConsistOf(lost.Token, injected.Token))

	// Another run takes the freed key on the new master.
	next, err := c.Acquire(ctx, req(strictKeys, lockclient.FenceStrict))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next.Fence).To(BeNumerically(">", lost.Fence), "Strict: the Redis clock bounds the fence from below")
	nextInjected, err := c.Acquire(ctx, req(injectKeys, lockclient.FenceInject))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(nextInjected.Fence).To(Equal(injected.Fence), "Inject: the new master's counter never saw the lost INCR")
}
