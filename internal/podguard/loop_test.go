package podguard

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// The guard's loop on a fake clock, against a scripted store and a fake process
// table: what it does and when, without a store, a PID namespace or root. The
// process tests in cmd/guard run the real binary.

// scriptedStore answers each read by a script, from the fake time it was sent;
// hold keeps an answer back until the fake clock reaches a time.
type scriptedStore struct {
	clock  *clocktesting.FakeClock
	answer func(n int, sent time.Time) (lockclient.Confirmation, error)
	hold   func(n int, sent time.Time) time.Time

	mu    sync.Mutex
	reads int
}

func (s *scriptedStore) Confirm(ctx context.Context, _ string, _ [sha256.Size]byte) (lockclient.Confirmation, error) {
	s.mu.Lock()
	s.reads++
	n := s.reads
	s.mu.Unlock()
	sent := s.clock.Now()
	if s.hold != nil {
		until := s.hold(n, sent)
		for s.clock.Now().Before(until) {
			select {
			case <-ctx.Done():
				return lockclient.Confirmation{}, &lockclient.StoreError{Op: "confirm", Err: ctx.Err()}
			case <-time.After(time.Millisecond):
			}
		}
	}
	cf, err := s.answer(n, sent)
	cf.SentAt = sent
	return cf, err
}

// fakeWorkload is a process table with one workload process that ends on
// SIGTERM; it records when each signal came, by the fake clock.
type fakeWorkload struct {
	clock *clocktesting.FakeClock
	mu    sync.Mutex
	alive bool
	sigs  map[syscall.Signal]time.Time
}

func (w *fakeWorkload) workload() ([]int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.alive {
		return []int{42}, nil
	}
	return nil, nil
}

func (w *fakeWorkload) signal(_ int, sig syscall.Signal) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.sigs[sig]; !ok {
		w.sigs[sig] = w.clock.Now()
	}
	w.alive = false
	return nil
}

func (w *fakeWorkload) signalled(sig syscall.Signal) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.sigs[sig]
	return at, ok
}

// loopRun runs a guard on a fake clock, stepping it tick by tick while the
// guard waits, until the guard returns or the fake clock reaches limit.
type loopRun struct {
	t        *testing.T
	clock    *clocktesting.FakeClock
	store    *scriptedStore
	procs    *fakeWorkload
	settings Settings
	start    time.Time
}

