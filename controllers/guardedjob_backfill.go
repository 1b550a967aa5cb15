package controllers

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// A backfill runs every occurrence of the schedule in a range through the lock,
// as if each were due now: the batch.guardedjob.dev/backfill request (made by
// kubectl guardedjob backfill, or by hand), carried out by the manager, so a
// tenant needs no store credentials. Its whole state is status.backfill: a
// restarted manager goes on from there. An occurrence whose done-marker exists
// (it succeeded anywhere: this cluster, another sharing the store, an earlier
// backfill) is skipped by the acquisition itself; one whose lock another
// holder has is tried again later, never given up: so the same backfill started
// in several clusters runs each occurrence once, wherever it gets the lock
// first, and every cluster ends with each occurrence run or skipped.

// backfillRunning says whether a backfill is in progress.
func backfillRunning(gj *batchv1alpha1.GuardedJob) bool {
	return gj.Status.Backfill != nil && gj.Status.Backfill.State == batchv1alpha1.BackfillRunning
}

// serveBackfillRequests handles the backfill and backfill-cancel annotations.
// It writes status only: the occurrences start in advanceBackfill.
func (r *GuardedJobReconciler) serveBackfillRequests(s *scope, spec *compiledSpec) {
	gj := s.gj
	ann := gj.Annotations
	if v := ann[batchv1alpha1.BackfillCancelAnnotation]; v != "" {
		if b := gj.Status.Backfill; b != nil && b.Request == v && b.State == batchv1alpha1.BackfillRunning {
			r.cancelBackfill(s, b)
		}
	}
	value := ann[batchv1alpha1.BackfillAnnotation]
	if value == "" || (gj.Status.LastBackfillRequest != nil && gj.Status.LastBackfillRequest.Request == due.Clip(value, runcore.MaxRequestValue)) {
		r.serveBackfillObjects(s, spec)
		return
	}
	r.deprecatedAnnotation(s, batchv1alpha1.BackfillAnnotation, value, "GuardedJobBackfill")
	rec := &batchv1alpha1.BackfillRequestRecord{Request: due.Clip(value, runcore.MaxRequestValue), HandledAt: metav1.Time{Time: s.now}}
	gj.Status.LastBackfillRequest = rec
	b, err := r.acceptBackfill(s, spec, value)
	if err != nil {
		rec.Result, rec.Message = batchv1alpha1.BackfillRefused, err.Error()
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.BackfillRefusedReason, "Refused %s=%s: %s", batchv1alpha1.BackfillAnnotation, rec.Request, rec.Message)
		return
	}
	rec.Result = batchv1alpha1.BackfillAccepted
	rec.Message = fmt.Sprintf("%d occurrence(s) from %s to %s, %d at a time", b.Total,
		b.From.UTC().Format(time.RFC3339), b.To.UTC().Format(time.RFC3339), b.Parallelism)
	gj.Status.Backfill = b
	r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.BackfillStartedReason, "Backfill %s: %s", b.Request, rec.Message)
}

// acceptBackfill checks a backfill request and returns its initial state.
func (r *GuardedJobReconciler) acceptBackfill(s *scope, spec *compiledSpec, value string) (*batchv1alpha1.BackfillStatus, error) {
	gj := s.gj
	ann := gj.Annotations
	at, err := due.ParseRequestTime(value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", batchv1alpha1.BackfillAnnotation, err)
	}
	if d := s.now.Sub(at); d > batchv1alpha1.BackfillRequestWindow || d < -batchv1alpha1.BackfillRequestWindow {
		return nil, fmt.Errorf("the request's time %s is more than %s from the manager's clock (%s): a request is carried out only when it is fresh (not, say, from a manifest applied later); ask again",
			at.UTC().Format(time.RFC3339), batchv1alpha1.BackfillRequestWindow, s.now.UTC().Format(time.RFC3339))
	}
	if b := gj.Status.Backfill; b != nil && b.State == batchv1alpha1.BackfillRunning {
		return nil, fmt.Errorf("backfill %s is running (%d occurrence(s) remaining): cancel it first (kubectl guardedjob backfill %s --cancel, or annotate %s=%s)",
			b.Request, b.Remaining, gj.Name, batchv1alpha1.BackfillCancelAnnotation, b.Request)
	}
	from, err := schedule.ParseBackfillTime(batchv1alpha1.BackfillFromAnnotation, ann[batchv1alpha1.BackfillFromAnnotation])
	if err != nil {
		return nil, err
	}
	to, err := schedule.ParseBackfillTime(batchv1alpha1.BackfillToAnnotation, ann[batchv1alpha1.BackfillToAnnotation])
	if err != nil {
		return nil, err
	}
	parallelism, err := parseParallelism(ann[batchv1alpha1.BackfillParallelismAnnotation])
	if err != nil {
		return nil, err
	}
	return newBackfill(s, spec, value, from, to, parallelism)
}

