package lockclient_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/tcpproxy"
)

// The keeper of a manager that may have lost its leadership: after a pause of
// the process a new leader may renew the same token, or have released it.

// TestKeeperARenewalInFlightAcrossAPauseDoesNotStopAHealthyRun: a renewal is
// sent, and the process is paused before its answer comes back, past the
// lease's self-fence deadline. Meanwhile a new leader renewed the same token.
// At the wake, what the keeper knows is as old as the pause: it must renew
// again, counting the answer's allowance from the wake, and report nothing,
// instead of judging the deadline with an allowance the pause has spent.
func TestKeeperARenewalInFlightAcrossAPauseDoesNotStopAHealthyRun(t *testing.T) {
	renewalAcrossAPause(t, 5*time.Second, (*tcpproxy.Proxy).HoldReplies, (*tcpproxy.Proxy).UnholdReplies)
}

// TestKeeperARenewalThatFailsAcrossAPauseDoesNotStopAHealthyRun: a renewal
// sent just before the process was paused fails after it (its call timed out
// during the pause). The failure is as old as the pause and says nothing about
// the store now: the keeper renews again at once, not after its usual retry
// delay, which would fall after the 0.5 s a renewal gets to answer after a wake.
func TestKeeperARenewalThatFailsAcrossAPauseDoesNotStopAHealthyRun(t *testing.T) {
	// The answer never comes, and the call times out by the real clock
	// (1 s), which runs while the fake clock stands.
	renewalAcrossAPause(t, time.Second, (*tcpproxy.Proxy).LoseOpenReplies, nil)
}

// renewalAcrossAPause tracks a self-fenced lease whose store is reached through
// a proxy (calls time out after timeout), lets its renewal go out after fault
// (applied to the proxy), pauses the process past the lease's self-fence
// deadline while a new leader renews the same token, applies wake (when set)
// at the wake, and checks that no deadline is reported and that a renewal sent
// after the wake answered.
func renewalAcrossAPause(t *testing.T, timeout time.Duration, fault, wake func(*tcpproxy.Proxy)) {
	const ttl, interval, budget = 30 * time.Second, 10 * time.Second, 12 * time.Second
	g := NewWithT(t)
	srv := redisserver.Start(t)
	px := tcpproxy.Start(t, srv.Addr())
	clk := clocktesting.NewFakeClock(time.Now())
	c := dialConfig(t, lockclient.Config{URL: "redis://" + px.Addr(), Timeout: timeout}, lockclient.WithClock(clk))
	k := lockclient.NewKeeper(c, lockclient.WithKeeperClock(clk))
	startKeeper(t, k)
	l := acquire(t, c, keys("inflight"), ttl)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: interval, SelfFence: true, StopBudget: budget})).To(Succeed())

	fault(px)
	stepUntil(t, k, clk, 100*time.Millisecond, 2*interval, func() bool {
		return !clk.Now().Before(l.SentAt.Add(interval)) && k.InFlight() > 0
	})
	g.Expect(srv.Client(t).PExpire(context.Background(), l.Keys.Lock, ttl).Err()).To(Succeed()) // the new leader renews
	clk.Step(ttl - budget)                                                                      // the pause
	if wake != nil {
		wake(px)
	}
	var reports []lockclient.ReportKind
	stepUntil(t, k, clk, 100*time.Millisecond, 2*time.Second, func() bool {
		reports = append(reports, queuedReports(k)...)
		st, _ := k.Get(l.Token)
		return st.LastRenewed.After(l.SentAt.Add(interval)) || st.DeadlineReached
	})
	reports = append(reports, queuedReports(k)...)
	g.Expect(reports).NotTo(ContainElement(lockclient.ReportDeadlineReached), "no stop of a run the store confirms")
	st, _ := k.Get(l.Token)
	g.Expect(st.DeadlineReached).To(BeFalse())
	g.Expect(st.LastRenewed).To(BeTemporally(">", l.SentAt.Add(interval)), "a renewal sent after the wake answered")
}

