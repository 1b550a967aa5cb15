package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
)

// runExtras is what a new run carries besides its occurrence: the backfill it
// belongs to and the parameters a run-now request set.
type runExtras struct {
	backfill   string
	parameters map[string]string
	// retry is the attempt number of a retry of its occurrence
	// (spec.retryOccurrence), 0 for a first try.
	retry int32
	// runNow is the request value of a buffered run-now, started later.
	runNow string
}

// scheduleAll is the pass's scheduling step: the failure policy and
// pauses (applySuspension), backfill requests, the schedule and
// run-now triggers (schedule), then at most one run that waited: a buffered
// occurrence, or else the next occurrence of a backfill. A pass starts one new
// run at most; the next pass comes at once when more can start.
func (r *GuardedJobReconciler) scheduleAll(ctx context.Context, s *scope, spec *compiledSpec) error {
	if err := r.applySuspension(ctx, s); err != nil {
		return err
	}
	r.serveBackfillRequests(s, spec)
	active, lastRun := len(s.gj.Status.Active), s.gj.Status.LastRun
	if err := r.schedule(ctx, s, spec); err != nil {
		return err
	}
	if s.guardedWriteFailed {
		return nil
	}
	if s.recordLater || len(s.gj.Status.Active) != active || s.gj.Status.LastRun != lastRun {
		// The schedule acted in this pass: what waits starts in the next.
		if len(s.gj.Status.Buffered) > 0 || backfillRunning(s.gj) {
			s.requeueAfter(time.Millisecond)
		}
		return nil
	}
	if waiting, err := r.startRetry(ctx, s, spec); waiting || err != nil { // guardedjob_retry.go
		return err
	}
	if waiting, err := r.startBuffered(ctx, s, spec); waiting || err != nil {
		return err
	}
	if due.BackfillAcceptedNow(s.orig.Status.Backfill, s.gj.Status.Backfill) {
		s.requeueAfter(time.Millisecond) // its first occurrence starts in the next pass
		return nil
	}
	return r.advanceBackfill(ctx, s, spec)
}

// bufferDue keeps a run that is due while earlier runs are active waiting for
// them to end, when the concurrency policy says so (BufferOne, BufferAll; and
// Replace when only backfill runs are active: a backfill occurrence is never
// replaced). It reports whether it handled the run: buffered it, or skipped it
// because the buffer is full.
func (r *GuardedJobReconciler) bufferDue(s *scope, occurrence time.Time, triggered bool, triggerValue string, skip func(string)) bool {
	gj := s.gj
	policy := gj.Spec.ConcurrencyPolicyOrDefault()
	limit := gj.Spec.BufferLimitOrDefault()
	if policy == batchv1alpha1.ReplaceConcurrent && onlyBackfillActive(gj) {
		limit = 1
	}
	if limit == 0 {
		return false
	}
	waitFor := gj.Status.Active[0].JobName
	for _, b := range gj.Status.Buffered {
		if b.ScheduledTime.Equal(&metav1.Time{Time: occurrence}) {
			skip("the run for " + occurrence.UTC().Format(time.RFC3339) + " is waiting already")
			return true
		}
	}
	if n := int32(len(gj.Status.Buffered)); n >= limit { //nolint:gosec // at most 100
		skip(fmt.Sprintf("concurrencyPolicy %s and %d run(s) already wait for %s", policy, n, waitFor))
		return true
	}
	entry := batchv1alpha1.BufferedRun{ScheduledTime: metav1.Time{Time: occurrence}, BufferedAt: metav1.Time{Time: s.now}}
	if triggered {
		entry.RunNow = triggerValue
		entry.Parameters = s.triggerParams
		answerTrigger(gj, triggerValue)
	} else if gj.Status.LastScheduleTime == nil || occurrence.After(gj.Status.LastScheduleTime.Time) {
		gj.Status.LastScheduleTime = &metav1.Time{Time: occurrence}
	}
	gj.Status.Buffered = append(gj.Status.Buffered, entry)
	r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.RunBufferedReason,
		"The run for %s waits for %s to end (concurrencyPolicy %s, %d waiting)", occurrence.UTC().Format(time.RFC3339), waitFor, policy, len(gj.Status.Buffered))
	return true
}

// startBuffered starts the oldest buffered occurrence once no run of this
// GuardedJob is active (nor while it is suspended). It reports whether
// occurrences wait: a backfill then waits for them.
func (r *GuardedJobReconciler) startBuffered(ctx context.Context, s *scope, spec *compiledSpec) (bool, error) {
	gj := s.gj
	if len(gj.Status.Buffered) == 0 {
		return false, nil
	}
	if gj.SuspendedAt(s.now) || len(gj.Status.Active) > 0 {
		return true, nil // a run's end or the resume brings the next pass
	}
	next := gj.Status.Buffered[0]
	gj.Status.Buffered = gj.Status.Buffered[1:]
	if len(gj.Status.Buffered) == 0 {
		gj.Status.Buffered = nil
	}
	// Its start deadline counts from when it could start: when the run it
	// waited for ended (the last run recorded), not from its scheduled time.
	due := next.BufferedAt.Time
	if lr := gj.Status.LastRun; lr != nil && lr.FinishedAt != nil && lr.FinishedAt.After(due) {
		due = lr.FinishedAt.Time
	}
	if len(gj.Status.Buffered) > 0 {
		s.requeueAfter(time.Millisecond)
	}
	// Never as a trigger: status.lastRunNow recorded its run-now value when it
	// was buffered, and a newer one may have been handled since.
	return true, r.recordIntent(ctx, s, spec, next.ScheduledTime.Time, due, false, "", runExtras{parameters: next.Parameters, runNow: next.RunNow})
}

// onlyBackfillActive says whether every active run is a backfill occurrence.
func onlyBackfillActive(gj *batchv1alpha1.GuardedJob) bool {
	for _, run := range gj.Status.Active {
		if run.Backfill == "" {
			return false
		}
	}
	return len(gj.Status.Active) > 0
}