// parseParallelism reads the backfill-parallelism annotation: empty is 1.
func parseParallelism(v string) (int32, error) {
	if v == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > batchv1alpha1.MaxBackfillParallelism {
		return 0, fmt.Errorf("%s %q must be a whole number from 1 to %d", batchv1alpha1.BackfillParallelismAnnotation, due.Clip(v, 16), batchv1alpha1.MaxBackfillParallelism)
	}
	return int32(n), nil //nolint:gosec // at most 10
}

// cancelBackfill stops a backfill: occurrences not running now never start;
// those running go on, and are counted when they end.
func (r *GuardedJobReconciler) cancelBackfill(s *scope, b *batchv1alpha1.BackfillStatus) {
	endBackfill(s, b)
	b.Message = fmt.Sprintf("cancelled at %s: %d succeeded, %d skipped, %d failed, %d not run (%d still running)",
		s.now.UTC().Format(time.RFC3339), b.Succeeded, b.Skipped, b.Failed, b.Remaining-int32(len(b.Current)), len(b.Current)) //nolint:gosec // at most 10
	r.event(s.gj, nil, corev1.EventTypeNormal, batchv1alpha1.BackfillCancelledReason, "Backfill %s %s", b.Request, b.Message)
}

// endBackfill ends a backfill as Cancelled: occurrences not running now never
// start; those running go on, and are counted when they end.
func endBackfill(s *scope, b *batchv1alpha1.BackfillStatus) {
	running := b.Current[:0]
	for _, e := range b.Current {
		if due.BackfillOccurrenceRunning(s.gj, b.Request, e.ScheduledTime) {
			running = append(running, e)
		}
	}
	b.Current = nilIfEmpty(running)
	b.Next = nil
	b.State = batchv1alpha1.BackfillCancelled
	b.FinishedAt = &metav1.Time{Time: s.now}
}

// expireBackfill ends a backfill that ran out of time to start occurrences:
// those running now go on, and are counted when they end; the others are not
// run.
func (r *GuardedJobReconciler) expireBackfill(s *scope, b *batchv1alpha1.BackfillStatus, until time.Time) {
	endBackfill(s, b)
	b.Message = fmt.Sprintf("stopped at %s: a backfill starts occurrences until %s (%s after its request), while the done-markers of the runs it made in any cluster live; %d succeeded, %d skipped, %d failed, %d not run (%d still running)",
		s.now.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339), batchv1alpha1.BackfillDoneMarkerTTL,
		b.Succeeded, b.Skipped, b.Failed, b.Remaining-int32(len(b.Current)), len(b.Current)) //nolint:gosec // at most 10
	r.event(s.gj, nil, corev1.EventTypeWarning, batchv1alpha1.BackfillCancelledReason, "Backfill %s %s", b.Request, b.Message)
}

