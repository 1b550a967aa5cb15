package runcore_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/runcore"
)

// TestALeftJobLosesItsFinalizerOnlyOnceNothingWorksAndStatusHoldsIt: a Job no
// run claims keeps its lease finalizer while its Pods may work or while status
// does not yet hold its fence and occurrence, and counts as an active run
// while its Pods may work.
func TestALeftJobLosesItsFinalizerOnlyOnceNothingWorksAndStatusHoldsIt(t *testing.T) {
	for _, c := range []struct {
		name      string
		job       runcore.LeftJob
		podsLeft  int
		countPods bool
		want      runcore.LeftAct
		working   bool
	}{
		{"finished, status holds it", runcore.LeftJob{Finished: true, CaughtUp: true}, 0, false, runcore.LeftDropFinalizer, false},
		{"finished, status not back", runcore.LeftJob{Finished: true}, 0, false, runcore.LeftWaitStatus, false},
		{"finished and being deleted", runcore.LeftJob{Finished: true, Deleting: true, CaughtUp: true}, 0, false, runcore.LeftDropFinalizer, false},
		{"running", runcore.LeftJob{CaughtUp: true}, 0, false, runcore.LeftStop, true},
		{"running, status not back", runcore.LeftJob{}, 0, false, runcore.LeftStop, true},
		{"being deleted, a Pod left", runcore.LeftJob{Deleting: true, CaughtUp: true}, 1, true, runcore.LeftGoing, true},
		{"being deleted, no Pod left", runcore.LeftJob{Deleting: true, CaughtUp: true}, 0, true, runcore.LeftDropFinalizer, false},
		{"being deleted, no Pod left, status not back", runcore.LeftJob{Deleting: true}, 0, true, runcore.LeftGoneWaitStatus, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(c.job.CountsPods()).To(Equal(c.countPods))
			act := c.job.Act(c.podsLeft)
			g.Expect(act).To(Equal(c.want))
			g.Expect(act.Working()).To(Equal(c.working))
		})
	}
}
