package runcore_test

import (
	"testing"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// TestTheDeletionOfAGuardedJobStopsOnlyWhatOnDeleteSays: a run waiting to
// acquire ends (it has no Job); a running run is stopped with onDelete Stop
// unless the delete orphans its Job; everything else runs to its own end.
func TestTheDeletionOfAGuardedJobStopsOnlyWhatOnDeleteSays(t *testing.T) {
	for _, c := range []struct {
		phase          batchv1alpha1.RunPhase
		stop, orphaned bool
		want           runcore.DeleteAct
		reads          bool
	}{
		{batchv1alpha1.RunPhaseAcquiring, true, false, runcore.DeleteEndsUnstarted, false},
		{batchv1alpha1.RunPhaseAcquiring, false, false, runcore.DeleteEndsUnstarted, false},
		{batchv1alpha1.RunPhaseRunning, true, false, runcore.DeleteStopsRun, true},
		{batchv1alpha1.RunPhaseRunning, true, true, runcore.DeleteLetsRunEnd, true},
		{batchv1alpha1.RunPhaseRunning, false, false, runcore.DeleteLetsRunEnd, false},
		{batchv1alpha1.RunPhaseStopping, true, false, runcore.DeleteLetsRunEnd, false},
		{batchv1alpha1.RunPhaseReleasing, true, false, runcore.DeleteLetsRunEnd, false},
	} {
		if got := runcore.OnDelete(c.phase, c.stop, c.orphaned); got != c.want {
			t.Errorf("phase %s, stop %v, orphaned %v: act %d, want %d", c.phase, c.stop, c.orphaned, got, c.want)
		}
		if got := runcore.ReadsJobOnDelete(c.phase, c.stop); got != c.reads {
			t.Errorf("phase %s, stop %v: reads its Job %v, want %v", c.phase, c.stop, got, c.reads)
		}
	}
}

// TestARunWhoseStoreCannotBeResolvedIsLeftToExpireOnceNothingOfItWorks: step
// stop_unresolved. A run that never started ends at once; a running one is
// stopped; a stopping one ends only when its Pods are gone, its lease left to
// expire (it can be neither renewed nor released).
func TestARunWhoseStoreCannotBeResolvedIsLeftToExpireOnceNothingOfItWorks(t *testing.T) {
	for _, c := range []struct {
		phase  batchv1alpha1.RunPhase
		counts bool
		pods   int
		want   runcore.UnresolvedAct
	}{
		{batchv1alpha1.RunPhaseAcquiring, false, 0, runcore.UnresolvedEnd},
		{batchv1alpha1.RunPhaseRunning, false, 0, runcore.UnresolvedStop},
		{batchv1alpha1.RunPhaseStopping, true, 2, runcore.UnresolvedWaitPods},
		{batchv1alpha1.RunPhaseStopping, true, 0, runcore.UnresolvedEndAfterPods},
		{batchv1alpha1.RunPhaseReleasing, true, 1, runcore.UnresolvedWaitPods},
		{batchv1alpha1.RunPhaseReleasing, true, 0, runcore.UnresolvedEndAfterPods},
	} {
		if got := runcore.UnresolvedCountsPods(c.phase); got != c.counts {
			t.Errorf("phase %s: counts Pods %v, want %v", c.phase, got, c.counts)
		}
		if got := runcore.Unresolved(c.phase, c.pods); got != c.want {
			t.Errorf("phase %s, %d Pods left: act %d, want %d", c.phase, c.pods, got, c.want)
		}
	}
}

// TestAForeignRunIsStoppedHereAndItsLeaseLeftAlone: a run this manager does
// not own ends at once when it has no Job, is stopped when it runs, and goes
// on through its stop or release (which leave its lease alone) otherwise.
func TestAForeignRunIsStoppedHereAndItsLeaseLeftAlone(t *testing.T) {
	for phase, want := range map[batchv1alpha1.RunPhase]runcore.ForeignAct{
		batchv1alpha1.RunPhaseAcquiring: runcore.ForeignEnd,
		batchv1alpha1.RunPhaseRunning:   runcore.ForeignStop,
		batchv1alpha1.RunPhaseStopping:  runcore.ForeignGoesOn,
		batchv1alpha1.RunPhaseReleasing: runcore.ForeignGoesOn,
	} {
		if got := runcore.Foreign(phase); got != want {
			t.Errorf("phase %s: act %d, want %d", phase, got, want)
		}
	}
}
