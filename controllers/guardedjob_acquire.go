package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
	"github.com/guardedjob/guardedjob/internal/leadership"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// acquire takes the lease of a run. On success the run starts (start): its Job
// created behind its start gate, carrying the run (createFirst), then the run
// recorded with its fence and Job (phase Running), and the gate opened with
// the object that write returned.
func (r *GuardedJobReconciler) acquire(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client) error {
	gj := s.gj
	unrecorded := s.unrecorded == run.JobName
	// A recorded run waiting to acquire again (busy, store down) whose
	// earlier pass created its Job and then failed its status write.
	job, err := r.jobWaitingFor(ctx, s, run)
	if err != nil || job != nil {
		if err == nil {
			_, err = r.adoptUnrecorded(ctx, s, job, run)
		}
		return err
	}
	sched, _ := schedule.Parse(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	if why := due.Late(&gj.Spec, sched, run, acquireAttempted(gj, run), s.now); why != "" {
		return r.skipLate(ctx, s, run, store, why)
	}
	deadline := due.StartDeadline(&gj.Spec, sched, run)
	floor := runcore.FenceFloor(run, gj.Status.LastFence)
	if run.FencingPolicy == batchv1alpha1.FencingStrict && r.EarlyGate {
		// A Job's run may have worked before status recorded its fence.
		jobs, err := r.ownedJobs(ctx, gj)
		if err != nil {
			return err
		}
		floor = runcore.FenceFloor(run, runcore.FloorWithJobs(gj.Status.LastFence, jobRecordsOf(gj, jobs)))
	}
	acquire := func() (lockclient.Lease, error) {
		return r.acquireLease(ctx, store, lockclient.AcquireRequest{
			Keys:  leaseOf(run).Keys,
			Token: run.Token, TTL: run.TTL.Duration, Floor: floor, Policy: fencePolicy(run.FencingPolicy),
		})
	}
	lease, err := acquire()
	var (
		busy     *lockclient.BusyError
		done     *lockclient.DoneError
		storeErr *lockclient.StoreError
	)
	var ledgerNote string
	if unrecorded && errors.As(err, &busy) {
		took, refused, terr := r.takeUpOrphan(ctx, s, run, store, busy.Holder)
		switch {
		case terr != nil:
			return terr
		case took:
			lease, err = acquire()
		default:
			ledgerNote = refused
		}
	}
	answer := runcore.Acquired
	switch {
	case errors.Is(err, leadership.ErrNotLeading):
		return err // nothing was sent; the pass ends and writes nothing
	case err == nil:
	case errors.As(err, &busy):
		answer = runcore.KeyBusy
	case errors.As(err, &done):
		answer = runcore.OccurrenceDone
	case errors.Is(err, lockclient.ErrNotAllowed): // before a store error, which may wrap it
		answer = runcore.StoreRefused
	case errors.As(err, &storeErr):
		answer = runcore.StoreSilent
	default:
		answer = runcore.StoreRefused
	}
	_, untilDone := retryBusyUntil(gj, run, s.now) // deadline counts it (due.StartDeadline)
	view := runcore.AcquireView{Run: run, Answer: answer, NextStoreTry: s.now.Add(storeRetry), Deadline: deadline, Now: s.now, ClockSkew: r.ClockSkew,
		OnBusyRetry: gj.Spec.Lock.OnBusyOrDefault() == batchv1alpha1.OnBusyRetry, RetriesOccurrence: untilDone}
	if answer == runcore.KeyBusy {
		if next, ok := busyRetry(gj).NextAttempt(runDueTime(gj, run), s.now, deadline); ok {
			view.NextTry = next
		}
	}
	v := runcore.AfterAcquire(view)

	switch answer {
	case runcore.Acquired:
		if waitedBusy(gj, run) {
			observeLockWait(lockWaitAcquired, s.now.Sub(runDueTime(gj, run)))
		}
		runcore.RecordAcquired(gj, run, lease.Fence, s.now)
		logStep(ctx, acquireStep(run), "job", run.JobName, "fence", run.Fence)
		r.track(gj, run, store, lease.SentAt)
		return r.start(ctx, s, run, store, lease, floor, unrecorded)

	case runcore.KeyBusy:
		runcore.SetStoreReachable(gj, nil, s.now)
		holder := leasetoken.HolderOf(busy.Holder)
		runcore.SetLock(gj, batchv1alpha1.LockStateBusy, run.Key, holder, 0)
		msg := fmt.Sprintf("lock %s is held by %s, expires in %s", run.Key, holder, busy.TTL.Round(time.Second))
		if ledgerNote == "" {
			ledgerNote = runcore.LedgerSays(gj, holder, s.now)
		}
		if ledgerNote != "" {
			msg += " (" + ledgerNote + ")"
		}
		if v.Act == runcore.TryAgainAt {
			runcore.SetLockHeld(gj, batchv1alpha1.LockBusyReason, msg+"; retrying until "+deadline.UTC().Format(time.RFC3339), s.now)
			s.requeueAt(v.At)
			return nil
		}
		if v.GaveUp {
			if untilDone {
				msg += "; gave up when its occurrence's tries stopped (spec.retryOccurrence)"
			} else {
				msg += "; gave up at the starting deadline"
			}
			observeLockWait(lockWaitGaveUp, s.now.Sub(runDueTime(gj, run)))
		}
		runcore.FinishRun(gj, *run, v.Lease, v.Result, holder, msg, s.now)
		runcore.SetLockHeld(gj, batchv1alpha1.LockBusyReason, msg, s.now)
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.LockBusyReason, "Skipped %s: %s", run.JobName, msg)
		return nil

	case runcore.OccurrenceDone:
		runcore.SetStoreReachable(gj, nil, s.now)
		holder := leasetoken.HolderOf(done.By)
		msg := fmt.Sprintf("occurrence %s already done by %s", run.OccurrenceKey, holder)
		// The script released the key if this run held it (a retried call).
		r.untrack(run.Token)
		runcore.FinishRun(gj, *run, v.Lease, v.Result, holder, msg, s.now)
		runcore.SetLockHeld(gj, "", "", s.now)
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.TriggerSkippedReason, "Skipped %s: %s", run.JobName, msg)
		return nil

	case runcore.StoreSilent:
		runcore.SetStoreReachable(gj, err, s.now)
		runcore.SetLock(gj, batchv1alpha1.LockStateStoreDown, run.Key, "", 0)
		switch v.Act {
		case runcore.StartUnguarded:
			return r.startUnguarded(ctx, s, run, store, err)
		case runcore.TryAgainAt:
			s.requeueAt(v.At)
			return nil
		}
		msg := fmt.Sprintf("the lock store did not answer until the starting deadline: %v", err)
		note, end := r.releaseUnconfirmed(ctx, gj, run, store, s.now)
		runcore.FinishRun(gj, *run, end, v.Result, "", msg+note, s.now)
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.StoreUnavailableReason, "Did not start %s: %s", run.JobName, msg)
		return nil
	}

	// Refused: retrying cannot help until the store, the flag or the spec
	// changes. Nothing was written, but an earlier attempt of the run may
	// hold the key (the lease is left to expire).
	reason, msg := batchv1alpha1.InvalidKeyReason, err.Error()
	var wrongType *lockclient.WrongTypeError
	switch {
	case errors.Is(err, lockclient.ErrNotAllowed):
		// An address the store announced (a Sentinel's master, a Cluster node)
		// is outside --store-allow: no connection was made.
		reason, msg = batchv1alpha1.StoreNotAllowedReason, "the lock store announced an address outside --store-allow; no connection was made: "+err.Error()
	case errors.As(err, &wrongType):
		// Bad data at a key (a hash written by someone else).
		reason = batchv1alpha1.StoreKeyWrongTypeReason
	}
	runcore.FinishRun(gj, *run, v.Lease, v.Result, "", msg, s.now)
	notReady := msg
	if reason != batchv1alpha1.StoreNotAllowedReason {
		notReady += "; runs are tried again at their schedule" // Ready stays False until an acquisition succeeds or the spec changes
	}
	runcore.SetNotReady(gj, reason, notReady, s.now)
	r.event(gj, nil, corev1.EventTypeWarning, reason, "Did not start %s: %s", run.JobName, msg)
	return nil
}

