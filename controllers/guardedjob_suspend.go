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
	"github.com/guardedjob/guardedjob/internal/runcore"
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
				SuspendNote: batchv1alpha1.SuspendNote{By: batchv1alpha1.FailurePolicySuspender, Reason: runcore.Clip(reason, due.MaxNoteReason)},
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
			runcore.SetCondition(gj, batchv1alpha1.PausedCondition, metav1.ConditionFalse, batchv1alpha1.PauseExpiredReason, msg, s.now)
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.PauseExpiredReason, "Resumed: status.pause.until %s passed", p.Until.UTC().Format(time.RFC3339))
		}
	}
	if note := gj.Spec.SuspendNoteOf(); note != nil && note.Until != nil {
		if s.now.Before(note.Until.Time) {
			s.requeueAt(note.Until.Time)
		} else if c := runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.SuspendedCondition); c != nil && c.Status == metav1.ConditionTrue && !gj.Status.Pause.PausedAt(s.now) {
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.SuspendExpiredReason,
				"Runs are scheduled again: spec.suspendNote.until %s passed (spec.suspend stays true until the manifest sets it to false)", note.Until.UTC().Format(time.RFC3339))
		}
	}
	runcore.SetSuspendedCondition(gj, s.now)
	runcore.SetReady(gj, nil, s.now) // its message carries the note, and suspension may have changed
	return nil
}

// servePauseRequests answers the pause and resume annotations, each value
// once. A pause request's note is checked as the schema checks spec's; a bad
// one pauses nothing and says why in a Warning event.
func (r *GuardedJobReconciler) servePauseRequests(s *scope) {
	gj := s.gj
	if v := gj.Annotations[batchv1alpha1.PauseAnnotation]; v != "" && runcore.Clip(v, runcore.MaxRequestValue) != gj.Status.LastPauseRequest {
		gj.Status.LastPauseRequest = runcore.Clip(v, runcore.MaxRequestValue)
		note, err := due.PauseNote(gj.Annotations[batchv1alpha1.PauseNoteAnnotation], s.now)
		if err != nil {
			r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.InvalidPauseRequestReason,
				"Pause request %q not handled: %s=%s; the GuardedJob is not paused", gj.Status.LastPauseRequest, batchv1alpha1.PauseNoteAnnotation, err)
		} else {
			gj.Status.Pause = &batchv1alpha1.Pause{SuspendNote: note, Since: metav1.Time{Time: s.now}, Request: gj.Status.LastPauseRequest}
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.PauseRequestedReason, "Paused%s", note.Suffix())
		}
	}
	if v := gj.Annotations[batchv1alpha1.ResumeAnnotation]; v != "" && runcore.Clip(v, runcore.MaxRequestValue) != gj.Status.LastResumeRequest {
		gj.Status.LastResumeRequest = runcore.Clip(v, runcore.MaxRequestValue)
		if p := gj.Status.Pause; p != nil {
			gj.Status.Pause = nil
			msg := fmt.Sprintf("resumed at %s by request %q (paused%s)", s.now.UTC().Format(time.RFC3339), gj.Status.LastResumeRequest, p.Suffix())
			runcore.SetCondition(gj, batchv1alpha1.PausedCondition, metav1.ConditionFalse, batchv1alpha1.ResumedReason, msg, s.now)
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
