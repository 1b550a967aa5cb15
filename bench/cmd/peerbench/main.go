// Command peerbench runs the bench module's benchmarks against one redis-server,
// pinned apart from the client, and prints their throughput, allocations and the
// ratios between them as markdown.
//
// Redis runs on one CPU and the benchmark process on another (taskset), so the
// client's CPU cost is what separates the clients. Every client runs in a process
// of its own, once per concurrency and round; each round runs the clients in
// another order, and ratios are computed within a round, so a slow spell on a
// shared machine hits both sides of a ratio alike.
//
//	go run ./cmd/peerbench -rounds 3 -benchtime 2s -out /tmp/peers.md
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardedjob/guardedjob/bench"
)

type options struct {
	rounds    int
	benchtime string
	redisCPU  string
	clientCPU string
	out       string
}

func main() {
	var o options
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each runs every client at every concurrency, in a rotated order")
	flag.StringVar(&o.benchtime, "benchtime", "2s", "go test -benchtime of each measurement")
	flag.StringVar(&o.redisCPU, "redis-cpu", "0", "CPU list (taskset -c) for redis-server")
	flag.StringVar(&o.clientCPU, "client-cpu", "1", "CPU list (taskset -c) for the benchmark process")
	flag.StringVar(&o.out, "out", "", "also write the report to this file")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	for _, bin := range []string{"taskset", "redis-server", "go"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is not on PATH: %w", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "peerbench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	testBin := filepath.Join(dir, "bench.test")
	build := exec.Command("go", "test", "-c", "-o", testBin, "github.com/guardedjob/guardedjob/bench")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build the benchmarks: %w", err)
	}

	srv, err := startRedis(dir, o.redisCPU)
	if err != nil {
		return err
	}
	defer srv.stop()
	fmt.Fprintf(os.Stderr, "redis-server pid %d on %s (CPU %s), clients on CPU %s\n", srv.cmd.Process.Pid, srv.addr, o.redisCPU, o.clientCPU)

	res := results{}
	start := time.Now().UTC()
	for r := range o.rounds {
		order := rotate(bench.Cases, r*len(bench.Cases)/o.rounds)
		for _, n := range bench.Concurrencies {
			for _, c := range order {
				m, err := measure(testBin, srv.addr, o, c, n)
				if err != nil {
					return fmt.Errorf("round %d, %s, c=%d: %w", r+1, c, n, err)
				}
				fmt.Fprintf(os.Stderr, "round %d  c=%-3d %-18s %10.0f ops/s %4.0f allocs/op %6.1f client-µs/op %6.1f redis-µs/op\n",
					r+1, n, c, m.opsPerSec(), m.allocs, m.clientUs, m.redisUs)
				res.add(r, n, c, m)
			}
		}
	}

	var report bytes.Buffer
	writeHeader(&report, o, start, srv.version)
	res.write(&report, o.rounds)
	if _, err := os.Stdout.Write(report.Bytes()); err != nil {
		return err
	}
	if o.out != "" {
		return os.WriteFile(o.out, report.Bytes(), 0o644)
	}
	return nil
}

type redisServer struct {
	cmd     *exec.Cmd
	addr    string
	version string
}

// startRedis starts redis-server on a free loopback port, without persistence,
// pinned to cpus.
func startRedis(dir, cpus string) (*redisServer, error) {
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		// taskset execs redis-server, so the PID is the server's.
		cmd := exec.Command("taskset", "-c", cpus, "redis-server",
			"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
			"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		s := &redisServer{cmd: cmd, addr: addr}
		if s.version, err = s.waitReady(); err == nil {
			return s, nil
		}
		s.stop()
		last = err
	}
	return nil, fmt.Errorf("redis-server did not start: %w", last)
}

func (s *redisServer) waitReady() (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: 2, MaxRetries: -1, DisableIdentity: true})
	defer func() { _ = rdb.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := rdb.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			return infoField(info, "redis_version"), nil
		}
		if time.Now().After(deadline) {
			return "", err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop kills the server by its PID and reaps it.
func (s *redisServer) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "?"
}