// advanceBackfill carries out what due.NextBackfill decides for a running
// backfill: its next occurrence starts, or it finishes, or it stops starting
// occurrences (with their events and messages). Buffered runs and retries come
// first: scheduleAll calls it only when none waits.
func (r *GuardedJobReconciler) advanceBackfill(ctx context.Context, s *scope, spec *compiledSpec) error {
	gj := s.gj
	step := due.NextBackfill(gj, spec.rules.Schedule, s.ahead, s.now)
	if !step.LookAt.IsZero() {
		s.requeueAt(step.LookAt)
	}
	if step.RetryAfter > 0 {
		s.requeueAfter(step.RetryAfter)
	}
	b := gj.Status.Backfill
	switch step.Act {
	case due.BackfillFinished:
		b.State = batchv1alpha1.BackfillComplete
		b.FinishedAt = &metav1.Time{Time: s.now}
		b.Message = fmt.Sprintf("finished: %d succeeded, %d skipped (done already), %d failed", b.Succeeded, b.Skipped, b.Failed)
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.BackfillFinishedReason, "Backfill %s %s", b.Request, b.Message)
	case due.BackfillExpired:
		r.expireBackfill(s, b, step.Until)
	case due.BackfillStart:
		s.requeueAfter(time.Millisecond) // another slot may be free
		return r.recordIntent(ctx, s, spec, step.Occurrence, s.now, false, "", runExtras{backfill: b.Request})
	}
	return nil
}

// markerTTLForRun is the done-marker lifetime of a run's occurrence: as for
// any run, and for a backfill occurrence at least BackfillDoneMarkerTTL (plus
// lock.keepAfterSuccess), so that the same backfill started in another cluster
// within that time skips it. A past occurrence's marker would otherwise live
// only minutes.
func markerTTLForRun(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, now time.Time) time.Duration {
	ttl := markerTTLFor(gj, run.ScheduledTime.Time, now)
	if run.Backfill != "" {
		// At least until the same backfill in another cluster stops starting
		// occurrences (due.BackfillStartsUntil): its request's time may be up to
		// BackfillRequestWindow ahead of the moment this run started.
		ttl = max(ttl, batchv1alpha1.BackfillDoneMarkerTTL+batchv1alpha1.BackfillRequestWindow+leasetiming.MarkerMargin+gj.Spec.Lock.KeepAfterSuccessOrDefault())
	}
	return ttl
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// serveBackfillObjects starts the oldest open GuardedJobBackfill when no
// backfill runs, cancels the running one when its request asks, and cancels
// or refuses requests that cannot start. Requests start one at a time, in the
// order they were created, and only once every earlier one is answered as
// finished: a backfill's final counts are copied to its request before
// status.backfill is taken by the next.
func (r *GuardedJobReconciler) serveBackfillObjects(s *scope, spec *compiledSpec) {
	gj, set := s.gj, s.requests
	if set == nil {
		return
	}
	for _, req := range set.backfills {
		value := req.RequestValue()
		if req.Status.Phase.Final() || !req.DeletionTimestamp.IsZero() {
			continue
		}
		if b := gj.Status.Backfill; b != nil && b.Request == value {
			if req.Spec.Cancel && b.State == batchv1alpha1.BackfillRunning {
				r.cancelBackfill(s, b)
			}
			return // its answer follows status.backfill; the next waits for it
		}
		if req.Status.AcceptedAt != nil {
			return // accepted, and its final state is not written to it yet
		}
		if req.Spec.Cancel {
			set.refuse(value, "cancelled before it started")
			continue
		}
		if backfillRunning(gj) {
			return // waits for the running backfill
		}
		b, err := r.acceptBackfillObject(s, spec, req, value)
		if err != nil {
			set.refuse(value, err.Error())
			r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.BackfillRefusedReason, "Refused GuardedJobBackfill %s: %v", req.Name, err)
			continue
		}
		gj.Status.Backfill = b
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.BackfillStartedReason, "Backfill %s (GuardedJobBackfill %s): %d occurrence(s) from %s to %s, %d at a time",
			value, req.Name, b.Total, b.From.UTC().Format(time.RFC3339), b.To.UTC().Format(time.RFC3339), b.Parallelism)
		return
	}
}
