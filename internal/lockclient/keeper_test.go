package lockclient_test

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/tcpproxy"
)

// startKeeper runs k until the test ends.
func startKeeper(t testing.TB, k *lockclient.Keeper) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = k.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// startFakeClockKeeper runs a keeper until the test ends, on a client of srv;
// both read the fake clock it returns.
func startFakeClockKeeper(t testing.TB, srv *redisserver.Server) (*clocktesting.FakeClock, *lockclient.Client, *lockclient.Keeper) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	c := dial(t, srv, lockclient.WithClock(clk))
	k := lockclient.NewKeeper(c, lockclient.WithKeeperClock(clk))
	startKeeper(t, k)
	return clk, c, k
}

// startProxiedFakeClockKeeper is startFakeClockKeeper with its client behind a
// proxy of srv, for tests that hold or cut the traffic.
func startProxiedFakeClockKeeper(t testing.TB, srv *redisserver.Server) (*tcpproxy.Proxy, *clocktesting.FakeClock, *lockclient.Client, *lockclient.Keeper) {
	t.Helper()
	px := tcpproxy.Start(t, srv.Addr())
	clk := clocktesting.NewFakeClock(time.Now())
	c := dialConfig(t, lockclient.Config{URL: "redis://" + px.Addr(), Timeout: 5 * time.Second}, lockclient.WithClock(clk))
	k := lockclient.NewKeeper(c, lockclient.WithKeeperClock(clk))
	startKeeper(t, k)
	return px, clk, c, k
}

// nextReport waits for the next report.
func nextReport(t testing.TB, k *lockclient.Keeper, within time.Duration) lockclient.Report {
	t.Helper()
	select {
	case r := <-k.Reports():
		return r
	case <-time.After(within):
		t.Fatalf("no report within %s", within)
		return lockclient.Report{}
	}
}

// stepUntil advances the fake clock in small steps until cond holds. It steps only
// while no renewal is in flight, so the fake clock never runs ahead of real Redis
// I/O.
func stepUntil(t testing.TB, k *lockclient.Keeper, clk *clocktesting.FakeClock, step time.Duration, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var stepped time.Duration
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after stepping %s", stepped)
		}
		if stepped < limit && clk.HasWaiters() && k.Settled() {
			clk.Step(step)
			stepped += step
		}
		runtime.Gosched()
	}
}

// planned says whether the keeper has planned after everything it was told and
// waits on a timer of clk: a step of clk taken then cannot land before the
// keeper has planned.
func planned(k *lockclient.Keeper, clk *clocktesting.FakeClock) func() bool {
	return func() bool { return clk.HasWaiters() && k.Settled() }
}

// queuedReports returns the kinds of the reports the keeper has queued, without
// waiting for more.
func queuedReports(k *lockclient.Keeper) []lockclient.ReportKind {
	var kinds []lockclient.ReportKind
	for {
		select {
		case r := <-k.Reports():
			kinds = append(kinds, r.Kind)
		default:
			return kinds
		}
	}
}

func acquire(t testing.TB, c *lockclient.Client, k lockclient.Keys, ttl time.Duration) lockclient.Lease {
	t.Helper()
	l, err := c.Acquire(context.Background(), acquireReq(k, token(t, "job"), ttl))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestKeeperRenewsALeaseForTenTimesItsTTL(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	rdb := srv.Client(t)
	ctx := context.Background()
	k := lockclient.NewKeeper(c)
	startKeeper(t, k)

	// Long enough that a renewal delayed by a busy machine still lands in time.
	const ttl = 2 * time.Second
	l := acquire(t, c, keys("tenfold"), ttl)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: 250 * time.Millisecond})).To(Succeed())

	// Without renewals the key would be gone after one TTL; watch it for ten.
	g.Consistently(func() string { return rdb.Get(ctx, l.Keys.Lock).Val() }).
		WithTimeout(10 * ttl).WithPolling(50 * time.Millisecond).Should(Equal(l.Token))
	st, ok := k.Get(l.Token)
	g.Expect(ok).To(BeTrue())
	g.Expect(st.State).To(Equal(lockclient.StateHeld))
	g.Expect(st.Failures).To(BeZero())
}

