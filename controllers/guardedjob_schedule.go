package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/runparams"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// What starts now: suspension and pauses, the schedule's occurrences,
// run-now triggers and their parameters, buffered runs, retries of an
// occurrence, and a busy run's occurrence done elsewhere. The decisions are
// internal/due's; here they are asked with what the pass read, and a start is
// handed to recordIntent (guardedjob_runs.go).

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
	if waiting, err := r.startRetry(ctx, s, spec); waiting || err != nil {
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
	ok, why, waitFor := due.Buffering(&gj.Spec, &gj.Status, occurrence)
	switch {
	case !ok:
		return false
	case why != "":
		skip(why)
		return true
	}
	entry := batchv1alpha1.BufferedRun{ScheduledTime: metav1.Time{Time: occurrence}, BufferedAt: metav1.Time{Time: s.now}}
	if triggered {
		entry.RunNow = triggerValue
		entry.Parameters = s.triggerParams
		runcore.AnswerRunNow(gj, triggerValue)
	} else {
		due.NoteScheduled(&gj.Status, occurrence)
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
	if gj.SuspendedAt(s.now) || len(gj.Status.Active) > 0 || !s.mayStartWaiting() {
		return true, nil // a run's end, the resume or the Pods' end brings the next pass
	}
	next := gj.Status.Buffered[0]
	gj.Status.Buffered = gj.Status.Buffered[1:]
	if len(gj.Status.Buffered) == 0 {
		gj.Status.Buffered = nil
	}
	dueAt := due.BufferedDue(next, gj.Status.LastRun)
	if len(gj.Status.Buffered) > 0 {
		s.requeueAfter(time.Millisecond)
	}
	// Never as a trigger: status.lastRunNow recorded its run-now value when it
	// was buffered, and a newer one may have been handled since.
	return true, r.recordIntent(ctx, s, spec, next.ScheduledTime.Time, dueAt, false, "", runExtras{parameters: next.Parameters, runNow: next.RunNow})
}

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
	if pause, reason, reset := due.FailurePause(gj, s.now); reset {
		if pause != nil {
			gj.Status.Pause = pause
			r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.SuspendedAfterFailuresReason,
				"Suspended: %s. Resume with kubectl guardedjob resume %s", reason, gj.Name)
		}
		// Reaching the threshold starts the count again, whether the policy
		// paused the object now or it was suspended already.
		gj.Status.ConsecutiveFailures = 0
	}
	if p := gj.Status.Pause; p != nil {
		switch over, wakeAt := due.PauseOver(p, s.now); {
		case over:
			gj.Status.Pause = nil
			msg := fmt.Sprintf("resumed at %s: status.pause.until %s passed (paused%s)",
				s.now.UTC().Format(time.RFC3339), p.Until.UTC().Format(time.RFC3339), p.Suffix())
			runcore.SetCondition(gj, batchv1alpha1.PausedCondition, metav1.ConditionFalse, batchv1alpha1.PauseExpiredReason, msg, s.now)
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.PauseExpiredReason, "Resumed: status.pause.until %s passed", p.Until.UTC().Format(time.RFC3339))
		case !wakeAt.IsZero():
			s.requeueAt(wakeAt)
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
	if v := gj.Annotations[batchv1alpha1.PauseAnnotation]; v != "" && due.Clip(v, runcore.MaxRequestValue) != gj.Status.LastPauseRequest {
		gj.Status.LastPauseRequest = due.Clip(v, runcore.MaxRequestValue)
		note, err := due.PauseNote(gj.Annotations[batchv1alpha1.PauseNoteAnnotation], s.now)
		if err != nil {
			r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.InvalidPauseRequestReason,
				"Pause request %q not handled: %s=%s; the GuardedJob is not paused", gj.Status.LastPauseRequest, batchv1alpha1.PauseNoteAnnotation, err)
		} else {
			gj.Status.Pause = &batchv1alpha1.Pause{SuspendNote: note, Since: metav1.Time{Time: s.now}, Request: gj.Status.LastPauseRequest}
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.PauseRequestedReason, "Paused%s", note.Suffix())
		}
	}
	if v := gj.Annotations[batchv1alpha1.ResumeAnnotation]; v != "" && due.Clip(v, runcore.MaxRequestValue) != gj.Status.LastResumeRequest {
		gj.Status.LastResumeRequest = due.Clip(v, runcore.MaxRequestValue)
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
	if err := r.patchGuardedJob(ctx, gj, client.RawPatch(types.JSONPatchType, data)); err != nil {
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

// Tries of an occurrence no cluster has done yet (spec.retryOccurrence): what
// they are and when they stop is decided in internal/due; here the retry is
// started, or given up with its event and series.

// retryUntil is when tries of the occurrence at scheduled stop (due.RetryUntil).
func retryUntil(gj *batchv1alpha1.GuardedJob, scheduled, now time.Time) time.Time {
	sched, _ := schedule.Parse(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	return due.RetryUntil(&gj.Spec, sched, scheduled, now)
}

// retryBusyUntil is how long a run that finds its key busy waits for it: with
// spec.retryOccurrence, until its occurrence's tries stop (the holder's run
// may fail, and then this cluster's run does the occurrence); ok is false
// without it, and for backfill and run-now runs, which wait as onBusy says.
func retryBusyUntil(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, now time.Time) (time.Time, bool) {
	if !due.Retries(&gj.Spec, run) {
		return time.Time{}, false
	}
	return retryUntil(gj, run.ScheduledTime.Time, now), true
}

// startRetry starts the next try of the occurrence in status.retry when its
// backoff has passed and no run is active (nor while suspended), or abandons
// it once its tries have stopped: its until passed, a newer occurrence was
// scheduled, or spec.retryOccurrence was removed. It reports whether a retry
// waits (a backfill then waits for it).
func (r *GuardedJobReconciler) startRetry(ctx context.Context, s *scope, spec *compiledSpec) (bool, error) {
	gj := s.gj
	rt := gj.Status.Retry
	if rt == nil {
		return false, nil
	}
	occurrence := rt.ScheduledTime.UTC().Format(time.RFC3339)
	abandon := func(why string) (bool, error) {
		gj.Status.Retry = nil
		s.abandoned = true // counted once the status says so (countWritten)
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.OccurrenceAbandonedReason,
			"Gave up occurrence %s: %s, and no cluster sharing the lock store has done it (%d retries; the last run ended %s: %s)",
			occurrence, why, rt.Attempts, rt.LastResult, rt.LastMessage)
		return false, nil
	}
	switch step := due.NextRetry(gj, s.now); step.Act {
	case due.NoRetry:
		return false, nil
	case due.RetryAbandon:
		return abandon(step.Why)
	case due.RetryRunning:
		return true, nil // its end decides, and brings the next pass
	case due.RetryWaits:
		s.requeueAt(step.At)
		return true, nil
	}
	if !s.mayStartWaiting() {
		return true, nil
	}
	rt.Attempts++
	rt.NotBefore = nil
	r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.OccurrenceRetryingReason,
		"Trying occurrence %s again (retry %d, until %s): its last run ended %s: %s",
		occurrence, rt.Attempts, rt.Until.UTC().Format(time.RFC3339), rt.LastResult, rt.LastMessage)
	return true, r.recordIntent(ctx, s, spec, rt.ScheduledTime.Time, s.now, false, "", runExtras{retry: rt.Attempts})
}

// Parameters of manual runs: a run-now request may set values for the
// parameters spec.parameters declares (the run-now-parameters annotation), and
// nothing else. The run carries them in status.active and its record, its Job in
// env vars and an annotation (internal/jobbuild).

// refuseTriggerParameters refuses a run-now request whose parameters are not
// declared or not allowed: the trigger is handled (status.lastRunNow), the run
// does not start, status.lastRun says why (Skipped) and a Warning event
// InvalidParameters repeats it. It reports whether it refused.
func (r *GuardedJobReconciler) refuseTriggerParameters(s *scope, value string, occurrence time.Time, values map[string]string, err error) bool {
	gj := s.gj
	if err == nil {
		err = runparams.Check(gj.Spec.Parameters, values)
	}
	if err == nil {
		if len(values) > 0 {
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.RunParametersReason,
				"Run-now %s with parameters %s", value, runparams.Describe(values))
		}
		return false
	}
	msg := fmt.Sprintf("run-now %s refused: %v", value, err)
	runcore.AnswerRunNow(gj, value)
	runcore.RecordRun(gj, "", occurrence, "", 0, false, batchv1alpha1.RunResultSkipped, "", msg, s.now)
	runcore.SyncRecent(gj, batchv1alpha1.TriggerRunNow)
	runcore.NoteRequest(gj, value)
	s.requests.refuse(value, msg)
	r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.InvalidParametersReason, "%s", msg)
	return true
}

