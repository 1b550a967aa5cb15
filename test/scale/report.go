package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/guardedjob/guardedjob/test/scale/report"
)

// loadSampler samples the machine's 1-minute load average every 5 s while the
// benchmark runs: the figures of a run on a busy machine say so.
type loadSampler struct {
	mu      sync.Mutex
	samples []float64
	stop    chan struct{}
	done    chan struct{}
}

func startLoadSampler() *loadSampler {
	s := &loadSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			if l, ok := loadAverage(); ok {
				s.mu.Lock()
				s.samples = append(s.samples, l)
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()
	return s
}

// finish stops sampling and returns the load's minimum, mean and maximum.
func (s *loadSampler) finish() report.Load {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	l := report.Load{Samples: len(s.samples)}
	if len(s.samples) == 0 {
		return l
	}
	l.Min, l.Max = s.samples[0], s.samples[0]
	sum := 0.0
	for _, v := range s.samples {
		l.Min, l.Max = min(l.Min, v), max(l.Max, v)
		sum += v
	}
	l.Mean = sum / float64(len(s.samples))
	return l
}

func loadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}

// managerBuild is what the manager binary says it is (--version).
func managerBuild(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// flagValue returns the value of --name=value (or --name value) in args, or def.
func flagValue(args []string, name, def string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return def
}

// managerLimits are the manager's client limits and workers as the benchmark
// runs it (its defaults unless -manager-args says otherwise): CronJob is also
// measured with the same.
func managerLimits(args []string) report.Limits {
	qps, _ := strconv.ParseFloat(flagValue(args, "kube-api-qps", "0"), 64)
	burst, _ := strconv.Atoi(flagValue(args, "kube-api-burst", "0"))
	workers, _ := strconv.Atoi(flagValue(args, "max-concurrent-reconciles", "16"))
	if qps > 0 && burst <= 0 {
		burst = max(1, int(2*qps))
	}
	return report.Limits{QPS: qps, Burst: burst, Workers: workers}
}

func newReport(b *bench, phases []string, managerBin string, managerArgs []string, note string) *report.Report {
	return &report.Report{
		Started: time.Now().UTC(), Note: note, Phases: phases,
		N: b.n, Idle: b.idleN, KeeperLeases: b.keeperLeases,
		Machine: report.Machine{CPUs: numCPU(), GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH},
		Manager: report.ManagerRun{Build: managerBuild(context.Background(), managerBin), Args: managerArgs, Limits: managerLimits(managerArgs)},
	}
}

func writeJSON(path string, r *report.Report) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