// startUnguarded starts a FailOpen run without a lease while the store is down.
// The keeper takes the key for it, with its own token, once the store answers.
func (r *GuardedJobReconciler) startUnguarded(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client, cause error) error {
	runcore.GoUnguarded(run, s.now)
	r.track(s.gj, run, store, resumed)
	if err := r.writeGuarded(ctx, s); err != nil {
		return err
	}
	if run = runcore.RunByName(s.gj, run.JobName); run == nil {
		return nil
	}
	r.event(s.gj, nil, corev1.EventTypeWarning, batchv1alpha1.UnguardedReason,
		"Starting %s WITHOUT a lease (storeFailurePolicy FailOpen): %v", run.JobName, cause)
	return s.next(run)
}

// takeUpOrphan makes a run that no status records yet the run whose lease a
// manager took and died (or failed its status write) before recording: the key's
// holder value is a token minted by this cluster for this object and occurrence
// that no status ever recorded. The run then has that token and its Job name,
// and acquires again with it (a new fence for the same lease). A token the lease
// ledger knows (its run was recorded: live, left to expire on purpose, or
// released) or whose Job exists is never taken up: take-up is for a lease that
// never had a Job. It returns why a token minted for this run was refused, or ""
// with ok false when the token is not this run's at all.
func (r *GuardedJobReconciler) takeUpOrphan(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client, value string) (ok bool, refused string, err error) {
	_, dup := r.Identity.Duplicate(store.Identity())
	id := runcore.Identity{Duplicate: dup, Settled: r.Identity.Settled(store.Identity())}
	ledger := func(holder string) string { return runcore.LedgerSays(s.gj, holder, s.now) }
	orphan, minted, refused := runcore.TakeUp(value, run.Token, r.runIdentity(s.gj, run), id, s.gj.Status.Active, ledger)
	if !minted || refused != "" {
		return false, refused, nil
	}
	jobName, holder := orphan.JobName, orphan.Holder
	job, err := r.getJobConfirmed(ctx, s.gj.Namespace, jobName)
	if err != nil {
		return false, "", err
	}
	if refused := orphan.JobRefusal(job != nil); refused != "" {
		return false, refused, nil
	}
	runcore.EndLease(s.gj, run, runcore.NeverHeld, s.now) // the token minted for this pass never held the key
	run.JobName, run.Holder, run.Token = jobName, holder, value
	runcore.RecordLease(s.gj, run, s.now)
	s.unrecorded = jobName
	return true, "", nil
}

