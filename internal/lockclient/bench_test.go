package lockclient_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// The benchmarks run against a real redis-server on loopback, like the tests. They
// run only with -bench:
//
//	go test -run '^$' -bench . -benchmem -count 6 ./internal/lockclient/
//
// docs/benchmarks.md holds the figures and how to read them.

// benchTTL is long enough that no key expires while a benchmark runs.
const benchTTL = 30 * time.Second

// benchClient starts a server and returns a lock client for it with the scripts
// already in the server's cache, so no measured call falls back to EVAL.
func benchClient(b *testing.B, opts ...lockclient.ClientOption) *lockclient.Client {
	b.Helper()
	srv := redisserver.Start(b)
	c := dial(b, srv, opts...)
	if err := c.LoadScripts(context.Background()); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkRawSetNXDel is the baseline: the two round trips of the simplest lock
// (SET key token NX PX ttl, then DEL) with go-redis alone, on the same connection
// settings the lock client uses. No token check, no fence, no per-call timeout.
func BenchmarkRawSetNXDel(b *testing.B) {
	c := benchClient(b)
	rdb := c.Redis()
	ctx := context.Background()
	key := keys("raw").Lock
	tok := token(b, "raw")
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := rdb.Do(ctx, "SET", key, tok, "NX", "PX", benchTTL.Milliseconds()).Text(); err != nil || ok != "OK" {
			b.Fatalf("SET NX PX: %q, %v", ok, err)
		}
		if err := rdb.Del(ctx, key).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireRelease is one run's lease as GuardedJob takes it by default:
// acquire (done-marker check, SET NX PX, INCR fence) and release
// (compare-token-then-DEL), two script calls.
func BenchmarkAcquireRelease(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	req := acquireReq(keys("acquire"), token(b, "acquire"), benchTTL)
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Release(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
}

// benchParallelism sets how many goroutines per GOMAXPROCS the parallel
// benchmarks run: the work is mostly waiting for Redis, so more goroutines than
// cores keep several calls in flight.
const benchParallelism = 4

// BenchmarkRawSetNXDelParallel is the baseline for BenchmarkAcquireReleaseParallel:
// each goroutine locks and unlocks its own key.
func BenchmarkRawSetNXDelParallel(b *testing.B) {
	c := benchClient(b)
	rdb := c.Redis()
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.RunParallel(func(pb *testing.PB) {
		key := keys("raw-par").Lock
		random, err := leasetoken.NewRandom()
		if err != nil {
			b.Error(err)
			return
		}
		tok := leasetoken.Format("bench/ns/raw", random)
		for pb.Next() {
			if ok, err := rdb.Do(ctx, "SET", key, tok, "NX", "PX", benchTTL.Milliseconds()).Text(); err != nil || ok != "OK" {
				b.Errorf("SET NX PX: %q, %v", ok, err)
				return
			}
			if err := rdb.Del(ctx, key).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAcquireReleaseParallel is BenchmarkAcquireRelease from several
// goroutines, each with its own keys: throughput of uncontended leases through one
// client's connection pool.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.RunParallel(func(pb *testing.PB) {
		random, err := leasetoken.NewRandom()
		if err != nil {
			b.Error(err)
			return
		}
		req := acquireReq(keys("acquire-par"), leasetoken.Format("bench/ns/acquire", random), benchTTL)
		for pb.Next() {
			l, err := c.Acquire(ctx, req)
			if err != nil {
				b.Error(err)
				return
			}
			if err := c.Release(ctx, l); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRenew is one renewal as a single call (compare-token-then-PEXPIRE): what
// a foreign client's renewal costs, and the keeper's cost when nothing else is due.
func BenchmarkRenew(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	l, err := c.Acquire(ctx, acquireReq(keys("renew"), token(b, "renew"), benchTTL))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Renew(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKeeperRenewBatch measures the keeper renewing N leases that fall due at
// once: each iteration steps a fake clock by the renew interval and waits until
// every lease's LastRenewed is the new time. The keeper sends them in pipelines of
// its batch size (1000). leases/s is renewals per second of wall time.
func BenchmarkKeeperRenewBatch(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) { benchKeeper(b, n) })
	}
}

func benchKeeper(b *testing.B, n int) {
	const interval = 10 * time.Second
	clk := clocktesting.NewFakeClock(time.Now())
	c := benchClient(b, lockclient.WithClock(clk))
	k := lockclient.NewKeeper(c, lockclient.WithKeeperClock(clk))
	ctx := context.Background()

	reqs := make([]lockclient.TrackRequest, n)
	tokens := make([]string, n)
	for i := range reqs {
		kk := keys("keeper")
		l, err := c.Acquire(ctx, lockclient.AcquireRequest{
			Keys: lockclient.Keys{Lock: kk.Lock}, Token: token(b, fmt.Sprintf("job-%d", i)),
			TTL: benchTTL, Policy: lockclient.FenceNone,
		})
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = lockclient.TrackRequest{Lease: l, RenewInterval: interval}
		tokens[i] = l.Token
		if err := k.Track(reqs[i]); err != nil {
			b.Fatal(err)
		}
	}
	startKeeper(b, k)
	waitFor(b, clk.HasWaiters)

	b.ReportAllocs()
	for b.Loop() {
		clk.Step(interval)
		// Tracking a tracked lease changes nothing but wakes the keeper, so it reads
		// the stepped clock even if it was between reading the clock and arming its
		// timer when the clock moved.
		if err := k.Track(reqs[0]); err != nil {
			b.Fatal(err)
		}
		waitRenewed(b, k, tokens, clk.Now())
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "leases/s")
}

// waitRenewed waits until the keeper has renewed every lease at time at. It reads
// each lease once it is done and waits on the first that is not, so the check costs
// about one Get per lease and allocates nothing.
func waitRenewed(b *testing.B, k *lockclient.Keeper, tokens []string, at time.Time) {
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < len(tokens); {
		st, ok := k.Get(tokens[i])
		switch {
		case !ok:
			b.Fatalf("lease %d is not tracked", i)
		case st.State != lockclient.StateHeld:
			b.Fatalf("lease %d is %s: %v", i, st.State, st.LastError)
		case st.LastRenewed.Equal(at):
			i++
			continue
		case time.Now().After(deadline):
			b.Fatalf("lease %d not renewed at %s within 30s (last renewed %s)", i, at, st.LastRenewed)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

func waitFor(b *testing.B, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
