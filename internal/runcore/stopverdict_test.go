package runcore_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// The stop controller's judgement of an active run's Job: which report or
// record stops it, and how much grace its Pods get. A stop at the self-fence
// deadline gives only what still fits before the lease could expire.
func TestTheStopControllerStopsWhatTheKeeperReportsOrStatusRecords(t *testing.T) {
	until := time.Date(2026, 12, 6, 3, 0, 20, 0, time.UTC)
	running := &batchv1alpha1.ActiveRun{JobName: "settle-1", Phase: batchv1alpha1.RunPhaseRunning}
	stopping := &batchv1alpha1.ActiveRun{JobName: "settle-1", Phase: batchv1alpha1.RunPhaseStopping, StopResult: batchv1alpha1.RunResultFailed}
	lostStop := &batchv1alpha1.ActiveRun{JobName: "settle-1", Phase: batchv1alpha1.RunPhaseStopping, StopResult: batchv1alpha1.RunResultLockLost}
	grace := 30 * time.Second
	for _, c := range []struct {
		name  string
		view  runcore.StopView
		grace time.Duration
		step  runcore.Step
	}{
		{"a lease the keeper lost: at once", runcore.StopView{Run: running, Tracked: true, Lost: true, PodGrace: grace}, time.Second, runcore.StopReported},
		{"a lease at its deadline: what fits before it could expire", runcore.StopView{Run: running, Tracked: true, DeadlineReached: true, ValidUntil: until, ValidFor: 12 * time.Second, PodGrace: grace},
			12*time.Second - leasetiming.StopMargin, runcore.StopReported},
		{"a run at lock.maxHold: the Pods' grace", runcore.StopView{Run: running, Tracked: true, MaxHoldReached: true, PodGrace: grace}, grace, runcore.StopReported},
		{"a run status marks Stopping: the Pods' grace", runcore.StopView{Run: stopping, Tracked: true, PodGrace: grace}, grace, runcore.StopStopping},
		{"a run stopping because its lease was lost: at once", runcore.StopView{Run: lostStop, PodGrace: grace}, time.Second, runcore.StopStopping},
		{"a GuardedJob whose deletion stops its runs", runcore.StopView{Run: running, DeleteStops: true, PodGrace: grace}, grace, runcore.StopStopping},
		{"a healthy run: nothing", runcore.StopView{Run: running, Tracked: true, PodGrace: grace}, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			gotGrace, step := runcore.StopVerdict(c.view)
			g.Expect(step).To(Equal(c.step))
			g.Expect(gotGrace).To(Equal(c.grace))
		})
	}
}

// TestAHandedOverRunIsStoppedOnlyAsItsOwnWouldBe: the shard a GuardedJob left
// stops a handed-over run's Job only for what would stop its own (the lease
// lost, its self-fence deadline, maxHold) or when no shard took it over in
// time; a finished Job has nothing left to stop then.
func TestAHandedOverRunIsStoppedOnlyAsItsOwnWouldBe(t *testing.T) {
	until := time.Date(2026, 12, 6, 3, 0, 20, 0, time.UTC)
	grace := 30 * time.Second
	for _, c := range []struct {
		name               string
		view               runcore.StopView
		timedOut, finished bool
		grace              time.Duration
		stop               bool
	}{
		{"not renewed here", runcore.StopView{PodGrace: grace}, true, false, 0, false},
		{"renewed, nothing reported", runcore.StopView{Tracked: true, PodGrace: grace}, false, false, 0, false},
		{"lost", runcore.StopView{Tracked: true, Lost: true, PodGrace: grace}, false, true, time.Second, true},
		{"at its deadline", runcore.StopView{Tracked: true, DeadlineReached: true, ValidUntil: until, ValidFor: 12 * time.Second, PodGrace: grace},
			false, false, leasetiming.DeadlineGrace(grace, until, until.Add(-12*time.Second)), true},
		{"maxHold", runcore.StopView{Tracked: true, MaxHoldReached: true, PodGrace: grace}, false, false, grace, true},
		{"no shard in time", runcore.StopView{Tracked: true, PodGrace: grace}, true, false, grace, true},
		{"no shard in time, the Job finished", runcore.StopView{Tracked: true, PodGrace: grace}, true, true, 0, false},
		{"maxHold, the Job finished", runcore.StopView{Tracked: true, MaxHoldReached: true, PodGrace: grace}, false, true, 0, false},
		{"lost, the Job finished", runcore.StopView{Tracked: true, Lost: true, PodGrace: grace}, true, true, time.Second, true},
		{"at its deadline, the Job finished", runcore.StopView{Tracked: true, DeadlineReached: true, ValidUntil: until, ValidFor: 12 * time.Second, PodGrace: grace},
			false, true, leasetiming.DeadlineGrace(grace, until, until.Add(-12*time.Second)), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			grace, stop := runcore.HandoverStop(c.view, c.timedOut, c.finished)
			g.Expect(stop).To(Equal(c.stop))
			g.Expect(grace).To(Equal(c.grace))
		})
	}
}

// TestALeaseIsConfirmedOnlyWithRoomToStopItsPods: a Job is created or its gate
// opened only on a renewal this process saw succeed that left more of the
// lease than stopping its Pods takes.
func TestALeaseIsConfirmedOnlyWithRoomToStopItsPods(t *testing.T) {
	g := NewWithT(t)
	grace := 10 * time.Second
	room := leasetiming.StopBudget(grace)
	g.Expect(runcore.LeaseConfirmed(true, true, room+time.Millisecond, grace)).To(BeTrue())
	g.Expect(runcore.LeaseConfirmed(true, true, room, grace)).To(BeFalse(), "no room past the stop budget")
	g.Expect(runcore.LeaseConfirmed(false, true, time.Hour, grace)).To(BeFalse(), "no renewal seen")
	g.Expect(runcore.LeaseConfirmed(true, false, time.Hour, grace)).To(BeFalse(), "not held")
}
