package runcore

// Step drop_finalizer, as the schedule step takes it: a Job of the GuardedJob
// that no run in status claims and that waits for no adoption (its run ended,
// status was lost or restored from a backup, or, with the early gate, its run
// worked before any status recorded it and could not be adopted). Its lease
// finalizer goes only once nothing of its run works and status holds what the
// Job carries; until its Pods are gone it counts as an active run.

// LeftJob is what the schedule step saw of such a Job.
type LeftJob struct {
	// Finished: Complete or Failed; the Job controller saw every Pod end.
	Finished bool
	// Deleting: the Job has a deletion timestamp.
	Deleting bool
	// CaughtUp: the status the API server last returned holds what the Job
	// carries (CaughtUp).
	CaughtUp bool
}

// LeftAct is what becomes of a LeftJob.
type LeftAct int

const (
	// LeftDropFinalizer: nothing of its run works and status holds what it
	// carries: its lease finalizer goes (step drop_finalizer).
	LeftDropFinalizer LeftAct = iota + 1
	// LeftWaitStatus: it finished, and the status write that holds what it
	// carries is not back yet: it is looked at again shortly.
	LeftWaitStatus
	// LeftGoing: it is being deleted and Pods of it are left, which may still
	// work.
	LeftGoing
	// LeftGoneWaitStatus: it is being deleted with no Pod left, and the status
	// write that holds what it carries is not back yet: looked at again
	// shortly; until then it is taken for working.
	LeftGoneWaitStatus
	// LeftStop: it has not finished and is not being deleted: the stop
	// controller stops it (step stop_unclaimed).
	LeftStop
)

// CountsPods says whether Act needs the number of the Job's Pods left: only for
// a Job being deleted that has not finished.
func (j LeftJob) CountsPods() bool { return j.Deleting && !j.Finished }

// Act is what becomes of the Job; podsLeft is read when CountsPods says so.
func (j LeftJob) Act(podsLeft int) LeftAct {
	switch {
	case j.Finished && j.CaughtUp:
		return LeftDropFinalizer
	case j.Finished:
		return LeftWaitStatus
	case !j.Deleting:
		return LeftStop
	case podsLeft > 0:
		return LeftGoing
	case j.CaughtUp:
		return LeftDropFinalizer
	}
	return LeftGoneWaitStatus
}

// Working says whether Pods of a Job whose act is a may still work: it counts
// as an active run of its GuardedJob (due.Ahead.Unclaimed) until they are gone.
func (a LeftAct) Working() bool {
	return a == LeftGoing || a == LeftGoneWaitStatus || a == LeftStop
}