// Occurrences done in any cluster (status.lastOccurrenceDone). Where the same
// GuardedJob is applied in every cluster that shares the lock store, each
// occurrence runs in the cluster that takes the lock first; the others end
// their run Skipped (the done-marker was there: already done) or Busy (the
// winner still held the lock). Neither is a failure of the GuardedJob, and what
// the alerts ask is whether the occurrence was done anywhere:
//   - Skipped, already done: the acquisition read the marker's holder, and the
//     occurrence is recorded done by it at once (runcore.NoteOccurrenceDone).
//   - Busy, held by a run of the GuardedJob of the same name in another
//     cluster: that run's outcome is not known yet. Later passes read that
//     run's occurrence's done-marker (watchOccurrence), each when the holder's
//     lease would expire unless renewed (every lock.ttl at most), until the
//     marker is there (done by its holder) or the key no longer holds that
//     run (it ended without completing the occurrence: nothing is recorded).

// watchedOccurrence is the occurrence whose outcome the last run waits to learn:
// the one the run of another cluster that held the lock (status.lastRun, Busy)
// was for, with its done-marker key.
type watchedOccurrence struct {
	scheduled time.Time
	marker    string
}

// peerOccurrence returns the occurrence a Busy last run should watch: the lock
// was held by a run of the GuardedJob of the same name in another cluster
// (holder <cluster>/<namespace>/<name>-<scheduled Unix minutes>-<hex>, any
// namespace: each cluster may keep it in its own), and that occurrence is not
// known to be done yet.
func (r *GuardedJobReconciler) peerOccurrence(gj *batchv1alpha1.GuardedJob, spec *compiledSpec) (watchedOccurrence, bool) {
	lr := gj.Status.LastRun
	if lr == nil || lr.Result != batchv1alpha1.RunResultBusy || lr.Key == "" || lr.ScheduledTime == nil {
		return watchedOccurrence{}, false
	}
	minutes, ok := peerRunMinutes(gj.Name, lr.HeldBy, r.ClusterName)
	if !ok {
		return watchedOccurrence{}, false
	}
	w := watchedOccurrence{scheduled: lr.ScheduledTime.Time, marker: lr.OccurrenceKey}
	if lr.ScheduledTime.Unix()/60 != minutes {
		// The holder runs an earlier occurrence (one that lasts longer than the
		// schedule's interval): the schedule's occurrence in its minute.
		start := time.Unix(minutes*60, 0)
		w.scheduled = spec.rules.Schedule.Next(start.Add(-time.Second))
		if w.scheduled.Unix()/60 != minutes {
			return watchedOccurrence{}, false
		}
		k, err := spec.keys(r, gj, w.scheduled)
		if err != nil {
			return watchedOccurrence{}, false
		}
		w.marker = k.Occurrence
	}
	if w.marker == "" {
		return watchedOccurrence{}, false
	}
	if done := gj.Status.LastOccurrenceDone; done != nil && !done.ScheduledTime.Time.Before(w.scheduled) {
		return watchedOccurrence{}, false
	}
	return w, true
}

