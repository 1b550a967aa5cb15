package main_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/podguard"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/tcpproxy"
)

// Timing allowances for a loaded 2-core machine, each at least twice the
// spread seen there. None of them loosens a safety bound: "gone before the
// lease could expire" is asserted against the lease itself.
const (
	// reactSlack covers a guard's wake-up, its process scan and the
	// workload's exit after a signal.
	reactSlack = time.Second
	// waitLong bounds waits for things that must happen, never a timing claim.
	waitLong = 20 * time.Second
)

const leaseKey = "payments:settlement"

// scene is a guarded run: Redis, a proxy the guard reads through, the
// manager renewing the lease, and a Pod with the guard and two workload
// processes that started once the guard's startup probe passed.
type scene struct {
	admin    *redis.Client
	proxy    *tcpproxy.Proxy
	token    string
	mgr      *manager
	pod      *pod
	gs       *guardSetup
	guard    *proc
	sleeper  *proc // ends on SIGTERM
	stubborn *proc // ends on SIGKILL only
}

func newScene(t *testing.T) *scene {
	t.Helper()
	srv := redisserver.Start(t)
	sc := &scene{admin: srv.Client(t), proxy: tcpproxy.Start(t, srv.Addr()), token: newToken(t, "settlement-29123456-5f3a9c")}
	sc.mgr = startManager(t, sc.admin, leaseKey, sc.token)
	sc.pod = startPod(t)
	sc.gs = newGuardSetup(t, sc.proxy.Addr(), leaseKey, sc.token)
	sc.guard = sc.gs.start(sc.pod)
	sc.gs.waitReady(t, sc.guard, waitLong)
	sc.sleeper = sc.pod.sleeper()
	sc.stubborn = sc.pod.stubborn()
	sc.pod.pid(sc.sleeper, sleepPath(t))
	sc.pod.pid(sc.stubborn, selfExe(t))
	return sc
}

func selfExe(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitStopped waits for the guard to stop both workloads and exit, and
// returns when each workload was gone.
func (sc *scene) waitStopped(t *testing.T) (termed, killed time.Time) {
	t.Helper()
	termed = sc.sleeper.wait(t, waitLong)
	killed = sc.stubborn.wait(t, waitLong)
	sc.guard.wait(t, waitLong)
	return termed, killed
}

// message returns the guard's termination message, checking that neither it
// nor the guard's log holds a token's random part.
func (sc *scene) message(t *testing.T, tokens ...string) string {
	t.Helper()
	g := NewWithT(t)
	msg := sc.gs.terminationMessage(t)
	for _, tok := range tokens {
		g.Expect(msg).NotTo(ContainSubstring(randomPart(tok)), "no token in the termination message")
	}
	g.Expect(sc.guard.log()).NotTo(ContainSubstring(randomPart(sc.token)), "no token in the guard's log")
	return msg
}

// Another holder's token, or no key at all: the lease is lost. The workload
// gets SIGTERM at the guard's next read and SIGKILL a grace period later, and
// the guard exits "lost" naming the holder (never a token).
func TestALostLeaseStopsTheWorkload(t *testing.T) {
	t.Parallel() // a store and processes of its own
	for name, tc := range map[string]struct {
		lose    func(sc *scene) []string // returns the tokens in play
		message func(sc *scene, other string) string
	}{
		"another holder took the key": {
			lose: func(sc *scene) []string {
				other := newToken(t, "settlement-29123456-aaaaaa")
				NewWithT(t).Expect(sc.admin.Set(context.Background(), leaseKey, other, testTTL).Err()).To(Succeed())
				return []string{sc.token, other}
			},
			message: func(sc *scene, other string) string {
				return "lease payments:settlement is held by " + leasetoken.HolderOf(other) + ", not by this run (" + leasetoken.HolderOf(sc.token) + ")"
			},
		},
		"the key was deleted": {
			lose: func(sc *scene) []string {
				NewWithT(t).Expect(sc.admin.Del(context.Background(), leaseKey).Err()).To(Succeed())
				return []string{sc.token}
			},
			message: func(*scene, string) string { return "lease payments:settlement is gone: no key" },
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			sc := newScene(t)
			sc.mgr.halt()
			lostAt := time.Now()
			tokens := tc.lose(sc)
			termed, killed := sc.waitStopped(t)
			t.Logf("SIGTERM %s after the loss, SIGKILL %s after SIGTERM", termed.Sub(lostAt), killed.Sub(termed))

			g.Expect(termed.Sub(lostAt)).To(BeNumerically("<", testInterval+reactSlack), "SIGTERM at the next read")
			g.Expect(killed.Sub(termed)).To(BeNumerically(">=", testGrace-50*time.Millisecond), "SIGKILL only after the grace period")
			g.Expect(killed.Sub(lostAt)).To(BeNumerically("<", testInterval+testGrace+reactSlack), "gone within interval + grace")
			g.Expect(sc.guard.exitCode()).To(Equal(podguard.ExitLost), sc.guard.log())
			other := tokens[len(tokens)-1]
			g.Expect(sc.message(t, tokens...)).To(HavePrefix(tc.message(sc, other)))
			code, out := sc.gs.probe(t)
			g.Expect(code).NotTo(BeZero())
			g.Expect(out).To(ContainSubstring("the guard stopped the workload"))
		})
	}
}

