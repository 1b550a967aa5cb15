package runcore

import batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"

// What becomes of a run when what it depends on goes: its GuardedJob is
// deleted (OnDelete), or its store can no longer be resolved (Unresolved).

// DeleteAct is what the deletion of its GuardedJob does to an active run. The
// object's finalizer goes only once no run is left, so every lease is released
// (or left to expire) by its own run's end, never dropped with the object.
type DeleteAct int

const (
	// DeleteLetsRunEnd: the run goes on to its own end (onDelete Wait, a
	// delete that orphans the Jobs, a run already stopping or releasing).
	DeleteLetsRunEnd DeleteAct = iota
	// DeleteEndsUnstarted: a run waiting to acquire has no Job; it ends
	// Skipped, and releases the lease if its acquisition went through.
	DeleteEndsUnstarted
	// DeleteStopsRun: onDelete Stop stops a running run (its Job and Pods).
	DeleteStopsRun
)

// OnDelete is the act of a GuardedJob's deletion on its run in phase. stop:
// onDelete Stop, and the delete does not orphan the dependents; orphaned: the
// run's Job no longer has the GuardedJob for its controller (a delete with
// --cascade=orphan asked to keep it), which counts only for a running run.
func OnDelete(phase batchv1alpha1.RunPhase, stop, orphaned bool) DeleteAct {
	switch {
	case phase == batchv1alpha1.RunPhaseAcquiring:
		return DeleteEndsUnstarted
	case phase == batchv1alpha1.RunPhaseRunning && stop && !orphaned:
		return DeleteStopsRun
	}
	return DeleteLetsRunEnd
}

// ReadsJobOnDelete says whether the deletion's act on a run in phase depends on
// its Job (whether the delete orphaned it): only a running run's, and only
// when onDelete would stop it.
func ReadsJobOnDelete(phase batchv1alpha1.RunPhase, stop bool) bool {
	return phase == batchv1alpha1.RunPhaseRunning && stop
}

// UnresolvedAct is step stop_unresolved's act on a run whose store cannot be
// resolved (its Secret changed or is gone since the run started): its lease
// can be neither renewed nor released, so it is left to expire once nothing of
// the run works.
type UnresolvedAct int

const (
	// UnresolvedEnd: a run waiting to acquire has no Job; it ends, its lease
	// (if its acquisition went through) left to expire.
	UnresolvedEnd UnresolvedAct = iota + 1
	// UnresolvedStop: a running run is stopped (its Pods deleted).
	UnresolvedStop
	// UnresolvedWaitPods: a stopping or releasing run waits until no Pod of
	// it is left.
	UnresolvedWaitPods
	// UnresolvedEndAfterPods: no Pod of the run is left; its Job loses the
	// lease finalizer, the keeper stops renewing, and the run ends with its
	// lease left to expire.
	UnresolvedEndAfterPods
)

// UnresolvedCountsPods says whether step stop_unresolved needs the number of
// the run's Pods left for a run in phase: only once it is stopping or
// releasing.
func UnresolvedCountsPods(phase batchv1alpha1.RunPhase) bool {
	return phase != batchv1alpha1.RunPhaseAcquiring && phase != batchv1alpha1.RunPhaseRunning
}

// Unresolved is step stop_unresolved's act on a run in phase whose store cannot
// be resolved; podsLeft is read when UnresolvedCountsPods says so.
func Unresolved(phase batchv1alpha1.RunPhase, podsLeft int) UnresolvedAct {
	switch {
	case phase == batchv1alpha1.RunPhaseAcquiring:
		return UnresolvedEnd
	case phase == batchv1alpha1.RunPhaseRunning:
		return UnresolvedStop
	case podsLeft > 0:
		return UnresolvedWaitPods
	}
	return UnresolvedEndAfterPods
}

// ForeignAct is what becomes of a run that status records but this manager
// does not own (OwnsRun: restored from a backup, or recorded under another
// cluster name or for another object UID). Its lease is never renewed,
// released or completed here, since that cluster may still be alive; its Pods
// here are stopped, never silently dropped.
type ForeignAct int

const (
	// ForeignEnd: a run waiting to acquire has no Job here; it ends Failed.
	ForeignEnd ForeignAct = iota + 1
	// ForeignStop: a running run is stopped (its Pods deleted), then goes
	// on as a stopping run.
	ForeignStop
	// ForeignGoesOn: a stopping or releasing run goes on through its phase,
	// which leaves a foreign lease alone.
	ForeignGoesOn
)

// Foreign is the act on a foreign run in phase.
func Foreign(phase batchv1alpha1.RunPhase) ForeignAct {
	switch phase {
	case batchv1alpha1.RunPhaseAcquiring:
		return ForeignEnd
	case batchv1alpha1.RunPhaseRunning:
		return ForeignStop
	}
	return ForeignGoesOn
}
