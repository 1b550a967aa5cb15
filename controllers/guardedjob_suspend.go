package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
)

// Suspension has two owners. spec.suspend (with its note) is the user's and
// Git's: the manager reads it and never writes it, so that a GitOps tool never
// has to fight the manager over the field. A pause the manager decides (the
// failure policy's, or one a pause request asks for) lives in status.pause and
// ends by a resume request or at its until; no apply of the manifest can
// clear it, and none is refused because of it.

// applySuspension moves a pause an earlier version wrote into spec to status,
// answers pause and resume requests, pauses the GuardedJob when its failure
// policy says so, ends a pause whose until has come, and sets the Suspended and
// Paused conditions. The only spec write is the move, and it removes only what
// the manager itself once wrote there.
func (r *GuardedJobReconciler) applySuspension(ctx context.Context, s *scope) error {
	gj := s.gj
	if err := r.movePauseOutOfSpec(ctx, s); err != nil {
		return err
	}
	r.servePauseRequests(s)
	if n := gj.Spec.SuspendAfter(); n > 0 && gj.Status.ConsecutiveFailures >= n {
		if !gj.SuspendedAt(s.now) {
			reason := fmt.Sprintf("%d runs in a row failed (the Job failed, MaxHoldExceeded%s; spec.failurePolicy.suspendAfter %d)", gj.Status.ConsecutiveFailures, alsoCounted(gj), n)
			if lr := gj.Status.LastRun; lr != nil {
				reason += fmt.Sprintf("; the last, %s, ended %s: %s", dashIfEmpty(lr.JobName), lr.Result, lr.Message)
			}
			gj.Status.Pause = &batchv1alpha1.Pause{
				SuspendNote: batchv1alpha1.SuspendNote{By: batchv1alpha1.FailurePolicySuspender, Reason: clip(reason, due.MaxNoteReason)},
				Since:       metav1.Time{Time: s.now},
			}
			r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.SuspendedAfterFailuresReason,
				"Suspended: %s. Resume with kubectl guardedjob resume %s", reason, gj.Name)
		}
		// Reaching the threshold starts the count again, whether the policy
		// paused the object now or it was suspended already.
		gj.Status.ConsecutiveFailures = 0
	}
	if p := gj.Status.Pause; p != nil && p.Until != nil {
		if s.now.Before(p.Until.Time) {
			s.requeueAt(p.Until.Time)
		} else {
			gj.Status.Pause = nil
			msg := fmt.Sprintf("resumed at %s: status.pause.until %s passed (paused%s)",
				s.now.UTC().Format(time.RFC3339), p.Until.UTC().Format(time.RFC3339), p.Suffix())
			setCondition(gj, batchv1alpha1.PausedCondition, metav1.ConditionFalse, batchv1alpha1.PauseExpiredReason, msg, s.now)
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.PauseExpiredReason, "Resumed: status.pause.until %s passed", p.Until.UTC().Format(time.RFC3339))
		}
	}
	if note := gj.Spec.SuspendNoteOf(); note != nil && note.Until != nil {
		if s.now.Before(note.Until.Time) {
			s.requeueAt(note.Until.Time)
		} else if c := findCondition(gj.Status.Conditions, batchv1alpha1.SuspendedCondition); c != nil && c.Status == metav1.ConditionTrue && !gj.Status.Pause.PausedAt(s.now) {
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.SuspendExpiredReason,
				"Runs are scheduled again: spec.suspendNote.until %s passed (spec.suspend stays true until the manifest sets it to false)", note.Until.UTC().Format(time.RFC3339))
		}
	}
	setSuspendedCondition(gj, s.now)
	setReady(gj, nil, s.now) // its message carries the note, and suspension may have changed
	return nil
}

