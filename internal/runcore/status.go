package runcore

import (
	"errors"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// The status conditions and the lock's record. Each condition has its writers
// here alone; the adapters call them with what a pass observed.

// SetCondition sets a condition; its transition time moves only when the status does.
func SetCondition(gj *batchv1alpha1.GuardedJob, typ string, status metav1.ConditionStatus, reason, msg string, now time.Time) {
	meta.SetStatusCondition(&gj.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: gj.Generation, LastTransitionTime: metav1.NewTime(now),
	})
}

// FindCondition returns the condition of a type, or nil.
func FindCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(conds, typ)
}

// SetReady reflects whether the spec can run: True (Scheduled or Suspended) or
// False with the spec error's reason and message.
func SetReady(gj *batchv1alpha1.GuardedJob, specErr error, now time.Time) {
	var se *specerror.Error
	switch {
	case errors.As(specErr, &se):
		SetCondition(gj, batchv1alpha1.ReadyCondition, metav1.ConditionFalse, se.Reason, se.Message, now)
	case specErr != nil:
		// A transient error (store, API) says nothing about the spec: keep Ready as is.
	case gj.SuspendedAt(now):
		SetCondition(gj, batchv1alpha1.ReadyCondition, metav1.ConditionTrue, batchv1alpha1.SuspendedReason, SuspendedMessage(gj, now), now)
	case acquisitionBlocked(gj):
		// The store refused the keys at the last acquisition; only a successful
		// acquisition or a spec change clears that, never a pass that merely
		// re-validated the spec.
	default:
		SetCondition(gj, batchv1alpha1.ReadyCondition, metav1.ConditionTrue, batchv1alpha1.ScheduledReason, "the schedule, keys and lease timing are valid", now)
	}
}

// SetNotReady sets Ready=False for what keeps the GuardedJob from running that
// only a pass sees (an acquisition the store refused, keys a spec gives no grant
// for, a twin of this cluster's identity). Ready has its writers here alone.
func SetNotReady(gj *batchv1alpha1.GuardedJob, reason, msg string, now time.Time) {
	SetCondition(gj, batchv1alpha1.ReadyCondition, metav1.ConditionFalse, reason, msg, now)
}

// acquisitionBlocked says whether Ready=False was set by an acquisition the
// store refused for the current spec (a key of the wrong type, or keys in
// different Cluster slots).
func acquisitionBlocked(gj *batchv1alpha1.GuardedJob) bool {
	c := FindCondition(gj.Status.Conditions, batchv1alpha1.ReadyCondition)
	return c != nil && c.Status == metav1.ConditionFalse && c.ObservedGeneration == gj.Generation &&
		(c.Reason == batchv1alpha1.StoreKeyWrongTypeReason || c.Reason == batchv1alpha1.InvalidKeyReason ||
			c.Reason == batchv1alpha1.StoreNotAllowedReason)
}

// SetAcquired clears an acquisition error once an acquisition succeeded.
func SetAcquired(gj *batchv1alpha1.GuardedJob, now time.Time) {
	if acquisitionBlocked(gj) {
		SetCondition(gj, batchv1alpha1.ReadyCondition, metav1.ConditionTrue, batchv1alpha1.ScheduledReason, "the schedule, keys and lease timing are valid", now)
	}
}

