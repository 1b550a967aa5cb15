package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

func TestAcquireSetsTheExpiryInTheSameCommandAsTheValue(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	g.Expect(c.LoadScripts(context.Background())).To(Succeed())
	rec := record(c)
	k := keys("expiry")
	tok := token(t, "job-1")

	lease, err := c.Acquire(context.Background(), acquireReq(k, tok, 30*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lease.Fence).To(Equal(int64(1)))
	g.Expect(lease.Holder()).To(Equal("test-cluster/ns/job-1"))

	cmds, _ := rec.reset()
	g.Expect(cmds).To(Equal([]string{"evalsha"}), "acquire is one script call")
	rdb := srv.Client(t)
	g.Expect(rdb.Get(context.Background(), k.Lock).Val()).To(Equal(tok))
	pttl := rdb.PTTL(context.Background(), k.Lock).Val()
	g.Expect(pttl).To(BeNumerically(">", 29*time.Second))
	g.Expect(pttl).To(BeNumerically("<=", 30*time.Second))
}

func TestReleaseAndRenewAreOneScriptCallEach(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	ctx := context.Background()
	g.Expect(c.LoadScripts(ctx)).To(Succeed())
	lease, err := c.Acquire(ctx, acquireReq(keys("atomic"), token(t, "job"), 10*time.Second))
	g.Expect(err).NotTo(HaveOccurred())

	// No GET-then-DEL window: the client sends exactly one command (the script),
	// so no other client can act between the comparison and the write.
	rec := record(c)
	g.Expect(c.Renew(ctx, lease)).To(Succeed())
	cmds, _ := rec.reset()
	g.Expect(cmds).To(Equal([]string{"evalsha"}))

	g.Expect(c.Release(ctx, lease)).To(Succeed())
	cmds, _ = rec.reset()
	g.Expect(cmds).To(Equal([]string{"evalsha"}))
	g.Expect(srv.Client(t).Exists(ctx, lease.Keys.Lock).Val()).To(BeZero())
}

// The seeds' central timeline: A's lease expires while A still works, B acquires,
// then A tries to release, renew and complete. None of A's calls may touch B's key.
func TestAnExpiredHolderCannotReleaseRenewOrCompleteOverTheNextHolder(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	rdb := srv.Client(t)
	ctx := context.Background()
	k := keys("timeline")

	a, err := c.Acquire(ctx, acquireReq(k, token(t, "job-a"), 5*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	// A's lease runs out (A paused past its TTL).
	g.Expect(rdb.PExpire(ctx, k.Lock, time.Millisecond).Err()).To(Succeed())
	g.Eventually(func() int64 { return rdb.Exists(ctx, k.Lock).Val() }).Should(BeZero())

	bTok := token(t, "job-b")
	b, err := c.Acquire(ctx, acquireReq(k, bTok, 5*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Fence).To(BeNumerically(">", a.Fence))

	var nh *lockclient.NotHeldError
	err = c.Release(ctx, a)
	g.Expect(errors.As(err, &nh)).To(BeTrue(), "release: %v", err)
	g.Expect(nh.Holder).To(Equal(bTok))

	err = c.Renew(ctx, a)
	g.Expect(errors.Is(err, lockclient.ErrNotHeld)).To(BeTrue(), "renew: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("test-cluster/ns/job-b"))
	g.Expect(err.Error()).NotTo(ContainSubstring(bTok), "errors show the holder, never the token")

	_, err = c.Complete(ctx, a, time.Minute)
	g.Expect(errors.Is(err, lockclient.ErrNotHeld)).To(BeTrue(), "complete: %v", err)
	g.Expect(rdb.Exists(ctx, k.Occurrence).Val()).To(BeZero(), "no done-marker over another holder's lease")

	g.Expect(rdb.Get(ctx, k.Lock).Val()).To(Equal(bTok))
	g.Expect(rdb.PTTL(ctx, k.Lock).Val()).To(BeNumerically(">", 4*time.Second), "A's renew did not touch B's expiry")
}

func TestBusyNamesTheHolderAndTheRemainingTTL(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	ctx := context.Background()
	k := keys("busy")
	first := token(t, "first")
	_, err := c.Acquire(ctx, acquireReq(k, first, 20*time.Second))
	g.Expect(err).NotTo(HaveOccurred())

	_, err = c.Acquire(ctx, acquireReq(k, token(t, "second"), 20*time.Second))
	var busy *lockclient.BusyError
	g.Expect(errors.As(err, &busy)).To(BeTrue(), "%v", err)
	g.Expect(errors.Is(err, lockclient.ErrBusy)).To(BeTrue())
	g.Expect(busy.Holder).To(Equal(first))
	g.Expect(busy.TTL).To(BeNumerically(">", 19*time.Second))
	g.Expect(err.Error()).To(MatchRegexp(`lock ns:busy:\d+ is held by test-cluster/ns/first, expires in (19\.\d+|20)s`))
}

func TestAcquiringWithTheOwnTokenExtendsTheLeaseAndIssuesAHigherFence(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	ctx := context.Background()
	k := keys("reenter")
	tok := token(t, "job")
	first, err := c.Acquire(ctx, acquireReq(k, tok, 5*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(srv.Client(t).PExpire(ctx, k.Lock, time.Second).Err()).To(Succeed())

	again, err := c.Acquire(ctx, acquireReq(k, tok, 5*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Reentered).To(BeTrue())
	g.Expect(again.Fence).To(Equal(first.Fence + 1))
	g.Expect(srv.Client(t).PTTL(ctx, k.Lock).Val()).To(BeNumerically(">", 4*time.Second))
}

func TestFencesStrictlyIncreaseAndHoldersNeverOverlapUnderContention(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	k := keys("contention")

	// About 0.2 s on a quiet 2-core machine. A worker never blocks without this
	// deadline: the first failure (or the deadline) stops every worker.
	const clients, perClient, deadline = 8, 125, 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var (
		inside atomic.Int32
		mu     sync.Mutex
		fences []int64 // in the order the critical sections ran
		wg     sync.WaitGroup
		first  = make(chan error, 1) // the first failure; later ones are its echoes
	)
	fail := func(err error) {
		select {
		case first <- err:
		default:
		}
		cancel()
	}
	for w := range clients {
		wg.Go(func() {
			for n := 0; n < perClient; {
				lease, err := c.Acquire(ctx, acquireReq(k, token(t, "worker"), 10*time.Second))
				if ctx.Err() != nil {
					fail(fmt.Errorf("worker %d got %d of its %d leases within %s", w, n, perClient, deadline))
					return
				}
				if errors.Is(err, lockclient.ErrBusy) {
					continue
				}
				if err != nil {
					fail(fmt.Errorf("worker %d: acquire: %w", w, err))
					return
				}
				if inside.Add(1) != 1 {
					fail(fmt.Errorf("two holders at once: worker %d got fence %d while another worker held the lease", w, lease.Fence))
					return
				}
				mu.Lock()
				fences = append(fences, lease.Fence)
				mu.Unlock()
				runtime.Gosched() // hold the lease while the other workers run
				inside.Add(-1)
				if err := c.Release(ctx, lease); err != nil {
					fail(fmt.Errorf("worker %d: release fence %d: %w", w, lease.Fence, err))
					return
				}
				n++
			}
		})
	}
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(deadline + 10*time.Second):
		t.Fatalf("the workers did not stop within 10s of their %s deadline", deadline)
	}
	select {
	case err := <-first:
		t.Fatal(err)
	default:
	}
	g.Expect(fences).To(HaveLen(clients * perClient))
	g.Expect(slices.IsSorted(fences)).To(BeTrue(), "fences rise in the order the holders ran")
	g.Expect(slices.Compact(slices.Clone(fences))).To(HaveLen(len(fences)), "no fence is issued twice")
}

func TestStrictFencesStayAboveEveryEarlierFenceAfterRedisLosesItsData(t *testing.T) {
	srv := redisserver.Start(t)
	c := dial(t, srv)
	ctx := context.Background()
	rdb := srv.Client(t)

	strict := func(k lockclient.Keys, floor int64) lockclient.Lease {
		t.Helper()
		l, err := c.Acquire(ctx, lockclient.AcquireRequest{Keys: k, Token: token(t, "job"), TTL: 5 * time.Second, Floor: floor, Policy: lockclient.FenceStrict})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
		return l
	}

	t.Run("without a floor, the Redis clock keeps fences rising", func(t *testing.T) {
		g := NewWithT(t)
		k := keys("strict-clock")
		var highest int64
		for range 5 {
			l := strict(k, 0)
			g.Expect(l.Fence).To(BeNumerically(">", highest))
			highest = l.Fence
		}
		g.Expect(highest).To(BeNumerically("<", int64(1)<<53), "fences stay exact in Lua numbers")
		g.Expect(rdb.FlushAll(ctx).Err()).To(Succeed())
		// Real data loss (a restart, a failover) takes far longer than the
		// millisecond the clock-derived fence needs to move past the last one
		// (it leaves room for 1,024 acquisitions per millisecond).
		time.Sleep(5 * time.Millisecond)
		after := strict(k, 0)
		g.Expect(after.Fence).To(BeNumerically(">", highest))
		g.Expect(after.FenceRaised).To(BeFalse())
	})

	t.Run("with a floor above the clock, the fence goes above the floor and says so", func(t *testing.T) {
		g := NewWithT(t)
		k := keys("strict-floor")
		floor := int64(1) << 52 // above any clock-derived value for centuries
		l := strict(k, floor)
		g.Expect(l.Fence).To(Equal(floor + 1))
		g.Expect(l.FenceRaised).To(BeTrue())
		g.Expect(rdb.Get(ctx, k.Fence).Val()).To(Equal("4503599627370497"), "the raised value is written back exactly")
		g.Expect(strict(k, floor).Fence).To(Equal(floor + 2))
	})

	t.Run("Inject fences restart after data loss: the documented limit Strict removes", func(t *testing.T) {
		g := NewWithT(t)
		k := keys("inject")
		for range 3 {
			_, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rdb.Del(ctx, k.Lock).Err()).To(Succeed())
		}
		g.Expect(rdb.FlushAll(ctx).Err()).To(Succeed())
		l, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(l.Fence).To(Equal(int64(1)))
	})
}

func TestFencePolicyNoneLeavesNoCounter(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	k := keys("none")
	l, err := c.Acquire(context.Background(), lockclient.AcquireRequest{Keys: k, Token: token(t, "j"), TTL: 5 * time.Second, Policy: lockclient.FenceNone})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Fence).To(BeZero())
	g.Expect(srv.Client(t).Exists(context.Background(), k.Fence).Val()).To(BeZero())
}

func TestOccurrenceMarkers(t *testing.T) {
	ctx := context.Background()

	t.Run("after complete, any client acquiring the occurrence gets Done with the completer", func(t *testing.T) {
		g := NewWithT(t)
		srv := redisserver.Start(t)
		c, other := dial(t, srv), dial(t, srv)
		k := keys("occ")
		tok := token(t, "job-1")
		l, err := c.Acquire(ctx, acquireReq(k, tok, 5*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
		released, err := c.Complete(ctx, l, time.Hour)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(released).To(BeTrue())
		g.Expect(srv.Client(t).Exists(ctx, k.Lock).Val()).To(BeZero())
		g.Expect(srv.Client(t).PTTL(ctx, k.Occurrence).Val()).To(BeNumerically(">", 59*time.Minute))

		_, err = other.Acquire(ctx, acquireReq(k, token(t, "job-2"), 5*time.Second))
		var done *lockclient.DoneError
		g.Expect(errors.As(err, &done)).To(BeTrue(), "%v", err)
		g.Expect(done.By).To(Equal(tok))
		g.Expect(err.Error()).To(Equal("occurrence " + k.Occurrence + " already done by test-cluster/ns/job-1"))
	})

	t.Run("complete after the lease expired still writes the marker", func(t *testing.T) {
		g := NewWithT(t)
		srv := redisserver.Start(t)
		c := dial(t, srv)
		k := keys("occ-expired")
		l, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(srv.Client(t).Del(ctx, k.Lock).Err()).To(Succeed())
		released, err := c.Complete(ctx, l, time.Minute)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(released).To(BeFalse())
		g.Expect(srv.Client(t).Get(ctx, k.Occurrence).Val()).To(Equal(l.Token))
	})

	t.Run("complete never writes while another token holds the lock", func(t *testing.T) {
		g := NewWithT(t)
		srv := redisserver.Start(t)
		c := dial(t, srv)
		k := keys("occ-other")
		l, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(srv.Client(t).Set(ctx, k.Lock, "other-cluster/ns/x#abc", 0).Err()).To(Succeed())
		_, err = c.Complete(ctx, l, time.Minute)
		g.Expect(errors.Is(err, lockclient.ErrNotHeld)).To(BeTrue())
		g.Expect(srv.Client(t).Exists(ctx, k.Occurrence).Val()).To(BeZero())
		g.Expect(srv.Client(t).Get(ctx, k.Lock).Val()).To(Equal("other-cluster/ns/x#abc"))
	})
}

func TestAHashAtTheLockKeyIsAClearErrorNotAStoreOutage(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	k := keys("hash")
	g.Expect(srv.Client(t).HSet(context.Background(), k.Lock, "f", "v").Err()).To(Succeed())
	_, err := c.Acquire(context.Background(), acquireReq(k, token(t, "j"), 5*time.Second))
	g.Expect(errors.Is(err, lockclient.ErrInvalid)).To(BeTrue(), "%v", err)
	g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeFalse())
	g.Expect(err.Error()).To(ContainSubstring("not a string"))
}

func TestAnUnreachableStoreIsAStoreErrorNeverNotHeld(t *testing.T) {
	ctx := context.Background()
	lease := lockclient.Lease{Keys: keys("down"), TTL: 5 * time.Second}

	t.Run("connection refused", func(t *testing.T) {
		g := NewWithT(t)
		srv := redisserver.Start(t)
		c := dial(t, srv)
		lease.Token = token(t, "j")
		srv.Kill()
		for name, err := range map[string]error{
			"renew":   c.Renew(ctx, lease),
			"release": c.Release(ctx, lease),
		} {
			g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue(), "%s: %v", name, err)
			g.Expect(errors.Is(err, lockclient.ErrNotHeld)).To(BeFalse(), name)
		}
		_, err := c.Acquire(ctx, acquireReq(lease.Keys, lease.Token, 5*time.Second))
		g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue(), "%v", err)
	})

	t.Run("a server that stopped answering times out within the bound", func(t *testing.T) {
		g := NewWithT(t)
		srv := redisserver.Start(t)
		c := dialConfig(t, lockclient.Config{URL: srv.URL(), Timeout: 300 * time.Millisecond})
		lease.Token = token(t, "j")
		g.Expect(c.Ping(ctx)).To(Succeed())
		srv.Pause()
		t.Cleanup(srv.Resume)
		start := time.Now()
		err := c.Renew(ctx, lease)
		g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue(), "%v", err)
		// Generous bound: the point is that the call ends, not how fast.
		g.Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second))
	})
}

// Other processes may share a key with GuardedJob. A client that follows the seeds'
// algorithm (SET NX PX to take, compare-token-then-DEL to release) shares it
// safely; one that releases with a plain DEL (ShedLock's default) deletes other
// holders' leases, which the keeper then reports as lost.
func TestForeignClientsSharingAKey(t *testing.T) {
	ctx := context.Background()
	const compareAndDel = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`

	t.Run("the seeds' algorithm shares a key safely", func(t *testing.T) {
		g := NewWithT(t)
		srv := redisserver.Start(t)
		c := dial(t, srv)
		foreign := srv.Client(t)
		k := keys("shared")
		foreignTok := "billing-service-7f9c"

		g.Expect(foreign.SetNX(ctx, k.Lock, foreignTok, 10*time.Second).Val()).To(BeTrue())
		_, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
		var busy *lockclient.BusyError
		g.Expect(errors.As(err, &busy)).To(BeTrue())
		g.Expect(busy.Holder).To(Equal(foreignTok), "a foreign value is shown whole")

		// The foreign lease expires; GuardedJob takes the key; the foreign process
		// wakes up and releases with its old token: nothing happens.
		g.Expect(foreign.Del(ctx, k.Lock).Err()).To(Succeed())
		ours, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(foreign.Eval(ctx, compareAndDel, []string{k.Lock}, foreignTok).Val()).To(BeEquivalentTo(0))
		g.Expect(foreign.SetNX(ctx, k.Lock, foreignTok, 10*time.Second).Val()).To(BeFalse(), "the foreign client sees it busy")
		g.Expect(c.Renew(ctx, ours)).To(Succeed())
	})

	t.Run("a plain DEL breaks mutual exclusion, and the renewal notices", func(t *testing.T) {
		g := NewWithT(t)
		srv := redisserver.Start(t)
		c := dial(t, srv)
		foreign := srv.Client(t)
		k := keys("unsafe")
		ours, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
		g.Expect(err).NotTo(HaveOccurred())

		g.Expect(foreign.Del(ctx, k.Lock).Err()).To(Succeed()) // "unlock" without checking
		g.Expect(foreign.SetNX(ctx, k.Lock, "other-process", 10*time.Second).Val()).To(BeTrue(),
			"a third process now holds the key while our work still runs")
		err = c.Renew(ctx, ours)
		var nh *lockclient.NotHeldError
		g.Expect(errors.As(err, &nh)).To(BeTrue())
		g.Expect(nh.Holder).To(Equal("other-process"))
	})
}

func TestInspectReadsHolderTTLFenceAndMarker(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	c := dial(t, srv)
	ctx := context.Background()
	k := keys("inspect")

	st, err := c.Inspect(ctx, k)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st).To(Equal(lockclient.KeyState{}))

	l, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	st, err = c.Inspect(ctx, k)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Holder).To(Equal(l.Token))
	g.Expect(st.TTL).To(BeNumerically(">", 4*time.Second))
	g.Expect(st.Fence).To(Equal(int64(1)))
	g.Expect(st.Done).To(BeEmpty())
}
