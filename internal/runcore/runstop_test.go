package runcore_test

import (
	"testing"

	. "github.com/onsi/gomega"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// TestARunWhoseJobFinishedEndsWithTheJobsResultOrTheGuards: a completed Job's
// run succeeds without asking the pod guard; a failed one asks, and ends as
// GuardStopped when a guard ended the workload, else Failed with the Job's
// failure; a rejected Job's run fails as JobRejected. Each goes to Releasing.
func TestARunWhoseJobFinishedEndsWithTheJobsResultOrTheGuards(t *testing.T) {
	for _, c := range []struct {
		name      string
		end       runcore.JobEnd
		asksGuard bool
		result    batchv1alpha1.RunResult
		reason    string
		cause     string
	}{
		{name: "completed", end: runcore.JobEnd{Completed: true, GuardStopped: "ignored"}, result: batchv1alpha1.RunResultSucceeded,
			reason: "Succeeded: the Job completed"},
		{name: "failed", end: runcore.JobEnd{Failure: "BackoffLimitExceeded"}, asksGuard: true, result: batchv1alpha1.RunResultFailed,
			reason: "Failed: the Job failed: BackoffLimitExceeded", cause: string(batchv1alpha1.FailureJobFailed)},
		{name: "failed as a guard ended it", end: runcore.JobEnd{Failure: "BackoffLimitExceeded", GuardStopped: "the lease was lost"}, asksGuard: true,
			result: batchv1alpha1.RunResultGuardStopped, reason: "GuardStopped: the lease was lost", cause: string(batchv1alpha1.FailureJobFailed)},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(c.end.AsksGuard()).To(Equal(c.asksGuard))
			run := &batchv1alpha1.ActiveRun{Phase: batchv1alpha1.RunPhaseRunning}
			runcore.EndFinished(run, c.end)
			g.Expect(run.Phase).To(Equal(batchv1alpha1.RunPhaseReleasing))
			g.Expect([]string{string(run.StopResult), run.StopReason, run.StopCause}).To(Equal([]string{string(c.result), c.reason, c.cause}))
		})
	}
	g := NewWithT(t)
	run := &batchv1alpha1.ActiveRun{Phase: batchv1alpha1.RunPhaseRunning}
	runcore.RejectJob(run, "the API server rejected the Job: forbidden")
	g.Expect(run.Phase).To(Equal(batchv1alpha1.RunPhaseReleasing))
	g.Expect([]string{string(run.StopResult), run.StopReason, run.StopCause}).To(Equal([]string{string(batchv1alpha1.RunResultFailed),
		"Failed: the API server rejected the Job: forbidden", string(batchv1alpha1.FailureJobRejected)}))
}