// servePauseRequests answers the pause and resume annotations, each value
// once. A pause request's note is checked as the schema checks spec's; a bad
// one pauses nothing and says why in a Warning event.
func (r *GuardedJobReconciler) servePauseRequests(s *scope) {
	gj := s.gj
	if v := gj.Annotations[batchv1alpha1.PauseAnnotation]; v != "" && clip(v, maxRequestValue) != gj.Status.LastPauseRequest {
		gj.Status.LastPauseRequest = clip(v, maxRequestValue)
		note, err := due.PauseNote(gj.Annotations[batchv1alpha1.PauseNoteAnnotation], s.now)
		if err != nil {
			r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.InvalidPauseRequestReason,
				"Pause request %q not handled: %s=%s; the GuardedJob is not paused", gj.Status.LastPauseRequest, batchv1alpha1.PauseNoteAnnotation, err)
		} else {
			gj.Status.Pause = &batchv1alpha1.Pause{SuspendNote: note, Since: metav1.Time{Time: s.now}, Request: gj.Status.LastPauseRequest}
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.PauseRequestedReason, "Paused%s", note.Suffix())
		}
	}
	if v := gj.Annotations[batchv1alpha1.ResumeAnnotation]; v != "" && clip(v, maxRequestValue) != gj.Status.LastResumeRequest {
		gj.Status.LastResumeRequest = clip(v, maxRequestValue)
		if p := gj.Status.Pause; p != nil {
			gj.Status.Pause = nil
			msg := fmt.Sprintf("resumed at %s by request %q (paused%s)", s.now.UTC().Format(time.RFC3339), gj.Status.LastResumeRequest, p.Suffix())
			setCondition(gj, batchv1alpha1.PausedCondition, metav1.ConditionFalse, batchv1alpha1.ResumedReason, msg, s.now)
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.ResumedReason, "Resumed by request (paused%s)", p.Suffix())
		}
	}
}

// movePauseOutOfSpec moves a failure-policy pause that an earlier version wrote
// into spec (spec.suspend: true with a suspendNote by guardedjob-manager) to
// status.pause, and removes both fields, once, when due.LegacyPause says the
// status confirms it. The JSON patch tests the note first, so that a note a
// person wrote meanwhile is never removed. The pass keeps its status and writes it
// against the new resourceVersion.
func (r *GuardedJobReconciler) movePauseOutOfSpec(ctx context.Context, s *scope) error {
	gj := s.gj
	since, ok := due.LegacyPause(gj)
	if !ok {
		return nil
	}
	note := gj.Spec.SuspendNoteOf()
	ops := []map[string]any{
		{"op": "test", "path": "/spec/suspendNote/by", "value": batchv1alpha1.FailurePolicySuspender},
		{"op": "test", "path": "/spec/suspend", "value": true},
		{"op": "remove", "path": "/spec/suspendNote"},
		{"op": "remove", "path": "/spec/suspend"},
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	moved := *note
	status := gj.Status.DeepCopy()
	before := gj.ResourceVersion
	if err := r.Patch(ctx, gj, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return fmt.Errorf("move the failure policy's pause from spec to status: %w", err)
	}
	r.markSuperseded(client.ObjectKeyFromObject(gj), before, gj.ResourceVersion)
	gj.Status = *status
	s.orig.ObjectMeta = *gj.ObjectMeta.DeepCopy()
	s.orig.Spec = *gj.Spec.DeepCopy()
	gj.Status.Pause = &batchv1alpha1.Pause{SuspendNote: moved, Since: since}
	r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.PauseMovedToStatusReason,
		"The failure policy's pause moved from spec to status.pause; spec.suspend and spec.suspendNote removed (the manager no longer writes spec). Resume with kubectl guardedjob resume %s", gj.Name)
	return nil
}

