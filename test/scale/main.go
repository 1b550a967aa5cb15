// Command bench-scale measures the GuardedJob manager at scale, in one run, beside
// what the API server itself allows and what kube-controller-manager's CronJob
// controller achieves on the same control plane:
//
//   - floor: N Job creates plus 2N status updates of N objects from parallel writers;
//   - floorcrd (not run by default): the floor's writes in rounds, under the
//     checkout's CRD and under -floor-crd in turn: what a CRD change costs a status
//     update;
//   - writecost (not run by default): N status writes, Job creates and gate
//     writes in each way they could be made: the API server's CPU per write;
//   - cronjob: N CronJobs due in the same minute (kube-controller-manager, cronjob
//     controller only), once with its default flags and once with the manager's
//     client limits and workers: schedule skew;
//   - guardedjob: N GuardedJobs due in the same minute under the manager binary:
//     skew, API requests per run by verb (from the API server's audit log), the
//     manager's CPU and peak RSS (from /proc), no writes per renewal;
//   - idle: M more GuardedJobs due months from now beside the N active runs: the
//     manager's RSS and CPU at rest;
//   - stop: Redis killed under the N active runs: when each Job and Pod delete is
//     issued, against each lease's expiry;
//   - keeper: K leases in one keeper (in this process) for a while: missed renewals,
//     CPU and memory per lease.
//
// Everything runs on loopback: etcd and kube-apiserver (envtest, from
// KUBEBUILDER_ASSETS), kube-controller-manager from the same directory,
// redis-server from PATH and the manager binary. `make bench-scale` runs it;
// docs/benchmarks.md has the figures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/guardedjob/guardedjob/test/scale/report"
)

type bench struct {
	n, idleN, keeperLeases, writers int
	idleWindow, keeperDuration      time.Duration
	cpuProfile                      string
	serverCPUs, clientCPUs          string
	floorCRD                        string
	floorRounds                     int
	w                               *world
	res                             results
	rep                             *report.Report
	floorStatusWrites               int
	cronVariants                    []string
	profileDir                      string
	profileFor                      time.Duration
	out                             io.Writer
}

func (b *bench) printf(format string, args ...any) { _, _ = fmt.Fprintf(b.out, format, args...) }

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().UTC().Format(time.TimeOnly)}, args...)...)
}

func main() {
	logf.SetLogger(logr.Discard()) // envtest's own messages; the report says what matters
	home, _ := os.UserHomeDir()
	b := &bench{}
	flag.IntVar(&b.n, "n", 1000, "GuardedJobs (and CronJobs) due in the same minute, and floor objects.")
	flag.IntVar(&b.idleN, "idle", 5000, "Idle GuardedJobs added beside the N active runs in the idle phase.")
	flag.IntVar(&b.keeperLeases, "keeper-leases", 100000, "Leases the keeper holds in the keeper phase.")
	flag.DurationVar(&b.keeperDuration, "keeper-duration", 5*time.Minute, "How long the keeper phase holds its leases.")
	flag.DurationVar(&b.idleWindow, "idle-window", time.Minute, "How long the idle phase measures.")
	flag.IntVar(&b.writers, "writers", 32, "Parallel writers of the floor (and of the benchmark's object creation).")
	flag.StringVar(&b.floorCRD, "floor-crd", "", "A GuardedJob CRD file the floorcrd phase compares with the checkout's (e.g. an older release's).")
	flag.IntVar(&b.floorStatusWrites, "floor-status-writes", 0, "Status updates per run in the floor, before its Job create: the manager's (0: the Job first; the floorcrd phase makes at least 1).")
	flag.IntVar(&b.floorRounds, "floor-rounds", 3, "Rounds of the floor's writes under each CRD in the floorcrd phase.")
	phases := flag.String("phases", "floor,cronjob,guardedjob,idle,stop,keeper", "Phases to run, in this order (also floorcrd and writecost, which the default run leaves out).")
	assets := flag.String("assets", os.Getenv("KUBEBUILDER_ASSETS"), "Directory with etcd, kube-apiserver and kube-controller-manager (hack/build-control-plane.sh --demo).")
	managerBin := flag.String("manager", "bin/manager", "The manager binary (make build).")
	managerArgs := flag.String("manager-args", "", "Extra manager flags, space separated.")
	root := flag.String("root", ".", "The repository checkout (for the CRD and the manager's ClusterRole).")
	output := flag.String("o", "", "Also write the report (markdown) to this file.")
	keep := flag.Bool("keep", false, "Keep the work directory (logs, audit log) after the run.")
	jsonOut := flag.String("json", "", "Also write the report as JSON to this file (hack/benchtables turns committed reports into docs/benchmarks.md's tables).")
	note := flag.String("note", "", "A note on the conditions of the run, kept in the JSON report (e.g. \"the machine was shared with other builds\").")
	cronVariants := flag.String("cronjob-variants", report.CronDefaults+","+report.CronEqualLimits,
		"CronJob runs: \""+report.CronDefaults+"\" (kube-controller-manager's default flags) and \""+report.CronEqualLimits+"\" (the manager's client limits and workers).")
	flag.StringVar(&b.cpuProfile, "keeper-cpuprofile", "", "Write a CPU profile of the keeper phase (in this process) to this file.")
	serverCPUs, clientCPUs := defaultPinning(numCPU())
	flag.StringVar(&b.serverCPUs, "server-cpus", serverCPUs, "CPU list (taskset -c) for etcd and kube-apiserver; empty: no pinning.")
	flag.StringVar(&b.clientCPUs, "client-cpus", clientCPUs, "CPU list for everything else: the floor's writers, kube-controller-manager, the manager, Redis and this process.")
	flag.StringVar(&b.profileDir, "profile-dir", "", "Take CPU profiles of the API server (and the manager) over each burst into this directory.")
	flag.DurationVar(&b.profileFor, "profile-seconds", 15*time.Second, "How long each burst's profiles run from the due time.")
	flag.Parse()
	if b.serverCPUs != "" && b.clientCPUs == "" {
		fatal(errors.New("-server-cpus needs -client-cpus: every client must run off the API server's CPUs"))
	}
	if *assets == "" {
		*assets = filepath.Join(home, ".cache", "guardedjob", "k8s-v1.37.2")
	}
	if b.profileDir != "" {
		// Found missing only when the first burst's profiles are written,
		// after minutes of work.
		if err := os.MkdirAll(b.profileDir, 0o755); err != nil {
			fatal(err)
		}
	}

	dir, err := os.MkdirTemp("", "bench-scale-")
	if err != nil {
		fatal(err)
	}
	b.w = &world{dir: dir, assets: *assets, root: *root}
	var report strings.Builder
	b.out = io.MultiWriter(os.Stdout, &report)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	for _, v := range strings.Split(*cronVariants, ",") {
		if v = strings.TrimSpace(v); v != "" {
			b.cronVariants = append(b.cronVariants, v)
		}
	}
	b.rep = newReport(b, strings.Split(*phases, ","), *managerBin, strings.Fields(*managerArgs), *note)
	load := startLoadSampler()
	err = b.run(ctx, strings.Split(*phases, ","), *managerBin, strings.Fields(*managerArgs))
	cancel()
	b.w.stop()
	b.rep.Load = load.finish()
	b.rep.Finished = time.Now().UTC()
	if t := b.rep.Targets(); len(t) > 0 {
		b.printf("\n### Targets\n\n| target | result | met? |\n|---|---|---|\n")
		for _, x := range t {
			met := "-"
			if x.Met != nil {
				met = map[bool]string{true: "yes", false: "no"}[*x.Met]
			}
			b.printf("| %s | %s | %s |\n", x.Name, x.Result, met)
		}
		b.printf("\nLoad average (1 min) over the run: min %.1f, mean %.1f, max %.1f.\n", b.rep.Load.Min, b.rep.Load.Mean, b.rep.Load.Max)
	}
	if *jsonOut != "" {
		if werr := writeJSON(*jsonOut, b.rep); werr != nil {
			fmt.Fprintln(os.Stderr, werr)
		}
	}
	if *output != "" {
		if werr := os.WriteFile(*output, []byte(report.String()), 0o644); werr != nil {
			fmt.Fprintln(os.Stderr, werr)
		}
	}
	if *keep || err != nil {
		fmt.Fprintln(os.Stderr, "logs and audit log in", dir)
	} else {
		_ = os.RemoveAll(dir)
	}
	if err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench-scale:", err)
	os.Exit(1)
}