func newLoopRun(t *testing.T, answer func(n int, sent time.Time) (lockclient.Confirmation, error)) *loopRun {
	start := time.Date(2026, 12, 1, 0, 5, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	return &loopRun{
		t: t, clock: clk, start: start,
		store: &scriptedStore{clock: clk, answer: answer},
		procs: &fakeWorkload{clock: clk, alive: true, sigs: map[syscall.Signal]time.Time{}},
		settings: Settings{Key: "payments:settle", Holder: "cluster-a/payments/settle-1-abcdef",
			Interval: time.Second, Grace: 2 * time.Second, Margin: time.Second, StateDir: t.TempDir()},
	}
}

const tick = 50 * time.Millisecond

func (l *loopRun) run(limit time.Duration) (Outcome, bool) {
	g := &guard{s: l.settings, store: l.store, procs: l.procs, clock: l.clock,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Outcome, 1)
	go func() { done <- g.run(ctx) }()
	for l.clock.Since(l.start) < limit {
		select {
		case o := <-done:
			return o, true
		case <-time.After(2 * time.Millisecond): // let the guard reach its next wait
		}
		l.clock.Step(tick)
	}
	cancel()
	<-done
	return Outcome{}, false
}

func held(ttl time.Duration) (lockclient.Confirmation, error) {
	return lockclient.Confirmation{Held: true, Holder: "cluster-a/payments/settle-1-abcdef", TTL: ttl}, nil
}

var errUnreachable = &lockclient.StoreError{Op: "confirm payments:settle", Err: errors.New("dial tcp: i/o timeout")}

func TestGuardLoopKeepsAHealthyLeasesWorkloadRunning(t *testing.T) {
	g := NewWithT(t)
	// Renewed every interval: each read sees close to a full ttl.
	l := newLoopRun(t, func(int, time.Time) (lockclient.Confirmation, error) { return held(10 * time.Second) })
	_, ended := l.run(30 * time.Second)
	g.Expect(ended).To(BeFalse(), "the guard never stops a workload whose lease keeps being renewed")
	_, termed := l.procs.signalled(syscall.SIGTERM)
	g.Expect(termed).To(BeFalse())
	g.Expect(filepath.Join(l.settings.StateDir, readyFile)).To(BeAnExistingFile(), "the startup gate opened")
	g.Expect(l.store.reads).To(BeNumerically(">=", 25), "one read per interval")
}

func TestGuardLoopStopsTheWorkloadBeforeTheLeaseCouldExpireWhenTheStoreIsUnreachable(t *testing.T) {
	g := NewWithT(t)
	l := newLoopRun(t, func(n int, _ time.Time) (lockclient.Confirmation, error) {
		if n == 1 {
			return held(10 * time.Second)
		}
		return lockclient.Confirmation{}, errUnreachable
	})
	o, ended := l.run(30 * time.Second)
	g.Expect(ended).To(BeTrue())
	g.Expect(o.Code).To(Equal(ExitDeadline))
	g.Expect(o.Message).To(ContainSubstring("store unreachable"))
	leaseEnd := l.start.Add(10 * time.Second)
	termAt, ok := l.procs.signalled(syscall.SIGTERM)
	g.Expect(ok).To(BeTrue())
	g.Expect(termAt).To(BeTemporally(">=", leaseEnd.Add(-l.settings.Margin-l.settings.Grace)), "not before the deadline")
	g.Expect(termAt).To(BeTemporally("<=", leaseEnd.Add(-l.settings.Margin-l.settings.Grace+2*tick)), "at the deadline")
	g.Expect(filepath.Join(l.settings.StateDir, stoppedFile)).To(BeAnExistingFile(), "a restarted guard repeats the stop")
}

func TestGuardLoopStopsTheWorkloadAtOnceWhenAnotherHolderHasTheKey(t *testing.T) {
	g := NewWithT(t)
	l := newLoopRun(t, func(n int, _ time.Time) (lockclient.Confirmation, error) {
		if n <= 3 {
			return held(10 * time.Second)
		}
		return lockclient.Confirmation{Holder: "cluster-b/payments/settle-2-fedcba"}, nil
	})
	o, ended := l.run(30 * time.Second)
	g.Expect(ended).To(BeTrue())
	g.Expect(o.Code).To(Equal(ExitLost))
	g.Expect(o.Message).To(ContainSubstring("held by cluster-b/payments/settle-2-fedcba"))
	termAt, _ := l.procs.signalled(syscall.SIGTERM)
	g.Expect(termAt).To(BeTemporally("<", l.start.Add(3*time.Second+2*tick)), "at the read that saw it")
}

// A read whose answer comes late counts from when it was sent: Redis counted
// the PTTL it reported from when it ran the read, before the answer arrived.
func TestGuardLoopCountsALateAnswerFromItsSendTime(t *testing.T) {
	g := NewWithT(t)
	l := newLoopRun(t, func(n int, _ time.Time) (lockclient.Confirmation, error) {
		if n == 1 {
			return held(10 * time.Second)
		}
		return lockclient.Confirmation{}, errUnreachable
	})
	// The first answer arrives 2.5 s after it was sent (within the read timeout
	// of a 3 s interval).
	l.settings.Interval = 3 * time.Second
	l.store.hold = func(n int, sent time.Time) time.Time {
		if n == 1 {
			return sent.Add(2500 * time.Millisecond)
		}
		return sent
	}
	o, ended := l.run(30 * time.Second)
	g.Expect(ended).To(BeTrue())
	g.Expect(o.Code).To(Equal(ExitDeadline))
	termAt, _ := l.procs.signalled(syscall.SIGTERM)
	deadline := l.start.Add(10*time.Second - l.settings.Margin - l.settings.Grace)
	g.Expect(termAt).To(BeTemporally("<=", deadline.Add(2*tick)),
		"stopped at the deadline counted from the send time, not 2.5 s later")
}

func TestGuardLoopNeverOpensTheStartupGateWithoutAConfirmation(t *testing.T) {
	g := NewWithT(t)
	l := newLoopRun(t, func(int, time.Time) (lockclient.Confirmation, error) {
		return lockclient.Confirmation{}, errUnreachable
	})
	_, ended := l.run(10 * time.Second)
	g.Expect(ended).To(BeFalse(), "a guard that starts with its Pod waits: its workload has not started")
	_, err := os.Stat(filepath.Join(l.settings.StateDir, readyFile))
	g.Expect(err).To(MatchError(os.ErrNotExist), "the workload never starts without a confirmation")
}