// Redis stops answering the guard (the connection is refused, or nothing
// gets through) while the manager keeps renewing: the guard cannot confirm
// the lease, and ends the workload before the lease it last confirmed could
// have expired, using the time the lease had rather than stopping at the
// first failed read.
func TestAnUnreachableStoreStopsTheWorkloadBeforeTheLeaseCouldExpire(t *testing.T) {
	t.Parallel() // a store and processes of its own
	for name, fault := range map[string]func(*tcpproxy.Proxy){
		"refused":    (*tcpproxy.Proxy).Cut,
		"blackholed": (*tcpproxy.Proxy).Blackhole,
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			sc := newScene(t)
			// Let the guard read once after a renewal the test knows, then
			// cut it off: its last confirmation counts from that renewal.
			sc.mgr.pause()
			earliestExpiry := keyExpiry(t, sc.admin, leaseKey)
			reads := execCalls(t, sc.admin)
			g.Eventually(func() int { return execCalls(t, sc.admin) }, waitLong, 10*time.Millisecond).Should(BeNumerically(">", reads))
			fault(sc.proxy)
			cutAt := time.Now()
			sc.mgr.resume()
			termed, killed := sc.waitStopped(t)

			// earliestExpiry: when the key could have expired, had the
			// renewal the guard saw last been the last.
			t.Logf("SIGTERM %s after the cut; SIGKILL %s after SIGTERM, %s before the lease could expire",
				termed.Sub(cutAt), killed.Sub(termed), earliestExpiry.Sub(killed))
			g.Expect(killed).To(BeTemporally("<", earliestExpiry), "the workload is gone before the lease could have expired (%s before)", earliestExpiry.Sub(killed))
			g.Expect(termed).To(BeTemporally(">", earliestExpiry.Add(-testMargin-testGrace-reactSlack)),
				"SIGTERM at the deadline, %s after the cut, not at the first failed read", termed.Sub(cutAt))
			g.Expect(killed.Sub(termed)).To(BeNumerically(">=", testGrace-50*time.Millisecond), "the grace period between SIGTERM and SIGKILL")
			g.Expect(sc.guard.exitCode()).To(Equal(podguard.ExitDeadline), sc.guard.log())
			msg := sc.message(t, sc.token)
			g.Expect(msg).To(MatchRegexp(`^lease payments:settlement not confirmed for [0-9.]+s \(store unreachable: `))
			g.Expect(sc.admin.Get(context.Background(), leaseKey).Val()).To(Equal(sc.token), "the key stayed ours all along")
		})
	}
}

