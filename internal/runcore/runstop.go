package runcore

import (
	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// SetStop records how a run ends: the result it ends with, and why.
func SetStop(run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult, msg string) {
	run.StopResult = result
	run.StopReason = string(result) + ": " + msg
}

// JobEnd is what a pass found of a run's Job that finished: it completed, or
// it failed (Failure says how); GuardStopped says why a pod guard ended the
// workload, "" when none did.
type JobEnd struct {
	Completed    bool
	Failure      string
	GuardStopped string
}

// AsksGuard says whether the pass reads what the run's pod guard reported
// before the run ends: a Job may have failed because a guard ended its
// workload; a completed one ended on its own.
func (e JobEnd) AsksGuard() bool { return !e.Completed }

// EndFinished ends a run whose Job finished (step release): it goes to
// Releasing with the Job's result, or the pod guard's when a guard ended the
// workload.
func EndFinished(run *batchv1alpha1.ActiveRun, e JobEnd) {
	run.Phase = batchv1alpha1.RunPhaseReleasing
	switch {
	case e.Completed:
		SetStop(run, batchv1alpha1.RunResultSucceeded, "the Job completed")
	case e.GuardStopped != "":
		SetStop(run, batchv1alpha1.RunResultGuardStopped, e.GuardStopped)
		run.StopCause = string(batchv1alpha1.FailureJobFailed)
	default:
		SetStop(run, batchv1alpha1.RunResultFailed, "the Job failed: "+e.Failure)
		run.StopCause = string(batchv1alpha1.FailureJobFailed)
	}
}

// RejectJob ends a run whose Job the API server rejected (invalid or
// forbidden): it never had a Job, and goes to Releasing as Failed, a failure
// of kind JobRejected.
func RejectJob(run *batchv1alpha1.ActiveRun, msg string) {
	run.Phase = batchv1alpha1.RunPhaseReleasing
	SetStop(run, batchv1alpha1.RunResultFailed, msg)
	run.StopCause = string(batchv1alpha1.FailureJobRejected)
}
