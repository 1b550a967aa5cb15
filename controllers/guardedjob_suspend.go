package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// Suspension with a note (spec.suspendNote), its end at suspendNote.until, and
// the failure policy that suspends a GuardedJob whose runs keep failing. Both
// the manager's own suspensions and its resumes are written into spec, where a
// person's are (as Argo Workflows' CronWorkflow stopStrategy does): spec.suspend
// stays the one switch that kubectl get, Argo CD, kstatus and the metrics read.

// maxNoteReason is the longest suspendNote.reason (the schema's bound).
const maxNoteReason = 512

// applySuspension suspends the GuardedJob when its failure policy says so, and
// resumes it when its suspendNote.until has come; then it sets the Suspended
// condition. Both write the spec (with a resourceVersion precondition, so a
// note changed meanwhile is never acted on); the pass goes on with the object
// the write returned.
func (r *GuardedJobReconciler) applySuspension(ctx context.Context, s *scope) error {
	gj := s.gj
	if n := gj.Spec.SuspendAfter(); n > 0 && gj.Status.ConsecutiveFailures >= n {
		if !gj.Spec.Suspended() {
			reason := fmt.Sprintf("%d runs in a row failed (the Job failed, MaxHoldExceeded%s; spec.failurePolicy.suspendAfter %d)", gj.Status.ConsecutiveFailures, alsoCounted(gj), n)
			if lr := gj.Status.LastRun; lr != nil {
				reason += fmt.Sprintf("; the last, %s, ended %s: %s", dashIfEmpty(lr.JobName), lr.Result, lr.Message)
			}
			note := &batchv1alpha1.SuspendNote{By: batchv1alpha1.FailurePolicySuspender, Reason: clip(reason, maxNoteReason)}
			if err := r.patchSuspend(ctx, s, true, note); err != nil {
				return err
			}
			r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.SuspendedAfterFailuresReason,
				"Suspended: %s. Resume with kubectl guardedjob resume %s (or set spec.suspend to false)", reason, gj.Name)
		}
		// Reaching the threshold starts the count again, whether the policy
		// suspended the object now or it was suspended already.
		gj.Status.ConsecutiveFailures = 0
	}
	if note := gj.Spec.SuspendNoteOf(); note != nil && note.Until != nil {
		if s.now.Before(note.Until.Time) {
			s.requeueAt(note.Until.Time)
		} else {
			was := *note
			if err := r.patchSuspend(ctx, s, false, nil); err != nil {
				return err
			}
			msg := fmt.Sprintf("resumed at %s: spec.suspendNote.until %s passed (suspended%s)",
				s.now.UTC().Format(time.RFC3339), was.Until.UTC().Format(time.RFC3339), was.Suffix())
			setCondition(gj, batchv1alpha1.SuspendedCondition, metav1.ConditionFalse, batchv1alpha1.SuspendExpiredReason, msg, s.now)
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.SuspendExpiredReason, "Resumed: spec.suspendNote.until %s passed", was.Until.UTC().Format(time.RFC3339))
		}
	}
	setSuspendedCondition(gj, s.now)
	setReady(gj, nil, s.now) // its message carries the note, and suspend may have changed
	return nil
}

// patchSuspend sets spec.suspend and spec.suspendNote with one merge patch and a
// resourceVersion precondition. The pass keeps its status (the patch's answer
// carries the API server's, which does not have this pass's changes yet) and
// writes it against the new resourceVersion.
func (r *GuardedJobReconciler) patchSuspend(ctx context.Context, s *scope, suspend bool, note *batchv1alpha1.SuspendNote) error {
	gj := s.gj
	status := gj.Status.DeepCopy()
	patch := client.MergeFromWithOptions(gj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	gj.Spec.Suspend = &suspend
	gj.Spec.SuspendNote = note
	before := gj.ResourceVersion
	if err := r.Patch(ctx, gj, patch); err != nil {
		return fmt.Errorf("set spec.suspend to %t: %w", suspend, err)
	}
	r.markSuperseded(client.ObjectKeyFromObject(gj), before, gj.ResourceVersion)
	gj.Status = *status
	s.orig.ObjectMeta = *gj.ObjectMeta.DeepCopy()
	s.orig.Spec = *gj.Spec.DeepCopy()
	return nil
}

// setSuspendedCondition derives the Suspended condition from spec: True while
// suspended (TooManyFailures when the failure policy did it), False (Resumed)
// once a suspension ends. A GuardedJob never suspended has none.
func setSuspendedCondition(gj *batchv1alpha1.GuardedJob, now time.Time) {
	if gj.Spec.Suspended() {
		reason := batchv1alpha1.SuspendRequestedReason
		if note := gj.Spec.SuspendNote; note != nil && note.By == batchv1alpha1.FailurePolicySuspender {
			reason = batchv1alpha1.TooManyFailuresReason
		}
		setCondition(gj, batchv1alpha1.SuspendedCondition, metav1.ConditionTrue, reason, suspendedMessage(gj), now)
		return
	}
	if c := findCondition(gj.Status.Conditions, batchv1alpha1.SuspendedCondition); c != nil && c.Status == metav1.ConditionTrue {
		setCondition(gj, batchv1alpha1.SuspendedCondition, metav1.ConditionFalse, batchv1alpha1.ResumedReason,
			"resumed at "+now.UTC().Format(time.RFC3339)+": spec.suspend is false", now)
	}
}

// suspendedMessage is the message of Ready (reason Suspended) and of Suspended:
// "suspended: no new runs are scheduled (by alice, until 2026-12-01T06:00:00Z): db migration".
func suspendedMessage(gj *batchv1alpha1.GuardedJob) string {
	return "suspended: no new runs are scheduled" + gj.Spec.SuspendNoteOf().Suffix()
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
