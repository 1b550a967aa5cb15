package controllers

import (
	"cmp"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// setCondition sets a condition; its transition time moves only when the status does.
func setCondition(gj *batchv1alpha1.GuardedJob, typ string, status metav1.ConditionStatus, reason, msg string, now time.Time) {
	meta.SetStatusCondition(&gj.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: gj.Generation, LastTransitionTime: metav1.NewTime(now),
	})
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(conds, typ)
}

// setReady reflects whether the spec can run: True (Scheduled or Suspended) or
// False with the spec error's reason and message.
func setReady(gj *batchv1alpha1.GuardedJob, specErr error, now time.Time) {
	var se *specerror.Error
	switch {
	case errors.As(specErr, &se):
		setCondition(gj, batchv1alpha1.ReadyCondition, metav1.ConditionFalse, se.Reason, se.Message, now)
	case specErr != nil:
		// A transient error (store, API) says nothing about the spec: keep Ready as is.
	case gj.SuspendedAt(now):
		setCondition(gj, batchv1alpha1.ReadyCondition, metav1.ConditionTrue, batchv1alpha1.SuspendedReason, suspendedMessage(gj, now), now)
	case acquisitionBlocked(gj):
		// The store refused the keys at the last acquisition; only a successful
		// acquisition or a spec change clears that, never a pass that merely
		// re-validated the spec.
	default:
		setCondition(gj, batchv1alpha1.ReadyCondition, metav1.ConditionTrue, batchv1alpha1.ScheduledReason, "the schedule, keys and lease timing are valid", now)
	}
}

// setNotReady sets Ready=False for what keeps the GuardedJob from running that
// only a pass sees (an acquisition the store refused, keys a spec gives no grant
// for, a twin of this cluster's identity). Ready has its writers here alone.
func setNotReady(gj *batchv1alpha1.GuardedJob, reason, msg string, now time.Time) {
	setCondition(gj, batchv1alpha1.ReadyCondition, metav1.ConditionFalse, reason, msg, now)
}

// acquisitionBlocked says whether Ready=False was set by an acquisition the
// store refused for the current spec (a key of the wrong type, or keys in
// different Cluster slots).
func acquisitionBlocked(gj *batchv1alpha1.GuardedJob) bool {
	c := findCondition(gj.Status.Conditions, batchv1alpha1.ReadyCondition)
	return c != nil && c.Status == metav1.ConditionFalse && c.ObservedGeneration == gj.Generation &&
		(c.Reason == batchv1alpha1.StoreKeyWrongTypeReason || c.Reason == batchv1alpha1.InvalidKeyReason ||
			c.Reason == batchv1alpha1.StoreNotAllowedReason)
}

// setAcquired clears an acquisition error once an acquisition succeeded.
func setAcquired(gj *batchv1alpha1.GuardedJob, now time.Time) {
	if acquisitionBlocked(gj) {
		setCondition(gj, batchv1alpha1.ReadyCondition, metav1.ConditionTrue, batchv1alpha1.ScheduledReason, "the schedule, keys and lease timing are valid", now)
	}
}

// setKstatus sets the kstatus conditions from the rest of the status, as the last
// step before a status write, so that Flux and Argo CD tell a
// GuardedJob that is still being reconciled (Reconciling) from one that waits for
// a person (Stalled). Both are removed when false, as kstatus reads an absent
// condition as false. Runs, busy locks and store outages are normal operation:
// they set neither.
func setKstatus(gj *batchv1alpha1.GuardedJob, now time.Time) {
	if gj.Generation != gj.Status.ObservedGeneration {
		setCondition(gj, batchv1alpha1.ReconcilingCondition, metav1.ConditionTrue, batchv1alpha1.GenerationNotObservedReason,
			"generation "+itoa(gj.Generation)+" is not reconciled yet (observed: "+itoa(gj.Status.ObservedGeneration)+")", now)
	} else {
		meta.RemoveStatusCondition(&gj.Status.Conditions, batchv1alpha1.ReconcilingCondition)
	}
	// A Ready condition left from an older generation says nothing about the
	// current spec: only one set for this generation can stall it.
	ready := findCondition(gj.Status.Conditions, batchv1alpha1.ReadyCondition)
	if ready != nil && ready.Status == metav1.ConditionFalse && ready.ObservedGeneration == gj.Generation &&
		batchv1alpha1.IsStalledReason(ready.Reason) {
		setCondition(gj, batchv1alpha1.StalledCondition, metav1.ConditionTrue, ready.Reason, ready.Message, now)
		return
	}
	meta.RemoveStatusCondition(&gj.Status.Conditions, batchv1alpha1.StalledCondition)
}

// setActiveCount keeps status.activeCount, the ACTIVE column, equal to the number
// of active runs, as the last step before a status write.
func setActiveCount(gj *batchv1alpha1.GuardedJob) {
	gj.Status.ActiveCount = int32(len(gj.Status.Active)) //nolint:gosec // a handful of runs
}

// setStoreReachable records whether the last call to the store got an answer.
func setStoreReachable(gj *batchv1alpha1.GuardedJob, err error, now time.Time) {
	if err != nil {
		setCondition(gj, batchv1alpha1.StoreReachableCondition, metav1.ConditionFalse, batchv1alpha1.StoreUnavailableReason, err.Error(), now)
		return
	}
	setCondition(gj, batchv1alpha1.StoreReachableCondition, metav1.ConditionTrue, batchv1alpha1.StoreAvailableReason, "the lock store answers", now)
}