// peerRunMinutes parses a holder as a run of the GuardedJob named name in a
// cluster other than this one's, and returns the Unix minutes of its occurrence
// (from its Job name, runtoken.JobName).
func peerRunMinutes(name, holder, clusterName string) (int64, bool) {
	cluster, _, job, ok := leasetoken.SplitHolder(holder)
	if !ok || cluster == clusterName {
		return 0, false
	}
	rest, ok := strings.CutPrefix(job, name+"-")
	if !ok {
		return 0, false
	}
	digits, random, ok := strings.Cut(rest, "-")
	if !ok || random == "" || strings.Contains(random, "-") {
		return 0, false
	}
	minutes, err := strconv.ParseInt(digits, 10, 64)
	return minutes, err == nil && minutes > 0
}

// watchOccurrence reads the done-marker of the occurrence a Busy last run lost
// to a run of another cluster (peerOccurrence) and records it done once the
// marker is there. While that run still holds the lock it looks again when the
// run's lease would expire unless renewed; once the key no longer holds it and
// no marker was written, the run ended without completing the occurrence and
// nothing is recorded. A store that does not answer is asked again later.
func (r *GuardedJobReconciler) watchOccurrence(ctx context.Context, s *scope, spec *compiledSpec) {
	if s.guardedWriteFailed || spec == nil {
		return
	}
	gj := s.gj
	w, ok := r.peerOccurrence(gj, spec)
	if !ok {
		return
	}
	lr := gj.Status.LastRun
	st, err := r.inspectKeys(ctx, spec.store, lockclient.Keys{Lock: lr.Key, Occurrence: w.marker})
	switch {
	case err != nil:
		s.requeueAfter(storeRetry)
	case st.Done != "":
		by := leasetoken.HolderOf(st.Done)
		runcore.SetOccurrenceDone(gj, w.scheduled, by, s.now)
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.OccurrenceDoneElsewhereReason,
			"Occurrence %s was done by %s (done-marker %s); run %s had found lock %s held by it",
			w.scheduled.UTC().Format(time.RFC3339), by, w.marker, lr.JobName, lr.Key)
	case leasetoken.HolderOf(st.Holder) == lr.HeldBy:
		ttl := gj.Spec.Lock.TTLOrDefault()
		wait := st.TTL
		if wait <= 0 || wait > ttl {
			wait = ttl
		}
		s.requeueAfter(max(wait, time.Second))
	}
}

