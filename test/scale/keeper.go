package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/test/scale/report"
)

// keeper holds K leases (ttl 30s, renewInterval 10s) in one Keeper, in this
// process, for a while, against a redis-server of its own; it samples every lease's
// last renewal and a random set of keys' PTTL as it goes.
func (b *bench) keeper(ctx context.Context) error {
	k := b.keeperLeases
	srv, err := b.w.startRedis(ctx, "redis-keeper")
	if err != nil {
		return err
	}
	defer srv.Kill()
	store, err := lockclient.Dial(lockclient.Config{URL: "redis://" + srv.addr})
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	if err := store.LoadScripts(ctx); err != nil {
		return err
	}
	keeper := lockclient.NewKeeper(store)

	runtime.GC()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	rss0, _ := procUsage(os.Getpid())

	// Acquired as a manager would, one call each, from 64 goroutines; each is
	// tracked as soon as it is held, so the renewals spread over the time the
	// acquisitions took.
	acquireStart := time.Now()
	if err := parallel(ctx, k, 64, func(ctx context.Context, i int) error {
		random, err := leasetoken.NewRandom()
		if err != nil {
			return err
		}
		key := fmt.Sprintf("keeper:lease-%d", i)
		l, err := store.Acquire(ctx, lockclient.AcquireRequest{
			Keys:  lockclient.Keys{Lock: key},
			Token: leasetoken.Format(leasetoken.FormatHolder("bench", "keeper", fmt.Sprintf("lease-%d", i)), random),
			TTL:   benchTTL, Policy: lockclient.FenceNone,
		})
		if err != nil {
			return fmt.Errorf("acquire %s: %w", key, err)
		}
		return keeper.Track(lockclient.TrackRequest{
			Lease: l, RenewInterval: benchInterval, SelfFence: true, StopBudget: benchGrace + stopMargin,
			Owner: "keeper/" + key,
		})
	}); err != nil {
		return err
	}
	acquired := time.Since(acquireStart)
	runtime.GC()
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)

	kctx, stopKeeper := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = keeper.Run(kctx)
	}()
	defer func() {
		stopKeeper()
		<-done
	}()
	go func() {
		for {
			select {
			case <-kctx.Done():
				return
			case <-keeper.Reports():
			}
		}
	}()

	rdb := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer func() { _ = rdb.Close() }()
	// The first renewals are due one interval after the first acquisition: the
	// measurement starts when every lease has been renewed once.
	time.Sleep(time.Until(acquireStart.Add(benchInterval + acquired + time.Second)))
	if b.cpuProfile != "" {
		f, err := os.Create(b.cpuProfile)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	r0, _ := procUsage(srv.PID())
	s0 := keeper.Stats()
	start := time.Now()

	late, notHeld, samples := 0, 0, 0
	var oldest time.Duration
	minPTTL := benchTTL
	for time.Since(start) < b.keeperDuration {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(15*time.Second, b.keeperDuration-time.Since(start))):
		}
		samples++
		now := time.Now()
		for _, st := range keeper.Snapshot() {
			if st.State != lockclient.StateHeld {
				notHeld++
			}
			age := now.Sub(st.LastRenewed)
			oldest = max(oldest, age)
			// A renewal goes out at most a coalescing window early and answers
			// within a round trip: a lease whose last successful renewal is more
			// than an interval and a second old missed one.
			if age > benchInterval+time.Second {
				late++
			}
		}
		pipe := rdb.Pipeline()
		cmds := make([]*redis.DurationCmd, 1000)
		for i := range cmds {
			cmds[i] = pipe.PTTL(ctx, fmt.Sprintf("keeper:lease-%d", rand.N(k)))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("sample PTTL: %w", err)
		}
		for _, c := range cmds {
			minPTTL = min(minPTTL, c.Val())
		}
	}
	elapsed := time.Since(start)
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	r1, _ := procUsage(srv.PID())
	s1 := keeper.Stats()
	rss1, _ := procUsage(os.Getpid())
	keys, _ := rdb.DBSize(ctx).Result()

	cpu := rusageCPU(ru1) - rusageCPU(ru0)
	renewals := s1.RenewalsOK - s0.RenewalsOK
	pipelines := s1.Pipelines - s0.Pipelines
	// Every lease renews about once per interval (a renewal may go out a little
	// early to join a pipeline, or late on a busy machine).
	expected := float64(k) * elapsed.Seconds() / benchInterval.Seconds()
	heap := int64(ms1.HeapAlloc) - int64(ms0.HeapAlloc)
	b.printf("\n### Keeper: %d leases (ttl %s, renewInterval %s) for %s\n\n", k, benchTTL, benchInterval, elapsed.Round(time.Second))
	b.printf("| leases | renewals ok (leases × window / interval: %.0f) | failed / lost | pipelines (renewals each) | late or not held in %d samples | oldest last renewal seen | lowest PTTL of %d sampled keys | keys at the end |\n|---|---|---|---|---|---|---|---|\n",
		expected, samples, samples*1000)
	b.printf("| %d | %d | %d / %d | %d (%.0f) | %d / %d | %s | %s | %d |\n\n", k, renewals, s1.RenewalsFailed-s0.RenewalsFailed, s1.RenewalsLost-s0.RenewalsLost,
		pipelines, float64(renewals)/float64(max(1, pipelines)), late, notHeld, ms(oldest), ms(minPTTL), keys)
	b.printf("| keeper process CPU | per lease per minute | per renewal | redis-server CPU | heap per lease | RSS growth (whole process) |\n|---|---|---|---|---|---|\n")
	b.printf("| %.2f s (%.1f%% of one core) | %.1f µs | %.1f µs | %.2f s | %.0f B | %s |\n",
		cpu.Seconds(), 100*cpu.Seconds()/elapsed.Seconds(),
		float64(cpu.Microseconds())/float64(k)/elapsed.Minutes(), float64(cpu.Microseconds())/float64(max(1, renewals)),
		(r1.CPU - r0.CPU).Seconds(), float64(heap)/float64(k), mib(rss1.RSS-rss0.RSS))
	b.printf("\n(the process CPU includes the samples: a Snapshot of every lease and 1000 PTTLs every 15 s)\n")
	b.rep.Keeper = &report.Keeper{Leases: k, Seconds: elapsed.Seconds(), RenewalsOK: int(renewals), RenewalsExpected: expected,
		Failed: int(s1.RenewalsFailed - s0.RenewalsFailed), Lost: int(s1.RenewalsLost - s0.RenewalsLost), Pipelines: int(pipelines),
		Late: late, NotHeld: notHeld, OldestSeconds: oldest.Seconds(), LowestPTTLSeconds: minPTTL.Seconds(), KeysAtEnd: int(keys),
		CPUSeconds: cpu.Seconds(), HeapPerLease: float64(heap) / float64(k)}
	return nil
}

func rusageCPU(ru syscall.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
