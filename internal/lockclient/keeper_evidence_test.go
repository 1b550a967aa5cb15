package lockclient_test

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/tcpproxy"
)

// resumed is how a restarted manager hands a lease to its keeper: no send time,
// only what status recorded.
func resumed(l lockclient.Lease, evidence time.Time) lockclient.TrackRequest {
	l.SentAt = time.Time{}
	return lockclient.TrackRequest{Lease: l, Owner: "ns/gj/job", RenewInterval: time.Second,
		SelfFence: true, StopBudget: 2 * time.Second, LastRenewed: evidence}
}

// resumeBehind returns a keeper whose store is reached through a proxy that a
// test can blackhole, plus the proxy. The call timeout is long, so a test sees
// whether the keeper waits for it.
func resumeBehind(t *testing.T, srv *redisserver.Server) (*lockclient.Keeper, *tcpproxy.Proxy) {
	t.Helper()
	proxy := tcpproxy.Start(t, srv.Addr())
	c := dialConfig(t, lockclient.Config{URL: "redis://" + proxy.Addr(), Timeout: 5 * time.Second})
	if err := c.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	return lockclient.NewKeeper(c), proxy
}

func TestKeeperNeverAssumesAResumedLeaseIsYoungerThanItsEvidence(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	direct := dial(t, srv)

	for _, tc := range []struct {
		name     string
		evidence func(acquired time.Time) time.Time
	}{
		{"no evidence at all: the deadline has passed", func(time.Time) time.Time { return time.Time{} }},
		{"evidence older than the deadline allows", func(a time.Time) time.Time { return a.Add(-time.Hour) }},
		{"recent evidence: the deadline counts from it", func(a time.Time) time.Time { return a.Add(-2 * time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			const ttl = 8 * time.Second
			l := acquire(t, direct, keys("resumed"), ttl)
			evidence := tc.evidence(l.SentAt)
			k, proxy := resumeBehind(t, srv)
			startKeeper(t, k)
			proxy.Blackhole() // cut off from Redis, while other clients still reach it

			start := time.Now()
			go k.ResumeAll(context.Background(), []lockclient.TrackRequest{resumed(l, evidence)})
			for r := nextReport(t, k, ttl); r.Kind != lockclient.ReportDeadlineReached; r = nextReport(t, k, ttl) {
				g.Expect(r.Kind).To(Equal(lockclient.ReportStoreFailing))
			}
			reported := time.Now()
			st, ok := k.Get(l.Token)
			g.Expect(ok).To(BeTrue())
			g.Expect(st.Confirmed).To(BeFalse(), "no renewal answered")
			g.Expect(st.LastRenewed).To(Equal(evidence))
			g.Expect(st.ValidUntil).To(Equal(evidence.Add(ttl)))

			// The stop must come no later than the evidence allows, and never wait
			// for the hanging renewal's 5 s timeout.
			want := evidence.Add(ttl - 2*time.Second)
			if want.Before(start) {
				g.Expect(reported.Sub(start)).To(BeNumerically("<", 1500*time.Millisecond),
					"the evidence was already too old: report at once")
			} else {
				g.Expect(reported).To(BeTemporally("~", want, 700*time.Millisecond))
			}
			g.Expect(rdbPTTL(t, srv, l.Keys.Lock)).To(BeNumerically(">", 0), "the key has not expired yet: the stop is in time")
		})
	}
}

func TestKeeperKeepsAHealthyResumedLeaseWhoseEvidenceIsOld(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	k := lockclient.NewKeeper(c)
	startKeeper(t, k)

	l := acquire(t, c, keys("healthy"), 8*time.Second)
	res := k.ResumeAll(context.Background(), []lockclient.TrackRequest{resumed(l, l.SentAt.Add(-time.Hour))})
	g.Expect(res[l.Token]).NotTo(HaveOccurred())
	g.Consistently(k.Reports()).WithTimeout(2 * time.Second).ShouldNot(Receive())
	st, _ := k.Get(l.Token)
	g.Expect(st.Confirmed).To(BeTrue())
	g.Expect(st.DeadlineReached).To(BeFalse())
	g.Expect(st.LastRenewed).To(BeTemporally(">", l.SentAt))
}

func TestKeeperQuiesceWaitsForARenewalInFlightAndStopsReacquiring(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	srv := redisserver.Start(t)
	direct := dial(t, srv)
	proxy := tcpproxy.Start(t, srv.Addr())
	c := dialConfig(t, lockclient.Config{URL: "redis://" + proxy.Addr(), Timeout: 5 * time.Second})
	g.Expect(c.LoadScripts(context.Background())).To(Succeed())
	k := lockclient.NewKeeper(c)
	startKeeper(t, k)
	rdb := srv.Client(t)
	ctx := context.Background()

	l := acquire(t, direct, keys("failopen"), 6*time.Second)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: 500 * time.Millisecond, ReacquireIfAbsent: true})).To(Succeed())

	// A renewal is on its way when the run completes: it must not take the key
	// again after the release deleted it.
	proxy.Hold()
	g.Eventually(k.InFlight).WithTimeout(3 * time.Second).Should(Equal(1))
	quiesced := make(chan error, 1)
	go func() { quiesced <- k.Quiesce(ctx, l.Token) }()
	g.Consistently(quiesced).WithTimeout(300*time.Millisecond).ShouldNot(Receive(), "a renewal is still in flight")
	proxy.Unhold()
	g.Eventually(quiesced).WithTimeout(3 * time.Second).Should(Receive(BeNil()))

	_, err := direct.Complete(ctx, l, time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Consistently(func() int64 { return rdb.Exists(ctx, l.Keys.Lock).Val() }).WithTimeout(1500*time.Millisecond).Should(BeZero(),
		"later renewals only compare the token; the key stays released")
}

