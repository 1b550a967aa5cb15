package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/runtoken"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// storeRetry is how soon an acquisition or release the store did not answer is
// tried again.
const storeRetry = 5 * time.Second

// activeResync bounds how long a pass may go without looking at an active run,
// as a safety net under the watches and keeper reports.
const activeResync = time.Minute

// resumed marks a lease this process did not acquire itself (after a restart or
// a leader change, or a FailOpen run started without one): the keeper renews it
// at once and counts its deadline from the run's recorded evidence only.
var resumed time.Time

// observeRuns moves every active run along its phases.
func (r *GuardedJobReconciler) observeRuns(ctx context.Context, s *scope) error {
	runs := append([]batchv1alpha1.ActiveRun(nil), s.gj.Status.Active...)
	for i := range runs {
		run := runcore.RunByName(s.gj, runs[i].JobName)
		if run == nil {
			continue
		}
		if err := r.advanceRun(ctx, s, run); err != nil {
			return err
		}
	}
	if len(s.gj.Status.Active) > 0 {
		s.requeueAfter(activeResync)
	}
	return nil
}

// advanceRun moves one active run along its phases, as far as it can go in this
// pass. A write that must be durable before its side effect (the intent, the
// fence) is made with a resourceVersion precondition; the run goes on with the
// object that write returned.
func (r *GuardedJobReconciler) advanceRun(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun) error {
	if !r.ownsRun(s.gj, run) {
		msg := fmt.Sprintf("run %s was recorded by cluster %q for object %s; it is not resumed here and its lease is left alone", run.JobName, run.Cluster, run.OwnerUID)
		switch runcore.Foreign(run.Phase) {
		case runcore.ForeignEnd:
			runcore.FinishRun(s.gj, *run, runcore.NeverHeld, batchv1alpha1.RunResultFailed, "", msg, s.now)
			return nil
		case runcore.ForeignStop:
			if err := r.beginStop(s, run, batchv1alpha1.RunResultFailed, msg, batchv1alpha1.StaleJobReason, batchv1alpha1.LockStateLost, ""); err != nil {
				return err
			}
		}
	}
	store, err := r.runStore(ctx, s.gj, run)
	if err != nil {
		// The run's store cannot be resolved (its Secret changed or is gone
		// since the run started): its lease can be neither renewed nor
		// released, so its Pods are stopped and the lease is left to expire.
		runcore.SetStoreReachable(s.gj, err, s.now)
		return r.orphanedStore(ctx, s, run, err)
	}
	// The phases never call each other: a phase that moved the run on and
	// wants the next one in this pass says so (scope.next), and the run is
	// dispatched again on its new phase, found again by name (a guarded write
	// replaces the status it points into).
	name := run.JobName
	for {
		phase := run.Phase
		var err error
		switch phase {
		case batchv1alpha1.RunPhaseAcquiring:
			err = r.acquire(ctx, s, run, store)
		case batchv1alpha1.RunPhaseRunning:
			err = r.running(ctx, s, run, store)
		case batchv1alpha1.RunPhaseStopping:
			err = r.stopping(ctx, s, run, store)
		case batchv1alpha1.RunPhaseReleasing:
			err = r.release(ctx, s, run, store)
		}
		goOn := s.goOn == name
		s.goOn = ""
		if err != nil || !goOn {
			return err
		}
		if run = runcore.RunByName(s.gj, name); run == nil || run.Phase == phase {
			return nil
		}
	}
}

// orphanedStore handles a run whose store cannot be resolved.
func (r *GuardedJobReconciler) orphanedStore(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, cause error) error {
	msg := "the run's store cannot be resolved: " + cause.Error()
	left := 0
	if runcore.UnresolvedCountsPods(run.Phase) {
		var err error
		if left, err = r.podsLeft(ctx, s.gj.Namespace, run.JobName); err != nil {
			return err
		}
	}
	switch runcore.Unresolved(run.Phase, left) {
	case runcore.UnresolvedEnd:
		runcore.FinishRun(s.gj, *run, runcore.LeftToExpire(run, s.now, r.ClockSkew), batchv1alpha1.RunResultStoreUnavailable, "", msg, s.now)
	case runcore.UnresolvedStop:
		logStep(ctx, runcore.StopUnresolved, "job", run.JobName)
		return r.beginStop(s, run, batchv1alpha1.RunResultStoreUnavailable, msg, batchv1alpha1.StoreUnavailableReason, batchv1alpha1.LockStateStoreDown, "")
	case runcore.UnresolvedWaitPods:
		s.requeueAfter(storeRetry)
	case runcore.UnresolvedEndAfterPods:
		if err := r.dropLeaseFinalizer(ctx, s.gj.Namespace, run.JobName); err != nil {
			return err
		}
		r.untrack(run.Token)
		runcore.FinishRun(s.gj, *run, runcore.LeftToExpire(run, s.now, r.ClockSkew), batchv1alpha1.RunResultStoreUnavailable, "", msg+"; the lease was left to expire", s.now)
	}
	return nil
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
	r.claimShard(ctx, gj)
	if triggered {
		runcore.AnswerRunNow(gj, triggerValue)
	}
	due.NoteScheduled(&gj.Status, occurrence)
	s.requeueAfter(activeResync)
	s.unrecorded = jobName
	return r.advanceRun(ctx, s, runcore.RunByName(gj, jobName))
}
