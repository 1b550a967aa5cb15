// Package leadership says whether this manager is known to lead, and lets no side
// effect through while it is not.
//
// client-go's leader election leaves a deposed leader's controllers running for
// up to its renew deadline, and a process that was paused (a VM freeze, a cgroup
// freezer, a long GC pause, SIGSTOP) wakes up with a cache from before the pause,
// believing it leads while another replica may have taken over long ago. Every
// side effect of the manager (store writes other than renewing its own leases,
// Job creates, patches and deletes, status writes, events, the stop controller's
// deletes) asks one Guard first. The Guard says the manager leads only while
// both hold:
//
//   - a write to the leader-election lease, sent no longer than the renew
//     deadline ago, succeeded (a new leader takes over no earlier than the lease
//     duration after the last renewal it saw, and the lease duration is longer
//     than the renew deadline);
//   - no pause of this process has been seen since that write was sent (a pause
//     is seen when a timer fires much later than planned, by the wall clock or by
//     the monotonic clock, here or in the lease keeper).
//
// A manager without leader election always leads: it is the only one.
package leadership

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// ErrNotLeading is the error of every side effect the Guard refuses.
var ErrNotLeading = errors.New("this manager is not known to lead")

// PauseThreshold is how much later than planned a timer must fire to take it for
// a pause of the process.
const PauseThreshold = time.Second

// watchdogTick is how often the Guard's own watchdog looks at the clocks.
const watchdogTick = 100 * time.Millisecond

// Guard knows whether this manager leads. A nil Guard always leads.
type Guard struct {
	clock         clock.WithTicker
	renewDeadline time.Duration

	mu sync.Mutex
	// renewedAt is the send time of the latest leader-lease write that
	// succeeded; zero before the first.
	renewedAt time.Time
	// pausedAt is when the latest pause was seen, at its end.
	pausedAt time.Time
	// onPause are told of every pause the Guard sees, at once.
	onPause []func(at time.Time)
}

// New returns the Guard of a manager that runs leader election with the given
// renew deadline. It leads once a write to its leader-election lease succeeds
// (Lock wraps the lease to see them).
func New(clk clock.WithTicker, renewDeadline time.Duration) *Guard {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Guard{clock: clk, renewDeadline: renewDeadline}
}

// Err returns nil while this manager is known to lead, and an error wrapping
// ErrNotLeading that says why otherwise.
func (g *Guard) Err() error {
	if g == nil {
		return nil
	}
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.renewedAt.IsZero():
		return fmt.Errorf("%w: it has not renewed its leader-election lease yet", ErrNotLeading)
	case !g.pausedAt.Before(g.renewedAt):
		return fmt.Errorf("%w: it was paused (seen at %s) and has not renewed its leader-election lease since",
			ErrNotLeading, g.pausedAt.UTC().Format(time.RFC3339Nano))
	case now.Sub(g.renewedAt) > g.renewDeadline:
		return fmt.Errorf("%w: its last leader-election lease renewal was sent %s ago, more than the renew deadline %s",
			ErrNotLeading, now.Sub(g.renewedAt).Round(time.Millisecond), g.renewDeadline)
	}
	return nil
}

// Leading says whether Err is nil.
func (g *Guard) Leading() bool { return g.Err() == nil }

// Renewed records a leader-lease write, sent at sentAt, that succeeded.
func (g *Guard) Renewed(sentAt time.Time) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if sentAt.After(g.renewedAt) {
		g.renewedAt = sentAt
	}
}

// Paused records a pause of this process seen at at (its end): nothing is let
// through until a leader-lease write sent after it succeeds.
func (g *Guard) Paused(at time.Time) {
	if g == nil {
		return
	}
	g.mu.Lock()
	if at.After(g.pausedAt) {
		g.pausedAt = at
	}
	hooks := g.onPause
	g.mu.Unlock()
	for _, f := range hooks {
		f(at)
	}
}

// OnPause adds a function told at once of every pause the Guard sees (the lease
// keeper renews first and stops taking keys back then, even when it had no
// timer of its own running during the pause). f must not call Paused.
func (g *Guard) OnPause(f func(at time.Time)) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.onPause = append(g.onPause[:len(g.onPause):len(g.onPause)], f)
}

// Run watches the clocks until ctx ends: a tick that comes much later than
// planned, by the monotonic or the wall clock, is a pause.
func (g *Guard) Run(ctx context.Context) error {
	if g == nil {
		return nil
	}
	t := g.clock.NewTicker(watchdogTick)
	defer t.Stop()
	last := g.clock.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		now := g.clock.Now()
		if late(last, now) {
			g.Paused(now)
		}
		last = now
	}
}

// late says whether a watchdog tick planned one tick after last and seen at now
// came more than PauseThreshold late, by either clock: a VM freeze may stop the
// monotonic clock while the wall clock jumps.
func late(last, now time.Time) bool {
	mono := now.Sub(last)
	wall := now.Round(0).Sub(last.Round(0))
	return mono > watchdogTick+PauseThreshold || wall > watchdogTick+PauseThreshold
}

// Lock wraps a leader-election lock so that the Guard sees every write to it
// that succeeds, with the time it was sent.
func (g *Guard) Lock(inner resourcelock.Interface) resourcelock.Interface {
	return &lock{Interface: inner, g: g}
}

type lock struct {
	resourcelock.Interface
	g *Guard
}

func (l *lock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := l.g.clock.Now()
	if err := l.Interface.Create(ctx, ler); err != nil {
		return err
	}
	if ler.HolderIdentity == l.Identity() {
		l.g.Renewed(sent)
	}
	return nil
}

func (l *lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := l.g.clock.Now()
	if err := l.Interface.Update(ctx, ler); err != nil {
		return err
	}
	if ler.HolderIdentity == l.Identity() {
		l.g.Renewed(sent)
	}
	return nil
}