func rdbPTTL(t *testing.T, srv *redisserver.Server, key string) time.Duration {
	t.Helper()
	return srv.Client(t).PTTL(context.Background(), key).Val()
}

func TestKeeperExtendMaxHoldRenewsUntilTheLastPodCouldHaveStopped(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	k := lockclient.NewKeeper(c)
	startKeeper(t, k)

	// maxHold 1.5s from the acquisition; a Pod may start as late as the manager's
	// last contact with the API server and run for maxHold from there, plus its
	// grace and the stop margin: 3s of MaxPodLife here.
	l := acquire(t, c, keys("renew-only"), 3*time.Second)
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: 300 * time.Millisecond,
		MaxHoldUntil: l.SentAt.Add(1500 * time.Millisecond), MaxPodLife: 3 * time.Second})).To(Succeed())
	lastContact := time.Now()
	k.ExtendMaxHold(lastContact)

	r := nextReport(t, k, 10*time.Second)
	reported := time.Now()
	g.Expect(r.Kind).To(Equal(lockclient.ReportMaxHoldReached))
	g.Expect(reported).To(BeTemporally(">=", lastContact.Add(3*time.Second)), "not at acquisition + maxHold (1.5s)")
	st, _ := k.Get(l.Token)
	g.Expect(st.State).To(Equal(lockclient.StateHeld))
	g.Expect(st.LastRenewed).To(BeTemporally(">", lastContact.Add(2*time.Second)), "renewed all along")
}