// busyRetry is the backoff of onBusy Retry (lock.busyRetry): waits that double
// from the initial one up to the cap, each stretched by up to half at random, so
// that runs of many clusters waiting for one key do not retry in step.
func busyRetry(gj *batchv1alpha1.GuardedJob) schedule.BusyRetry {
	return schedule.BusyRetry{
		Initial: gj.Spec.Lock.BusyRetryInitial(), Max: gj.Spec.Lock.BusyRetryMax(),
		Factor: batchv1alpha1.BusyRetryFactor, Jitter: batchv1alpha1.BusyRetryJitter,
	}
}

// acquireAttempted says whether this run has already been tried and is waiting
// to try again (Busy with onBusy Retry, or the store down): such a run ends with
// that result at its deadline, not as Skipped.
func acquireAttempted(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) bool {
	l := gj.Status.Lock
	return l != nil && l.Key == run.Key && (l.State == batchv1alpha1.LockStateBusy || l.State == batchv1alpha1.LockStateStoreDown)
}

// waitedBusy says whether an onBusy Retry run found its key busy before (and so
// has been waiting for it).
func waitedBusy(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) bool {
	l := gj.Status.Lock
	return gj.Spec.Lock.OnBusyOrDefault() == batchv1alpha1.OnBusyRetry && l != nil && l.Key == run.Key && l.State == batchv1alpha1.LockStateBusy
}