// Redis answers slowly (every round trip through the proxy takes 400 ms
// longer, below the read interval) while the manager renews: the guard never
// stops the healthy run. Then the kubelet ends the guard with the Pod: exit 0.
func TestASlowStoreDoesNotStopAHealthyRun(t *testing.T) {
	t.Parallel() // a store and processes of its own
	g := NewWithT(t)
	sc := newScene(t)
	const delay = 200 * time.Millisecond
	sc.proxy.Delay(delay)
	slow := redis.NewClient(&redis.Options{Addr: sc.proxy.Addr(), MaxRetries: -1})
	defer func() { _ = slow.Close() }()
	sent := time.Now()
	g.Expect(slow.Ping(context.Background()).Err()).To(Succeed())
	g.Expect(time.Since(sent)).To(BeNumerically(">=", 2*delay), "the fault is on")

	reads := execCalls(t, sc.admin)
	until := time.Now().Add(4 * testTTL)
	for time.Now().Before(until) {
		for _, p := range []*proc{sc.guard, sc.sleeper, sc.stubborn} {
			g.Expect(p.gone()).To(BeFalse(), "%s ended\n%s", p.name, sc.guard.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	g.Expect(execCalls(t, sc.admin)-reads).To(BeNumerically(">=", 10), "the guard kept reading")

	g.Expect(syscall.Kill(sc.pod.pid(sc.guard, guardBin), syscall.SIGTERM)).To(Succeed())
	sc.guard.wait(t, waitLong)
	g.Expect(sc.guard.exitCode()).To(Equal(podguard.ExitTerminated), sc.guard.log())
	g.Expect(sc.gs.msgPath).NotTo(BeAnExistingFile(), "no termination message: nothing went wrong")
	g.Expect(sc.sleeper.gone() || sc.stubborn.gone()).To(BeFalse())
}

// The guard is stopped (SIGSTOP: a frozen process or node) for longer than
// the lease, while the manager keeps renewing. When it runs again its
// deadline has passed: it kills the workload at once, without asking Redis
// (which would have said the lease is still held).
func TestAGuardPausedPastItsDeadlineStopsTheWorkloadAtOnce(t *testing.T) {
	t.Parallel() // a store and processes of its own
	g := NewWithT(t)
	sc := newScene(t)
	guardPID := sc.pod.pid(sc.guard, guardBin)
	g.Expect(syscall.Kill(guardPID, syscall.SIGSTOP)).To(Succeed())
	// The length of the fault, not a synchronisation: past any deadline the
	// guard could have had.
	time.Sleep(testTTL + time.Second)
	g.Expect(sc.sleeper.gone() || sc.stubborn.gone()).To(BeFalse(), "nothing stops the workload while the guard is frozen")
	reads := execCalls(t, sc.admin)
	g.Expect(syscall.Kill(guardPID, syscall.SIGCONT)).To(Succeed())
	resumedAt := time.Now()
	// nsenter stops itself while its child is stopped (a stand-in detail:
	// in a Pod no such parent exists); let it go on waiting for the guard.
	g.Expect(syscall.Kill(sc.guard.cmd.Process.Pid, syscall.SIGCONT)).To(Succeed())
	termed, killed := sc.waitStopped(t)
	t.Logf("SIGTERM %s and SIGKILL %s after SIGCONT", termed.Sub(resumedAt), killed.Sub(resumedAt))

	g.Expect(killed.Sub(resumedAt)).To(BeNumerically("<", reactSlack), "SIGKILL at once: the lease may have expired during the pause")
	g.Expect(termed.Sub(resumedAt)).To(BeNumerically("<", reactSlack))
	g.Expect(execCalls(t, sc.admin)).To(Equal(reads), "no read after the pause")
	g.Expect(sc.guard.exitCode()).To(Equal(podguard.ExitDeadline), sc.guard.log())
	g.Expect(sc.message(t, sc.token)).To(MatchRegexp(`^lease payments:settlement not confirmed for [0-9.]+s \(the guard got no answer in time: was its process or node paused\?\)`))
	g.Expect(sc.admin.Get(context.Background(), leaseKey).Val()).To(Equal(sc.token), "Redis would have confirmed the lease")
}

// The startup probe holds the workload back until the guard confirmed the
// lease: while Redis cannot be reached it fails and the guard keeps trying
// (nothing runs yet, so nothing is stopped); once Redis answers it passes.
func TestTheStartupProbePassesOnceTheLeaseIsConfirmed(t *testing.T) {
	t.Parallel() // a store and processes of its own
	g := NewWithT(t)
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	proxy := tcpproxy.Start(t, srv.Addr())
	token := newToken(t, "settlement-29123456-5f3a9c")
	startManager(t, admin, leaseKey, token)
	proxy.Cut()
	p := startPod(t)
	gs := newGuardSetup(t, proxy.Addr(), leaseKey, token)
	guard := gs.start(p)

	failUntil := time.Now().Add(3 * testInterval)
	for time.Now().Before(failUntil) {
		code, out := gs.probe(t)
		g.Expect(code).To(Equal(1))
		g.Expect(out).To(ContainSubstring("not ready: the lease is not confirmed yet"))
		g.Expect(guard.gone()).To(BeFalse(), guard.log())
		time.Sleep(100 * time.Millisecond)
	}
	proxy.Restore(t)
	restored := time.Now()
	gs.waitReady(t, guard, waitLong)
	t.Logf("ready %s after Redis became reachable", time.Since(restored))
	g.Expect(time.Since(restored)).To(BeNumerically("<", testInterval+reactSlack), "ready at the next read")
}

// A lease lost before the Pod started: the guard exits "lost" and the probe
// never passes, so the workload never starts.
func TestALeaseLostBeforeThePodStartedKeepsTheWorkloadFromStarting(t *testing.T) {
	t.Parallel() // a store and processes of its own
	g := NewWithT(t)
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	token, other := newToken(t, "settlement-29123456-5f3a9c"), newToken(t, "settlement-29123456-bbbbbb")
	g.Expect(admin.Set(context.Background(), leaseKey, other, testTTL).Err()).To(Succeed())
	p := startPod(t)
	gs := newGuardSetup(t, srv.Addr(), leaseKey, token)
	guard := gs.start(p)
	guard.wait(t, waitLong)
	g.Expect(guard.exitCode()).To(Equal(podguard.ExitLost), guard.log())
	code, _ := gs.probe(t)
	g.Expect(code).To(Equal(1))
	g.Expect(gs.terminationMessage(t)).To(HavePrefix("lease payments:settlement is held by " + leasetoken.HolderOf(other)))
}

// The manager stops renewing (it died, or lost Redis while the node lost the
// control plane): the key still holds the run's token, but its expiry comes
// nearer at every read. The guard ends the workload before the key expires.
func TestALeaseNobodyRenewsStopsTheWorkloadBeforeItExpires(t *testing.T) {
	t.Parallel() // a store and processes of its own
	g := NewWithT(t)
	sc := newScene(t)
	sc.mgr.pause()
	expiry := keyExpiry(t, sc.admin, leaseKey)
	termed, killed := sc.waitStopped(t)
	t.Logf("SIGTERM %s and SIGKILL %s before the key could expire", expiry.Sub(termed), expiry.Sub(killed))

	g.Expect(killed).To(BeTemporally("<", expiry), "gone before the key could expire")
	g.Expect(termed).To(BeTemporally(">", expiry.Add(-testMargin-testGrace-reactSlack)), "but not long before its deadline")
	g.Expect(sc.guard.exitCode()).To(Equal(podguard.ExitDeadline), sc.guard.log())
	g.Expect(sc.message(t, sc.token)).To(MatchRegexp(`^lease payments:settlement is still held by this run but was not renewed: it could expire in [0-9.]+m?s \(has the manager stopped renewing it\?\)`))
	g.Expect(sc.admin.Get(context.Background(), leaseKey).Val()).To(Equal(sc.token), "the key was still ours when the workload was gone")
}