// StopReacquiring turns FailOpen's take-back off for every lease, and a key found
// absent afterwards is a lost lease, not taken again.
func TestKeeperStopReacquiringWaitsForRenewalsInFlight(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	rdb := srv.Client(t)
	ctx := context.Background()
	l := acquire(t, c, keys("stop-reacquiring"), 3*time.Second)
	k := lockclient.NewKeeper(c)
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = k.Run(kctx) }()
	g.Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: 200 * time.Millisecond, ReacquireIfAbsent: true})).To(Succeed())

	g.Expect(rdb.Del(ctx, l.Keys.Lock).Err()).To(Succeed())
	g.Eventually(func() string { return rdb.Get(ctx, l.Keys.Lock).Val() }).Should(Equal(l.Token), "FailOpen takes an absent key back")

	g.Expect(k.StopReacquiring(ctx)).To(Succeed())
	g.Expect(rdb.Del(ctx, l.Keys.Lock).Err()).To(Succeed())
	g.Eventually(func() lockclient.LeaseState { st, _ := k.Get(l.Token); return st.State }).Should(Equal(lockclient.StateLost))
	g.Consistently(func() int64 { return rdb.Exists(ctx, l.Keys.Lock).Val() }).WithTimeout(time.Second).Should(BeZero())
}

// A manager paused (SIGSTOP, a frozen VM) for longer than its leases' self-fence
// deadlines wakes up as an old leader: a new leader has been renewing the same
// tokens since it took over. Before the keeper judges a deadline that passed while
// it was not running, it renews: the store says the lease is still held, and the
// run the new leader keeps alive is not stopped. If the store does not answer, the
// deadline is reported within the renewal's short allowance.
func TestKeeperAfterAPauseRenewsBeforeItJudgesDeadlines(t *testing.T) {
	const ttl, interval, budget = 30 * time.Second, 10 * time.Second, 12 * time.Second
	setUp := func(t *testing.T) (*clocktesting.FakeClock, *lockclient.Keeper, lockclient.Lease, *redisserver.Server, *tcpproxy.Proxy) {
		srv := redisserver.Start(t)
		px := tcpproxy.Start(t, srv.Addr())
		clk := clocktesting.NewFakeClock(time.Now())
		c := dialConfig(t, lockclient.Config{URL: "redis://" + px.Addr(), Timeout: time.Second}, lockclient.WithClock(clk))
		k := lockclient.NewKeeper(c, lockclient.WithKeeperClock(clk))
		startKeeper(t, k)
		l := acquire(t, c, keys("paused"), ttl)
		NewWithT(t).Expect(k.Track(lockclient.TrackRequest{Lease: l, RenewInterval: interval, SelfFence: true, StopBudget: budget})).To(Succeed())
		NewWithT(t).Eventually(planned(k, clk)).Should(BeTrue())
		return clk, k, l, srv, px
	}

	t.Run("the store says the lease is held: nothing is stopped", func(t *testing.T) {
		g := NewWithT(t)
		clk, k, l, srv, _ := setUp(t)
		// Paused past the deadline; the new leader renewed the same token meanwhile.
		g.Expect(srv.Client(t).PExpire(context.Background(), l.Keys.Lock, ttl).Err()).To(Succeed())
		clk.Step(ttl - budget + 5*time.Second)
		g.Eventually(func() time.Time { st, _ := k.Get(l.Token); return st.LastRenewed }).Should(BeTemporally(">", l.SentAt),
			"the keeper renews first")
		g.Consistently(k.Reports()).WithTimeout(time.Second).ShouldNot(Receive(), "no deadline reported, no stop")
		st, _ := k.Get(l.Token)
		g.Expect(st.DeadlineReached).To(BeFalse())
		g.Expect(st.State).To(Equal(lockclient.StateHeld))
	})

	t.Run("the store does not answer: the deadline is reported within the allowance", func(t *testing.T) {
		g := NewWithT(t)
		clk, k, l, _, px := setUp(t)
		px.Blackhole()
		clk.Step(ttl - budget + 5*time.Second)
		paused := clk.Now()
		var reports []lockclient.ReportKind
		stepUntil(t, k, clk, 100*time.Millisecond, 5*time.Second, func() bool {
			reports = append(reports, queuedReports(k)...)
			return slices.Contains(reports, lockclient.ReportDeadlineReached)
		})
		g.Expect(clk.Since(paused)).To(BeNumerically("<=", time.Second), "within the renewal's allowance")
		st, _ := k.Get(l.Token)
		g.Expect(st.DeadlineReached).To(BeTrue())
	})
}
