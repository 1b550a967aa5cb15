package runcore_test

import (
	"testing"
	"time"

	"github.com/guardedjob/guardedjob/internal/runcore"
)

// TestAWorkingRunsPassStopsForItsGuardFirstAndOpensGatesBeforeTheTimeoutCounts:
// the tail of a recorded run's pass, once Running let its Job go on.
func TestAWorkingRunsPassStopsForItsGuardFirstAndOpensGatesBeforeTheTimeoutCounts(t *testing.T) {
	now := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	later, past := now.Add(time.Minute), now.Add(-time.Second)
	for name, c := range map[string]struct {
		v    runcore.WorkingView
		want runcore.WorkingAct
	}{
		"the Job works":                         {v: runcore.WorkingView{Started: true, PodStartDue: past}, want: runcore.KeepWorking},
		"the guard stopped the workload":        {v: runcore.WorkingView{GuardStopped: "lease lost", Started: true, Gated: true, PodsGated: true}, want: runcore.StopGuardStopped},
		"the Job waits at its gate":             {v: runcore.WorkingView{Gated: true, PodStartDue: past}, want: runcore.OpenStartGate},
		"a queue holds the Job":                 {v: runcore.WorkingView{Queued: true, PodStartDue: past}, want: runcore.HoldQueued},
		"the queue started gated Pods":          {v: runcore.WorkingView{PodsGated: true, PodStartDue: past}, want: runcore.OpenSchedulingGates},
		"no Pod started yet":                    {v: runcore.WorkingView{PodStartDue: later}, want: runcore.WaitPodStart},
		"no Pod started within podStartTimeout": {v: runcore.WorkingView{PodStartDue: past}, want: runcore.StopPodStartTimeout},
		"the timeout runs out now":              {v: runcore.WorkingView{PodStartDue: now}, want: runcore.StopPodStartTimeout},
	} {
		if got := runcore.Working(c.v, now); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}
