package runcore

// Step stop_unclaimed: the stop controller's judgement of a Job of a GuardedJob
// whose cached status has no run for it. The cache may simply not have the
// status that claims a brand-new Job yet, or may show a Job older than the end
// of its run, so nothing is stopped before the API server has been asked, in an
// order that leaves no gap: the GuardedJob, then the Job, then the GuardedJob
// again, then the Job again. A gate opens only after the status write that
// records its run, and a run is recorded as ended only after its Job finished,
// so one of those reads sees the run or the finished Job.

// JobView is what a read of a Job showed.
type JobView struct {
	// Found is false when the Job is gone.
	Found bool
	// OwnerUID is the UID of the GuardedJob that controls the Job.
	OwnerUID string
	// WaitsForAdoption: the Job is suspended at its start gate, carries its run,
	// and has not finished: the reconciler's to adopt or delete.
	WaitsForAdoption bool
	Finished         bool
	// Started: the Job is past its gate, carries its run and no status
	// records it (the early gate: its run may work before its status write).
	Started bool
	// RenewedHere: this process renews the lease of the Job's run (the pass
	// that opened its gate, a restart's resume), not lost, before its
	// self-fence deadline and maxHold.
	RenewedHere bool
}

// OwnerView is what a read of the Job's GuardedJob showed.
type OwnerView struct {
	// Found is false when the GuardedJob is gone.
	Found bool
	UID   string
	// Claims: an active run of its status names the Job.
	Claims bool
	// InShard: the GuardedJob is this shard's to judge.
	InShard bool
}

// UnclaimedAction is what the stop controller does next about the Job.
type UnclaimedAction int

const (
	// ReadOwner reads the GuardedJob from the API server (not the cache) and
	// delivers it with DeliverOwner.
	ReadOwner UnclaimedAction = iota
	// ReadJob reads the Job from the API server and delivers it with DeliverJob.
	ReadJob
	// Leave: nothing to stop (Why says why).
	Leave
	// StopOrphan: the Job's GuardedJob is gone or was created again; the Job is
	// stopped and its lease left to expire (Why says why).
	StopOrphan
	// Stop: no run of the live GuardedJob claims the Job, which has not
	// finished: it is stopped (event StaleJob).
	Stop
)

func (a UnclaimedAction) String() string {
	return [...]string{"ReadOwner", "ReadJob", "Leave", "StopOrphan", "Stop"}[a]
}

// Unclaimed walks step stop_unclaimed for one Job. Start it with the Job and
// its GuardedJob as the cache has them, then do what Next says and deliver its
// answer, until Next returns Leave, StopOrphan or Stop.
type Unclaimed struct {
	ownerName string
	job       JobView
	reads     int // reads done: owner, job, owner, job
	decided   bool
	done      UnclaimedAction
	why       string
}

// NewUnclaimed starts the judgement of a Job the cache shows (job) whose cached
// GuardedJob (named ownerName) claims it with no run.
func NewUnclaimed(ownerName string, job JobView) *Unclaimed {
	u := &Unclaimed{ownerName: ownerName, job: job}
	if job.WaitsForAdoption {
		// Every run's Job is seen here first, created a moment before the
		// status write that records its run: the reconciler adopts or
		// deletes it, with no read of the API server in a burst. If its gate
		// opens, the Job's update brings it back here.
		u.leave("it waits for adoption at its start gate")
	}
	if job.Started && job.RenewedHere {
		// The early gate: its run works under a lease this process renews,
		// and the reconciler adopts it. The keeper's report of that lease
		// lost or at its deadline brings it back here, and it is stopped.
		u.leave("its run's lease is renewed here until status records it")
	}
	return u
}

func (u *Unclaimed) leave(why string) { u.decide(Leave, why) }

func (u *Unclaimed) decide(a UnclaimedAction, why string) {
	u.decided, u.done, u.why = true, a, why
}

// Next returns what to do now, and, once decided, why.
func (u *Unclaimed) Next() (UnclaimedAction, string) {
	if u.decided {
		return u.done, u.why
	}
	if u.reads%2 == 0 {
		return ReadOwner, ""
	}
	return ReadJob, ""
}

// DeliverOwner applies a read of the GuardedJob.
func (u *Unclaimed) DeliverOwner(o OwnerView) {
	first := u.reads == 0
	u.reads++
	switch {
	case !o.Found && first:
		u.decide(StopOrphan, "its GuardedJob "+u.ownerName+" is gone")
	case !o.Found:
		u.leave("its GuardedJob is gone; the next look stops it as an orphan")
	case first && o.UID != u.job.OwnerUID:
		u.decide(StopOrphan, "its GuardedJob "+u.ownerName+" was deleted and created again")
	case o.Claims:
		u.leave("a run claims it: the cache was behind")
	case first && !o.InShard:
		u.leave("its GuardedJob moved to another shard, which judges its Jobs now")
	case first && u.job.Finished:
		// The live GuardedJob's reconciler drops a finished Job's finalizer
		// once its Pods are gone.
		u.leave("it finished")
	}
}

// DeliverJob applies a read of the Job.
func (u *Unclaimed) DeliverJob(j JobView) {
	u.reads++
	switch {
	case !j.Found:
		u.leave("it is gone")
	case j.Finished:
		// Read from the cache before its GuardedJob, it may have completed and
		// its run been recorded as ended in between.
		u.leave("it finished")
	case u.reads == 4:
		u.decide(Stop, "no active run of its GuardedJob claims it")
	}
}
