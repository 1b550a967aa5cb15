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
	if v.Tracked {
		switch {
		case v.Lost:
			return time.Second, StopReported
		case v.DeadlineReached:
			// Counted on the keeper's clock, the one that measured the lease.
			return leasetiming.DeadlineGrace(v.PodGrace, v.ValidUntil, v.ValidUntil.Add(-v.ValidFor)), StopReported
		case v.MaxHoldReached:
			return v.PodGrace, StopReported
		}
	}
	if v.Run.Phase == batchv1alpha1.RunPhaseStopping || v.DeleteStops {
		if result, _ := StopOf(v.Run); result == batchv1alpha1.RunResultLockLost {
			return time.Second, StopStopping
		}
		return v.PodGrace, StopStopping
	}
	return 0, ""
}
