package main_test

// A stand-in Pod for the guard: a PID namespace (unshare) whose PID 1 only
// waits, like the pause process, with "containers" entered into it (nsenter),
// so the guard sees the workload the way it does under shareProcessNamespace.
// A stand-in manager SETs the lease and renews it with PEXPIRE, recording
// when, so tests can say when the key could have expired at the earliest.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/podguard"
	"github.com/guardedjob/guardedjob/internal/testutil/bins"
)

// helperEnv makes the test binary a stand-in process instead of running tests.
const helperEnv = "GUARD_TEST_HELPER"

// guardBin is the guard, built once for the package by TestMain.
var guardBin string

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "pause":
		pause()
	case "stubborn":
		// A workload that ignores SIGTERM: only SIGKILL ends it, so its end
		// shows when the guard sent SIGKILL.
		signal.Ignore(syscall.SIGTERM)
		for {
			time.Sleep(time.Hour) // not select {}: without cgo the runtime calls that a deadlock
		}
	}
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		// Each test mostly waits on leases and signals: four share two cores.
		_ = flag.Set("test.parallel", "4")
	}
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	if p := os.Getenv(bins.GuardEnv); p != "" {
		guardBin = p // make test builds it once
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "guard-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	guardBin = filepath.Join(dir, "guard")
	build := exec.Command("go", "build", "-trimpath", "-o", guardBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/guard: %v\n%s", err, out)
		return 1
	}
	// The guard runs under other users in some tests.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// pause is PID 1 of a stand-in Pod: it reaps orphans and does nothing else.
func pause() {
	for {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, 0, nil); err != nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// proc is a process the test started, with its exit status and the time the
// test saw it exit.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	exited  time.Time
}

func startProc(t *testing.T, name string, env []string, argv ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = out.Close() }()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.exited = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.gone() {
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) gone() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait returns when the process exited, failing the test after timeout.
func (p *proc) wait(t *testing.T, timeout time.Duration) time.Time {
	t.Helper()
	select {
	case <-p.done:
		return p.exited
	case <-time.After(timeout):
		t.Fatalf("%s still runs after %s\n%s", p.name, timeout, p.log())
		return time.Time{}
	}
}

func (p *proc) exitCode() int { return p.cmd.ProcessState.ExitCode() }

func (p *proc) log() string { return fmt.Sprintf("--- %s log:\n%s", p.name, p.logText()) }

func (p *proc) logText() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// pod is a stand-in Pod: a PID namespace with its own /proc.
type pod struct {
	t      *testing.T
	ns     *proc
	pid1   int // PID 1 of the namespace, as the test sees it
	selfNS string
}

func startPod(t *testing.T) *pod {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the stand-in Pod needs root for its PID namespace (unshare --pid)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), helperEnv+"=pause")
	// --kill-child: if unshare dies (the test process died), the
	// namespace's PID 1 dies and the kernel kills every process in it.
	ns := startProc(t, "pod", env, "unshare", "--pid", "--fork", "--mount-proc", "--kill-child", self)
	p := &pod{t: t, ns: ns}
	p.selfNS, _ = os.Readlink("/proc/self/ns/pid")
	deadline := time.Now().Add(10 * time.Second)
	for p.pid1 == 0 {
		if child := childOf(ns.cmd.Process.Pid); child != 0 {
			// Ready once the child runs the pause helper in the new namespace.
			nsOf, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", child))
			exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", child))
			if nsOf != "" && nsOf != p.selfNS && exe == self {
				p.pid1 = child
			}
		}
		if time.Now().After(deadline) || ns.gone() {
			t.Fatalf("the stand-in Pod did not start\n%s", ns.log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() {
		// Killing PID 1 kills everything in the namespace.
		_ = syscall.Kill(p.pid1, syscall.SIGKILL)
		ns.wait(t, 10*time.Second)
	})
	return p
}

// childOf returns a child of pid, or 0.
func childOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// run starts argv inside the Pod with exactly env as its environment, as a
// container would be.
func (p *pod) run(name string, env []string, argv ...string) *proc {
	p.t.Helper()
	return p.runAs(name, 0, env, argv...)
}

// runAs is run as user and group uid (0: as the test).
func (p *pod) runAs(name string, uid int, env []string, argv ...string) *proc {
	p.t.Helper()
	args := []string{"nsenter", "--target", strconv.Itoa(p.pid1), "--pid", "--mount"}
	if uid != 0 {
		args = append(args, "--setuid", strconv.Itoa(uid), "--setgid", strconv.Itoa(uid))
	}
	args = append(append(args, "--", "env", "-i"), env...)
	return startProc(p.t, name, os.Environ(), append(args, argv...)...)
}

// sleeper starts a workload that ends on SIGTERM.
func (p *pod) sleeper() *proc { return p.run("sleeper", nil, sleepPath(p.t), "3600") }

// sleepPath is sleep(1), as /proc/PID/exe names it.
func sleepPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sleep")
	if err == nil {
		p, err = filepath.EvalSymlinks(p)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// stubborn starts a workload that only SIGKILL ends.
func (p *pod) stubborn() *proc {
	self, err := os.Executable()
	if err != nil {
		p.t.Fatal(err)
	}
	return p.run("stubborn", []string{helperEnv + "=stubborn"}, self)
}

// pid returns the PID (as the test sees it) of the process started by run,
// once it runs argv0.
func (p *pod) pid(pr *proc, exe string) int {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c := childOf(pr.cmd.Process.Pid); c != 0 {
			if e, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", c)); e == exe {
				return c
			}
		}
		if time.Now().After(deadline) || pr.gone() {
			p.t.Fatalf("%s did not start\n%s", pr.name, pr.log())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openDir returns a new directory every user may write, removed when the
// test ends, for a guard that runs as another user than the test.
func openDir(t *testing.T) func() string {
	return func() string {
		t.Helper()
		dir, err := os.MkdirTemp("", "guard-test-")
		if err == nil {
			err = os.Chmod(dir, 0o777) //nolint:gosec // a test directory for another user
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		return dir
	}
}

// guardSetup is one guard's configuration and files.
type guardSetup struct {
	settings podguard.Settings
	storeDir string
	stateDir string
	msgPath  string
}

const (
	testTTL      = 6 * time.Second
	renewEvery   = time.Second
	testInterval = time.Second
	testGrace    = time.Second
	testMargin   = time.Second
)

// newGuardSetup writes the store directory (a URL to addr, as the test
// Redis' default user) and returns settings for the lease key and token.
func newGuardSetup(t *testing.T, addr, key, token string) *guardSetup {
	t.Helper()
	return newGuardSetupIn(t, t.TempDir, addr, key, token)
}

// newGuardSetupIn is newGuardSetup with directories from mkdir.
func newGuardSetupIn(t *testing.T, mkdir func() string, addr, key, token string) *guardSetup {
	t.Helper()
	gs := &guardSetup{storeDir: mkdir(), stateDir: mkdir()}
	gs.msgPath = filepath.Join(mkdir(), "termination-log")
	writeStore(t, gs.storeDir, map[string]string{"url": "redis://" + addr})
	gs.settings = podguard.Settings{
		Key: key, Holder: leasetoken.HolderOf(token), TokenSHA256: podguard.TokenSHA256(token),
		Interval: testInterval, Grace: testGrace, Margin: testMargin,
		StoreDir: gs.storeDir, StateDir: gs.stateDir, TerminationMessagePath: gs.msgPath,
	}
	return gs
}

func writeStore(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil { //nolint:gosec // read by a guard running as another user
			t.Fatal(err)
		}
	}
}

func (gs *guardSetup) env() []string {
	env := []string{podguard.EnvLogLevel + "=debug"}
	for _, v := range gs.settings.Environment() {
		env = append(env, v.Name+"="+v.Value)
	}
	return env
}

// start runs the guard in the Pod.
func (gs *guardSetup) start(p *pod) *proc { return p.run("guard", gs.env(), guardBin) }

// probe runs the startup probe the way the kubelet does: in the guard's
// container, with its environment.
func (gs *guardSetup) probe(t *testing.T) (int, string) {
	t.Helper()
	cmd := exec.Command(guardBin, podguard.ProbeArg)
	cmd.Env = gs.env()
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// waitReady polls the probe until it passes.
func (gs *guardSetup) waitReady(t *testing.T, guard *proc, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code, _ := gs.probe(t)
		if code == 0 {
			return
		}
		if time.Now().After(deadline) || guard.gone() {
			t.Fatalf("the guard's startup probe did not pass within %s\n%s", timeout, guard.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (gs *guardSetup) terminationMessage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(gs.msgPath)
	if err != nil {
		t.Fatalf("termination message: %v", err)
	}
	return string(b)
}

// manager plays the GuardedJob manager: it holds the lease with SET and
// renews it with PEXPIRE every renewEvery, straight to Redis.
type manager struct {
	rdb *redis.Client
	key string

	mu     sync.Mutex
	paused bool
	stop   chan struct{}
	done   chan struct{}
}

func startManager(t *testing.T, rdb *redis.Client, key, token string) *manager {
	t.Helper()
	m := &manager{rdb: rdb, key: key, stop: make(chan struct{}), done: make(chan struct{})}
	if err := rdb.Set(context.Background(), key, token, testTTL).Err(); err != nil {
		t.Fatal(err)
	}
	go m.loop()
	t.Cleanup(m.halt)
	return m
}

func (m *manager) loop() {
	defer close(m.done)
	tick := time.NewTicker(renewEvery)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		m.mu.Lock()
		if !m.paused {
			_ = m.rdb.PExpire(context.Background(), m.key, testTTL).Err()
		}
		m.mu.Unlock()
	}
}

// pause stops renewing; a renewal under way is done when it returns.
func (m *manager) pause() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.paused = true
}

func (m *manager) resume() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.paused = false
}

func (m *manager) halt() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

// keyExpiry returns the earliest time the key, left alone, can expire, as a
// reading of the test's clock: the latest of several send + PTTL, each a
// lower bound of Redis' expiry (PTTL runs after it was sent), so a read the
// test process sent late does not make the bound loose.
func keyExpiry(t *testing.T, rdb *redis.Client, key string) time.Time {
	t.Helper()
	var bound time.Time
	for range 5 {
		sent := time.Now()
		pttl, err := rdb.PTTL(context.Background(), key).Result()
		if err != nil || pttl <= 0 {
			t.Fatalf("PTTL %s = %v, %v: the key should be there with an expiry", key, pttl, err)
		}
		if e := sent.Add(pttl); e.After(bound) {
			bound = e
		}
	}
	return bound
}

// execCalls is how many MULTI/EXEC transactions Redis ran: the guard's reads
// (the test itself sends none).
func execCalls(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_exec:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// newToken returns a token in the contract's format.
func newToken(t *testing.T, job string) string {
	t.Helper()
	r, err := leasetoken.NewRandom()
	if err != nil {
		t.Fatal(err)
	}
	return leasetoken.Format(leasetoken.FormatHolder("cluster-a", "payments", job), r)
}

// randomPart is the part of a token that must never leave status.
func randomPart(token string) string { return token[strings.LastIndexByte(token, '#')+1:] }
