package lockclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// A manual unlock names the holder a person saw, never the token: the key is
// deleted only while its value still has that holder, in one script call, so a
// lock that changed hands since it was shown is never deleted.
func TestUnlockDeletesOnlyTheHolderThatWasShown(t *testing.T) {
	srv := redisserver.Start(t)
	c := dial(t, srv)
	rdb := srv.Client(t)
	ctx := context.Background()
	NewWithT(t).Expect(c.LoadScripts(ctx)).To(Succeed())

	t.Run("a GuardedJob lease with time to live is never deleted, in any cluster's name", func(t *testing.T) {
		g := NewWithT(t)
		k := keys("live")
		for _, tok := range []string{token(t, "settle-1-abcdef"), "cluster-b/payments/settle-1-fedcba#0123456789abcdef0123456789abcdef"} {
			g.Expect(rdb.Set(ctx, k.Lock, tok, time.Minute).Err()).To(Succeed())
			rec := record(c)
			err := c.Unlock(ctx, k.Lock, leasetoken.HolderOf(tok), lockclient.UnlockLock)
			cmds, _ := rec.reset()
			g.Expect(cmds).To(Equal([]string{"evalsha"}), "one script call decides")
			var live *lockclient.LiveLeaseError
			g.Expect(errors.As(err, &live)).To(BeTrue(), "%v", err)
			g.Expect(live.Holder).To(Equal(leasetoken.HolderOf(tok)))
			g.Expect(live.TTL).To(BeNumerically("~", time.Minute, 5*time.Second))
			g.Expect(rdb.Get(ctx, k.Lock).Val()).To(Equal(tok))
		}
	})

	t.Run("a GuardedJob token with no expiry is deleted by its holder", func(t *testing.T) {
		g := NewWithT(t)
		k := keys("stale")
		tok := token(t, "settle-1-abcdef")
		g.Expect(rdb.Set(ctx, k.Lock, tok, 0).Err()).To(Succeed())
		g.Expect(c.Unlock(ctx, k.Lock, leasetoken.HolderOf(tok), lockclient.UnlockLock)).To(Succeed())
		g.Expect(rdb.Exists(ctx, k.Lock).Val()).To(BeZero())
	})

	t.Run("a done-marker (a GuardedJob token with time to live) is deleted by its holder", func(t *testing.T) {
		g := NewWithT(t)
		k := keys("marker")
		tok := token(t, "settle-1-abcdef")
		g.Expect(rdb.Set(ctx, k.Occurrence, tok, time.Hour).Err()).To(Succeed())
		g.Expect(c.Unlock(ctx, k.Occurrence, leasetoken.HolderOf(tok), lockclient.UnlockDoneMarker)).To(Succeed())
		g.Expect(rdb.Exists(ctx, k.Occurrence).Val()).To(BeZero())
	})

	t.Run("a foreign value without # is its own holder", func(t *testing.T) {
		g := NewWithT(t)
		k := keys("foreign")
		g.Expect(rdb.Set(ctx, k.Lock, "batch-host-7", time.Minute).Err()).To(Succeed())
		g.Expect(c.Unlock(ctx, k.Lock, "batch-host-7", lockclient.UnlockLock)).To(Succeed(), "with time to live too: it is no GuardedJob lease")
		g.Expect(rdb.Exists(ctx, k.Lock).Val()).To(BeZero())
	})

	t.Run("the holder is the part before the last #, as HolderOf says", func(t *testing.T) {
		g := NewWithT(t)
		k := keys("hashes")
		g.Expect(rdb.Set(ctx, k.Lock, "a#b#c", 0).Err()).To(Succeed())
		var nh *lockclient.NotHeldError
		g.Expect(errors.As(c.Unlock(ctx, k.Lock, "a", lockclient.UnlockLock), &nh)).To(BeTrue())
		g.Expect(rdb.Get(ctx, k.Lock).Val()).To(Equal("a#b#c"))
		g.Expect(c.Unlock(ctx, k.Lock, leasetoken.HolderOf("a#b#c"), lockclient.UnlockLock)).To(Succeed())
		g.Expect(rdb.Exists(ctx, k.Lock).Val()).To(BeZero())
	})

	t.Run("another holder's value is left alone and named", func(t *testing.T) {
		g := NewWithT(t)
		k := keys("changed")
		next := token(t, "settle-2-123456")
		g.Expect(rdb.Set(ctx, k.Lock, next, time.Minute).Err()).To(Succeed())
		err := c.Unlock(ctx, k.Lock, leasetoken.FormatHolder("test-cluster", "ns", "settle-1-abcdef"), lockclient.UnlockLock)
		var nh *lockclient.NotHeldError
		g.Expect(errors.As(err, &nh)).To(BeTrue(), "%v", err)
		g.Expect(nh.Holder).To(Equal(next))
		g.Expect(rdb.Get(ctx, k.Lock).Val()).To(Equal(next))
	})

	t.Run("an absent key is not held, with no holder", func(t *testing.T) {
		g := NewWithT(t)
		err := c.Unlock(ctx, keys("absent").Lock, "someone", lockclient.UnlockLock)
		var nh *lockclient.NotHeldError
		g.Expect(errors.As(err, &nh)).To(BeTrue(), "%v", err)
		g.Expect(nh.Holder).To(BeEmpty())
	})

	t.Run("an empty holder or a bad key is invalid, and nothing is sent", func(t *testing.T) {
		g := NewWithT(t)
		k := keys("empty")
		g.Expect(rdb.Set(ctx, k.Lock, "x", 0).Err()).To(Succeed())
		rec := record(c)
		g.Expect(errors.Is(c.Unlock(ctx, k.Lock, "", lockclient.UnlockLock), lockclient.ErrInvalid)).To(BeTrue())
		g.Expect(errors.Is(c.Unlock(ctx, "has space", "x", lockclient.UnlockLock), lockclient.ErrInvalid)).To(BeTrue())
		cmds, _ := rec.reset()
		g.Expect(cmds).To(BeEmpty())
		g.Expect(rdb.Get(ctx, k.Lock).Val()).To(Equal("x"))
	})

	t.Run("a store that does not answer is a store error", func(t *testing.T) {
		g := NewWithT(t)
		down := dialConfig(t, lockclient.Config{URL: "redis://" + closedPort(t), Timeout: time.Second})
		g.Expect(errors.Is(down.Unlock(ctx, "ns:x", "h", lockclient.UnlockLock), lockclient.ErrStore)).To(BeTrue())
	})
}

