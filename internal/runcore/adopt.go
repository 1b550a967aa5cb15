package runcore

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/runtoken"
)

// KeyView is what the store said of a run's keys: the lock key's value (empty
// when the key is absent) and the fence counter.
type KeyView struct {
	Holder string
	Fence  int64
}

// Adoptable is the judgement of step AdoptUnrecorded: why the Job of run, which
// no status records, may not be adopted, or "". The lock key must hold the token
// minted for this very Job (its holder alone is not enough), the fence counter
// must still be at the Job's fence (nobody acquired the key since), and the
// lease ledger (leases, from status) must not record the run as released or
// left to expire. A run no status records (unrecorded) takes what started it
// from the Job's annotation: the token must attest it (StartOf). readErr is the
// store's error reading the keys, if any.
func Adoptable(leases []batchv1alpha1.LeaseRecord, run *batchv1alpha1.ActiveRun, unrecorded bool, key KeyView, readErr error, identity runtoken.Run) string {
	if readErr != nil {
		return "its lock key cannot be read: " + readErr.Error()
	}
	if key.Holder == "" {
		return "lock " + run.Key + " is free: its lease expired or was released"
	}
	holder := leasetoken.HolderOf(key.Holder)
	if name, ok := runtoken.MintedFor(key.Holder, identity); !ok || name != run.JobName || holder != run.Holder {
		return "lock " + run.Key + " is held by " + holder
	}
	if unrecorded && !runtoken.StartedBy(key.Holder, StartOf(run)) {
		return "its " + batchv1alpha1.RunAnnotation + " annotation does not match the run lock " + run.Key + " was taken for (what started it)"
	}
	if run.Fence > 0 && key.Fence != run.Fence {
		return fmt.Sprintf("the fence counter %s is at %d, not at the Job's fence %d: the key was acquired again since", run.FenceKey, key.Fence, run.Fence)
	}
	if rec := LedgerRecord(leases, holder); rec != nil && rec.State != batchv1alpha1.LeaseLive {
		return "status.leases records its lease as " + string(rec.State)
	}
	return ""
}

// RecordAdopted is step adopt's record in status: run, whose Job waited at its gate and
// may be adopted, becomes an active run (in place of recorded, the run status
// records without its Job, when there is one). Status takes what the run's start
// means: the fence floor rises to the run's fence (once the history limit deletes
// the Job, a data loss must not hand that fence out again), the last schedule
// time moves up to its occurrence, and the occurrence leaves the buffer. It
// returns the run as status now holds it.
func RecordAdopted(st *batchv1alpha1.GuardedJobStatus, run batchv1alpha1.ActiveRun, recorded *batchv1alpha1.ActiveRun) *batchv1alpha1.ActiveRun {
	var r *batchv1alpha1.ActiveRun
	if recorded != nil {
		*recorded = run
		r = recorded
	} else {
		st.Active = append(st.Active, run)
		r = &st.Active[len(st.Active)-1]
	}
	st.LastFence = max(st.LastFence, r.Fence)
	due.NoteScheduled(st, r.ScheduledTime.Time)
	st.Buffered = slices.DeleteFunc(st.Buffered, func(b batchv1alpha1.BufferedRun) bool { return b.ScheduledTime.Equal(&r.ScheduledTime) })
	if len(st.Buffered) == 0 {
		st.Buffered = nil
	}
	return r
}

// AdoptAct is what step AdoptUnrecorded does with a Job waiting for adoption.
type AdoptAct int

const (
	// AdoptTheJob records the run with the token its key holds, then opens the gate.
	AdoptTheJob AdoptAct = iota
	// DeleteUnadopted deletes the Job: it never had a Pod and may not run.
	DeleteUnadopted
	// StopRecorded stops the recorded run whose Job this is: it lost its
	// lease before its Job could start. Its Job is deleted, its lease released.
	StopRecorded
	// WaitForTheStore looks at the Job again once its store answers.
	WaitForTheStore
	// LeaveToStopper leaves a Job past its gate that may not be adopted to
	// the stop controller, which stops it unless this process renews its lease
	// (a finished one only folds its fence and occurrence into status before
	// its lease finalizer goes).
	LeaveToStopper
)

// Unrecorded is what a pass read for a Job waiting for adoption.
type Unrecorded struct {
	// Run is the run the Job would be adopted as (TrustedRun), nil when it
	// may not be, and Why then says why not.
	Run *batchv1alpha1.ActiveRun
	Why string
	// Recorded is the run status records without its Job (waiting to acquire
	// again), or nil.
	Recorded *batchv1alpha1.ActiveRun
	// Key is what the store said of the run's keys, ReadErr its error, and
	// StoreDown says the store did not answer at all.
	Key       KeyView
	ReadErr   error
	StoreDown bool
	Leases    []batchv1alpha1.LeaseRecord
	Identity  runtoken.Run
	// Started: the Job is past its gate (Waiting.Started).
	Started bool
	// Judged is the Job as the pass read it (from a cache that may be behind
	// the world).
	Judged JobVersion
	// OpenedHere: this process opened the Job's gate and left its run's
	// record to a later pass (the early gate); the cache may still show the
	// Job at its gate. Such a Job's record is the run's, not an adoption: its
	// pass's own status write carries it, and the lease stays renewed if that
	// write fails (KeepsLeaseUnwritten).
	OpenedHere bool
}