// measurement is one benchmark line.
type measurement struct {
	nsPerOp, bytes, allocs float64
	// clientUs and redisUs are CPU microseconds per op in the benchmark process and
	// in redis-server.
	clientUs, redisUs float64
}

func (m measurement) opsPerSec() float64 { return 1e9 / m.nsPerOp }

// measure runs one client at one concurrency in a process of its own.
func measure(testBin, addr string, o options, c string, n int) (measurement, error) {
	name := benchName(c, n)
	cmd := exec.Command("taskset", "-c", o.clientCPU, testBin,
		"-test.run", "^$", "-test.bench", benchPattern(name), "-test.benchtime", o.benchtime,
		"-test.benchmem", "-test.count", "1")
	cmd.Env = append(os.Environ(), "GUARDEDJOB_BENCH_REDIS="+addr)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return measurement{}, fmt.Errorf("%w\n%s", err, out.String())
	}
	m, ok := findResult(&out, name)
	if !ok {
		return measurement{}, fmt.Errorf("no result for %s in:\n%s", name, out.String())
	}
	return m, nil
}

// benchName is the full benchmark name of case c at concurrency n.
func benchName(c string, n int) string {
	return fmt.Sprintf("Benchmark%s/c=%d", c, n)
}

// benchPattern matches exactly name (go test splits -bench at slashes).
func benchPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// gomaxprocsSuffix is the "-N" go test appends to a name when GOMAXPROCS > 1.
var gomaxprocsSuffix = regexp.MustCompile(`-\d+$`)

// findResult reads the benchmark line of name from go test's output.
func findResult(r io.Reader, name string) (measurement, bool) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || gomaxprocsSuffix.ReplaceAllString(f[0], "") != name {
			continue
		}
		var m measurement
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				m.nsPerOp = v
			case "B/op":
				m.bytes = v
			case "allocs/op":
				m.allocs = v
			case "client-us/op":
				m.clientUs = v
			case "redis-us/op":
				m.redisUs = v
			}
		}
		return m, m.nsPerOp > 0
	}
	return measurement{}, false
}

func rotate(s []string, k int) []string {
	k %= len(s)
	return append(slices.Clone(s[k:]), s[:k]...)
}

// results holds the measurements by round, concurrency and case.
type results map[key]measurement

type key struct {
	round, n int
	c        string
}

func (r results) add(round, n int, c string, m measurement) { r[key{round, n, c}] = m }

// ratio is ops/s of cmp.Case over ops/s of cmp.Base in one round.
func (r results) ratio(round, n int, cmp bench.Comparison) (float64, bool) {
	a, okA := r[key{round, n, cmp.Case}]
	b, okB := r[key{round, n, cmp.Base}]
	if !okA || !okB {
		return 0, false
	}
	return b.nsPerOp / a.nsPerOp, true
}