// countDoneElsewhere counts, for the metrics, a Busy run whose occurrence was
// found done by another cluster's run: it was the race of two clusters, not a
// lock that no run gets.
func (r *GuardedJobReconciler) countDoneElsewhere(s *scope) {
	done := s.gj.Status.LastOccurrenceDone
	if done == nil || equality.Semantic.DeepEqual(done, s.orig.Status.LastOccurrenceDone) {
		return
	}
	if cluster, _, _, ok := leasetoken.SplitHolder(done.By); ok && cluster == r.ClusterName {
		return
	}
	if lr := s.gj.Status.LastRun; lr == nil || lr.Result != batchv1alpha1.RunResultBusy {
		return
	}
	guardedJobMetrics.busyRunDoneElsewhere(s.gj)
}

// schedule decides whether a run is due (by schedule or by a run-now trigger),
// applies the concurrency policy, records the intent of a new run and starts it.
func (r *GuardedJobReconciler) schedule(ctx context.Context, s *scope, spec *compiledSpec) error {
	gj := s.gj
	deadline := gj.Spec.StartingDeadline()
	unclaimed, adopting, err := r.reapUnclaimedJobs(ctx, s)
	if err != nil || s.guardedWriteFailed {
		return err
	}
	s.ahead = due.Ahead{Adopting: adopting, Unclaimed: unclaimed}
	triggerValue, triggered, manual, triggerAt := r.pendingTrigger(s, spec)

	// occurrence is the scheduled time of the run to start; dueAt is when it was
	// due to start (its scheduled time, or later with scheduleJitter).
	o := due.Scheduled(gj, spec.rules.Schedule, s.now)
	occurrence, dueAt := o.Occurrence, o.DueAt
	if o.Missed > 0 {
		due.NoteScheduled(&gj.Status, o.MissedLast)
		msg := o.MissedMessage(deadline)
		runcore.RecordRun(gj, "", o.MissedLast, "", 0, false, batchv1alpha1.RunResultSkipped, "", msg, s.now)
		runcore.SyncRecent(gj, batchv1alpha1.TriggerSchedule)
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.StartingDeadlineExceededReason, "%s", msg)
	}
	if o.Suspended {
		gj.Status.NextScheduleTime = nil
	} else {
		gj.Status.NextScheduleTime = &metav1.Time{Time: o.Next}
		s.requeueAt(o.Next)
	}
	if triggered {
		occurrence = manual
	}
	if occurrence.IsZero() {
		return nil
	}

	skip := func(msg string) {
		step := runcore.SkipForbid
		if triggered {
			step = runcore.SkipTrigger
		}
		logStep(ctx, step, "occurrence", occurrence.UTC().Format(time.RFC3339))
		if !triggered {
			due.NoteScheduled(&gj.Status, occurrence)
		} else {
			runcore.AnswerRunNow(gj, triggerValue)
		}
		runcore.RecordRun(gj, "", occurrence, "", 0, false, batchv1alpha1.RunResultSkipped, "", msg, s.now)
		trigger := batchv1alpha1.TriggerSchedule
		if triggered {
			trigger = batchv1alpha1.TriggerRunNow
		}
		runcore.SyncRecent(gj, trigger)
		if triggered {
			runcore.NoteRequest(gj, triggerValue)
		}
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.TriggerSkippedReason, "Skipped the run for %s: %s", occurrence.UTC().Format(time.RFC3339), msg)
	}
	ahead := due.Ahead{Occurrence: occurrence, Triggered: triggered, Active: gj.Status.Active, Adopting: adopting, Unclaimed: unclaimed,
		Policy: gj.Spec.ConcurrencyPolicyOrDefault()}
	admit := due.Admit(ahead)
	if admit.Act == due.AskBuffer {
		if r.bufferDue(s, occurrence, triggered, triggerValue, skip) { // BufferOne, BufferAll
			return nil
		}
		admit = due.Contend(ahead)
	}
	switch admit.Act {
	case due.Skip:
		skip(admit.Why)
		return nil
	case due.Replace:
		for _, i := range admit.Victims {
			run := &gj.Status.Active[i]
			if err := r.beginStop(s, run, batchv1alpha1.RunResultFailed,
				"replaced by the run for "+occurrence.UTC().Format(time.RFC3339), batchv1alpha1.JobStoppedReason, batchv1alpha1.LockStateHeld, run.Holder); err != nil {
				return err
			}
		}
		s.requeueAfter(admit.RetryAfter)
		return nil // the new run starts once the old one's Pods are gone
	case due.Wait:
		if admit.RetryAfter > 0 {
			s.requeueAfter(admit.RetryAfter)
		}
		return nil
	}
	if triggered {
		dueAt = triggerAt
	}
	extras := runExtras{}
	if triggered {
		extras.parameters = s.triggerParams
	}
	return r.recordIntent(ctx, s, spec, occurrence, dueAt, triggered, triggerValue, extras)
}