// start carries out the start of a run whose lease this pass has just
// acquired, as the core decides it (runcore.NewStart): its Job created first
// when it may be, the guarded status write that records the run, then the
// Job's gate, or the run's Job created in phase Running (status first).
func (r *GuardedJobReconciler) start(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client, lease lockclient.Lease, floor int64, unrecorded bool) error {
	gj := s.gj
	jobFirst := !run.Unguarded && r.leaseConfirmed(gj, run)
	m := runcore.StartFor(jobFirst, r.EarlyGate, !unrecorded, run)
	var (
		job      *batchv1.Job
		warnings []jobbuild.Warning
		writeErr error
	)
	for {
		switch m.Next() {
		case runcore.CreateJobFirst:
			var rejected string
			job, warnings, rejected = r.createFirst(ctx, s, run)
			if rejected != "" {
				r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.JobRejectedReason, "%s", rejected)
				runcore.RejectJob(run, rejected)
			}
			if job != nil {
				run.JobUID = job.UID
				logStep(ctx, runcore.CreateFirst, "job", run.JobName)
			}
			m.Deliver(runcore.StartOutcome{Created: job != nil, Rejected: rejected != ""})
		case runcore.ReleaseRejected:
			return s.next(run)
		case runcore.WriteRecord:
			writeErr = r.writeGuarded(ctx, s)
			m.Deliver(runcore.StartOutcome{WriteOK: writeErr == nil})
		case runcore.AbandonPass:
			if unrecorded && !m.KeepsRenewing() {
				// No status names the run: stop renewing, but leave the lease
				// (and its Job, if created) to the next pass, which takes it
				// up or adopts the Job (or to its ttl). A Job whose gate the
				// early start opened is its run's record: its lease is renewed
				// on until the next pass adopts it.
				r.untrack(run.Token)
			}
			if m.JobCreated() {
				r.memory.created(client.ObjectKeyFromObject(gj), job.Name, job.UID, true)
			}
			return writeErr
		case runcore.Recorded:
			s.unrecorded = ""
			if run = runcore.RunByName(gj, run.JobName); run == nil {
				return nil
			}
			logStep(ctx, m.Record(), "job", run.JobName, "fence", run.Fence)
			r.acquiredEvents(gj, run, store, lease, floor)
			m.Deliver(runcore.StartOutcome{})
		case runcore.RecordLater:
			// The Job is the run's record: this pass writes no status, the
			// lease stays renewed, and the next pass (brought by the Job's
			// update) records the run from the Job.
			r.memory.createdOpen(client.ObjectKeyFromObject(gj), job.Name, job.UID)
			s.recordLater = true
			r.acquiredEvents(gj, run, store, lease, floor)
			return nil
		case runcore.OpenJobGate:
			if m.Early() {
				logStep(ctx, runcore.ConfirmFirst, "job", run.JobName)
			}
			if err := r.jobCreatedFirst(ctx, s, run, job, warnings, store); err != nil {
				return err
			}
			opened := !jobbuild.Gated(job)
			if opened {
				logStep(ctx, openStep(m), "job", run.JobName)
			}
			m.Deliver(runcore.StartOutcome{Opened: opened})
		case runcore.GoRunning:
			// The fence is durable: the Job follows in this pass.
			return s.next(run)
		default: // runcore.StartDone
			return nil
		}
	}
}

// acquiredEvents tells what a run's acquisition made true.
func (r *GuardedJobReconciler) acquiredEvents(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, store *lockclient.Client, lease lockclient.Lease, floor int64) {
	r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.LockAcquiredReason,
		"Acquired lock %s for %s%s", run.Key, run.JobName, runcore.FenceSuffix(lease.Fence))
	if r.insecureStore(store) {
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.InsecureStoreReason,
			"Lock %s is in store %s, whose Secret turns TLS server verification off (insecureSkipVerify): anyone on the network path can pose as that Redis; put its CA into ca.crt instead", run.Key, store.Identity())
	}
	if lease.FenceRaised {
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.FenceRaisedReason,
			"The fence counter %s was at or below the last fence %d (the store lost data?); raised to %d", run.FenceKey, floor, lease.Fence)
	}
}

// openStep names the opening of a Job's gate as the model does: open_first
// before status records its run (the early gate), open after.
func openStep(m *runcore.Starting) runcore.Step {
	if m.Early() {
		return runcore.OpenFirst
	}
	return runcore.Open
}

// acquireStep names an acquisition as the model does: for a run-now request, or
// for the schedule (or a backfill, a buffered or retried occurrence).
func acquireStep(run *batchv1alpha1.ActiveRun) runcore.Step {
	if run.RunNow != "" {
		return runcore.AcquireTrigger
	}
	return runcore.AcquireNext
}
