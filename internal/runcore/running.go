package runcore

import (
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// The pass of a run that status records: what its Job and its lease say, in
// the order the protocol looks at them. The adapter reads the Job and asks the
// keeper, hands both over, and carries out the verdict; reading the Job live,
// the pod guard's reads, the gates and the Pods stay with it.

// JobRead says where a pass read a run's Job from.
type JobRead int

const (
	// ReadCached: the manager's cache, which may be behind the world.
	ReadCached JobRead = iota
	// ReadLive: the API server itself.
	ReadLive
)

// RunJobView is what a pass read of the Job of a run's name.
type RunJobView struct {
	Read   JobRead
	Exists bool
	UID    types.UID
	// Finished is JobComplete or JobFailed once the Job controller says so,
	// else "".
	Finished batchv1.JobConditionType
	// Deleting: the Job has a deletion timestamp.
	Deleting bool
	// Gated: the Job still waits at the manager's start gate.
	Gated bool
	// PodsFailed: a Pod of the Job failed.
	PodsFailed bool
}

// LeaseView is what the keeper reports of a run's lease.
type LeaseView struct {
	// Tracked: the keeper renews the lease.
	Tracked bool
	// Lost: the key is gone or holds another token.
	Lost bool
	// DeadlineReached: renewals went unanswered until the self-fence deadline.
	DeadlineReached bool
	// MaxHoldReached: the run has held the lease for lock.maxHold.
	MaxHoldReached bool
	// Confirmed: a renewal has confirmed the lease, with room left to stop the
	// Pods before it could expire.
	Confirmed bool
}

// MustStop says whether the keeper says the run must stop.
func (l LeaseView) MustStop() bool {
	return l.Tracked && (l.Lost || l.DeadlineReached || l.MaxHoldReached)
}

// RunningView is what the pass of a recorded run decides from.
type RunningView struct {
	Run   *batchv1alpha1.ActiveRun
	Job   RunJobView
	Lease LeaseView
	// PastStartDeadline: the run's own start deadline has passed.
	PastStartDeadline bool
	// StopperBehind: the stop controller still has deletes to send for runs
	// that must stop (asked only when the lease must stop).
	StopperBehind bool
}

// Act is what the pass of a recorded run does next.
type Act int

const (
	// ReadJobLive: the cache shows no Job; ask the API server before treating
	// it as missing, whatever status says of its UID. A run skipped, stopped or
	// released on a cached "not found" could leave a Pod working without its
	// lease.
	ReadJobLive Act = iota + 1
	// WaitForCache: the API server has the recorded Job the cache does not
	// show yet; look again when the cache catches up.
	WaitForCache
	// ReleaseFinished: the Job finished; release (or complete) the lease, even
	// if it ran out meanwhile: the done-marker is written over an absent key,
	// never over another holder.
	ReleaseFinished
	// WaitForDeletes: the run must stop, and its status write waits while the
	// stop controller has deletes to send first (the API server is shared;
	// the status can wait, the lease cannot).
	WaitForDeletes
	// StopRun: stop the run for Verdict.Cause.
	StopRun
	// SkipLateRun: past its start deadline without a Job: skipped, its lease
	// released.
	SkipLateRun
	// WaitConfirm: create the Job only once a renewal has confirmed the lease.
	WaitConfirm
	// CreateRunJob: create the run's Job.
	CreateRunJob
	// AdoptJob: record the UID of the Job of the run's name (when its fence is
	// the run's; otherwise it is stopped).
	AdoptJob
	// GoOn: the Job is the run's and may run: the pod guard, the gate, a queue
	// and the Pods are looked at next.
	GoOn
)

// Cause is why a run stops.
type Cause int

const (
	// CauseNone: the run does not stop.
	CauseNone Cause = iota
	// CauseLost: the lease was lost.
	CauseLost
	// CauseStoreSilent: the store did not answer renewals until the deadline.
	CauseStoreSilent
	// CauseMaxHold: the run reached lock.maxHold.
	CauseMaxHold
	// CauseJobDeleted: the Job is gone although its finalizer should have
	// kept it.
	CauseJobDeleted
	// CauseJobReplaced: another object of the Job's name has replaced it.
	CauseJobReplaced
	// CauseJobDeleting: the Job is being deleted.
	CauseJobDeleting
)

// Verdict is the pass's judgement, tagged with the model's step.
type Verdict struct {
	Step  Step
	Act   Act
	Cause Cause
}

// Running judges the pass of a run that status records.
func Running(v RunningView) Verdict {
	run, job, lease := v.Run, v.Job, v.Lease
	switch {
	case job.Read == ReadCached && !job.Exists:
		return Verdict{Act: ReadJobLive}
	case job.Read == ReadLive && job.Exists && run.JobUID != "":
		return Verdict{Act: WaitForCache}
	}
	if job.Exists && job.UID == run.JobUID && job.Finished != "" {
		return Verdict{Step: Release, Act: ReleaseFinished}
	}
	if lease.MustStop() {
		if v.StopperBehind {
			return Verdict{Act: WaitForDeletes}
		}
		switch {
		case lease.Lost:
			return Verdict{Step: StopLost, Act: StopRun, Cause: CauseLost}
		case lease.DeadlineReached:
			return Verdict{Step: StopLost, Act: StopRun, Cause: CauseStoreSilent}
		default:
			return Verdict{Step: StopLost, Act: StopRun, Cause: CauseMaxHold}
		}
	}
	switch {
	case !job.Exists && run.JobUID == "":
		switch {
		case v.PastStartDeadline:
			return Verdict{Step: SkipLate, Act: SkipLateRun}
		case !run.Unguarded && !lease.Confirmed:
			return Verdict{Step: Confirm, Act: WaitConfirm}
		}
		return Verdict{Step: CreateJob, Act: CreateRunJob}
	case !job.Exists:
		return Verdict{Step: StopDeleted, Act: StopRun, Cause: CauseJobDeleted}
	case run.JobUID == "":
		return Verdict{Step: Adopt, Act: AdoptJob}
	case job.UID != run.JobUID:
		return Verdict{Step: StopDeleted, Act: StopRun, Cause: CauseJobReplaced}
	case job.Deleting:
		return Verdict{Step: StopDeleted, Act: StopRun, Cause: CauseJobDeleting}
	case job.Gated:
		return Verdict{Step: Open, Act: GoOn}
	}
	return Verdict{Act: GoOn}
}

// LeaveToExpire is step release's judgement for a run with a pod guard
// (spec.podGuard): whether it must leave its lease to expire instead of
// releasing it. Unless its Job completed with no Pod failed, a Pod of the run
// may still be running where the API server no longer shows it (a node cut off
// from the control plane, a force-deleted Pod), and only its guard, reading the
// lease's remaining time, can stop it before another holder starts. A run whose
// Job's UID was never recorded may still have had a Job (created by a manager
// that died before recording it, or by a pass that left the record to the next
// one): the Job of its name decides (job, read live when the cache does not
// show it), and with none left nothing says that no Pod of it ever ran.
func LeaveToExpire(run *batchv1alpha1.ActiveRun, job RunJobView) bool {
	if run.PodGuard == nil {
		return false
	}
	if !job.Exists || run.JobUID != "" && job.UID != run.JobUID {
		return true
	}
	return job.Finished != batchv1.JobComplete || job.PodsFailed
}

// CreateAnswer is the API server's answer to the create of a recorded run's
// Job (Verdict CreateRunJob).
type CreateAnswer int

const (
	// JobCreated: the Job exists now, with the UID the answer gives.
	JobCreated CreateAnswer = iota
	// JobNameTaken: a Job of the run's name exists already (a create of an
	// earlier pass, or another object's).
	JobNameTaken
	// JobRefused: the API server rejected the Job as invalid or forbidden.
	JobRefused
	// CreateFailed: no answer, or another error.
	CreateFailed
)

// CreateAct is what a pass does after the create of a recorded run's Job.
type CreateAct int

const (
	// OpenAndRecordLater: open the Job's gate; the pass the Job's own watch
	// event brings records its UID (this pass writes no status: at a
	// due-time burst the writes that start runs go first).
	OpenAndRecordLater CreateAct = iota
	// OpenAndRecordNow: open the Job's gate, and this pass's status write
	// records the Job's UID with what else it writes.
	OpenAndRecordNow
	// LeaveToNextPass: the next pass adopts the Job of the run's name, or
	// stops the run when it is not the run's (step adopt).
	LeaveToNextPass
	// ReleaseRejectedJob: the run fails without a Job (RejectJob), and its
	// lease is released.
	ReleaseRejectedJob
	// RetryCreate: the pass fails, and the create is tried again.
	RetryCreate
)

// AfterCreate decides what a pass does with the answer to the create of a
// recorded run's Job; active is how many runs status records as active. A
// Job created for the only active run is recorded by the next pass: this one
// need write nothing; beside other runs, this pass records it.
func AfterCreate(answer CreateAnswer, active int) CreateAct {
	switch answer {
	case JobCreated:
		if active == 1 {
			return OpenAndRecordLater
		}
		return OpenAndRecordNow
	case JobNameTaken:
		return LeaveToNextPass
	case JobRefused:
		return ReleaseRejectedJob
	}
	return RetryCreate
}