// pendingTrigger reads the run-now request: the run-now annotation's value when
// it is new, else the oldest GuardedJobRun not acted on (requests.go). It
// returns the occurrence to run, or handles a request that is stale or does not
// parse (recorded, with an event).
func (r *GuardedJobReconciler) pendingTrigger(s *scope, spec *compiledSpec) (value string, ok bool, occurrence, at time.Time) {
	gj := s.gj
	value = gj.Annotations[batchv1alpha1.RunNowAnnotation]
	var params map[string]string
	var paramErr error
	if value == "" || value == gj.Status.LastRunNow {
		req := s.requests.nextRunRequest(gj)
		if req == nil {
			return value, false, time.Time{}, time.Time{}
		}
		value, at, params = req.RequestValue(), req.CreationTimestamp.Time, req.Spec.Parameters
	} else {
		r.deprecatedAnnotation(s, batchv1alpha1.RunNowAnnotation, value, "GuardedJobRun")
		var err error
		at, err = schedule.ParseTrigger(value)
		if err != nil {
			runcore.IgnoreRunNow(gj, value)
			r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.InvalidTriggerReason, "Ignored %s=%q: %v", batchv1alpha1.RunNowAnnotation, value, err)
			return value, false, time.Time{}, time.Time{}
		}
		params, paramErr = runparams.Parse(gj.Annotations[batchv1alpha1.RunNowParametersAnnotation])
	}
	occ, stale, msg := schedule.TriggerOccurrence(spec.rules.Schedule, at, gj.CreationTimestamp.Time, s.now, gj.Spec.StartingDeadline())
	if stale || occ.IsZero() {
		runcore.AnswerRunNow(gj, value)
		runcore.RecordRun(gj, "", at, "", 0, false, batchv1alpha1.RunResultSkipped, "", msg, s.now)
		runcore.SyncRecent(gj, batchv1alpha1.TriggerRunNow)
		runcore.NoteRequest(gj, value)
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.TriggerSkippedReason, "Skipped trigger %s: %s", value, msg)
		return value, false, time.Time{}, time.Time{}
	}
	if r.refuseTriggerParameters(s, value, occ, params, paramErr) {
		return value, false, time.Time{}, time.Time{}
	}
	if len(params) > 0 {
		s.triggerParams = params
	}
	// A trigger a little ahead of this manager's clock counts from now.
	if at.After(s.now) {
		at = s.now
	}
	return value, true, occ, at
}

