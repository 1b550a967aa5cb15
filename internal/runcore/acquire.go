package runcore

import (
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// AcquireAnswer is what the store answered a run's acquisition (after take-up,
// when the key held an orphan this run took up).
type AcquireAnswer int

const (
	// Acquired: the key holds the run's token, with a new fence.
	Acquired AcquireAnswer = iota + 1
	// KeyBusy: another holder's token.
	KeyBusy
	// OccurrenceDone: the occurrence's done-marker (the script released the
	// key if this run held it).
	OccurrenceDone
	// StoreRefused: the store announced an address outside --store-allow, or
	// the key cannot be used (a value of another type, keys in different
	// Cluster slots): nothing was written, and trying again cannot help.
	StoreRefused
	// StoreSilent: the store did not answer.
	StoreSilent
)

// AcquireView is what step acquire_next (or acquire_trigger) judges its
// store's answer with.
type AcquireView struct {
	Run    *batchv1alpha1.ActiveRun
	Answer AcquireAnswer
	// OnBusyRetry: spec.lock.onBusy is Retry; RetriesOccurrence: the run's
	// occurrence is tried until it is done (spec.retryOccurrence). Either
	// makes a run wait for a busy key. NextTry is its next attempt, zero when
	// none is left before its deadline.
	OnBusyRetry, RetriesOccurrence bool
	NextTry                        time.Time
	// NextStoreTry is when a store that did not answer is tried again;
	// Deadline is the run's own deadline to start.
	NextStoreTry, Deadline time.Time
	Now                    time.Time
	ClockSkew              time.Duration
}

// AcquireAct is what the pass does with the answer.
type AcquireAct int

const (
	// StartRun: the run starts (NewStart).
	StartRun AcquireAct = iota + 1
	// TryAgainAt: the run waits for its key, or for its store, until At.
	TryAgainAt
	// StartUnguarded: the store is down and the run's storeFailurePolicy is
	// FailOpen: it starts without a lease, and the keeper takes the key for
	// it once the store answers.
	StartUnguarded
	// ReleaseAndEnd: the store did not answer until the deadline; the run
	// ends StoreUnavailable, and a lease an answer that was lost may have
	// given it is released (or left to expire if the store still does not
	// answer).
	ReleaseAndEnd
	// EndUnstarted: the run ends with Result before it started; its lease's
	// end for the ledger is Lease.
	EndUnstarted
)

// AcquireVerdict is step acquire's judgement of the store's answer.
type AcquireVerdict struct {
	Act AcquireAct
	At  time.Time
	// Result and Lease are the run's end (EndUnstarted, and ReleaseAndEnd's
	// result).
	Result batchv1alpha1.RunResult
	Lease  LeaseEnd
	// GaveUp: a run that waited for its busy key ends because no attempt is
	// left.
	GaveUp bool
}

// FenceFloor is the floor a run's acquisition raises the fence counter above:
// with fencing policy Strict, the last fence status records (a store that lost
// its data must not hand a fence out again); none otherwise.
func FenceFloor(run *batchv1alpha1.ActiveRun, lastFence int64) int64 {
	if run.FencingPolicy == batchv1alpha1.FencingStrict {
		return lastFence
	}
	return 0
}

// AfterAcquire judges a run's acquisition. A token that never held the key
// leaves no ledger entry; a key the store may have given the run before it
// refused the rest (an earlier attempt before the store moved) is left to
// expire, so that the ledger keeps take-up and unlock away from it.
func AfterAcquire(v AcquireView) AcquireVerdict {
	switch v.Answer {
	case Acquired:
		return AcquireVerdict{Act: StartRun}
	case KeyBusy:
		waits := v.OnBusyRetry || v.RetriesOccurrence
		if waits && !v.NextTry.IsZero() {
			return AcquireVerdict{Act: TryAgainAt, At: v.NextTry}
		}
		return AcquireVerdict{Act: EndUnstarted, Result: batchv1alpha1.RunResultBusy, Lease: NeverHeld, GaveUp: waits}
	case OccurrenceDone:
		return AcquireVerdict{Act: EndUnstarted, Result: batchv1alpha1.RunResultSkipped, Lease: Released}
	case StoreRefused:
		return AcquireVerdict{Act: EndUnstarted, Result: batchv1alpha1.RunResultFailed, Lease: LeftToExpire(v.Run, v.Now, v.ClockSkew)}
	}
	switch {
	case v.Run.StoreFailurePolicy == batchv1alpha1.FailOpen:
		return AcquireVerdict{Act: StartUnguarded}
	case v.NextStoreTry.Before(v.Deadline):
		return AcquireVerdict{Act: TryAgainAt, At: v.NextStoreTry}
	}
	return AcquireVerdict{Act: ReleaseAndEnd, Result: batchv1alpha1.RunResultStoreUnavailable}
}

// RecordAcquired is what an acquisition that went through writes into status
// (the record comes with the run's next status write): the run Running under
// its new fence, acquired now; status.lastFence raised to it; the lock held;
// the store reachable and an acquisition seen.
func RecordAcquired(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, fence int64, now time.Time) {
	run.Phase, run.Fence, run.AcquiredAt = batchv1alpha1.RunPhaseRunning, fence, PtrTime(now)
	gj.Status.LastFence = max(gj.Status.LastFence, fence)
	heldNow(gj, run, now)
}

// heldNow records that a run's key holds its token, as an acquisition or an
// adoption found it: the store reachable, an acquisition seen (clearing one the
// store refused), the lock held under the run's fence.
func heldNow(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, now time.Time) {
	SetStoreReachable(gj, nil, now)
	SetAcquired(gj, now)
	SetLock(gj, batchv1alpha1.LockStateHeld, run.Key, run.Holder, run.Fence)
	SetLockHeld(gj, "", "", now)
}

// GoUnguarded makes a FailOpen run that could not reach its store a run
// without a lease: Running, unguarded, with no fence, started now.
func GoUnguarded(run *batchv1alpha1.ActiveRun, now time.Time) {
	run.Phase, run.Unguarded, run.Fence, run.AcquiredAt = batchv1alpha1.RunPhaseRunning, true, 0, PtrTime(now)
}