func TestKeeperReportsATheftWithinOneRenewInterval(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	clk, c, k := startFakeClockKeeper(t, srv)
	ctx := context.Background()

	l := acquire(t, c, keys("theft"), 30*time.Second)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, Owner: "ns/gj", RenewInterval: 10 * time.Second})).To(Succeed())
	g.Expect(srv.Client(t).Set(ctx, l.Keys.Lock, "thief/ns/other#1", 0).Err()).To(Succeed())

	g.Eventually(planned(k, clk)).Should(BeTrue())
	clk.Step(10 * time.Second) // one renew interval
	r := nextReport(t, k, 10*time.Second)
	g.Expect(r).To(Equal(lockclient.Report{Token: l.Token, Owner: "ns/gj", Kind: lockclient.ReportLost}))
	st, _ := k.Get(l.Token)
	g.Expect(st.State).To(Equal(lockclient.StateLost))
	g.Expect(st.Holder).To(Equal("thief/ns/other#1"))
	g.Expect(srv.Client(t).Get(ctx, l.Keys.Lock).Val()).To(Equal("thief/ns/other#1"), "the thief's key is untouched")
}

func TestKeeperReportsTheDeadlineBeforeTheLeaseCouldExpireWhenRedisDies(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	clk, c, k := startFakeClockKeeper(t, srv)

	const ttl, interval, budget = 30 * time.Second, 10 * time.Second, 12 * time.Second
	l := acquire(t, c, keys("dead"), ttl)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: interval, SelfFence: true, StopBudget: budget})).To(Succeed())
	srv.Kill()

	var reports []lockclient.ReportKind
	stepUntil(t, k, clk, time.Second, ttl, func() bool {
		select {
		case r := <-k.Reports():
			reports = append(reports, r.Kind)
		default:
		}
		return len(reports) > 0 && reports[len(reports)-1] == lockclient.ReportDeadlineReached
	})
	g.Expect(reports).To(Equal([]lockclient.ReportKind{lockclient.ReportStoreFailing, lockclient.ReportDeadlineReached}))
	st, _ := k.Get(l.Token)
	g.Expect(st.DeadlineReached).To(BeTrue())
	g.Expect(st.State).To(Equal(lockclient.StateFailing))
	g.Expect(st.Deadline).To(Equal(l.SentAt.Add(ttl - budget)))
	g.Expect(clk.Now()).To(BeTemporally("<", l.ValidUntil()), "reported while the lease could still be ours")
	g.Expect(clk.Now()).To(BeTemporally(">=", st.Deadline))
	g.Expect(st.LastError).To(MatchError(lockclient.ErrStore))
}

func TestKeeperReportsTheDeadlineOnTimeEvenWhileARenewalHangs(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	srv := redisserver.Start(t)
	// The call timeout is longer than the lease: a renewal stuck on a frozen Redis
	// must not hold up the deadline.
	c := dialConfig(t, lockclient.Config{URL: srv.URL(), Timeout: 10 * time.Second})
	k := lockclient.NewKeeper(c)
	startKeeper(t, k)

	const ttl = 3 * time.Second
	l := acquire(t, c, keys("frozen"), ttl)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: time.Second, SelfFence: true, StopBudget: 1500 * time.Millisecond})).To(Succeed())
	srv.Pause()
	t.Cleanup(srv.Resume)

	for {
		r := nextReport(t, k, 2*ttl)
		if r.Kind == lockclient.ReportDeadlineReached {
			break
		}
	}
	st, _ := k.Get(l.Token)
	g.Expect(time.Now()).To(BeTemporally("<", st.ValidUntil), "the deadline came before the lease could expire")
}