// On a Redlock store the key goes from every node where the holder matches; a
// live GuardedJob lease on any node is left alone.
func TestRedlockUnlock(t *testing.T) {
	g := NewWithT(t)
	nodes, c := startRedlock(t, 3)
	ctx := context.Background()
	for _, n := range nodes {
		g.Expect(n.Client(t).Set(ctx, "ns:rl", "batch-host-1#aa", time.Minute).Err()).To(Succeed())
	}
	g.Expect(c.Unlock(ctx, "ns:rl", "batch-host-2", lockclient.UnlockLock)).To(MatchError(lockclient.ErrNotHeld))
	g.Expect(holders(t, nodes, "ns:rl", "batch-host-1#aa")).To(Equal(3))
	g.Expect(c.Unlock(ctx, "ns:rl", "batch-host-1", lockclient.UnlockLock)).To(Succeed())
	g.Expect(holders(t, nodes, "ns:rl", "batch-host-1#aa")).To(BeZero())

	for _, n := range nodes {
		g.Expect(n.Client(t).Set(ctx, "ns:rl", "cluster-b/ns/job-1#aa", time.Minute).Err()).To(Succeed())
	}
	var live *lockclient.LiveLeaseError
	g.Expect(errors.As(c.Unlock(ctx, "ns:rl", "cluster-b/ns/job-1", lockclient.UnlockLock), &live)).To(BeTrue())
	g.Expect(holders(t, nodes, "ns:rl", "cluster-b/ns/job-1#aa")).To(Equal(3))
}

func TestParseHolder(t *testing.T) {
	for _, tt := range []struct {
		value                   string
		cluster, namespace, job string
		ok                      bool
	}{
		{"cluster-a/payments/settle-1-abcdef#0123", "cluster-a", "payments", "settle-1-abcdef", true},
		{"batch-host-7", "", "", "", false},
		{"cluster-a/payments/settle#", "cluster-a", "payments", "settle", true},
		{"a/b#x", "", "", "", false},
		{"a//c#x", "", "", "", false},
		{"a/b/c/d#x", "", "", "", false},
	} {
		g := NewWithT(t)
		c, n, j, ok := leasetoken.ParseHolder(tt.value)
		g.Expect([]any{c, n, j, ok}).To(Equal([]any{tt.cluster, tt.namespace, tt.job, tt.ok}), tt.value)
	}
}
