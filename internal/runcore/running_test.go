package runcore_test

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// TestARecordedRunsPassFollowsItsJobAndItsLease: the pass of a run that
// status records, without an API server or a store: which step it takes for
// what its Job and its lease say.
func TestARecordedRunsPassFollowsItsJobAndItsLease(t *testing.T) {
	recorded := &batchv1alpha1.ActiveRun{JobName: "settle-1", JobUID: "uid-1"}
	unrecordedUID := &batchv1alpha1.ActiveRun{JobName: "settle-1"}
	cachedMiss := runcore.RunJobView{Read: runcore.ReadCached}
	liveMiss := runcore.RunJobView{Read: runcore.ReadLive}
	theJob := runcore.RunJobView{Read: runcore.ReadCached, Exists: true, UID: "uid-1"}
	with := func(j runcore.RunJobView, mod func(*runcore.RunJobView)) runcore.RunJobView {
		mod(&j)
		return j
	}
	held := runcore.LeaseView{Tracked: true, Confirmed: true}
	for _, c := range []struct {
		name string
		view runcore.RunningView
		want runcore.Verdict
	}{
		// A cached "not found" is never acted on: the Job may be newer than
		// the cache, and a run skipped, stopped or released on it could leave
		// a Pod working without its lease.
		{"a recorded Job the cache does not show is read live", runcore.RunningView{Run: recorded, Job: cachedMiss, Lease: held},
			runcore.Verdict{Act: runcore.ReadJobLive}},
		{"a Job whose UID is not recorded yet, which the cache does not show, is read live before the run is skipped", runcore.RunningView{Run: unrecordedUID, Job: cachedMiss, Lease: held, PastStartDeadline: true},
			runcore.Verdict{Act: runcore.ReadJobLive}},
		{"a recorded Job the API server has waits for the cache", runcore.RunningView{Run: recorded, Job: with(theJob, func(j *runcore.RunJobView) { j.Read = runcore.ReadLive }), Lease: held},
			runcore.Verdict{Act: runcore.WaitForCache}},
		{"a missing Job past the start deadline is skipped", runcore.RunningView{Run: unrecordedUID, Job: liveMiss, Lease: held, PastStartDeadline: true},
			runcore.Verdict{Step: runcore.SkipLate, Act: runcore.SkipLateRun}},
		{"a missing Job waits for a confirmed lease", runcore.RunningView{Run: unrecordedUID, Job: liveMiss, Lease: runcore.LeaseView{Tracked: true}},
			runcore.Verdict{Step: runcore.Confirm, Act: runcore.WaitConfirm}},
		{"a missing Job is created on a confirmed lease", runcore.RunningView{Run: unrecordedUID, Job: liveMiss, Lease: held},
			runcore.Verdict{Step: runcore.CreateJob, Act: runcore.CreateRunJob}},
		{"an unguarded run's Job is created without a lease", runcore.RunningView{Run: &batchv1alpha1.ActiveRun{JobName: "settle-1", Unguarded: true}, Job: liveMiss},
			runcore.Verdict{Step: runcore.CreateJob, Act: runcore.CreateRunJob}},
		{"a recorded Job that is gone stops the run", runcore.RunningView{Run: recorded, Job: liveMiss, Lease: held},
			runcore.Verdict{Step: runcore.StopDeleted, Act: runcore.StopRun, Cause: runcore.CauseJobDeleted}},
		{"a finished Job releases the lease, even one the keeper lost", runcore.RunningView{Run: recorded, Job: with(theJob, func(j *runcore.RunJobView) { j.Finished = batchv1.JobComplete }), Lease: runcore.LeaseView{Tracked: true, Lost: true}},
			runcore.Verdict{Step: runcore.Release, Act: runcore.ReleaseFinished}},
		{"a lost lease stops the run", runcore.RunningView{Run: recorded, Job: theJob, Lease: runcore.LeaseView{Tracked: true, Lost: true}},
			runcore.Verdict{Step: runcore.StopLost, Act: runcore.StopRun, Cause: runcore.CauseLost}},
		{"a lease at its deadline stops the run", runcore.RunningView{Run: recorded, Job: theJob, Lease: runcore.LeaseView{Tracked: true, DeadlineReached: true}},
			runcore.Verdict{Step: runcore.StopLost, Act: runcore.StopRun, Cause: runcore.CauseStoreSilent}},
		{"a lease at lock.maxHold stops the run", runcore.RunningView{Run: recorded, Job: theJob, Lease: runcore.LeaseView{Tracked: true, MaxHoldReached: true}},
			runcore.Verdict{Step: runcore.StopLost, Act: runcore.StopRun, Cause: runcore.CauseMaxHold}},
		{"a stop waits while the stop controller's deletes go first", runcore.RunningView{Run: recorded, Job: theJob, Lease: runcore.LeaseView{Tracked: true, Lost: true}, StopperBehind: true},
			runcore.Verdict{Act: runcore.WaitForDeletes}},
		{"a Job of the run's name whose UID is not recorded is adopted", runcore.RunningView{Run: unrecordedUID, Job: theJob, Lease: held},
			runcore.Verdict{Step: runcore.Adopt, Act: runcore.AdoptJob}},
		{"a Job replaced by another object of its name stops the run", runcore.RunningView{Run: recorded, Job: with(theJob, func(j *runcore.RunJobView) { j.UID = "uid-2" }), Lease: held},
			runcore.Verdict{Step: runcore.StopDeleted, Act: runcore.StopRun, Cause: runcore.CauseJobReplaced}},
		{"a Job being deleted stops the run", runcore.RunningView{Run: recorded, Job: with(theJob, func(j *runcore.RunJobView) { j.Deleting = true }), Lease: held},
			runcore.Verdict{Step: runcore.StopDeleted, Act: runcore.StopRun, Cause: runcore.CauseJobDeleting}},
		{"a gated Job goes on to its gate", runcore.RunningView{Run: recorded, Job: with(theJob, func(j *runcore.RunJobView) { j.Gated = true }), Lease: held},
			runcore.Verdict{Step: runcore.Open, Act: runcore.GoOn}},
		{"a running Job goes on", runcore.RunningView{Run: recorded, Job: theJob, Lease: held},
			runcore.Verdict{Act: runcore.GoOn}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := runcore.Running(c.view); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestAGuardedRunLeavesItsLeaseToExpireUnlessItsJobCompletedCleanly: step
// release for a run with a pod guard. Its lease is released only when its Job
// completed with no Pod failed; otherwise a Pod may still run where the API
// server does not show it, and only its guard can stop it before another
// holder starts. A run whose Job's UID was never recorded is judged by the Job
// of its name, and with none, nothing says no Pod of it ever ran.
func TestAGuardedRunLeavesItsLeaseToExpireUnlessItsJobCompletedCleanly(t *testing.T) {
	guard := &batchv1alpha1.RunPodGuard{}
	complete := runcore.RunJobView{Read: runcore.ReadLive, Exists: true, UID: "uid-1", Finished: batchv1.JobComplete}
	for _, c := range []struct {
		name string
		run  *batchv1alpha1.ActiveRun
		job  runcore.RunJobView
		want bool
	}{
		{"no pod guard", &batchv1alpha1.ActiveRun{JobUID: "uid-1"}, runcore.RunJobView{}, false},
		{"its Job completed cleanly", &batchv1alpha1.ActiveRun{JobUID: "uid-1", PodGuard: guard}, complete, false},
		{"its Job completed after a Pod failed", &batchv1alpha1.ActiveRun{JobUID: "uid-1", PodGuard: guard}, runcore.RunJobView{Read: runcore.ReadLive, Exists: true, UID: "uid-1", Finished: batchv1.JobComplete, PodsFailed: true}, true},
		{"its Job failed", &batchv1alpha1.ActiveRun{JobUID: "uid-1", PodGuard: guard}, runcore.RunJobView{Read: runcore.ReadLive, Exists: true, UID: "uid-1", Finished: batchv1.JobFailed}, true},
		{"its Job is still running", &batchv1alpha1.ActiveRun{JobUID: "uid-1", PodGuard: guard}, runcore.RunJobView{Read: runcore.ReadLive, Exists: true, UID: "uid-1"}, true},
		{"its Job is gone", &batchv1alpha1.ActiveRun{JobUID: "uid-1", PodGuard: guard}, runcore.RunJobView{Read: runcore.ReadLive}, true},
		{"another Job of its name completed", &batchv1alpha1.ActiveRun{JobUID: "uid-0", PodGuard: guard}, complete, true},
		{"its Job's UID never recorded, and none of its name", &batchv1alpha1.ActiveRun{PodGuard: guard}, runcore.RunJobView{Read: runcore.ReadLive}, true},
		{"its Job's UID never recorded, and the Job of its name completed cleanly", &batchv1alpha1.ActiveRun{PodGuard: guard}, complete, false},
	} {
		if got := runcore.LeaveToExpire(c.run, c.job); got != c.want {
			t.Errorf("%s: leave to expire %v, want %v", c.name, got, c.want)
		}
	}
}

// TestTheCreateOfARecordedRunsJobIsAnsweredAsTheCoreSays: a Job created for the
// only active run is recorded by the next pass, beside other runs by this
// one; a name taken leaves the Job to the next pass's adoption, a rejected Job
// fails the run, and any other error tries the create again.
func TestTheCreateOfARecordedRunsJobIsAnsweredAsTheCoreSays(t *testing.T) {
	for _, c := range []struct {
		answer runcore.CreateAnswer
		active int
		want   runcore.CreateAct
	}{
		{runcore.JobCreated, 1, runcore.OpenAndRecordLater},
		{runcore.JobCreated, 0, runcore.OpenAndRecordNow},
		{runcore.JobCreated, 2, runcore.OpenAndRecordNow},
		{runcore.JobNameTaken, 1, runcore.LeaveToNextPass},
		{runcore.JobRefused, 1, runcore.ReleaseRejectedJob},
		{runcore.CreateFailed, 2, runcore.RetryCreate},
	} {
		if got := runcore.AfterCreate(c.answer, c.active); got != c.want {
			t.Errorf("answer %d with %d active runs: %d, want %d", c.answer, c.active, got, c.want)
		}
	}
}