func TestKeeperReportsMaxHoldAndKeepsRenewing(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	clk, c, k := startFakeClockKeeper(t, srv)

	l := acquire(t, c, keys("maxhold"), 30*time.Second)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: 10 * time.Second, MaxHoldUntil: l.SentAt.Add(45 * time.Second)})).To(Succeed())
	var got lockclient.Report
	stepUntil(t, k, clk, time.Second, time.Minute, func() bool {
		select {
		case got = <-k.Reports():
			return true
		default:
			return false
		}
	})
	g.Expect(got.Kind).To(Equal(lockclient.ReportMaxHoldReached))
	g.Expect(clk.Now()).To(BeTemporally(">=", l.SentAt.Add(45*time.Second)))
	st, _ := k.Get(l.Token)
	g.Expect(st.MaxHoldReached).To(BeTrue())
	g.Expect(st.State).To(Equal(lockclient.StateHeld))
	// Still renewing until the caller releases: a renewal sent strictly after the
	// report (one sent at the report's instant may have left before it). The clock
	// moves only while no renewal is in flight, so a slow machine shifts the renewals
	// by a step or two but cannot make this pass without a new one.
	reported := clk.Now()
	stepUntil(t, k, clk, time.Second, 30*time.Second, func() bool {
		st, _ := k.Get(l.Token)
		return st.LastRenewed.After(reported)
	})
	st, _ = k.Get(l.Token)
	g.Expect(st.State).To(Equal(lockclient.StateHeld))
}

func TestKeeperRenewsAThousandLeasesInOnePipeline(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	clk := clocktesting.NewFakeClock(time.Now())
	c := dial(t, srv, lockclient.WithClock(clk))
	k := lockclient.NewKeeper(c, lockclient.WithKeeperClock(clk))
	ctx := context.Background()
	g.Expect(c.LoadScripts(ctx)).To(Succeed())

	var leases []lockclient.Lease
	for i := range 1000 {
		l := acquire(t, c, keys(fmt.Sprintf("many-%d", i)), 30*time.Second)
		leases = append(leases, l)
		g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: 10 * time.Second})).To(Succeed())
	}
	rdb := srv.Client(t)
	for _, l := range leases {
		g.Expect(rdb.PExpire(ctx, l.Keys.Lock, 15*time.Second).Err()).To(Succeed())
	}
	rec := record(c)
	startKeeper(t, k)
	g.Eventually(planned(k, clk)).Should(BeTrue())
	clk.Step(10 * time.Second)
	g.Eventually(func() time.Time {
		oldest := clk.Now()
		for _, st := range k.Snapshot() {
			if st.LastRenewed.Before(oldest) {
				oldest = st.LastRenewed
			}
		}
		return oldest
	}).Should(Equal(clk.Now()))

	cmds, pipelines := rec.reset()
	g.Expect(pipelines).To(Equal(1))
	g.Expect(cmds).To(HaveLen(1000))
	for _, l := range leases {
		g.Expect(rdb.PTTL(ctx, l.Keys.Lock).Val()).To(BeNumerically(">", 20*time.Second))
	}
}

func TestKeeperReloadsScriptsAfterARedisRestartInsteadOfCallingTheLeaseLost(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	clk, c, k := startFakeClockKeeper(t, srv)
	ctx := context.Background()

	l := acquire(t, c, keys("noscript"), 30*time.Second)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: 10 * time.Second})).To(Succeed())
	g.Expect(c.Renew(ctx, l)).To(Succeed()) // the script is cached on the server now

	// A restart with persistence keeps the key but never the script cache.
	srv.Restart(t)
	g.Expect(srv.Client(t).Set(ctx, l.Keys.Lock, l.Token, 12*time.Second).Err()).To(Succeed())

	g.Eventually(planned(k, clk)).Should(BeTrue())
	clk.Step(10 * time.Second)
	g.Eventually(func() time.Time { st, _ := k.Get(l.Token); return st.LastRenewed }).Should(Equal(clk.Now()))
	st, _ := k.Get(l.Token)
	g.Expect(st.State).To(Equal(lockclient.StateHeld))
	g.Expect(srv.Client(t).PTTL(ctx, l.Keys.Lock).Val()).To(BeNumerically(">", 20*time.Second))
	select {
	case r := <-k.Reports():
		t.Fatalf("unexpected report %+v", r)
	default:
	}
}

func TestKeeperReacquiresAnAbsentKeyWithTheSameTokenWhenAsked(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	clk, c, k := startFakeClockKeeper(t, srv)
	ctx := context.Background()

	l := acquire(t, c, keys("failopen"), 30*time.Second)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: 10 * time.Second, ReacquireIfAbsent: true})).To(Succeed())
	srv.Restart(t) // empty

	g.Eventually(planned(k, clk)).Should(BeTrue())
	clk.Step(10 * time.Second)
	r := nextReport(t, k, 10*time.Second)
	g.Expect(r.Kind).To(Equal(lockclient.ReportReacquired))
	g.Expect(srv.Client(t).Get(ctx, l.Keys.Lock).Val()).To(Equal(l.Token))
}