// cpuRatio is the CPU per op (client and Redis together) of cmp.Base over that of
// cmp.Case in one round: the throughput ratio the two would reach if CPU were all
// that limited them, which other load on the machine barely moves.
func (r results) cpuRatio(round, n int, cmp bench.Comparison) (float64, bool) {
	a, okA := r[key{round, n, cmp.Case}]
	b, okB := r[key{round, n, cmp.Base}]
	if !okA || !okB || a.clientUs+a.redisUs <= 0 {
		return 0, false
	}
	return (b.clientUs + b.redisUs) / (a.clientUs + a.redisUs), true
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func writeHeader(w io.Writer, o options, start time.Time, redisVersion string) {
	pf := printer(w)
	pf("Run %s UTC; %d rounds, -benchtime %s; redis-server %s pinned to CPU %s, clients pinned to CPU %s (GOMAXPROCS 1); %s, %s, %d CPUs online.\n",
		start.Format("2006-01-02 15:04"), o.rounds, o.benchtime, redisVersion, o.redisCPU, o.clientCPU, runtime.Version(), cpuModel(), runtime.NumCPU())
	// The test binary's build info lists no dependencies, so ask the module.
	out, err := exec.Command("go", "list", "-m", "github.com/redis/go-redis/v9", "github.com/bsm/redislock", "github.com/go-redsync/redsync/v4").Output()
	if err == nil {
		pf("Modules: %s.\n", strings.Join(strings.Split(strings.TrimSpace(string(out)), "\n"), ", "))
	}
}

// printer returns a Printf to w; the report goes to a buffer, which cannot fail.
func printer(w io.Writer) func(format string, a ...any) {
	return func(format string, a ...any) { _, _ = fmt.Fprintf(w, format, a...) }
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func (r results) write(w io.Writer, rounds int) {
	pf := printer(w)
	for _, n := range bench.Concurrencies {
		pf("\n#### %d client goroutine%s\n\n", n, plural(n))
		tableHeader(pf, "client", "ops/s round %d", rounds, "allocs/op", "B/op", "client CPU µs/op", "Redis CPU µs/op")
		for _, c := range bench.Cases {
			pf("| %s |", c)
			var allocs, bytes, clientUs, redisUs []float64
			for i := range rounds {
				m, ok := r[key{i, n, c}]
				if !ok {
					pf(" – |")
					continue
				}
				pf(" %.0f |", m.opsPerSec())
				allocs, bytes = append(allocs, m.allocs), append(bytes, m.bytes)
				clientUs, redisUs = append(clientUs, m.clientUs), append(redisUs, m.redisUs)
			}
			pf(" %s | %s | %.1f | %.1f |\n", span(allocs), span(bytes), median(clientUs), median(redisUs))
		}

		pf("\n")
		tableHeader(pf, "throughput ratio", "round %d", rounds, "median", "target", "CPU ratio, median")
		for _, cmp := range bench.Comparisons {
			pf("| %s / %s |", cmp.Case, cmp.Base)
			var v, cpu []float64
			for i := range rounds {
				if x, ok := r.cpuRatio(i, n, cmp); ok {
					cpu = append(cpu, x)
				}
				x, ok := r.ratio(i, n, cmp)
				if !ok {
					pf(" – |")
					continue
				}
				v = append(v, x)
				pf(" %.2f |", x)
			}
			pf(" %.2f | %s | %.2f |\n", median(v), target(cmp, n, v), median(cpu))
		}
	}
}

// target says whether the ratios reach cmp's target: in every round, in most, or
// not.
func target(cmp bench.Comparison, n int, v []float64) string {
	if cmp.Target == 0 || n != bench.TargetConcurrency {
		return ""
	}
	met := 0
	for _, x := range v {
		if x >= cmp.Target {
			met++
		}
	}
	verdict := "not met"
	switch {
	case met == len(v):
		verdict = "met in every round"
	case median(v) >= cmp.Target:
		verdict = fmt.Sprintf("median met (%d of %d rounds)", met, len(v))
	}
	return fmt.Sprintf("≥ %.2f: %s", cmp.Target, verdict)
}

// span prints the values' range: allocations vary by a fraction between runs
// (go-redis' pool and the runtime allocate a little in the background).
func span(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if hi-lo < 0.5 {
		return strconv.FormatFloat(lo, 'f', 0, 64)
	}
	return fmt.Sprintf("%.0f–%.0f", lo, hi)
}

// tableHeader prints a markdown table's header: the first column, one column
// per round, then the others, every column after the first right-aligned.
func tableHeader(pf func(string, ...any), first, round string, rounds int, rest ...string) {
	pf("| %s |", first)
	for i := range rounds {
		pf(" "+round+" |", i+1)
	}
	for _, c := range rest {
		pf(" %s |", c)
	}
	pf("\n|---|")
	for range rounds + len(rest) {
		pf("---:|")
	}
	pf("\n")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