// SetKstatus sets the kstatus conditions from the rest of the status, as the last
// step before a status write, so that Flux and Argo CD tell a
// GuardedJob that is still being reconciled (Reconciling) from one that waits for
// a person (Stalled). Both are removed when false, as kstatus reads an absent
// condition as false. Runs, busy locks and store outages are normal operation:
// they set neither.
func SetKstatus(gj *batchv1alpha1.GuardedJob, now time.Time) {
	if gj.Generation != gj.Status.ObservedGeneration {
		SetCondition(gj, batchv1alpha1.ReconcilingCondition, metav1.ConditionTrue, batchv1alpha1.GenerationNotObservedReason,
			"generation "+itoa(gj.Generation)+" is not reconciled yet (observed: "+itoa(gj.Status.ObservedGeneration)+")", now)
	} else {
		meta.RemoveStatusCondition(&gj.Status.Conditions, batchv1alpha1.ReconcilingCondition)
	}
	// A Ready condition left from an older generation says nothing about the
	// current spec: only one set for this generation can stall it.
	ready := FindCondition(gj.Status.Conditions, batchv1alpha1.ReadyCondition)
	if ready != nil && ready.Status == metav1.ConditionFalse && ready.ObservedGeneration == gj.Generation &&
		batchv1alpha1.IsStalledReason(ready.Reason) {
		SetCondition(gj, batchv1alpha1.StalledCondition, metav1.ConditionTrue, ready.Reason, ready.Message, now)
		return
	}
	meta.RemoveStatusCondition(&gj.Status.Conditions, batchv1alpha1.StalledCondition)
}

// SetActiveCount keeps status.activeCount, the ACTIVE column, equal to the number
// of active runs, as the last step before a status write.
func SetActiveCount(gj *batchv1alpha1.GuardedJob) {
	gj.Status.ActiveCount = int32(len(gj.Status.Active)) //nolint:gosec // a handful of runs
}

// SetStoreReachable records whether the last call to the store got an answer.
func SetStoreReachable(gj *batchv1alpha1.GuardedJob, err error, now time.Time) {
	if err != nil {
		SetCondition(gj, batchv1alpha1.StoreReachableCondition, metav1.ConditionFalse, batchv1alpha1.StoreUnavailableReason, err.Error(), now)
		return
	}
	SetCondition(gj, batchv1alpha1.StoreReachableCondition, metav1.ConditionTrue, batchv1alpha1.StoreAvailableReason, "the lock store answers", now)
}

// SetLockHeld derives LockHeld from the active runs: True while a run holds its
// lease, False otherwise with the reason given (Idle, LockBusy, LockLost, ...).
func SetLockHeld(gj *batchv1alpha1.GuardedJob, idleReason, idleMsg string, now time.Time) {
	for _, run := range gj.Status.Active {
		if run.Phase == batchv1alpha1.RunPhaseRunning && !run.Unguarded {
			SetCondition(gj, batchv1alpha1.LockHeldCondition, metav1.ConditionTrue, batchv1alpha1.LockAcquiredReason,
				"lock "+run.Key+" is held by "+run.Holder+FenceSuffix(run.Fence), now)
			return
		}
	}
	if idleReason == "" {
		idleReason, idleMsg = batchv1alpha1.IdleReason, "no run holds the lock"
	}
	SetCondition(gj, batchv1alpha1.LockHeldCondition, metav1.ConditionFalse, idleReason, idleMsg, now)
}

// SetLock records the latest observation of the lock key.
func SetLock(gj *batchv1alpha1.GuardedJob, state batchv1alpha1.LockState, key, holder string, fence int64) {
	gj.Status.Lock = &batchv1alpha1.LockStatus{State: state, Key: key, Holder: holder, Fence: fence}
}