func TestResumeAllRenewsEveryLeaseInOnePipelineBeforeReturning(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	k := lockclient.NewKeeper(c)
	ctx := context.Background()
	g.Expect(c.LoadScripts(ctx)).To(Succeed())
	rdb := srv.Client(t)

	var reqs []lockclient.TrackRequest
	for i := range 50 {
		l := acquire(t, c, keys(fmt.Sprintf("resume-%d", i)), 30*time.Second)
		g.Expect(rdb.PExpire(ctx, l.Keys.Lock, 5*time.Second).Err()).To(Succeed())
		reqs = append(reqs, lockclient.TrackRequest{Lease: l, Owner: "ns/gj"})
	}
	stolen := reqs[7].Lease
	g.Expect(rdb.Set(ctx, stolen.Keys.Lock, "elsewhere/ns/x#9", 0).Err()).To(Succeed())

	rec := record(c)
	res := k.ResumeAll(ctx, reqs)
	_, pipelines := rec.reset()
	g.Expect(pipelines).To(Equal(1))
	g.Expect(res).To(HaveLen(50))
	for _, r := range reqs {
		if r.Lease.Token == stolen.Token {
			g.Expect(res[r.Lease.Token]).To(MatchError(lockclient.ErrNotHeld))
			continue
		}
		g.Expect(res[r.Lease.Token]).NotTo(HaveOccurred())
		g.Expect(rdb.PTTL(ctx, r.Lease.Keys.Lock).Val()).To(BeNumerically(">", 25*time.Second))
	}
	startKeeper(t, k)
	g.Expect(nextReport(t, k, 5*time.Second)).To(Equal(lockclient.Report{Token: stolen.Token, Owner: "ns/gj", Kind: lockclient.ReportLost}))
}

func TestKeeperNeverBlocksOnAConsumerThatDoesNotRead(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	clk, c, k := startFakeClockKeeper(t, srv)
	ctx := context.Background()
	rdb := srv.Client(t)

	// 300 lost leases produce more reports than the channel buffers.
	for i := range 300 {
		l := acquire(t, c, keys(fmt.Sprintf("lost-%d", i)), 30*time.Second)
		g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: 10 * time.Second})).To(Succeed())
		g.Expect(rdb.Del(ctx, l.Keys.Lock).Err()).To(Succeed())
	}
	survivor := acquire(t, c, keys("survivor"), 30*time.Second)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: survivor, RenewInterval: 10 * time.Second})).To(Succeed())

	for round := 1; round <= 3; round++ {
		g.Eventually(planned(k, clk)).Should(BeTrue())
		clk.Step(10 * time.Second)
		g.Eventually(func() time.Time { st, _ := k.Get(survivor.Token); return st.LastRenewed }).Should(Equal(clk.Now()))
	}
	got := 0
	for got < 300 {
		nextReport(t, k, 5*time.Second)
		got++
	}
}

// With the tightest timing the controller accepts, the self-fence deadline falls
// exactly when the next renewal is due; a renewal that answers must win.
func TestKeeperNeverStopsAHealthyLeaseAtTheTimingBoundaryEvenWhenARenewalIsSlow(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv) // call timeout 2s
	k := lockclient.NewKeeper(c)
	startKeeper(t, k)

	// The smallest safe lease: ttl - stop budget just above renew interval + call
	// timeout, so the deadline falls just after a renewal that takes its whole
	// timeout.
	const interval, budget = time.Second, 2 * time.Second
	ttl := interval + c.Timeout() + budget + 100*time.Millisecond
	l := acquire(t, c, keys("boundary"), ttl)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: interval, SelfFence: true, StopBudget: budget})).To(Succeed())
	g.Eventually(func() time.Time { st, _ := k.Get(l.Token); return st.LastRenewed }).WithTimeout(3 * time.Second).Should(BeTemporally(">", l.SentAt))

	// Redis answers the next renewal late (a pause, not a fault), twice in a row.
	for range 2 {
		srv.Pause()
		time.Sleep(1500 * time.Millisecond) // the length of the pause under test
		srv.Resume()
		g.Consistently(k.Reports()).WithTimeout(time.Second).ShouldNot(Receive())
	}
	st, _ := k.Get(l.Token)
	g.Expect(st.DeadlineReached).To(BeFalse())
	g.Expect(st.State).To(Equal(lockclient.StateHeld))
}

