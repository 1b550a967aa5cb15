package bench_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/guardedjob/guardedjob/bench"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// The benchmarks take and give back uncontended leases: every worker goroutine has
// its own key, so each op measures one lease's cost, not waiting for another
// holder. Names are Benchmark<Op>/<client>/c=<workers>. cmd/peerbench runs them,
// one client per process, against one pinned redis-server; run by hand they start
// a server of their own:
//
//	go test -run '^$' -bench 'Lock/^ours$/^c=8$' -benchmem .
//
// redisAddrEnv names a running server (host:port) to use instead.
const redisAddrEnv = "GUARDEDJOB_BENCH_REDIS"

// leaseTTL is long enough that no key expires while a benchmark runs.
const leaseTTL = 30 * time.Second

// rawUnlock is the floor of a token-checked release (compare-token-then-DEL).
var rawUnlock = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// rawFenceLock is the floor of a fenced acquire: SET NX PX and INCR of the fence in
// one script, and nothing else.
var rawFenceLock = redis.NewScript(`if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return redis.call("INCR", KEYS[2]) end return false`)

// rawRenew is the floor of a renewal (compare-token-then-PEXPIRE).
var rawRenew = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end return 0`)

// cycle is one op of a worker; setup makes a worker's op for its own key prefix.
type cycle func(ctx context.Context) error

type setup func(b *testing.B, c *lockclient.Client, prefix string) cycle

// lockClients are the lock/unlock cycles compared by BenchmarkLock.
var lockClients = []struct {
	name string
	new  setup
}{
	{"raw", newRaw},
	{"raw-fence", newRawFence},
	{"ours", func(b *testing.B, c *lockclient.Client, p string) cycle {
		return newOurs(b, c, p, lockclient.FenceInject)
	}},
	{"ours-strict", func(b *testing.B, c *lockclient.Client, p string) cycle {
		return newOurs(b, c, p, lockclient.FenceStrict)
	}},
	{"redislock", newRedislock},
	{"redsync", newRedsync},
}

// renewClients are the renewals compared by BenchmarkRenew.
var renewClients = []struct {
	name string
	new  setup
}{
	{"raw", newRawRenew},
	{"ours", newOursRenew},
}

// BenchmarkLock is one lock and unlock of a free key per op.
func BenchmarkLock(b *testing.B) {
	c := client(b)
	for _, lc := range lockClients {
		for _, n := range bench.Concurrencies {
			b.Run(fmt.Sprintf("%s/c=%d", lc.name, n), func(b *testing.B) { run(b, c, n, lc.new) })
		}
	}
}

// BenchmarkRenew is one renewal of a held lease per op.
func BenchmarkRenew(b *testing.B) {
	c := client(b)
	for _, rc := range renewClients {
		for _, n := range bench.Concurrencies {
			b.Run(fmt.Sprintf("%s/c=%d", rc.name, n), func(b *testing.B) { run(b, c, n, rc.new) })
		}
	}
}

// client returns a lock client on the operator's connection settings
// (lockclient.Dial); every client measured shares its go-redis client.
func client(b *testing.B) *lockclient.Client {
	addr := os.Getenv(redisAddrEnv)
	if addr == "" {
		addr = redisserver.Start(b).Addr()
	}
	c, err := lockclient.Dial(lockclient.Config{URL: "redis://" + addr})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	if err := c.LoadScripts(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, s := range []*redis.Script{rawUnlock, rawFenceLock, rawRenew} {
		if err := s.Load(context.Background(), c.Redis()).Err(); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

var runs atomic.Int64

// run makes n workers and shares b.N ops among them. Setup is not timed.
func run(b *testing.B, c *lockclient.Client, n int, s setup) {
	ctx := context.Background()
	// A prefix per run and process keeps keys apart from earlier runs' fence counters.
	base := fmt.Sprintf("bench:%d:%d", os.Getpid(), runs.Add(1))
	cycles := make([]cycle, n)
	for i := range cycles {
		cycles[i] = s(b, c, base+":"+strconv.Itoa(i))
	}
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	rdb := c.Redis()
	redis0, client0 := redisCPU(b, rdb), clientCPU(b)
	b.ReportAllocs()
	b.ResetTimer()
	for _, cy := range cycles {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) && !failed.Load() {
				if err := cy(ctx); err != nil {
					failed.Store(true)
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	// CPU time per op on each side: unlike ops/s, it barely moves when other
	// processes take the machine's CPUs, so it shows what a client costs.
	b.ReportMetric((redisCPU(b, rdb)-redis0).Seconds()*1e6/float64(b.N), "redis-us/op")
	b.ReportMetric((clientCPU(b)-client0).Seconds()*1e6/float64(b.N), "client-us/op")
}

// redisCPU is the CPU time the server has used (INFO cpu: user + system).
func redisCPU(b *testing.B, rdb redis.UniversalClient) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || k != "used_cpu_sys" && k != "used_cpu_user" {
			continue
		}
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatalf("INFO cpu %s: %v", k, err)
		}
		total += time.Duration(s * float64(time.Second))
	}
	return total
}

// clientCPU is the CPU time this process has used (user + system).
func clientCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func newRaw(b *testing.B, c *lockclient.Client, prefix string) cycle {
	rdb, key, tok := c.Redis(), prefix, token(b)
	return func(ctx context.Context) error {
		if ok, err := rdb.SetNX(ctx, key, tok, leaseTTL).Result(); err != nil || !ok {
			return fmt.Errorf("SET NX PX: %v, %w", ok, err)
		}
		return rawRelease(ctx, rdb, key, tok)
	}
}

func newRawFence(b *testing.B, c *lockclient.Client, prefix string) cycle {
	rdb, key, fence, tok := c.Redis(), prefix, prefix+":fence", token(b)
	return func(ctx context.Context) error {
		if _, err := rawFenceLock.Run(ctx, rdb, []string{key, fence}, tok, leaseTTL.Milliseconds()).Int64(); err != nil {
			return fmt.Errorf("fenced SET NX PX: %w", err)
		}
		return rawRelease(ctx, rdb, key, tok)
	}
}

func rawRelease(ctx context.Context, rdb redis.UniversalClient, key, tok string) error {
	if n, err := rawUnlock.Run(ctx, rdb, []string{key}, tok).Int64(); err != nil || n != 1 {
		return fmt.Errorf("compare-and-DEL: %d, %w", n, err)
	}
	return nil
}

// newOurs is Acquire with a done-marker check and a fence, then Release: the calls
// a run makes, with the token it minted at intent time.
func newOurs(b *testing.B, c *lockclient.Client, prefix string, policy lockclient.FencePolicy) cycle {
	req := lockclient.AcquireRequest{
		Keys:  lockclient.Keys{Lock: prefix, Occurrence: prefix + ":done:1", Fence: prefix + ":fence"},
		Token: token(b), TTL: leaseTTL, Policy: policy,
	}
	return func(ctx context.Context) error {
		l, err := c.Acquire(ctx, req)
		if err != nil {
			return err
		}
		return c.Release(ctx, l)
	}
}

// newRedislock is bsm/redislock used as documented: Obtain mints its own token.
func newRedislock(_ *testing.B, c *lockclient.Client, prefix string) cycle {
	locker := redislock.New(c.Redis())
	return func(ctx context.Context) error {
		l, err := locker.Obtain(ctx, prefix, leaseTTL, nil)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
}

// newRedsync is redsync on one pool (a quorum of one), one try per lock: Lock mints
// its own value.
func newRedsync(_ *testing.B, c *lockclient.Client, prefix string) cycle {
	rs := redsync.New(redsyncgoredis.NewPool(c.Redis()))
	m := rs.NewMutex(prefix, redsync.WithExpiry(leaseTTL), redsync.WithTries(1))
	return func(ctx context.Context) error {
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		if ok, err := m.UnlockContext(ctx); err != nil || !ok {
			return fmt.Errorf("unlock: %v, %w", ok, err)
		}
		return nil
	}
}

func newRawRenew(b *testing.B, c *lockclient.Client, prefix string) cycle {
	rdb, key, tok := c.Redis(), prefix, token(b)
	if err := rdb.Set(context.Background(), key, tok, leaseTTL).Err(); err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context) error {
		if n, err := rawRenew.Run(ctx, rdb, []string{key}, tok, leaseTTL.Milliseconds()).Int64(); err != nil || n != 1 {
			return fmt.Errorf("compare-and-PEXPIRE: %d, %w", n, err)
		}
		return nil
	}
}

func newOursRenew(b *testing.B, c *lockclient.Client, prefix string) cycle {
	l, err := c.Acquire(context.Background(), lockclient.AcquireRequest{
		Keys:  lockclient.Keys{Lock: prefix, Occurrence: prefix + ":done:1", Fence: prefix + ":fence"},
		Token: token(b), TTL: leaseTTL, Policy: lockclient.FenceInject,
	})
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context) error { return c.Renew(ctx, l) }
}

// token mints a token in the operator's format.
func token(b *testing.B) string {
	r, err := leasetoken.NewRandom()
	if err != nil {
		b.Fatal(err)
	}
	return leasetoken.Format(leasetoken.FormatHolder("bench", "ns", "job"), r)
}

func TestEveryCaseHasABenchmark(t *testing.T) {
	have := map[string]bool{}
	for _, c := range lockClients {
		have["Lock/"+c.name] = true
	}
	for _, c := range renewClients {
		have["Renew/"+c.name] = true
	}
	for _, c := range bench.Cases {
		if !have[c] {
			t.Errorf("case %s has no benchmark", c)
		}
		delete(have, c)
	}
	for c := range have {
		t.Errorf("benchmark %s is not in bench.Cases", c)
	}
}