// SetSuspendedCondition derives the Suspended condition (no new runs, for any
// reason) and the Paused condition (status.pause): True while they hold, False
// once they end. A GuardedJob never suspended or paused has neither.
func SetSuspendedCondition(gj *batchv1alpha1.GuardedJob, now time.Time) {
	gj.Status.Suspended = gj.SuspendedAt(now)
	if p := gj.Status.Pause; p.PausedAt(now) {
		SetCondition(gj, batchv1alpha1.PausedCondition, metav1.ConditionTrue, PauseReason(p), pausedMessage(gj), now)
	} else if c := FindCondition(gj.Status.Conditions, batchv1alpha1.PausedCondition); c != nil && c.Status == metav1.ConditionTrue {
		SetCondition(gj, batchv1alpha1.PausedCondition, metav1.ConditionFalse, batchv1alpha1.ResumedReason,
			"resumed at "+now.UTC().Format(time.RFC3339)+": status.pause ended", now)
	}
	switch {
	case gj.Spec.SuspendedAt(now):
		SetCondition(gj, batchv1alpha1.SuspendedCondition, metav1.ConditionTrue, batchv1alpha1.SuspendRequestedReason, SuspendedMessage(gj, now), now)
	case gj.Status.Pause.PausedAt(now):
		SetCondition(gj, batchv1alpha1.SuspendedCondition, metav1.ConditionTrue, PauseReason(gj.Status.Pause), SuspendedMessage(gj, now), now)
	default:
		c := FindCondition(gj.Status.Conditions, batchv1alpha1.SuspendedCondition)
		if c == nil {
			return
		}
		if gj.Spec.Suspended() {
			// spec.suspend is still true, but its until has passed.
			until := gj.Spec.SuspendNote.Until.UTC().Format(time.RFC3339)
			if c.Status == metav1.ConditionTrue || c.Reason != batchv1alpha1.SuspendExpiredReason {
				SetCondition(gj, batchv1alpha1.SuspendedCondition, metav1.ConditionFalse, batchv1alpha1.SuspendExpiredReason,
					"runs are scheduled again: spec.suspendNote.until "+until+" passed (spec.suspend is still true: set it to false in the manifest)"+gj.Spec.SuspendNote.Suffix(), now)
			}
			return
		}
		if c.Status == metav1.ConditionTrue || c.Reason == batchv1alpha1.SuspendExpiredReason {
			SetCondition(gj, batchv1alpha1.SuspendedCondition, metav1.ConditionFalse, batchv1alpha1.ResumedReason,
				"resumed at "+now.UTC().Format(time.RFC3339)+": spec.suspend is false and no pause holds", now)
		}
	}
}

// PauseReason is the reason of Suspended and Paused for a pause in status.
func PauseReason(p *batchv1alpha1.Pause) string {
	if p.By == batchv1alpha1.FailurePolicySuspender && p.Request == "" {
		return batchv1alpha1.TooManyFailuresReason
	}
	return batchv1alpha1.PauseRequestedReason
}

// SuspendedMessage is the message of Ready (reason Suspended) and of Suspended:
// "suspended: no new runs are scheduled (by alice, until 2026-12-01T06:00:00Z): db migration".
// spec.suspend's note comes first; a pause in status says how to end it.
func SuspendedMessage(gj *batchv1alpha1.GuardedJob, now time.Time) string {
	if gj.Spec.SuspendedAt(now) {
		return "suspended: no new runs are scheduled" + gj.Spec.SuspendNoteOf().Suffix()
	}
	if gj.Status.Pause.PausedAt(now) {
		return pausedMessage(gj)
	}
	return "suspended: no new runs are scheduled"
}

// pausedMessage is the message of Paused (and of Suspended while only a pause
// holds): the pause's note and how to end it.
func pausedMessage(gj *batchv1alpha1.GuardedJob) string {
	return "suspended: no new runs are scheduled" + gj.Status.Pause.Suffix() +
		" (status.pause; resume with kubectl guardedjob resume " + gj.Name + ")"
}

// RunByName returns a pointer into status.active, or nil.
func RunByName(gj *batchv1alpha1.GuardedJob, jobName string) *batchv1alpha1.ActiveRun {
	for i := range gj.Status.Active {
		if gj.Status.Active[i].JobName == jobName {
			return &gj.Status.Active[i]
		}
	}
	return nil
}

// removeRun takes a run out of status.active.
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

// FenceSuffix is " (fence N)" for a message, or "" without a fence.
func FenceSuffix(fence int64) string {
	if fence == 0 {
		return ""
	}
	return " (fence " + itoa(fence) + ")"
}

// PtrTime returns t as a *metav1.Time.
func PtrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