// TestKeeperTellsItsPauseHookBeforeItRenews: the keeper's run loop that wakes
// much later than it planned tells the manager at once, so that nothing else
// (its own re-acquiring renewals included) acts on what it knew before.
func TestKeeperTellsItsPauseHookBeforeItRenews(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	clk := clocktesting.NewFakeClock(time.Now())
	c := dialConfig(t, lockclient.Config{URL: srv.URL(), Timeout: time.Second}, lockclient.WithClock(clk))
	var pausedAt atomic.Value
	var leading atomic.Bool
	leading.Store(true)
	k := lockclient.NewKeeper(c, lockclient.WithKeeperClock(clk), lockclient.WithReacquireGate(leading.Load),
		lockclient.WithPauseHook(func(at time.Time) { pausedAt.Store(at); leading.Store(false) }))
	startKeeper(t, k)
	ctx := context.Background()
	l := acquire(t, c, keys("hook"), 30*time.Second)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: 10 * time.Second, ReacquireIfAbsent: true})).To(Succeed())
	g.Eventually(planned(k, clk)).Should(BeTrue())
	g.Expect(srv.Client(t).Del(ctx, l.Keys.Lock).Err()).To(Succeed()) // released by a new leader
	clk.Step(25 * time.Second)                                        // the renewal, 15 s late
	g.Eventually(pausedAt.Load).ShouldNot(BeNil())
	g.Expect(pausedAt.Load()).To(Equal(clk.Now()))
	g.Eventually(func() lockclient.LeaseState { st, _ := k.Get(l.Token); return st.State }).Should(Equal(lockclient.StateLost),
		"the renewal that woke late was sent after the hook: it did not take the key back")
	g.Expect(srv.Client(t).Exists(ctx, l.Keys.Lock).Val()).To(BeZero())
}

// TestKeeperTakesAKeyBackOnlyWhileItsGateAllows: a FailOpen lease's renewal
// takes an absent key back, but never while the manager is not known to lead:
// a new leader may have released the lease.
func TestKeeperTakesAKeyBackOnlyWhileItsGateAllows(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	rdb := srv.Client(t)
	clk := clocktesting.NewFakeClock(time.Now())
	c := dialConfig(t, lockclient.Config{URL: srv.URL(), Timeout: time.Second}, lockclient.WithClock(clk))
	var leading atomic.Bool
	k := lockclient.NewKeeper(c, lockclient.WithKeeperClock(clk), lockclient.WithReacquireGate(leading.Load))
	startKeeper(t, k)
	ctx := context.Background()

	leading.Store(true)
	l := acquire(t, c, keys("gate"), 30*time.Second)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: 10 * time.Second, ReacquireIfAbsent: true})).To(Succeed())
	g.Eventually(planned(k, clk)).Should(BeTrue())
	g.Expect(rdb.Del(ctx, l.Keys.Lock).Err()).To(Succeed()) // Redis lost it
	stepUntil(t, k, clk, time.Second, 11*time.Second, func() bool { return rdb.Get(ctx, l.Keys.Lock).Val() == l.Token })
	st, _ := k.Get(l.Token)
	g.Expect(st.State).To(Equal(lockclient.StateHeld), "taken back while leading")

	leading.Store(false)
	g.Expect(rdb.Del(ctx, l.Keys.Lock).Err()).To(Succeed()) // a new leader released it
	stepUntil(t, k, clk, time.Second, 11*time.Second, func() bool { st, _ := k.Get(l.Token); return st.State == lockclient.StateLost })
	g.Expect(rdb.Exists(ctx, l.Keys.Lock).Val()).To(BeZero(), "not written back")
}

