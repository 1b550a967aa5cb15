package runcore

import (
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
)

// KeepTerms are the terms on which the keeper renews a run's lease, from the
// run as status (or the Job taken up) records it. A lease resumed from status
// is never assumed younger than it provably is: its evidence is the recorded
// acquisition time (taken before the acquisition was sent, stored rounded
// down) less the clock-skew allowance, since another replica's clock may have
// written it. A FailOpen run started without a lease has no evidence at all.
type KeepTerms struct {
	// SelfFence: the run's Pods are stopped before its lease could expire
	// unrenewed (its self-fence deadline); FailOpen runs keep working.
	SelfFence bool
	// ReacquireIfAbsent: a FailOpen run's renewal writes an absent key back.
	ReacquireIfAbsent bool
	// StopBudget is what stopping the run's Pods takes: their grace and a
	// margin.
	StopBudget time.Duration
	// LastRenewed is the evidence a resumed lease starts from; zero when
	// this process sent the acquisition (its send time is the evidence).
	LastRenewed time.Time
	// MaxHoldUntil, when set, is when the run must end (spec maxHold), and
	// MaxPodLife how long its Pods may live at most.
	MaxHoldUntil time.Time
	MaxPodLife   time.Duration
}

// KeepTermsOf are the keeper's terms for run, whose Pods have podGrace to
// stop. resumed: this process did not send the run's acquisition (a restart,
// a new leader, a shard taking over, an adoption), so the evidence comes from
// status; skew is the clock-skew allowance between replicas.
func KeepTermsOf(run *batchv1alpha1.ActiveRun, podGrace time.Duration, resumed bool, skew time.Duration) KeepTerms {
	t := KeepTerms{
		SelfFence:         run.StoreFailurePolicy != batchv1alpha1.FailOpen,
		ReacquireIfAbsent: run.StoreFailurePolicy == batchv1alpha1.FailOpen,
		StopBudget:        leasetiming.StopBudget(podGrace),
	}
	if resumed && run.AcquiredAt != nil && !run.Unguarded {
		t.LastRenewed = leasetiming.ResumedEvidence(run.AcquiredAt.Time, skew)
	}
	if run.AcquiredAt != nil && run.MaxHold.Duration > 0 {
		t.MaxHoldUntil = run.AcquiredAt.Add(run.MaxHold.Duration)
		t.MaxPodLife = run.MaxHold.Duration + podGrace + leasetiming.StopMargin
	}
	return t
}
