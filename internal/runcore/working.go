package runcore

import "time"

// WorkingView is what the pass of a recorded run decides from once Running let
// it go on (GoOn): its Job and the Job's Pods as the cache shows them.
type WorkingView struct {
	// GuardStopped is the pod guard's report that it stopped the workload of
	// one of the Job's Pods, or "".
	GuardStopped string
	// Gated: the Job waits at its start gate (jobbuild.Gated).
	Gated bool
	// Queued: a queue holds the Job suspended, or has resumed it and the Job
	// controller has not seen that yet: lock.podStartTimeout does not count.
	Queued bool
	// PodsGated: a Pod of the Job waits at the lease's scheduling gate.
	PodsGated bool
	// Started: a Pod of the Job started, or the Job has a result.
	Started bool
	// PodStartDue is when lock.podStartTimeout runs out: counted from the
	// Job's creation, or from when its queue last resumed it.
	PodStartDue time.Time
}

// WorkingAct is what the pass does with a run whose Job may work.
type WorkingAct int

const (
	// KeepWorking: the Job works; the lease stays held.
	KeepWorking WorkingAct = iota
	// StopGuardStopped stops the run as GuardStopped: its pod guard stopped
	// the workload (the lease it saw was lost or at its deadline).
	StopGuardStopped
	// OpenStartGate opens the Job's start gate (NewOpening, JobGate).
	OpenStartGate
	// HoldQueued holds the lease while a queue keeps the Job suspended.
	HoldQueued
	// OpenSchedulingGates lets the Pods a queue started be scheduled
	// (NewOpening, PodGates), and the pass looks again.
	OpenSchedulingGates
	// WaitPodStart looks again when lock.podStartTimeout runs out.
	WaitPodStart
	// StopPodStartTimeout stops the run as Failed: no Pod of its Job started
	// within lock.podStartTimeout, and it would hold the lock until maxHold.
	StopPodStartTimeout
)

// Working is the verdict for a run whose Job may work, at now. A guard that
// stopped the workload comes first: nothing else of the run may go on; then
// the gates, which open only after a confirmation of the lease; the pod-start
// timeout counts only while no queue holds the Job.
func Working(v WorkingView, now time.Time) WorkingAct {
	switch {
	case v.GuardStopped != "":
		return StopGuardStopped
	case v.Gated:
		return OpenStartGate
	case v.Queued:
		return HoldQueued
	case v.PodsGated:
		return OpenSchedulingGates
	case v.Started:
		return KeepWorking
	case now.Before(v.PodStartDue):
		return WaitPodStart
	}
	return StopPodStartTimeout
}
