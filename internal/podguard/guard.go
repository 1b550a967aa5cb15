package podguard

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// Exit codes of the guard. A guard never exits while its workload should
// still run, except when the kubelet ends it with the Pod.
const (
	// ExitTerminated: SIGTERM (the kubelet ends the Pod's sidecars once the
	// workload containers are done). The only 0.
	ExitTerminated = 0
	// ExitConfig: the environment, the store Secret or the Pod is wrong; the
	// guard never confirmed anything and the workload never started.
	ExitConfig = 2
	// ExitLost: the key holds another token, or no key exists: the run lost
	// its lease. The workload was stopped.
	ExitLost = 3
	// ExitDeadline: the lease could not be confirmed before the time it could
	// have left (less margin and grace): the store was unreachable or too
	// slow, or the guard was not running (paused). The workload was stopped
	// before the lease could expire.
	ExitDeadline = 4
	// ExitStopFailed: as ExitLost or ExitDeadline, but some workload process
	// could not be ended (no permission to signal it, or it did not die).
	ExitStopFailed = 5
)

// State files in Settings.StateDir.
const (
	readyFile   = "ready"
	stoppedFile = "stopped"
)

// maxMessage is the kubelet's limit for a termination message.
const maxMessage = 4096

// confirmer reads the lease; *lockclient.Client implements it.
type confirmer interface {
	Confirm(ctx context.Context, key string, tokenSHA256 [sha256.Size]byte) (lockclient.Confirmation, error)
}

var _ confirmer = (*lockclient.Client)(nil)

// processes is the Pod's process table; *procfs implements it.
type processes interface {
	workload() ([]int, error)
	signal(pid int, sig syscall.Signal) error
}

// Outcome is how a guard run ended.
type Outcome struct {
	Code int
	// Message says why, for the termination message; empty for ExitTerminated.
	Message string
}

type guard struct {
	s     Settings
	store confirmer
	procs processes
	log   *slog.Logger
	// clock is the local monotonic clock every bound is counted on.
	clock clock.WithTicker
}

type readResult struct {
	cf   lockclient.Confirmation
	sent time.Time
	err  error
}

// watch is what a guard run knows between reads.
type watch struct {
	tl            *timeline
	start         time.Time
	lastConfirmed time.Time // send time of the last confirmation
	lastErr       error     // of the reads since then
	ready         bool      // the ready file exists
	warnedNoTTL   bool
}

