package runcore

import (
	"strings"
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// Step release, then finish, of one run whose Job ended or whose stop is done,
// as a machine: Next says the one effect the protocol needs now, the adapter
// performs it and delivers the answer, until Next says EndRun. The adapter's
// loop is:
//
//	m := runcore.NewRelease(run, owns)
//	for {
//		switch m.Next() {
//		case runcore.Quiesce: ... m.Deliver(ReleaseOutcome{HeldNow: ...})
//		case runcore.ReadGuardedJob: ... m.Deliver(ReleaseOutcome{Job: ...})
//		case runcore.CompleteLease, runcore.ReleaseLease: ... m.Deliver(ReleaseOutcome{Released: ...})
//		case runcore.WaitForStore: return // the run stays Releasing
//		case runcore.EndRun: record m.Ended(now, skew); return
//		}
//	}
//
// An error of an effect (the API server, a store error that is not an outage)
// ends the pass instead: the next pass starts the machine again, and every
// effect is safe to repeat (a release or completion compares the token).

// ReleaseEffect is what the release of a run needs next.
type ReleaseEffect int

const (
	// Quiesce waits out a renewal in flight and reports whether the keeper
	// holds the key for the run now: a FailOpen renewal could otherwise take
	// the key back right after it is deleted, and an unguarded run holds a
	// lease only if the keeper took the key for it since.
	Quiesce ReleaseEffect = iota + 1
	// ReadGuardedJob reads the Job of a run with a pod guard from the API
	// server: unless it completed with no Pod failed, a Pod of it may still run
	// where the API server no longer shows it (LeaveToExpire).
	ReadGuardedJob
	// CompleteLease writes the occurrence's done-marker and deletes the key,
	// both only while the key holds the run's token.
	CompleteLease
	// ReleaseLease deletes the key only while it holds the run's token.
	ReleaseLease
	// WaitForStore: the store did not answer; the run stays Releasing and a
	// later pass tries again.
	WaitForStore
	// EndRun drops the Job's lease finalizer, stops renewing the lease and
	// records the run's end (Ended) in one status write.
	EndRun
)

// Step is the model's step an effect takes.
func (e ReleaseEffect) Step() Step {
	switch e {
	case CompleteLease, ReleaseLease:
		return Release
	case EndRun:
		return Finish
	}
	return ""
}

// ReleaseOutcome is the answer to the effect Next returned.
type ReleaseOutcome struct {
	// HeldNow answers Quiesce: the keeper holds the key for the run, with a
	// confirmed renewal.
	HeldNow bool
	// Job answers ReadGuardedJob.
	Job RunJobView
	// Released, NotHeld, Holder and StoreDown answer CompleteLease and
	// ReleaseLease: the key was deleted; or it held another token (Holder,
	// empty when the key is gone) and was left alone; or the store did not
	// answer.
	Released  bool
	NotHeld   bool
	Holder    string
	StoreDown bool
}

// Releasing is the release of one run, from its stop to its end.
type Releasing struct {
	run    *batchv1alpha1.ActiveRun
	owns   bool
	result batchv1alpha1.RunResult
	msg    string

	next     ReleaseEffect
	heldNow  bool
	leave    bool
	released bool
	notHeld  bool
	holder   string
}

// NewRelease starts the release of a run; owns says the run was recorded by
// this cluster (a run minted under another cluster name is never released or
// completed here).
func NewRelease(run *batchv1alpha1.ActiveRun, owns bool) *Releasing {
	result, msg := StopOf(run)
	return &Releasing{run: run, owns: owns, result: result, msg: msg, next: Quiesce}
}

// StopOf is the result and message a stopping or releasing run ends with.
func StopOf(run *batchv1alpha1.ActiveRun) (batchv1alpha1.RunResult, string) {
	text, msg, _ := strings.Cut(run.StopReason, ": ")
	if run.StopResult != "" {
		return run.StopResult, msg
	}
	return batchv1alpha1.RunResult(text), msg
}

// Next is the effect the release needs now.
func (m *Releasing) Next() ReleaseEffect { return m.next }

// Deliver takes the answer to the effect Next returned.
func (m *Releasing) Deliver(o ReleaseOutcome) {
	switch m.next {
	case Quiesce:
		m.heldNow = o.HeldNow
		if m.run.PodGuard != nil {
			m.next = ReadGuardedJob
			return
		}
		m.decide(RunJobView{})
	case ReadGuardedJob:
		m.decide(o.Job)
	case CompleteLease, ReleaseLease:
		switch {
		case o.StoreDown:
			m.next = WaitForStore
			return
		case o.NotHeld:
			m.notHeld, m.holder = true, o.Holder
		default:
			m.released = o.Released
		}
		m.next = EndRun
	}
}

// decide is step release's choice of the store call, once it knows whether
// the run's lease must be left to expire.
func (m *Releasing) decide(job RunJobView) {
	m.leave = LeaveToExpire(m.run, job)
	m.next = EndRun
	switch {
	case !m.owns:
	case m.leave:
	case m.run.Unguarded && !m.heldNow:
	case m.result == batchv1alpha1.RunResultSucceeded:
		m.next = CompleteLease
	default:
		m.next = ReleaseLease
	}
}

// RunEnd is what the end of a released run records.
type RunEnd struct {
	Result  batchv1alpha1.RunResult
	Message string
	// Lease is what became of the run's lease, for the ledger.
	Lease LeaseEnd
	// Released: the key was deleted (LockReleased, and the lock is free).
	Released bool
	// OccurrenceDone: the done-marker was written (OccurrenceDone).
	OccurrenceDone bool
	// MarkerLostTo is the holder of the key a succeeded run found taken: its
	// done-marker was not written.
	MarkerLostTo string
}

// Ended is the end to record once Next says EndRun.
func (m *Releasing) Ended(now time.Time, clockSkew time.Duration) RunEnd {
	end := RunEnd{Result: m.result, Message: m.msg, Released: m.released, Lease: Released}
	if m.owns && m.leave {
		note := "lease " + m.run.Key + " left to expire (within its ttl " + m.run.TTL.Duration.String() +
			"): a Pod of this run may still run where the API server does not show it, and its pod guard stops it first"
		if m.result == batchv1alpha1.RunResultSucceeded {
			note += "; the done-marker was not written"
		}
		if end.Message == "" {
			end.Message = note
		} else {
			end.Message += "; " + note
		}
	}
	neverHeld := !m.owns || m.run.Unguarded && !m.heldNow
	switch {
	case neverHeld:
		end.Lease = NeverHeld // not this manager's token, or it never took the key
	case m.leave:
		end.Lease = LeftToExpire(m.run, now, clockSkew)
	}
	if m.result == batchv1alpha1.RunResultSucceeded {
		end.OccurrenceDone = !m.notHeld && !m.leave && !neverHeld
		if m.notHeld {
			end.MarkerLostTo = m.holder
		}
	}
	return end
}
