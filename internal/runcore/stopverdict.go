package runcore

import (
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
)

// StopView is what the stop controller judges a run's Job by: what the keeper
// reports of the run's lease, the run as status records it, and whether the
// GuardedJob's deletion stops its runs.
type StopView struct {
	Run *batchv1alpha1.ActiveRun
	// Tracked: the keeper renews the lease; Lost, DeadlineReached and
	// MaxHoldReached are its reports. ValidUntil and ValidFor are the lease's
	// end and what was left of it, on the keeper's clock.
	Tracked, Lost, DeadlineReached, MaxHoldReached bool
	ValidUntil                                     time.Time
	ValidFor                                       time.Duration
	// PodGrace is the Pods' grace period (spec.podGracePeriodSeconds).
	PodGrace time.Duration
	// DeleteStops: the GuardedJob is being deleted and its deletion stops
	// its runs (onDelete Stop, not an orphaning delete).
	DeleteStops bool
}

// StopVerdict is steps stop_reported and stop_stopping: whether the run's Job
// and Pods are deleted now, and with which grace. A lost lease stops at once
// (another holder may be running already); one at its self-fence deadline
// with what still fits before it could expire; maxHold, a stop status records
// or a deleting GuardedJob with the Pods' grace (a lost lease's stop with 1s).
// A zero step: nothing to stop.
func StopVerdict(v StopView) (time.Duration, Step) {
	if grace, stop := reported(v, false); stop {
		return grace, StopReported
	}
	if v.Run.Phase == batchv1alpha1.RunPhaseStopping || v.DeleteStops {
		if result, _ := StopOf(v.Run); result == batchv1alpha1.RunResultLockLost {
			return time.Second, StopStopping
		}
		return v.PodGrace, StopStopping
	}
	return 0, ""
}

// reported is step stop_reported: the keeper's report of the lease stops the
// run's Job now, with its grace. timedOut: maxHold's stop also comes when no
// shard took a handed-over run in time.
func reported(v StopView, timedOut bool) (time.Duration, bool) {
	if !v.Tracked {
		return 0, false
	}
	switch {
	case v.Lost:
		return time.Second, true
	case v.DeadlineReached:
		// Counted on the keeper's clock, the one that measured the lease.
		return leasetiming.DeadlineGrace(v.PodGrace, v.ValidUntil, v.ValidUntil.Add(-v.ValidFor)), true
	case v.MaxHoldReached || timedOut:
		return v.PodGrace, true
	}
	return 0, false
}

// HandoverStop is step stop_reported for the Job of a run its shard hands over
// (status names another shard, which may not have taken it yet): the old shard
// renews its lease until then, and stops its Job only as it would its own (the
// lease lost, its self-fence deadline, maxHold), or once no shard took it over
// within the hand-over timeout (timedOut). A finished Job has no Pod left to
// stop: its run waits for the new shard. v.Run is not read.
func HandoverStop(v StopView, timedOut, finished bool) (time.Duration, bool) {
	grace, stop := reported(v, timedOut)
	if stop && finished && !v.Lost && !v.DeadlineReached {
		return 0, false
	}
	return grace, stop
}

// LeaseConfirmed says whether the keeper's last renewal confirmed a run's
// lease with room left to stop its Pods before it could expire: a renewal
// this process saw succeed (confirmed), the lease still held, and more of it
// left (validFor) than stopping Pods of podGrace takes. Only then may the
// run's Job be created or its gate opened on it.
func LeaseConfirmed(confirmed, held bool, validFor, podGrace time.Duration) bool {
	return confirmed && held && validFor > leasetiming.StopBudget(podGrace)
}