// JobVersion names one version of a Job: its UID and resourceVersion.
type JobVersion struct {
	UID             types.UID
	ResourceVersion string
}

// DeleteNames is what the delete of a Job that may not be adopted is
// conditional on: the version judged. A cache behind the world may show a Job
// as waiting that has since been adopted and started, or has finished (some
// run's history); the API server refuses the delete of such a Job, and it is
// judged again once the cache shows it as it is.
func (u Unrecorded) DeleteNames() JobVersion {
	return u.Judged
}

// Adoption is the verdict of step AdoptUnrecorded, and why when the Job may
// not run. The key must hold the token minted for this very Job (Adoptable),
// and a recorded run must own that token: every other Job is deleted, and a
// recorded run whose Job it is stops without having started.
func Adoption(u Unrecorded) (AdoptAct, string) {
	why := u.Why
	if why == "" && u.StoreDown {
		return WaitForTheStore, ""
	}
	if why == "" {
		why = Adoptable(u.Leases, u.Run, u.Recorded == nil, u.Key, u.ReadErr, u.Identity)
	}
	if why == "" && u.Recorded != nil && u.Key.Holder != u.Recorded.Token {
		why = "lock " + u.Run.Key + " holds another token of its run"
	}
	switch {
	case why == "":
		return AdoptTheJob, ""
	case u.Recorded != nil:
		return StopRecorded, why
	case u.Started:
		return LeaveToStopper, why
	default:
		return DeleteUnadopted, why
	}
}

// KeepsLeaseUnwritten says whether the lease of a Job a pass adopted stays
// renewed when the status write that records the adoption fails: when status
// records the run already (waiting to acquire again), or the Job is past its
// gate (its Pods may work, the Job is the run's only record, and its lease is
// renewed until a pass adopts it), as the read showed it or as this process
// knows it opened the gate (a cache behind the world shows it at its gate).
// Behind its gate no Pod works under the lease, and the next pass judges the
// Job again.
func (u Unrecorded) KeepsLeaseUnwritten() bool {
	return u.Recorded != nil || u.Started || u.OpenedHere
}

// ResumesUnrecorded says whether a restart (a new leader, a shard taking a
// GuardedJob over) renews the lease of a Job no status records, at once with
// the recorded ones: a working Job past its gate that its pass would adopt (the
// key holds the token minted for it, at its fence, and the ledger does not
// record its run as over). Its pass adopts it; the stop controller stops every
// other such Job, whose lease nobody renews.
func ResumesUnrecorded(w Waiting, u Unrecorded) bool {
	if !w.WorksUnrecorded() {
		return false
	}
	act, _ := Adoption(u)
	return act == AdoptTheJob
}

// AdoptInto records a Job waiting for adoption as its run, once Adoption says
// AdoptTheJob: the run as TrustedRun gives it, with the token its key holds,
// the Job's UID and phase Running, in status (RecordAdopted) and the lease
// ledger; the lock held under its fence, an acquisition seen, the store
// reachable. A run-now the run carries (its token attests it: Adoptable)
// answers the request while the annotation still asks for it. It returns the
// run as status records it.
func AdoptInto(gj *batchv1alpha1.GuardedJob, u Unrecorded, jobUID types.UID, now time.Time) *batchv1alpha1.ActiveRun {
	run := *u.Run
	run.Token, run.JobUID, run.Phase = u.Key.Holder, jobUID, batchv1alpha1.RunPhaseRunning
	r := RecordAdopted(&gj.Status, run, u.Recorded)
	RecordLease(gj, r, now)
	if r.RunNow != "" && gj.Annotations[batchv1alpha1.RunNowAnnotation] == r.RunNow {
		AnswerRunNow(gj, r.RunNow)
	}
	heldNow(gj, r, now) // its key holds its token: an acquisition went through
	return r
}

// WritesRecord says whether the adoption writes status itself (with a
// resourceVersion precondition) before the Job's gate opens, or, for a Job
// whose gate this process opened (OpenedHere), leaves the record to the
// pass's own status write at its end: that is the run's record (step
// record_job), not an adoption, and its lease stays renewed if the write
// fails.
func (u Unrecorded) WritesRecord() bool { return !u.OpenedHere }

// Step is the model's step an adoption takes: record_job for a Job whose gate
// this process opened, else adopt_unrecorded.
func (u Unrecorded) Step() Step {
	if u.OpenedHere {
		return RecordJob
	}
	return AdoptUnrecorded
}
