package main_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/podguard"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/secrets"
)

// Bad settings are refused before the guard reads anything, with exit code 2
// and a termination message that says what to fix.
func TestBadConfigurationExitsWithCode2AndSaysWhy(t *testing.T) {
	t.Parallel() // a store and processes of its own
	srv := redisserver.Start(t)
	token := newToken(t, "settlement-29123456-5f3a9c")
	for name, tc := range map[string]struct {
		change func(gs *guardSetup) []string // returns the environment to use
		want   []string
	}{
		"nothing set": {
			change: func(gs *guardSetup) []string {
				return []string{podguard.EnvTerminationMessagePath + "=" + gs.msgPath, podguard.EnvStateDir + "=" + gs.stateDir}
			},
			want: []string{"pod guard: bad environment:", podguard.EnvKey + ": not set", podguard.EnvHolder + ": not set",
				podguard.EnvTokenSHA256 + ": not set", podguard.EnvInterval + ": not set", podguard.EnvGrace + ": not set"},
		},
		"no state directory": {
			change: func(gs *guardSetup) []string {
				gs.settings.StateDir = filepath.Join(gs.stateDir, "missing")
				return gs.env()
			},
			want: []string{podguard.EnvStateDir + ": ", "is not a directory: mount an emptyDir there, into the guard container only"},
		},
		"no url in the store Secret": {
			change: func(gs *guardSetup) []string {
				NewWithT(t).Expect(os.Remove(filepath.Join(gs.storeDir, "url"))).To(Succeed())
				return gs.env()
			},
			want: []string{`the store Secret has no key "url"`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			p := startPod(t)
			gs := newGuardSetup(t, srv.Addr(), leaseKey, token)
			guard := p.run("guard", tc.change(gs), guardBin)
			guard.wait(t, waitLong)
			g.Expect(guard.exitCode()).To(Equal(podguard.ExitConfig), guard.log())
			msg := gs.terminationMessage(t)
			for _, w := range tc.want {
				g.Expect(msg).To(ContainSubstring(w))
			}
			g.Expect(guard.log()).To(ContainSubstring("Cannot guard the workload"))
		})
	}

	t.Run("the guard is PID 1: no shared process namespace", func(t *testing.T) {
		g := NewWithT(t)
		if os.Geteuid() != 0 {
			t.Skip("needs root for a PID namespace")
		}
		gs := newGuardSetup(t, srv.Addr(), leaseKey, token)
		guard := startProc(t, "guard", os.Environ(), append(append([]string{"unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "env", "-i"}, gs.env()...), guardBin)...)
		guard.wait(t, waitLong)
		g.Expect(guard.exitCode()).To(Equal(podguard.ExitConfig), guard.log())
		g.Expect(gs.terminationMessage(t)).To(ContainSubstring("set shareProcessNamespace: true"))
	})

	// Safe to run outside a Pod: the state directory is missing too, so even
	// a guard that did not see the node's processes would exit before reading.
	t.Run("the guard sees the node's processes", func(t *testing.T) {
		g := NewWithT(t)
		if stat, _ := os.ReadFile("/proc/2/stat"); !strings.Contains(string(stat), "(kthreadd)") {
			t.Skip("this machine's process namespace shows no kernel threads: it is itself a container")
		}
		gs := newGuardSetup(t, srv.Addr(), leaseKey, token)
		gs.settings.StateDir = filepath.Join(gs.stateDir, "missing")
		guard := startProc(t, "guard", gs.env(), guardBin)
		guard.wait(t, waitLong)
		g.Expect(guard.exitCode()).To(Equal(podguard.ExitConfig), guard.log())
		g.Expect(gs.terminationMessage(t)).To(ContainSubstring("the guard sees the node's processes (hostPID: true?)"))
	})

	t.Run("an argument", func(t *testing.T) {
		g := NewWithT(t)
		guard := startProc(t, "guard", nil, guardBin, "--key=x")
		guard.wait(t, waitLong)
		g.Expect(guard.exitCode()).To(Equal(podguard.ExitConfig))
		g.Expect(guard.log()).To(ContainSubstring("usage: guard [probe | --version]"))
	})
}

// No part of the store password appears in the guard's log (at debug level,
// with go-redis' own messages) or termination message, however the password
// is written and whether the URL parses or Redis refuses the login.
func TestNoPartOfTheStorePasswordIsEverPrinted(t *testing.T) {
	t.Parallel() // a store and processes of its own
	srv := redisserver.Start(t, redisserver.WithPassword("Adm1n-pw"))
	token := newToken(t, "settlement-29123456-5f3a9c")
	for _, pw := range secrets.Hostile {
		if len(pw.Value) < 3 {
			continue
		}
		for form, files := range map[string]map[string]string{
			"raw in the URL":               {"url": "redis://:" + pw.Value + "@" + srv.Addr()},
			"percent-encoded in the URL":   {"url": "redis://:" + secrets.Encode(pw.Value) + "@" + srv.Addr()},
			"in the password file":         {"url": "redis://" + srv.Addr(), "password": pw.Value},
			"user and password in the URL": {"url": "redis://guard:" + secrets.Encode(pw.Value) + "@" + srv.Addr() + "/0"},
		} {
			t.Run(pw.Name+", "+form, func(t *testing.T) {
				t.Parallel()
				g := NewWithT(t)
				p := startPod(t)
				gs := newGuardSetup(t, srv.Addr(), leaseKey, token)
				writeStore(t, gs.storeDir, files)
				guard := gs.start(p)
				// Either Dial refuses the URL (exit 2), or Redis refuses the
				// login read after read: let a few fail.
				g.Eventually(func() bool {
					return guard.gone() || strings.Count(guard.logText(), "Lease not confirmed") >= 3
				}, waitLong, 50*time.Millisecond).Should(BeTrue(), guard.log())
				if !guard.gone() {
					g.Expect(guard.logText()).To(ContainSubstring("WRONGPASS"), "the failure is the login")
					g.Expect(syscall.Kill(p.pid(guard, guardBin), syscall.SIGTERM)).To(Succeed())
				}
				guard.wait(t, waitLong)
				msg, _ := os.ReadFile(gs.msgPath)
				g.Expect(secrets.Leaks(guard.logText(), pw.Value)).To(BeEmpty(), guard.log())
				g.Expect(secrets.Leaks(string(msg), pw.Value)).To(BeEmpty(), string(msg))
			})
		}
	}
}

// A guard that may not signal the workload (another user, no KILL
// capability) cannot stop it: it says so, with its own exit code, after
// trying for a bounded time.
func TestAGuardThatMayNotSignalTheWorkloadSaysSo(t *testing.T) {
	t.Parallel() // a store and processes of its own
	g := NewWithT(t)
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	token := newToken(t, "settlement-29123456-5f3a9c")
	mgr := startManager(t, admin, leaseKey, token)
	p := startPod(t)
	gs := newGuardSetupIn(t, openDir(t), srv.Addr(), leaseKey, token)
	guard := p.runAs("guard", 65532, gs.env(), guardBin)
	gs.waitReady(t, guard, waitLong)
	stubborn := p.stubborn()
	p.pid(stubborn, selfExe(t))

	mgr.halt()
	g.Expect(admin.Del(context.Background(), leaseKey).Err()).To(Succeed())
	guard.wait(t, waitLong)
	g.Expect(guard.exitCode()).To(Equal(podguard.ExitStopFailed), guard.log())
	g.Expect(stubborn.gone()).To(BeFalse(), "root's process outlived the guard")
	g.Expect(gs.terminationMessage(t)).To(And(
		HavePrefix("lease payments:settlement is gone: no key"),
		MatchRegexp(`1 process could not be stopped \(PID [0-9]+\): the guard may not signal them; run the guard container as the workload's user or give it the KILL capability`)))
}

// A guard whose container restarts while the workload runs (the kubelet
// restarts a crashed sidecar) confirms the lease at once and carries on; one
// that cannot confirm it at once stops the workload, since it cannot know
// how long the lease went unwatched; and once a guard stopped the workload,
// every restart stops whatever runs again at once, without asking Redis.
func TestARestartedGuard(t *testing.T) {
	t.Parallel() // a store and processes of its own
	g := NewWithT(t)
	sc := newScene(t)
	crash := func(guard *proc) {
		t.Helper()
		g.Expect(syscall.Kill(sc.pod.pid(guard, guardBin), syscall.SIGKILL)).To(Succeed())
		guard.wait(t, waitLong)
	}

	crash(sc.guard)
	restarted := sc.gs.start(sc.pod)
	until := time.Now().Add(3 * testInterval)
	for time.Now().Before(until) {
		g.Expect(restarted.gone() || sc.sleeper.gone() || sc.stubborn.gone()).To(BeFalse(), restarted.log())
		time.Sleep(50 * time.Millisecond)
	}
	g.Expect(restarted.logText()).To(ContainSubstring("Restarted after the workload started"))

	crash(restarted)
	sc.proxy.Cut()
	restartedAt := time.Now()
	again := sc.gs.start(sc.pod)
	termed, killed := sc.sleeper.wait(t, waitLong), sc.stubborn.wait(t, waitLong)
	again.wait(t, waitLong)
	t.Logf("SIGKILL %s after the restart", killed.Sub(restartedAt))
	g.Expect(killed.Sub(restartedAt)).To(BeNumerically("<", testInterval+reactSlack), "the first read gets one read timeout")
	g.Expect(termed.Sub(restartedAt)).To(BeNumerically("<", testInterval+reactSlack))
	g.Expect(again.exitCode()).To(Equal(podguard.ExitDeadline), again.log())
	first := sc.gs.terminationMessage(t)
	g.Expect(first).To(HavePrefix("lease payments:settlement not confirmed since the guard restarted"))

	// The kubelet restarts a workload container (restartPolicy OnFailure)
	// and the guard: the guard ends it at once.
	sc.proxy.Restore(t)
	g.Expect(os.Remove(sc.gs.msgPath)).To(Succeed())
	reads := execCalls(t, sc.admin)
	workload := sc.pod.stubborn()
	sc.pod.pid(workload, selfExe(t))
	startedAt := time.Now()
	last := sc.gs.start(sc.pod)
	killed = workload.wait(t, waitLong)
	last.wait(t, waitLong)
	g.Expect(killed.Sub(startedAt)).To(BeNumerically("<", reactSlack+time.Second), "at once, without a grace period")
	g.Expect(last.exitCode()).To(Equal(podguard.ExitDeadline))
	g.Expect(sc.gs.terminationMessage(t)).To(Equal(first))
	g.Expect(execCalls(t, sc.admin)).To(Equal(reads), "without asking Redis")
}