func (b *bench) run(ctx context.Context, phases []string, managerBin string, managerArgs []string) error {
	want := map[string]bool{}
	for _, p := range phases {
		want[strings.TrimSpace(p)] = true
	}
	needsCluster := want["floor"] || want["floorcrd"] || want["writecost"] || want["cronjob"] || want["guardedjob"] || want["idle"] || want["stop"]
	b.printf("## bench-scale %s\n\nN=%d, idle=%d, keeper leases=%d; %d CPUs\n", time.Now().UTC().Format(time.RFC3339), b.n, b.idleN, b.keeperLeases, numCPU())
	if needsCluster {
		b.logf("Starting etcd and kube-apiserver from %s", b.w.assets)
		// They inherit this process's CPUs when they start; this process (and
		// every client it starts later) then moves to the client's.
		pinned := b.serverCPUs != ""
		if pinned {
			if err := pinSelf(b.serverCPUs); err != nil {
				return err
			}
		}
		if err := b.w.startControlPlane(ctx); err != nil {
			return err
		}
		if pinned {
			if err := pinSelf(b.clientCPUs); err != nil {
				return err
			}
			b.rep.Machine.ServerCPUs, b.rep.Machine.ClientCPUs = b.serverCPUs, b.clientCPUs
			b.printf("etcd and kube-apiserver on CPU %s; the floor's writers, kube-controller-manager, the manager, Redis and the benchmark on CPU %s (taskset)\n", b.serverCPUs, b.clientCPUs)
		}
	}
	step := func(name string, fn func(context.Context) error) error {
		if !want[name] {
			return nil
		}
		b.logf("Phase %s", name)
		if err := fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	if err := step("floor", b.floor); err != nil {
		return err
	}
	if err := step("floorcrd", b.floorCRDs); err != nil {
		return err
	}
	if err := step("writecost", b.writeCost); err != nil {
		return err
	}
	if err := step("cronjob", b.cronjob); err != nil {
		return err
	}
	if want["guardedjob"] || want["idle"] || want["stop"] {
		var err error
		if b.w.redis, err = b.w.startRedis(ctx, "redis"); err != nil {
			return err
		}
		b.logf("Starting the manager %s %s", managerBin, strings.Join(managerArgs, " "))
		if err := b.w.startManager(ctx, managerBin, managerArgs, b.profileDir != ""); err != nil {
			return err
		}
	}
	for _, p := range []struct {
		name string
		fn   func(context.Context) error
	}{{"guardedjob", b.guardedJobs}, {"idle", b.idle}, {"stop", b.stop}, {"keeper", b.keeper}} {
		if err := step(p.name, p.fn); err != nil {
			return err
		}
	}
	return nil
}
