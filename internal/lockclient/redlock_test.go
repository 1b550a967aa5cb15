package lockclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// startRedlock starts n independent masters and a Redlock client over them.
func startRedlock(t *testing.T, n int) ([]*redisserver.Server, *lockclient.Client) {
	t.Helper()
	var nodes []*redisserver.Server
	var addrs []string
	for range n {
		s := redisserver.Start(t)
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr())
	}
	return nodes, dialConfig(t, lockclient.Config{URL: "redis+redlock://" + strings.Join(addrs, ","), Timeout: time.Second})
}

// holders counts the nodes whose key holds tok.
func holders(t *testing.T, nodes []*redisserver.Server, key, tok string) int {
	t.Helper()
	n := 0
	for _, s := range nodes {
		rdb := s.Client(t)
		if rdb.Get(context.Background(), key).Val() == tok {
			n++
		}
	}
	return n
}

func TestRedlockURLs(t *testing.T) {
	const secret = "Zk9Wq7Vx"
	g := NewWithT(t)
	url := "redis+redlock://u:" + secret + "@a:1,b,c:3/2?minReplicaAcks=1"
	g.Expect(lockclient.Redact(url)).To(Equal("redis+redlock://a:1,b:6379,c:3/2"))
	for _, bad := range []string{"redis+redlock://:" + secret + "@a:1,b:2", "redis+redlock://:" + secret + "@a:1", "redis+redlock://a,b,c,d"} {
		_, err := lockclient.Dial(lockclient.Config{URL: bad})
		g.Expect(errors.Is(err, lockclient.ErrInvalid)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring("needs an odd number of hosts, at least 3"))
		g.Expect(err.Error()).NotTo(ContainSubstring(secret))
		g.Expect(lockclient.Redact(bad)).To(Equal("<invalid URL>"))
	}
}