// TestKeeperAKeyTakenBackByARenewalSentBeforeAPauseIsLost: the renewal of a
// FailOpen lease leaves while the manager leads, and the process is paused
// before the store has it; a new leader releases the lease meanwhile, and the
// renewal, arriving late, writes the key back. That key is nobody's: the keeper
// takes the lease for lost and never renews it again, so it expires.
func TestKeeperAKeyTakenBackByARenewalSentBeforeAPauseIsLost(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	rdb := srv.Client(t)
	px, clk, c, k := startProxiedFakeClockKeeper(t, srv)
	ctx := context.Background()
	l := acquire(t, c, keys("ghost"), 30*time.Second)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: 10 * time.Second, ReacquireIfAbsent: true})).To(Succeed())

	px.Hold() // the renewal leaves, and is held on its way
	stepUntil(t, k, clk, 100*time.Millisecond, 20*time.Second, func() bool {
		return !clk.Now().Before(l.SentAt.Add(10*time.Second)) && k.InFlight() > 0
	})
	g.Expect(rdb.Del(ctx, l.Keys.Lock).Err()).To(Succeed()) // the new leader released the lease
	clk.Step(20 * time.Second)                              // the pause, which the manager's watchdog sees
	k.NotePause(clk.Now())
	px.Unhold()
	g.Eventually(func() lockclient.LeaseState { st, _ := k.Get(l.Token); return st.State }).WithTimeout(10*time.Second).
		Should(Equal(lockclient.StateLost), "a key taken back across a pause is not this process's lease")
	g.Expect(rdb.Get(ctx, l.Keys.Lock).Val()).To(Equal(l.Token), "the late renewal did write it back")
	ttl := rdb.PTTL(ctx, l.Keys.Lock).Val()
	clk.Step(10 * time.Second) // renewals would be due again
	g.Consistently(func() time.Duration { return rdb.PTTL(ctx, l.Keys.Lock).Val() }).WithTimeout(500*time.Millisecond).
		Should(BeNumerically("<=", ttl), "never renewed again: it expires within its ttl")
}

// TestAClientWhoseWriteGateRefusesWritesNothingButRenewals: a manager that is
// not known to lead sends no acquire, complete, release, unlock or heartbeat;
// it still renews the leases it holds, so that a run the new leader adopts is
// never left to lapse.
func TestAClientWhoseWriteGateRefusesWritesNothingButRenewals(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	srv := redisserver.Start(t)
	var leading atomic.Bool
	leading.Store(true)
	errDeposed := errors.New("not leading")
	c := dialConfig(t, lockclient.Config{URL: "redis://" + srv.Addr(), Timeout: 5 * time.Second}, lockclient.WithWriteGate(func() error {
		if leading.Load() {
			return nil
		}
		return errDeposed
	}))
	held := acquire(t, c, keys("held"), 30*time.Second)
	leading.Store(false)

	k := keys("refused")
	_, err := c.Acquire(ctx, acquireReq(k, token(t, "job"), 30*time.Second))
	g.Expect(err).To(MatchError(errDeposed), "acquire")
	_, err = c.Complete(ctx, held, time.Minute)
	g.Expect(err).To(MatchError(errDeposed), "complete")
	g.Expect(c.Release(ctx, held)).To(MatchError(errDeposed), "release")
	g.Expect(c.Unlock(ctx, held.Keys.Lock, held.Token, lockclient.UnlockLock)).To(MatchError(errDeposed), "unlock")
	_, err = c.Swap(ctx, "_guardedjob:identity:x", "beat", time.Minute)
	g.Expect(err).To(MatchError(errDeposed), "swap")
	rdb := srv.Client(t)
	n, err := rdb.Exists(ctx, k.Lock, k.Fence, held.Keys.Occurrence, "_guardedjob:identity:x").Result()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeZero(), "no key written")
	g.Expect(rdb.Get(ctx, held.Keys.Lock).Val()).To(Equal(held.Token), "the held lease is still held")

	g.Expect(c.Renew(ctx, held)).To(Succeed(), "a renewal of its own lease goes through")
}
