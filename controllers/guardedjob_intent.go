package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/runparams"
	"github.com/guardedjob/guardedjob/internal/runtoken"
	"github.com/guardedjob/guardedjob/internal/schedule"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// schedule decides whether a run is due (by schedule or by a run-now trigger),
// applies the concurrency policy, records the intent of a new run and starts it.
func (r *GuardedJobReconciler) schedule(ctx context.Context, s *scope, spec *compiledSpec) error {
	gj := s.gj
	deadline := gj.Spec.StartingDeadline()
	unclaimed, adopting, err := r.reapUnclaimedJobs(ctx, s)
	if err != nil || s.guardedWriteFailed {
		return err
	}
	triggerValue, triggered, manual, triggerAt := r.pendingTrigger(s, spec)

	// occurrence is the scheduled time of the run to start; dueAt is when it was
	// due to start (its scheduled time, or later with scheduleJitter).
	var occurrence, dueAt time.Time
	if gj.SuspendedAt(s.now) {
		gj.Status.NextScheduleTime = nil
	} else {
		from := gj.CreationTimestamp.Time
		if gj.Status.LastScheduleTime != nil {
			from = gj.Status.LastScheduleTime.Time
		}
		// With scheduleJitter an occurrence starts up to the jitter after its
		// scheduled time, and may still start until that start + the deadline.
		jitter := gj.Spec.ScheduleJitterOrDefault()
		startOf := func(t time.Time) time.Time { return t.Add(schedule.JitterOffset(string(gj.UID), t, jitter)) }
		scheduled, ok, missed := spec.rules.Schedule.Due(from, s.now, deadline+jitter)
		if missed > 0 && !ok {
			if latest, found := spec.rules.Schedule.Prev(s.now.Add(-deadline)); found {
				gj.Status.LastScheduleTime = &metav1.Time{Time: latest}
				msg := fmt.Sprintf("missed %d run(s), the last due at %s: more than startingDeadlineSeconds (%s) late", missed, latest.UTC().Format(time.RFC3339), deadline)
				runcore.RecordRun(gj, "", latest, "", 0, false, batchv1alpha1.RunResultSkipped, "", msg, s.now)
				runcore.SyncRecent(gj, batchv1alpha1.TriggerSchedule)
				r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.StartingDeadlineExceededReason, "%s", msg)
			}
		}
		next := startOf(spec.rules.Schedule.Next(s.now))
		if ok {
			if start := startOf(scheduled); s.now.Before(start) {
				next = start // its jittered start is still to come
			} else {
				occurrence, dueAt = scheduled, start
			}
		}
		gj.Status.NextScheduleTime = &metav1.Time{Time: next}
		s.requeueAt(next)
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
			gj.Status.LastScheduleTime = &metav1.Time{Time: occurrence}
		} else {
			answerTrigger(gj, triggerValue)
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
		if r.bufferDue(s, occurrence, triggered, triggerValue, skip) { // BufferOne, BufferAll (guardedjob_buffer.go)
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
			gj.Status.LastRunNow = value
			r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.InvalidTriggerReason, "Ignored %s=%q: %v", batchv1alpha1.RunNowAnnotation, value, err)
			return value, false, time.Time{}, time.Time{}
		}
		params, paramErr = runparams.Parse(gj.Annotations[batchv1alpha1.RunNowParametersAnnotation])
	}
	occ, stale, msg := schedule.TriggerOccurrence(spec.rules.Schedule, at, gj.CreationTimestamp.Time, s.now, gj.Spec.StartingDeadline())
	if stale || occ.IsZero() {
		answerTrigger(gj, value)
		runcore.RecordRun(gj, "", at, "", 0, false, batchv1alpha1.RunResultSkipped, "", msg, s.now)
		runcore.SyncRecent(gj, batchv1alpha1.TriggerRunNow)
		runcore.NoteRequest(gj, value)
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.TriggerSkippedReason, "Skipped trigger %s: %s", value, msg)
		return value, false, time.Time{}, time.Time{}
	}
	if r.refuseTriggerParameters(s, value, occ, params, paramErr) { // guardedjob_params.go
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

// recordIntent starts a new run: everything needed to acquire, renew and release
// it (phase Acquiring), then its acquisition. Nothing is written before the
// acquisition: the run's first status write records the intent together with
// the fence it got (or, when it cannot start now, the intent alone, for its
// retries, or its result), with a resourceVersion precondition, and only then is
// its Job created (see acquire). A manager that dies between the acquisition and
// that write leaves a lease no status names; its token says which object,
// occurrence and cluster it was minted for, and the next pass takes it up.
func (r *GuardedJobReconciler) recordIntent(ctx context.Context, s *scope, spec *compiledSpec, occurrence, dueAt time.Time, triggered bool, triggerValue string, extras runExtras) error {
	gj := s.gj
	run, err := r.runFromSpec(gj, spec, occurrence)
	if err != nil {
		var se *specerror.Error
		if errors.As(err, &se) {
			runcore.SetNotReady(gj, se.Reason, se.Message, s.now)
			r.warnOnce(s, se.Reason, se.Message)
			return nil
		}
		return err
	}
	run.StartDeadline = &metav1.Time{Time: dueAt.Add(gj.Spec.StartingDeadline())}
	run.Backfill, run.Parameters, run.Retry = extras.backfill, extras.parameters, extras.retry
	switch {
	case triggered:
		run.RunNow = triggerValue
	case extras.runNow != "":
		run.RunNow = extras.runNow
	}
	token, jobName, err := runtoken.Mint(r.runIdentity(gj, &run))
	if err != nil {
		return err
	}
	run.JobName, run.Phase = jobName, batchv1alpha1.RunPhaseAcquiring
	run.Holder, run.Token = leasetoken.HolderOf(token), token
	gj.Status.Active = append(gj.Status.Active, run)
	runcore.RecordLease(gj, &gj.Status.Active[len(gj.Status.Active)-1], s.now)
	r.claimShard(gj)
	if triggered {
		answerTrigger(gj, triggerValue)
	}
	if gj.Status.LastScheduleTime == nil || occurrence.After(gj.Status.LastScheduleTime.Time) {
		gj.Status.LastScheduleTime = &metav1.Time{Time: occurrence}
	}
	s.requeueAfter(activeResync)
	s.unrecorded = jobName
	return r.advanceRun(ctx, s, runcore.RunByName(gj, jobName))
}

// runFromSpec is what the spec says a run of the occurrence at scheduled holds
// (its keys, store and lease timing), before it has a token, a Job or a phase:
// the snapshot a run takes when it starts, and what a run found elsewhere (a
// Job's annotation, which anyone who may create Jobs can write) must match. The
// keys are checked against the namespace's grants. Errors are
// *specerror.Error, or store errors.
func (r *GuardedJobReconciler) runFromSpec(gj *batchv1alpha1.GuardedJob, spec *compiledSpec, scheduled time.Time) (batchv1alpha1.ActiveRun, error) {
	keys, err := spec.keys(r, gj, scheduled)
	if err != nil {
		return batchv1alpha1.ActiveRun{}, err
	}
	return batchv1alpha1.ActiveRun{
		ScheduledTime:      metav1.Time{Time: scheduled},
		Key:                keys.Lock,
		OccurrenceKey:      keys.Occurrence,
		FenceKey:           keys.Fence,
		Store:              spec.store.Identity(),
		Cluster:            r.ClusterName,
		OwnerUID:           gj.UID,
		TTL:                metav1.Duration{Duration: gj.Spec.Lock.TTLOrDefault()},
		RenewInterval:      metav1.Duration{Duration: gj.Spec.Lock.RenewIntervalOrDefault()},
		MaxHold:            metav1.Duration{Duration: gj.Spec.Lock.MaxHoldOrDefault()},
		EnvName:            gj.Spec.Fencing.EnvNameOrDefault(),
		FencingPolicy:      gj.Spec.Fencing.PolicyOrDefault(),
		StoreFailurePolicy: gj.Spec.Lock.StoreFailurePolicyOrDefault(),
		PodGuard:           spec.guard.DeepCopy(),
	}, nil
}

// runIdentity is what a run's token is minted for: this cluster, the object and
// the occurrence, and what started the run.
func (r *GuardedJobReconciler) runIdentity(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) runtoken.Run {
	return runtoken.Run{Cluster: r.ClusterName, Namespace: gj.Namespace, Name: gj.Name, UID: string(gj.UID),
		Occurrence: run.ScheduledTime.Time, Start: runcore.StartOf(run)}
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
		handled[pending[i].Name] = true
	}
	for i := range jobs {
		job := &jobs[i]
		if runcore.RunByName(s.gj, job.Name) != nil || handled[job.Name] {
			continue
		}
		if _, finished := jobFinished(job); finished {
			// Complete or Failed: the Job controller saw every Pod end (the Pod
			// objects stay, finished, until the Job goes).
			if err := r.dropLeaseFinalizer(ctx, job.Namespace, job.Name); err != nil {
				return "", false, err
			}
			continue
		}
		if !job.DeletionTimestamp.IsZero() {
			left, err := r.podsLeft(ctx, job.Namespace, job.Name)
			if err != nil {
				return "", false, err
			}
			if left == 0 {
				if err := r.dropLeaseFinalizer(ctx, job.Namespace, job.Name); err != nil {
					return "", false, err
				}
				continue
			}
			running = job.Name
			continue
		}
		running = job.Name
		r.pokeStopper(job.Namespace, job.Name) // it stops the Job and says so
	}
	return running, adopting, nil
}