// Five independent masters: with two down a lease is taken, renewed and
// released on the other three; with three down nothing is taken and nothing is
// left behind on the two that answered, and a held lease's renewals fail (a
// store error: the Keeper self-fences) rather than being reported lost.
func TestRedlockNeedsAMajority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nodes, c := startRedlock(t, 5)
	k := lockclient.NewKeeper(c)
	startKeeper(t, k)

	t.Run("all five", func(t *testing.T) {
		g := NewWithT(t)
		lk := keys("redlock-all")
		before := time.Now()
		l, err := c.Acquire(ctx, acquireReq(lk, token(t, "j"), 10*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(holders(t, nodes, lk.Lock, l.Token)).To(Equal(5))
		g.Expect(l.ValidUntil()).To(BeTemporally("<=", before.Add(10*time.Second-100*time.Millisecond)), "the drift allowance is taken off")
		_, err = c.Acquire(ctx, acquireReq(lk, token(t, "other"), 10*time.Second))
		g.Expect(errors.Is(err, lockclient.ErrBusy)).To(BeTrue(), "%v", err)
		g.Expect(holders(t, nodes, lk.Lock, l.Token)).To(Equal(5), "a refused acquisition leaves the holder's keys alone")
		released, err := c.Complete(ctx, l, time.Minute)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(released).To(BeTrue())
		_, err = c.Acquire(ctx, acquireReq(lk, token(t, "other"), 10*time.Second))
		g.Expect(errors.Is(err, lockclient.ErrDone)).To(BeTrue(), "%v", err)
	})

	lk := keys("redlock-held")
	held, err := c.Acquire(ctx, acquireReq(lk, token(t, "held"), 10*time.Second))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(k.Track(lockclient.TrackRequest{Lease: held, RenewInterval: 100 * time.Millisecond, SelfFence: true, StopBudget: 2 * time.Second})).To(Succeed())

	t.Run("two down", func(t *testing.T) {
		g := NewWithT(t)
		nodes[3].Kill()
		nodes[4].Kill()
		heldAndRenewedSince(t, k, held.Token, time.Now())
		st, _ := k.Get(held.Token)
		g.Expect(st.ValidUntil).To(BeTemporally("<=", time.Now().Add(10*time.Second-100*time.Millisecond)), "renewals take the drift allowance off too")
		lk := keys("redlock-two-down")
		l, err := c.Acquire(ctx, acquireReq(lk, token(t, "j"), 10*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(l.Fence).To(BeEquivalentTo(1))
		g.Expect(holders(t, nodes[:3], lk.Lock, l.Token)).To(Equal(3))
		g.Expect(c.Renew(ctx, l)).To(Succeed())
		g.Expect(c.Release(ctx, l)).To(Succeed())
		g.Expect(holders(t, nodes[:3], lk.Lock, l.Token)).To(BeZero())
	})

	t.Run("three down", func(t *testing.T) {
		g := NewWithT(t)
		nodes[2].Kill()
		lk := keys("redlock-three-down")
		_, err := c.Acquire(ctx, acquireReq(lk, token(t, "j"), 10*time.Second))
		g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring("2 of 5 Redlock nodes answered, 3 needed"))
		for _, s := range nodes[:2] {
			g.Expect(s.Client(t).Exists(ctx, lk.Lock).Val()).To(BeZero(), "nothing left behind on %s", s.Addr())
		}
		g.Expect(c.Ping(ctx)).To(MatchError(lockclient.ErrStore))
		g.Eventually(func() lockclient.LeaseState {
			st, _ := k.Get(held.Token)
			return st.State
		}).Should(Equal(lockclient.StateFailing))
		st, _ := k.Get(held.Token)
		g.Expect(errors.Is(st.LastError, lockclient.ErrStore)).To(BeTrue(), "%v", st.LastError)
	})
}

// A master restarted without its data during a run: the lease keeps renewing
// on the four that still hold it, and is put back on the fifth. The fences tell what a restart can cost: a
// later majority may share with the earlier one only the node that lost its
// counter; a Strict fence still rises (the nodes' clocks bound it from below),
// while an Inject fence, a plain counter, is handed out again.
func TestRedlockNodeRestartedWithDataLoss(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	nodes, c := startRedlock(t, 5)
	k := lockclient.NewKeeper(c)
	startKeeper(t, k)

	lk := keys("redlock-restart")
	held, err := c.Acquire(ctx, acquireReq(lk, token(t, "held"), 10*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k.Track(lockclient.TrackRequest{Lease: held, RenewInterval: 100 * time.Millisecond, SelfFence: true, StopBudget: 2 * time.Second})).To(Succeed())
	nodes[0].Restart(t)
	heldAndRenewedSince(t, k, held.Token, time.Now())
	// The renewal that a majority confirmed puts the key back on the node that
	// lost it, so a rolling restart of every node never wears the lease down.
	g.Eventually(func() int { return holders(t, nodes, lk.Lock, held.Token) }).Should(Equal(5))
	k.Untrack(held.Token)
	g.Expect(c.Release(ctx, held)).To(Succeed())

	// A first majority {0, 1, 2}; then node 0 loses its data and the next
	// majority is {0, 3, 4}, which shares only node 0 with the first.
	nodes[3].Kill()
	nodes[4].Kill()
	strictKeys, injectKeys := keys("redlock-strict"), keys("redlock-inject")
	strictReq := func() lockclient.AcquireRequest {
		r := acquireReq(strictKeys, token(t, "j"), 10*time.Second)
		r.Policy = lockclient.FenceStrict
		return r
	}
	first, err := c.Acquire(ctx, strictReq())
	g.Expect(err).NotTo(HaveOccurred())
	firstInjected, err := c.Acquire(ctx, acquireReq(injectKeys, token(t, "j"), 10*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	for _, s := range nodes[:3] {
		g.Expect(s.Client(t).Get(ctx, strictKeys.Fence).Int64()).To(Equal(first.Fence), "the fence is written back to every node reached")
	}
	nodes[0].Restart(t)
	nodes[1].Kill()
	nodes[2].Kill()
	nodes[3].Restart(t)
	nodes[4].Restart(t)

	second, err := c.Acquire(ctx, strictReq())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(second.Fence).To(BeNumerically(">", first.Fence), "Strict: rises although no node of this majority remembers the first fence")
	secondInjected, err := c.Acquire(ctx, acquireReq(injectKeys, token(t, "j"), 10*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(secondInjected.Fence).To(Equal(firstInjected.Fence), "Inject: the counter was lost with the data")
}

// Redlock nodes are dialled through --store-allow like any other address.
func TestRedlockNodesOutsideTheAllowListAreNeverDialled(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	var addrs []string
	var nodes []*redisserver.Server
	for range 3 {
		s := redisserver.Start(t)
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr())
	}
	// Two nodes by name, one by an address outside the list.
	_, p0, _ := strings.Cut(addrs[0], ":")
	_, p1, _ := strings.Cut(addrs[1], ":")
	url := "redis+redlock://localhost:" + p0 + ",localhost:" + p1 + "," + addrs[2]
	list := allow(t, "localhost")
	g.Expect(errors.Is(list.Check(ctx, url), lockclient.ErrNotAllowed)).To(BeTrue())
	third := nodes[2].Client(t)
	before := connectionsReceived(t, third)
	c := dialConfig(t, lockclient.Config{URL: url, Tenant: true, Allow: list, Timeout: time.Second})
	lk := keys("redlock-allow")
	l, err := c.Acquire(ctx, acquireReq(lk, token(t, "j"), 10*time.Second))
	g.Expect(err).NotTo(HaveOccurred(), "two of three allowed nodes are a majority")
	g.Expect(connectionsReceived(t, third)).To(Equal(before), "the third node got no connection")
	g.Expect(c.Release(ctx, l)).To(Succeed())
}