// reapUnclaimedJobs handles Jobs of this GuardedJob that no active run claims:
// one created ahead of its run's status write is adopted or deleted
// (adoptUnrecorded); finished ones lose the lease finalizer once their Pods are
// gone (their run is over); running ones are stopped by the stop controller,
// which re-reads the object before it acts and records why. It returns the
// name of one such Job whose Pods may still run, or "", and whether a Job
// still waits for its adoption.
func (r *GuardedJobReconciler) reapUnclaimedJobs(ctx context.Context, s *scope) (running string, adopting bool, err error) {
	jobs, err := r.ownedJobs(ctx, s.gj)
	if err != nil {
		return "", false, err
	}
	pending, err := r.unrecordedJobsOf(ctx, s, jobs)
	if err != nil {
		return "", false, err
	}
	handled := map[string]bool{}
	for i := range pending {
		waiting, err := r.adoptUnrecorded(ctx, s, &pending[i], nil)
		if err != nil || s.guardedWriteFailed {
			return "", false, err
		}
		adopting = adopting || waiting
		// A Job past its gate that may not be adopted (left to the stop
		// controller) is judged below as any unclaimed Job.
		if waiting || runcore.RunByName(s.gj, pending[i].Name) != nil || !waitingOf(s.gj, &pending[i], r.EarlyGate).Started() {
			handled[pending[i].Name] = true
		}
	}
	for i := range jobs {
		job := &jobs[i]
		if runcore.RunByName(s.gj, job.Name) != nil || handled[job.Name] {
			continue
		}
		// Its run may have worked with no status recording it: status takes
		// its fence and occurrence first (step schedule_past_job), and its
		// lease finalizer stays until that status is written.
		// Only with the early gate: without it no Job's Pods work before
		// status records the run, and what an unclaimed Job's annotations say
		// (anyone who may create Jobs can write them) is not taken in.
		var rec runcore.JobRecord
		if r.EarlyGate {
			rec = jobRecordOf(s.gj, job)
		}
		if runcore.FoldJob(&s.gj.Status, rec) {
			logStep(ctx, runcore.SchedulePastJob, "job", job.Name, "fence", rec.Fence)
			r.event(s.gj, job, corev1.EventTypeWarning, batchv1alpha1.UnrecordedRunCountedReason,
				"Job %s carries a run no status recorded (%s): status counts it now, so that occurrence does not start again and later fences stay above it",
				job.Name, jobRecordText(rec))
		}
		_, finished := jobFinished(job)
		left := runcore.LeftJob{Finished: finished, Deleting: !job.DeletionTimestamp.IsZero(), CaughtUp: runcore.CaughtUp(&s.orig.Status, rec)}
		pods := 0
		if left.CountsPods() {
			if pods, err = r.podsLeft(ctx, job.Namespace, job.Name); err != nil {
				return "", false, err
			}
		}
		act := left.Act(pods)
		switch act {
		case runcore.LeftDropFinalizer:
			logStep(ctx, runcore.DropFinalizer, "job", job.Name)
			if err := r.dropLeaseFinalizer(ctx, job.Namespace, job.Name); err != nil {
				return "", false, err
			}
		case runcore.LeftWaitStatus, runcore.LeftGoneWaitStatus:
			s.requeueAfter(cacheLagRetry)
		case runcore.LeftStop:
			r.pokeStopper(job.Namespace, job.Name) // it stops the Job and says so
		}
		if act.Working() {
			running = job.Name
		}
	}
	return running, adopting, nil
}

// jobRecordText names what a Job carries of its run, for an event.
func jobRecordText(rec runcore.JobRecord) string {
	var parts []string
	if rec.Fence > 0 {
		parts = append(parts, "fence "+strconv.FormatInt(rec.Fence, 10))
	}
	if !rec.Occurrence.IsZero() {
		parts = append(parts, "occurrence "+rec.Occurrence.UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, ", ")
}