// setSuspendedCondition derives the Suspended condition (no new runs, for any
// reason) and the Paused condition (status.pause): True while they hold, False
// once they end. A GuardedJob never suspended or paused has neither.
func setSuspendedCondition(gj *batchv1alpha1.GuardedJob, now time.Time) {
	gj.Status.Suspended = gj.SuspendedAt(now)
	if p := gj.Status.Pause; p.PausedAt(now) {
		setCondition(gj, batchv1alpha1.PausedCondition, metav1.ConditionTrue, pauseReason(p), pausedMessage(gj), now)
	} else if c := findCondition(gj.Status.Conditions, batchv1alpha1.PausedCondition); c != nil && c.Status == metav1.ConditionTrue {
		setCondition(gj, batchv1alpha1.PausedCondition, metav1.ConditionFalse, batchv1alpha1.ResumedReason,
			"resumed at "+now.UTC().Format(time.RFC3339)+": status.pause ended", now)
	}
	switch {
	case gj.Spec.SuspendedAt(now):
		setCondition(gj, batchv1alpha1.SuspendedCondition, metav1.ConditionTrue, batchv1alpha1.SuspendRequestedReason, suspendedMessage(gj, now), now)
	case gj.Status.Pause.PausedAt(now):
		setCondition(gj, batchv1alpha1.SuspendedCondition, metav1.ConditionTrue, pauseReason(gj.Status.Pause), suspendedMessage(gj, now), now)
	default:
		c := findCondition(gj.Status.Conditions, batchv1alpha1.SuspendedCondition)
		if c == nil {
			return
		}
		if gj.Spec.Suspended() {
			// spec.suspend is still true, but its until has passed.
			until := gj.Spec.SuspendNote.Until.UTC().Format(time.RFC3339)
			if c.Status == metav1.ConditionTrue || c.Reason != batchv1alpha1.SuspendExpiredReason {
				setCondition(gj, batchv1alpha1.SuspendedCondition, metav1.ConditionFalse, batchv1alpha1.SuspendExpiredReason,
					"runs are scheduled again: spec.suspendNote.until "+until+" passed (spec.suspend is still true: set it to false in the manifest)"+gj.Spec.SuspendNote.Suffix(), now)
			}
			return
		}
		if c.Status == metav1.ConditionTrue || c.Reason == batchv1alpha1.SuspendExpiredReason {
			setCondition(gj, batchv1alpha1.SuspendedCondition, metav1.ConditionFalse, batchv1alpha1.ResumedReason,
				"resumed at "+now.UTC().Format(time.RFC3339)+": spec.suspend is false and no pause holds", now)
		}
	}
}

// pauseReason is the reason of Suspended and Paused for a pause in status.
func pauseReason(p *batchv1alpha1.Pause) string {
	if p.By == batchv1alpha1.FailurePolicySuspender && p.Request == "" {
		return batchv1alpha1.TooManyFailuresReason
	}
	return batchv1alpha1.PauseRequestedReason
}

// suspendedMessage is the message of Ready (reason Suspended) and of Suspended:
// "suspended: no new runs are scheduled (by alice, until 2026-12-01T06:00:00Z): db migration".
// spec.suspend's note comes first; a pause in status says how to end it.
func suspendedMessage(gj *batchv1alpha1.GuardedJob, now time.Time) string {
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

// noteRunEnd is told of every run that leaves status.active (finishRun): the
// run's record gets its backfill and parameters, a backfill counts its
// occurrence, and the failure policy counts failures in a row. Backfill runs do
// not count for the failure policy: a backfill records its own failures.
func noteRunEnd(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult, heldBy string, now time.Time) {
	if lr := gj.Status.LastRun; lr != nil {
		lr.Backfill, lr.Parameters = run.Backfill, run.Parameters
	}
	if run.Backfill != "" {
		backfillRunEnded(gj, run, result, heldBy, now)
		return
	}
	if due.Retries(&gj.Spec, run) {
		noteRetry(gj, run, result, now) // guardedjob_retry.go
	}
	switch {
	case result == batchv1alpha1.RunResultSucceeded:
		gj.Status.ConsecutiveFailures = 0
	case result == batchv1alpha1.RunResultMaxHoldExceeded,
		result == batchv1alpha1.RunResultFailed && gj.Spec.CountsFailure(run.StopCause):
		// The workload failing, not the cluster around it: a Pod that never
		// started, a rejected Job or a replaced run counts only when asked for.
		gj.Status.ConsecutiveFailures++
	}
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// alsoCounted names the causes spec.failurePolicy.alsoCount adds, for a message.
func alsoCounted(gj *batchv1alpha1.GuardedJob) string {
	out := ""
	if fp := gj.Spec.FailurePolicy; fp != nil {
		for _, c := range fp.AlsoCount {
			out += ", " + string(c)
		}
	}
	return out
}