// A renewal proves the lease from when it was sent: the store may have renewed
// it at any moment until the reply came, so a reply that comes late proves no
// more than one that comes at once.
func TestKeeperCountsARenewalFromItsSendTimeNotItsLateReply(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	px, clk, c, k := startProxiedFakeClockKeeper(t, srv)

	const ttl, interval = 30 * time.Second, 10 * time.Second
	l := acquire(t, c, keys("late-reply"), ttl)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, Owner: "ns/gj", RenewInterval: interval, SelfFence: true, StopBudget: 5 * time.Second})).To(Succeed())
	g.Eventually(planned(k, clk)).Should(BeTrue())

	// The next renewal reaches Redis; its reply is held while the keeper's
	// clock moves on.
	px.HoldReplies()
	before := px.Requests()
	sent := clk.Now().Add(interval)
	clk.Step(interval)
	g.Eventually(px.Requests).WithTimeout(5*time.Second).Should(BeNumerically(">", before), "the renewal is sent")
	clk.Step(1500 * time.Millisecond)
	px.UnholdReplies()
	g.Eventually(k.Settled).WithTimeout(10 * time.Second).Should(BeTrue())

	st, ok := k.Get(l.Token)
	g.Expect(ok).To(BeTrue())
	g.Expect(st.State).To(Equal(lockclient.StateHeld))
	g.Expect(st.LastRenewed).To(BeTemporally("==", sent), "the renewal proves the lease from its send time")
	g.Expect(st.ValidUntil).To(BeTemporally("==", sent.Add(ttl)))
}

func TestKeeperReportsManyLeasesAtRiskEarlyEnoughToStopThemAllAtTheStopRate(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	clk := clocktesting.NewFakeClock(time.Now())
	c := dial(t, srv, lockclient.WithClock(clk))
	// The caller stops two runs a second: ten need 5 s.
	const n, stopRate, stopTime = 10, 2, 500 * time.Millisecond
	k := lockclient.NewKeeper(c, lockclient.WithKeeperClock(clk), lockclient.WithStopRate(stopRate))
	startKeeper(t, k)

	const ttl, interval, budget = 30 * time.Second, 10 * time.Second, 12 * time.Second
	tokens := make([]string, n)
	for i := range tokens {
		l := acquire(t, c, keys(fmt.Sprintf("many-%d", i)), ttl)
		g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: interval, SelfFence: true, StopBudget: budget})).To(Succeed())
		tokens[i] = l.Token
	}
	// Healthy leases are never reported early, however many share a deadline.
	healthyUntil := clk.Now().Add(2 * ttl)
	stepUntil(t, k, clk, 500*time.Millisecond, 3*ttl, func() bool { return !clk.Now().Before(healthyUntil) })
	g.Consistently(k.Reports()).WithTimeout(100 * time.Millisecond).ShouldNot(Receive())

	srv.Kill()
	reached := func() int {
		count := 0
		for _, tok := range tokens {
			if st, _ := k.Get(tok); st.DeadlineReached {
				count++
			}
		}
		return count
	}
	const step = 100 * time.Millisecond
	stepUntil(t, k, clk, step, ttl, func() bool { return reached() == n })

	var states []lockclient.LeaseStatus
	for _, tok := range tokens {
		st, _ := k.Get(tok)
		states = append(states, st)
	}
	sort.Slice(states, func(i, j int) bool { return states[i].DeadlineReachedAt.Before(states[j].DeadlineReachedAt) })
	deadline := states[n-1].Deadline
	for i, st := range states {
		g.Expect(st.Deadline).To(Equal(deadline), "renewed in one pipeline, the leases share a deadline")
		// Stopped one after another at the stop rate, the i-th is stopped
		// (n-1-i) stops before the last, which goes at the deadline.
		want := deadline.Add(-time.Duration(n-1-i) * stopTime)
		g.Expect(st.DeadlineReachedAt).To(BeTemporally(">=", want), "lease %d", i)
		g.Expect(st.DeadlineReachedAt).To(BeTemporally("<", want.Add(step+time.Millisecond)), "lease %d", i)
	}
}