// run guards the workload until the lease is lost or cannot be confirmed in
// time (then it stops the workload and returns why), or until ctx ends (the
// kubelet's SIGTERM).
func (g *guard) run(ctx context.Context) Outcome {
	start := g.clock.Now()
	if o, ok := g.previousStop(); ok {
		g.log.Error("The guard stopped this Pod's workload before: stopping whatever runs now", "reason", o.Message)
		return g.finish(o, start, start)
	}
	restarted := exists(filepath.Join(g.s.StateDir, readyFile))
	w := &watch{tl: newTimeline(g.s, start, restarted), start: start, ready: restarted}
	if restarted {
		g.log.Info("Restarted after the workload started: confirming the lease at once", "key", g.s.Key, "stopIn", w.tl.stopAt.Sub(start))
	}

	results := make(chan readResult, 1)
	reading, next := false, start
	for {
		// The deadline comes first, whatever woke the guard.
		now := g.clock.Now()
		if w.tl.due(now) {
			return g.finish(g.deadlineOutcome(w, now), now, w.tl.killAt(now, false))
		}
		if !reading && !now.Before(next) {
			reading = true
			go g.read(ctx, now, results)
		}
		wake := w.tl.stopAt
		if !reading && (wake.IsZero() || next.Before(wake)) {
			wake = next
		}
		var timer clock.Timer
		var fire <-chan time.Time
		if !wake.IsZero() {
			timer = g.clock.NewTimer(wake.Sub(now))
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
			g.log.Info("Terminated")
			return Outcome{Code: ExitTerminated}
		case <-fire:
		case r := <-results:
			reading = false
			now = g.clock.Now()
			if w.tl.due(now) {
				// An answer the guard sees only after its deadline (it was
				// paused) does not get to overrule it.
				break
			}
			if o, lost := g.onRead(w, r, now); lost {
				return g.finish(o, now, w.tl.killAt(now, true))
			} else if o.Code != 0 {
				return o
			}
			next = w.tl.nextRead(r.sent, now)
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// onRead takes in one read's answer. It returns lost with the reason when
// the lease is lost, or an outcome with a non-zero code when the guard cannot
// go on; otherwise it moves the bounds and opens the startup gate after the
// first confirmation.
func (g *guard) onRead(w *watch, r readResult, now time.Time) (o Outcome, lost bool) {
	switch {
	case r.err != nil && errors.Is(r.err, lockclient.ErrStore):
		if w.lastErr == nil {
			g.log.Warn("Lease not confirmed: store unreachable", "key", g.s.Key, "err", r.err, "stopIn", untilOrNone(w.tl.stopAt, now))
		} else {
			g.log.Debug("Lease not confirmed", "err", r.err)
		}
		w.lastErr = r.err
		return Outcome{}, false
	case r.err != nil:
		return Outcome{Code: ExitLost, Message: fmt.Sprintf("lease %s: %v", g.s.Key, r.err)}, true
	case !r.cf.Held && r.cf.Holder == "":
		return Outcome{Code: ExitLost, Message: fmt.Sprintf("lease %s is gone: no key (it expired or was deleted)", g.s.Key)}, true
	case !r.cf.Held:
		return Outcome{Code: ExitLost, Message: fmt.Sprintf("lease %s is held by %s, not by this run (%s)", g.s.Key, r.cf.Holder, g.s.Holder)}, true
	}

	if w.lastErr != nil {
		g.log.Info("Lease confirmed again", "key", g.s.Key)
	}
	w.lastErr, w.lastConfirmed = nil, r.cf.SentAt
	if until := r.cf.ValidUntil(); !until.IsZero() {
		w.tl.confirmed(until)
	} else if !w.warnedNoTTL {
		g.log.Warn("Lease key has no expiry: the read gives no bound", "key", g.s.Key)
		w.warnedNoTTL = true
	}
	g.log.Debug("Lease confirmed", "key", g.s.Key, "stopIn", untilOrNone(w.tl.stopAt, now))
	// Open the gate only with time left: a lease about to expire is stopped
	// at the top of the loop instead.
	if w.ready || w.tl.stopAt.IsZero() || w.tl.due(now) {
		return Outcome{}, false
	}
	if err := os.WriteFile(filepath.Join(g.s.StateDir, readyFile), []byte("confirmed\n"), 0o644); err != nil { //nolint:gosec // read by the probe, holds nothing secret
		return Outcome{Code: ExitConfig, Message: fmt.Sprintf("pod guard: write the ready file: %v; mount an emptyDir at %s (%s)", err, g.s.StateDir, EnvStateDir)}, false
	}
	w.ready = true
	g.log.Info("Lease confirmed: the workload may start", "key", g.s.Key, "holder", g.s.Holder, "stopIn", w.tl.stopAt.Sub(now))
	return Outcome{}, false
}

// read confirms the lease once and reports on results (buffered: the loop
// may have stopped listening).
func (g *guard) read(ctx context.Context, sent time.Time, results chan<- readResult) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout(g.s.Interval))
	defer cancel()
	cf, err := g.store.Confirm(ctx, g.s.Key, g.s.TokenSHA256)
	results <- readResult{cf: cf, sent: sent, err: err}
}

// deadlineOutcome says why the deadline passed: the store did not answer,
// answered but the lease was not renewed, or the guard was not running.
func (g *guard) deadlineOutcome(w *watch, now time.Time) Outcome {
	start, lastConfirmed, leaseEnd, lastErr := w.start, w.lastConfirmed, w.tl.leaseEnd, w.lastErr
	round := func(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }
	const stopped = "; the workload was stopped before the lease could expire"
	switch {
	case lastConfirmed.IsZero():
		why := "no answer in time"
		if lastErr != nil {
			why = "store unreachable: " + lastErr.Error()
		}
		return Outcome{Code: ExitDeadline, Message: fmt.Sprintf("lease %s not confirmed since the guard restarted %s ago (%s)%s", g.s.Key, round(now.Sub(start)), why, stopped)}
	case lastErr != nil:
		return Outcome{Code: ExitDeadline, Message: fmt.Sprintf("lease %s not confirmed for %s (store unreachable: %v)%s", g.s.Key, round(now.Sub(lastConfirmed)), lastErr, stopped)}
	case now.Sub(lastConfirmed) <= 2*g.s.Interval:
		// Reads succeed, but the key's expiry did not move on.
		return Outcome{Code: ExitDeadline, Message: fmt.Sprintf("lease %s is still held by this run but was not renewed: it could expire in %s (has the manager stopped renewing it?)%s", g.s.Key, round(leaseEnd.Sub(now)), stopped)}
	default:
		return Outcome{Code: ExitDeadline, Message: fmt.Sprintf("lease %s not confirmed for %s (the guard got no answer in time: was its process or node paused?)%s", g.s.Key, round(now.Sub(lastConfirmed)), stopped)}
	}
}

// finish records the stop, so a restarted guard repeats it, then stops the
// workload: SIGTERM at termAt, SIGKILL at killAt.
func (g *guard) finish(o Outcome, termAt, killAt time.Time) Outcome {
	g.log.Error("Stopping the workload", "reason", o.Message, "killIn", killAt.Sub(termAt))
	if err := os.WriteFile(filepath.Join(g.s.StateDir, stoppedFile), []byte(strconv.Itoa(o.Code)+"\n"+o.Message), 0o644); err != nil { //nolint:gosec // holds nothing secret
		g.log.Error("Cannot record the stop: a restarted guard will not repeat it", "err", err)
	}
	res := stopWorkload(g.clock, g.procs, termAt, killAt)
	if res.failed() {
		o = Outcome{Code: ExitStopFailed, Message: o.Message + "; " + res.String()}
	}
	g.log.Error("Workload stopped", "terminated", res.termed, "killed", res.killed, "remaining", len(res.remaining))
	return o
}

// previousStop reads the stop an earlier run of the guard in this Pod made.
func (g *guard) previousStop() (Outcome, bool) {
	b, err := os.ReadFile(filepath.Join(g.s.StateDir, stoppedFile))
	if err != nil {
		return Outcome{}, false
	}
	code, msg, _ := strings.Cut(string(b), "\n")
	o := Outcome{Code: ExitDeadline, Message: msg}
	if c, err := strconv.Atoi(code); err == nil && (c == ExitLost || c == ExitDeadline || c == ExitStopFailed) {
		o.Code = c
	}
	if o.Message == "" {
		o.Message = "the guard stopped the workload before"
	}
	return o, true
}

func untilOrNone(t, now time.Time) any {
	if t.IsZero() {
		return "none"
	}
	return t.Sub(now)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// writeTerminationMessage writes msg where the kubelet reads it, cut to the
// kubelet's limit.
func writeTerminationMessage(path, msg string) error {
	if len(msg) > maxMessage {
		msg = msg[:maxMessage-3] + "..."
	}
	return os.WriteFile(path, []byte(msg), 0o644) //nolint:gosec // the kubelet reads it; holds no secret
}