// setLockHeld derives LockHeld from the active runs: True while a run holds its
// lease, False otherwise with the reason given (Idle, LockBusy, LockLost, ...).
func setLockHeld(gj *batchv1alpha1.GuardedJob, idleReason, idleMsg string, now time.Time) {
	for _, run := range gj.Status.Active {
		if run.Phase == batchv1alpha1.RunPhaseRunning && !run.Unguarded {
			setCondition(gj, batchv1alpha1.LockHeldCondition, metav1.ConditionTrue, batchv1alpha1.LockAcquiredReason,
				"lock "+run.Key+" is held by "+run.Holder+fenceSuffix(run.Fence), now)
			return
		}
	}
	if idleReason == "" {
		idleReason, idleMsg = batchv1alpha1.IdleReason, "no run holds the lock"
	}
	setCondition(gj, batchv1alpha1.LockHeldCondition, metav1.ConditionFalse, idleReason, idleMsg, now)
}

// setLock records the latest observation of the lock key.
func setLock(gj *batchv1alpha1.GuardedJob, state batchv1alpha1.LockState, key, holder string, fence int64) {
	gj.Status.Lock = &batchv1alpha1.LockStatus{State: state, Key: key, Holder: holder, Fence: fence}
}

// finishRun moves a run out of status.active into status.lastRun, and records in
// the lease ledger what became of its lease.
func finishRun(gj *batchv1alpha1.GuardedJob, run batchv1alpha1.ActiveRun, end leaseEnd, result batchv1alpha1.RunResult, heldBy, msg string, now time.Time) {
	removeRun(gj, run.JobName)
	endLease(gj, &run, end, now)
	recordRun(gj, run.JobName, run.ScheduledTime.Time, run.Key, run.Fence, run.Unguarded, result, heldBy, msg, now)
	gj.Status.LastRun.OccurrenceKey, gj.Status.LastRun.FenceKey = run.OccurrenceKey, run.FenceKey
	gj.Status.LastRun.PodGuarded = run.PodGuard != nil
	noteRunEnd(gj, &run, result, heldBy, now) // backfill progress, failure policy (guardedjob_suspend.go)
	// A success, or a skip because another run had done it (guardedjob_occurrence.go).
	noteOccurrenceDone(gj, &run, result, heldBy, now)
	syncRecent(gj, jobbuild.TriggerOf(&run))
	noteRequest(gj, cmp.Or(run.RunNow, run.Backfill))
}

// recordRun sets status.lastRun.
func recordRun(gj *batchv1alpha1.GuardedJob, jobName string, scheduled time.Time, key string, fence int64, unguarded bool, result batchv1alpha1.RunResult, heldBy, msg string, now time.Time) {
	t := metav1.NewTime(now)
	st := metav1.NewTime(scheduled)
	gj.Status.LastRun = &batchv1alpha1.RunRecord{
		JobName: jobName, ScheduledTime: &st, Key: key, Fence: fence, Unguarded: unguarded,
		Result: result, HeldBy: heldBy, FinishedAt: &t, Message: msg,
	}
	gj.Status.RecentRuns = append([]batchv1alpha1.RecentRun{{}}, gj.Status.RecentRuns...)
	if len(gj.Status.RecentRuns) > maxRecentRuns {
		gj.Status.RecentRuns = gj.Status.RecentRuns[:maxRecentRuns]
	}
	syncRecent(gj, "")
}

// maxRecentRuns is how many outcomes status.recentRuns keeps, and
// maxRecentMessage how much of each one's message.
const (
	maxRecentRuns    = 10
	maxRecentMessage = 256
)

// syncRecent makes status.recentRuns' newest entry say what status.lastRun
// says (recordRun added it), with what started the run when trigger says.
func syncRecent(gj *batchv1alpha1.GuardedJob, trigger string) {
	lr := gj.Status.LastRun
	if lr == nil || len(gj.Status.RecentRuns) == 0 {
		return
	}
	msg := lr.Message
	if len(msg) > maxRecentMessage {
		msg = msg[:maxRecentMessage] + "..."
	}
	if trigger == "" {
		trigger = gj.Status.RecentRuns[0].Trigger
	}
	job := lr.JobName
	if lr.Result == batchv1alpha1.RunResultBusy || lr.Result == batchv1alpha1.RunResultSkipped {
		job = "" // the name its Job would have had: it never had one
	}
	gj.Status.RecentRuns[0] = batchv1alpha1.RecentRun{
		ScheduledTime: lr.ScheduledTime.DeepCopy(), Result: lr.Result, JobName: job, Fence: lr.Fence,
		HeldBy: lr.HeldBy, Trigger: trigger, FinishedAt: lr.FinishedAt.DeepCopy(), Message: msg,
	}
}

func removeRun(gj *batchv1alpha1.GuardedJob, jobName string) {
	active := gj.Status.Active[:0]
	for _, r := range gj.Status.Active {
		if r.JobName != jobName {
			active = append(active, r)
		}
	}
	gj.Status.Active = active
	if len(gj.Status.Active) == 0 {
		gj.Status.Active = nil
	}
}

// runByName returns a pointer into status.active, or nil.
func runByName(gj *batchv1alpha1.GuardedJob, jobName string) *batchv1alpha1.ActiveRun {
	for i := range gj.Status.Active {
		if gj.Status.Active[i].JobName == jobName {
			return &gj.Status.Active[i]
		}
	}
	return nil
}

func fenceSuffix(fence int64) string {
	if fence == 0 {
		return ""
	}
	return " (fence " + itoa(fence) + ")"
}
