package controllers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// noSendTime marks a lease whose last renewal time is unknown (resumed after a
// restart or a leader change): the keeper renews it at once.
var noSendTime time.Time

// storeRetry is how soon an acquisition or release the store did not answer is
// tried again.
const storeRetry = 5 * time.Second

// activeResync bounds how long a pass may go without looking at an active run,
// as a safety net under the watches and keeper reports.
const activeResync = time.Minute

// leaseOf rebuilds the lease of a run from its status snapshot.
func leaseOf(run *batchv1alpha1.ActiveRun) lockclient.Lease {
	return lockclient.Lease{
		Keys:  lockclient.Keys{Lock: run.Key, Occurrence: run.OccurrenceKey, Fence: run.FenceKey},
		Token: run.Token, TTL: run.TTL.Duration, Fence: run.Fence,
	}
}

func fencePolicy(p batchv1alpha1.FencingPolicy) lockclient.FencePolicy {
	switch p {
	case batchv1alpha1.FencingNone:
		return lockclient.FenceNone
	case batchv1alpha1.FencingStrict:
		return lockclient.FenceStrict
	default:
		return lockclient.FenceInject
	}
}

// keeperOwner is the keeper's opaque owner of a run: enough to find the
// GuardedJob and the Job again from a report.
func keeperOwner(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) string {
	return gj.Namespace + "/" + gj.Name + "/" + run.JobName
}

// track makes sure the keeper renews a run's lease. sentAt is when the acquiring
// call was sent (by the lock client's clock); zero after a restart, when the last
// renewal time is unknown: the keeper then renews at once.
func (r *GuardedJobReconciler) track(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, store *lockclient.Client, sentAt time.Time) {
	if _, ok := r.Keeper.Get(run.Token); ok {
		return
	}
	_ = r.Keeper.Track(trackRequest(gj, run, store, sentAt)) // the lease was validated when it was acquired
}

// trackRequest is what the keeper needs to renew a run's lease.
func trackRequest(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, store *lockclient.Client, sentAt time.Time) lockclient.TrackRequest {
	lease := leaseOf(run)
	lease.SentAt = sentAt
	req := lockclient.TrackRequest{
		Lease: lease, Client: store, Owner: keeperOwner(gj, run), RenewInterval: run.RenewInterval.Duration,
		SelfFence:         run.StoreFailurePolicy != batchv1alpha1.FailOpen,
		StopBudget:        StopBudget(gj.Spec.PodGracePeriod()),
		ReacquireIfAbsent: run.StoreFailurePolicy == batchv1alpha1.FailOpen,
	}
	if run.AcquiredAt != nil && run.MaxHold.Duration > 0 {
		req.MaxHoldUntil = run.AcquiredAt.Add(run.MaxHold.Duration)
	}
	return req
}

// observeRuns moves every active run one step along its phases. A step that must
// be durable before its side effect ends the pass (errPassEnded).
func (r *GuardedJobReconciler) observeRuns(ctx context.Context, s *scope) error {
	runs := append([]batchv1alpha1.ActiveRun(nil), s.gj.Status.Active...)
	for i := range runs {
		run := runByName(s.gj, runs[i].JobName)
		if run == nil {
			continue
		}
		if run.Cluster != r.ClusterName || run.OwnerUID != s.gj.UID {
			// Restored from a backup, or recorded by another cluster: never renew or
			// release a lease this manager did not take.
			finishRun(s.gj, *run, batchv1alpha1.RunResultFailed, "",
				fmt.Sprintf("run %s was recorded by cluster %q for object %s; it is not resumed here", run.JobName, run.Cluster, run.OwnerUID), s.now)
			continue
		}
		store, err := r.runStore(ctx, s.gj, run)
		if err != nil {
			// The run's store cannot be resolved (its Secret changed or is gone
			// since the run started): its lease can be neither renewed nor
			// released, so its Pods are stopped and the lease is left to expire.
			setStoreReachable(s.gj, err, s.now)
			if err := r.orphanedStore(ctx, s, run, err); err != nil {
				return err
			}
			continue
		}
		switch run.Phase {
		case batchv1alpha1.RunPhaseAcquiring:
			err = r.acquire(ctx, s, run, store)
		case batchv1alpha1.RunPhaseRunning:
			err = r.running(ctx, s, run, store)
		case batchv1alpha1.RunPhaseStopping:
			err = r.stopping(ctx, s, run, store)
		case batchv1alpha1.RunPhaseReleasing:
			err = r.release(ctx, s, run, store)
		}
		if err != nil {
			return err
		}
	}
	if len(s.gj.Status.Active) > 0 {
		s.requeueAfter(activeResync)
	}
	return nil
}

// acquire takes the lease of a run whose intent is recorded. On success it records
// the fence (phase Running) before any Job exists, and ends the pass.
func (r *GuardedJobReconciler) acquire(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client) error {
	gj := s.gj
	deadline := run.ScheduledTime.Add(gj.Spec.StartingDeadline())
	if run.StartDeadline != nil {
		deadline = run.StartDeadline.Time
	}
	var floor int64
	if run.FencingPolicy == batchv1alpha1.FencingStrict {
		floor = gj.Status.LastFence
	}
	lease, err := store.Acquire(ctx, lockclient.AcquireRequest{
		Keys:  leaseOf(run).Keys,
		Token: run.Token, TTL: run.TTL.Duration, Floor: floor, Policy: fencePolicy(run.FencingPolicy),
	})
	var (
		busy     *lockclient.BusyError
		done     *lockclient.DoneError
		storeErr *lockclient.StoreError
	)
	switch {
	case err == nil:
		setStoreReachable(gj, nil, s.now)
		run.Phase = batchv1alpha1.RunPhaseRunning
		run.Fence = lease.Fence
		run.AcquiredAt = ptrTime(s.now)
		r.track(gj, run, store, lease.SentAt)
		gj.Status.LastFence = max(gj.Status.LastFence, lease.Fence)
		setLock(gj, batchv1alpha1.LockStateHeld, run.Key, run.Holder, lease.Fence)
		setLockHeld(gj, "", "", s.now)
		if err := r.writeGuarded(ctx, s); !errors.Is(err, errPassEnded) {
			return err
		}
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.LockAcquiredReason,
			"Acquired lock %s for %s%s", run.Key, run.JobName, fenceSuffix(lease.Fence))
		if r.insecureStore(store) {
			r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.InsecureStoreReason,
				"Lock %s is in store %s, whose Secret turns TLS server verification off (insecureSkipVerify): anyone on the network path can pose as that Redis; put its CA into ca.crt instead", run.Key, store.Identity())
		}
		if lease.FenceRaised {
			r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.FenceRaisedReason,
				"The fence counter %s was at or below the last fence %d (the store lost data?); raised to %d", run.FenceKey, floor, lease.Fence)
		}
		return errPassEnded

	case errors.As(err, &busy):
		setStoreReachable(gj, nil, s.now)
		holder := lockclient.HolderOf(busy.Holder)
		setLock(gj, batchv1alpha1.LockStateBusy, run.Key, holder, 0)
		msg := fmt.Sprintf("lock %s is held by %s, expires in %s", run.Key, holder, busy.TTL.Round(time.Second))
		if gj.Spec.Lock.OnBusyOrDefault() == batchv1alpha1.OnBusyRetry {
			if next := s.now.Add(retryBackoff(run, s.now)); next.Before(deadline) {
				setLockHeld(gj, batchv1alpha1.LockBusyReason, msg+"; retrying until "+deadline.UTC().Format(time.RFC3339), s.now)
				s.requeueAt(next)
				return nil
			}
			msg += "; gave up at the starting deadline"
		}
		finishRun(gj, *run, batchv1alpha1.RunResultBusy, holder, msg, s.now)
		setLockHeld(gj, batchv1alpha1.LockBusyReason, msg, s.now)
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.LockBusyReason, "Skipped %s: %s", run.JobName, msg)
		return nil

	case errors.As(err, &done):
		setStoreReachable(gj, nil, s.now)
		holder := lockclient.HolderOf(done.By)
		msg := fmt.Sprintf("occurrence %s already done by %s", run.OccurrenceKey, holder)
		finishRun(gj, *run, batchv1alpha1.RunResultSkipped, holder, msg, s.now)
		setLockHeld(gj, "", "", s.now)
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.TriggerSkippedReason, "Skipped %s: %s", run.JobName, msg)
		return nil

	case errors.As(err, &storeErr):
		setStoreReachable(gj, err, s.now)
		setLock(gj, batchv1alpha1.LockStateStoreDown, run.Key, "", 0)
		if run.StoreFailurePolicy == batchv1alpha1.FailOpen {
			return r.startUnguarded(ctx, s, run, store, err)
		}
		if next := s.now.Add(storeRetry); next.Before(deadline) {
			s.requeueAt(next)
			return nil
		}
		msg := fmt.Sprintf("the lock store did not answer until the starting deadline: %v", err)
		finishRun(gj, *run, batchv1alpha1.RunResultStoreUnavailable, "", msg, s.now)
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.StoreUnavailableReason, "Did not start %s: %s", run.JobName, msg)
		return nil

	default:
		// Bad data at the key (a hash written by someone else) or keys in different
		// Cluster slots: retrying cannot help.
		msg := err.Error()
		finishRun(gj, *run, batchv1alpha1.RunResultFailed, "", msg, s.now)
		setCondition(gj, batchv1alpha1.ReadyCondition, metav1.ConditionFalse, batchv1alpha1.InvalidKeyReason, msg, s.now)
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.InvalidKeyReason, "Did not start %s: %s", run.JobName, msg)
		return nil
	}
}

// orphanedStore handles a run whose store cannot be resolved.
func (r *GuardedJobReconciler) orphanedStore(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, cause error) error {
	msg := "the run's store cannot be resolved: " + cause.Error()
	switch run.Phase {
	case batchv1alpha1.RunPhaseAcquiring:
		finishRun(s.gj, *run, batchv1alpha1.RunResultStoreUnavailable, "", msg, s.now)
		return nil
	case batchv1alpha1.RunPhaseRunning:
		return r.beginStop(s, run, batchv1alpha1.RunResultStoreUnavailable, msg, batchv1alpha1.StoreUnavailableReason, batchv1alpha1.LockStateStoreDown, "")
	default:
		left, err := r.podsLeft(ctx, s.gj.Namespace, run.JobName)
		if err != nil || left > 0 {
			s.requeueAfter(storeRetry)
			return err
		}
		if err := r.dropLeaseFinalizer(ctx, s.gj.Namespace, run.JobName); err != nil {
			return err
		}
		r.Keeper.Untrack(run.Token)
		finishRun(s.gj, *run, batchv1alpha1.RunResultStoreUnavailable, "", msg+"; the lease was left to expire", s.now)
		return nil
	}
}

// startUnguarded starts a FailOpen run without a lease while the store is down.
// The keeper takes the key for it, with its own token, once the store answers.
func (r *GuardedJobReconciler) startUnguarded(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client, cause error) error {
	run.Phase = batchv1alpha1.RunPhaseRunning
	run.Unguarded = true
	run.Fence = 0
	run.AcquiredAt = ptrTime(s.now)
	r.track(s.gj, run, store, s.now)
	if err := r.writeGuarded(ctx, s); !errors.Is(err, errPassEnded) {
		return err
	}
	r.event(s.gj, nil, corev1.EventTypeWarning, batchv1alpha1.UnguardedReason,
		"Starting %s WITHOUT a lease (storeFailurePolicy FailOpen): %v", run.JobName, cause)
	return errPassEnded
}

// retryBackoff is the jittered wait before retrying a busy lock: 5-10s.
func retryBackoff(_ *batchv1alpha1.ActiveRun, _ time.Time) time.Duration {
	return 5*time.Second + rand.N(5*time.Second)
}

// running creates the run's Job if it does not exist yet, and moves the run on
// when its lease is lost or its Job ends.
func (r *GuardedJobReconciler) running(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client) error {
	gj := s.gj
	r.track(gj, run, store, noSendTime)

	// A Job that already ended is released (and its occurrence marked done) even
	// if the lease ran out meanwhile: the marker is written over an absent key,
	// never over another holder.
	job := &batchv1.Job{}
	err := r.Get(ctx, client.ObjectKey{Namespace: gj.Namespace, Name: run.JobName}, job)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get job %s: %w", run.JobName, err)
	}
	exists := err == nil
	if !exists && run.JobUID != "" {
		// The cache may simply not have seen the Job yet: ask the API server before
		// treating it as deleted.
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: gj.Namespace, Name: run.JobName}, job); err == nil {
			s.requeueAfter(cacheLagRetry)
			return nil
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("get job %s: %w", run.JobName, err)
		}
	}
	if exists && job.UID == run.JobUID {
		if finished, ok := jobFinished(job); ok {
			run.Phase = batchv1alpha1.RunPhaseReleasing
			if finished == batchv1.JobComplete {
				run.StopReason = string(batchv1alpha1.RunResultSucceeded) + ": the Job completed"
			} else {
				run.StopReason = string(batchv1alpha1.RunResultFailed) + ": the Job failed: " + jobFailureMessage(job)
			}
			return r.release(ctx, s, run, store)
		}
	}

	if st, ok := r.Keeper.Get(run.Token); ok {
		switch {
		case st.State == lockclient.StateLost:
			holder := lockclient.HolderOf(st.Holder)
			msg := "lock " + run.Key + " was lost"
			if holder != "" {
				msg += ": it is held by " + holder
			} else {
				msg += ": the key is gone"
			}
			return r.beginStop(s, run, batchv1alpha1.RunResultLockLost, msg, batchv1alpha1.LockLostReason, batchv1alpha1.LockStateLost, holder)
		case st.DeadlineReached:
			return r.beginStop(s, run, batchv1alpha1.RunResultStoreUnavailable,
				fmt.Sprintf("the lock store did not answer renewals for %s; stopped before the lease could expire", s.now.Sub(st.LastRenewed).Round(time.Second)),
				batchv1alpha1.StoreUnavailableReason, batchv1alpha1.LockStateStoreDown, "")
		case st.MaxHoldReached:
			return r.beginStop(s, run, batchv1alpha1.RunResultMaxHoldExceeded,
				fmt.Sprintf("the run reached lock.maxHold %s", run.MaxHold.Duration), batchv1alpha1.MaxHoldExceededReason, batchv1alpha1.LockStateHeld, run.Holder)
		}
	}

	switch {
	case !exists && run.JobUID == "":
		return r.createJob(ctx, s, run, store)
	case !exists:
		// The Job is gone although its finalizer should have kept it: treat the run
		// as over once no Pod of it remains.
		return r.beginStop(s, run, batchv1alpha1.RunResultFailed, "the Job "+run.JobName+" was deleted", batchv1alpha1.JobDeletedReason, batchv1alpha1.LockStateHeld, run.Holder)
	}
	if run.JobUID == "" {
		return r.adoptJob(ctx, s, run, job)
	}
	if job.UID != run.JobUID {
		return r.beginStop(s, run, batchv1alpha1.RunResultFailed, "the Job "+run.JobName+" was replaced by another object of that name", batchv1alpha1.StaleJobReason, batchv1alpha1.LockStateHeld, run.Holder)
	}
	if !job.DeletionTimestamp.IsZero() {
		return r.beginStop(s, run, batchv1alpha1.RunResultFailed, "the Job "+run.JobName+" is being deleted", batchv1alpha1.JobDeletedReason, batchv1alpha1.LockStateHeld, run.Holder)
	}
	setLockHeld(gj, "", "", s.now)
	return nil
}

// createJob creates the Job of a run whose fence is recorded.
func (r *GuardedJobReconciler) createJob(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client) error {
	job, warnings := buildJob(s.gj, run)
	if err := r.Create(ctx, job); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil // the next pass adopts or stops it
		}
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			msg := "the API server rejected the Job: " + err.Error()
			r.event(s.gj, nil, corev1.EventTypeWarning, "JobRejected", "%s", msg)
			run.Phase = batchv1alpha1.RunPhaseReleasing
			run.StopReason = string(batchv1alpha1.RunResultFailed) + ": " + msg
			return r.release(ctx, s, run, store)
		}
		return fmt.Errorf("create job %s: %w", run.JobName, err)
	}
	run.JobUID = job.UID
	for _, w := range warnings {
		r.event(s.gj, job, corev1.EventTypeWarning, batchv1alpha1.NoPodFailurePolicyReason, "%s", w)
	}
	if run.Unguarded {
		r.event(s.gj, job, corev1.EventTypeWarning, batchv1alpha1.UnguardedReason, "Created Job %s without a lease (unfenced)", job.Name)
	} else {
		r.event(s.gj, job, corev1.EventTypeNormal, batchv1alpha1.JobCreatedReason, "Created Job %s%s", job.Name, fenceSuffix(run.Fence))
	}
	setLockHeld(s.gj, "", "", s.now)
	return nil
}

// adoptJob records the UID of a Job that exists under the run's name but was not
// recorded (a crash between creating it and writing status). A Job whose fence
// differs from the run's is stale: it is stopped, never adopted.
func (r *GuardedJobReconciler) adoptJob(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, job *batchv1.Job) error {
	want, _ := buildJob(s.gj, run)
	owned := metav1.IsControlledBy(job, s.gj)
	if owned && job.Annotations[batchv1alpha1.FenceAnnotation] == want.Annotations[batchv1alpha1.FenceAnnotation] {
		run.JobUID = job.UID
		return nil
	}
	run.JobUID = job.UID
	msg := fmt.Sprintf("Job %s exists with fence %q, not the run's %q", job.Name, job.Annotations[batchv1alpha1.FenceAnnotation], want.Annotations[batchv1alpha1.FenceAnnotation])
	return r.beginStop(s, run, batchv1alpha1.RunResultFailed, msg, batchv1alpha1.StaleJobReason, batchv1alpha1.LockStateHeld, run.Holder)
}

// beginStop marks a run Stopping. The stop controller deletes its Job and Pods;
// the lease is kept (and renewed, where still ours) until the Pods are gone.
func (r *GuardedJobReconciler) beginStop(s *scope, run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult, msg, reason string, lock batchv1alpha1.LockState, holder string) error {
	run.Phase = batchv1alpha1.RunPhaseStopping
	run.StopReason = string(result) + ": " + msg
	setLock(s.gj, lock, run.Key, holder, run.Fence)
	eventType := corev1.EventTypeWarning
	if result == batchv1alpha1.RunResultFailed && reason == batchv1alpha1.JobDeletedReason {
		eventType = corev1.EventTypeNormal
	}
	setLockHeld(s.gj, reason, msg, s.now)
	r.event(s.gj, nil, eventType, reason, "Stopping %s: %s", run.JobName, msg)
	r.pokeStopper(s.gj.Namespace, run.JobName)
	return nil
}

// stopping waits until the run's Pods are gone (the stop controller deletes them),
// then releases.
func (r *GuardedJobReconciler) stopping(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client) error {
	r.track(s.gj, run, store, noSendTime)
	remaining, err := r.podsLeft(ctx, s.gj.Namespace, run.JobName)
	if err != nil {
		return err
	}
	if remaining == 0 {
		// Releasing lets another holder start: make sure no Pod is left that the
		// cache has not seen yet.
		if remaining, err = r.podsLeftUncached(ctx, s.gj.Namespace, run.JobName); err != nil {
			return err
		}
	}
	if remaining > 0 {
		s.requeueAfter(activeResync)
		return nil
	}
	job := &batchv1.Job{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: s.gj.Namespace, Name: run.JobName}, job); err == nil && job.DeletionTimestamp.IsZero() {
		if _, done := jobFinished(job); !done {
			return nil // the stop controller has not deleted the Job yet
		}
	} else if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get job %s: %w", run.JobName, err)
	}
	run.Phase = batchv1alpha1.RunPhaseReleasing
	return r.release(ctx, s, run, store)
}

// podsLeft counts the Pods of a Job that still exist.
func (r *GuardedJobReconciler) podsLeft(ctx context.Context, namespace, jobName string) (int, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{batchv1.JobNameLabel: jobName}); err != nil {
		return 0, fmt.Errorf("list pods of job %s: %w", jobName, err)
	}
	return len(pods.Items), nil
}

// podsLeftUncached counts the Pods of a Job as the API server sees them.
func (r *GuardedJobReconciler) podsLeftUncached(ctx context.Context, namespace, jobName string) (int, error) {
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{batchv1.JobNameLabel: jobName}); err != nil {
		return 0, fmt.Errorf("list pods of job %s: %w", jobName, err)
	}
	return len(pods.Items), nil
}

// release ends a run whose Pods are gone: done-marker + release on success,
// release otherwise; then the Job's lease finalizer goes and the run moves to
// status.lastRun. A store that does not answer keeps the run Releasing (and its
// lease renewed) until it does.
func (r *GuardedJobReconciler) release(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client) error {
	gj := s.gj
	resultText, msg, _ := strings.Cut(run.StopReason, ": ")
	result := batchv1alpha1.RunResult(resultText)
	lease := leaseOf(run)
	var err error
	released := false
	switch {
	case run.Unguarded:
		// No lease was ever taken for it, unless the keeper took one since.
		if st, ok := r.Keeper.Get(run.Token); ok && st.State == lockclient.StateHeld {
			err = store.Release(ctx, lease)
		}
	case result == batchv1alpha1.RunResultSucceeded:
		released, err = store.Complete(ctx, lease, markerTTLFor(gj, run.ScheduledTime.Time, s.now))
	default:
		err = store.Release(ctx, lease)
		released = err == nil
	}
	var nh *lockclient.NotHeldError
	switch {
	case errors.As(err, &nh):
		// Someone else holds the key now or it expired: nothing of ours to delete.
		if result == batchv1alpha1.RunResultSucceeded && nh.Holder != "" {
			r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.LockLostReason,
				"Job %s completed, but lock %s is held by %s: the done-marker was not written", run.JobName, run.Key, lockclient.HolderOf(nh.Holder))
		}
	case errors.Is(err, lockclient.ErrStore):
		setStoreReachable(gj, err, s.now)
		s.requeueAfter(storeRetry)
		return nil
	case err != nil:
		return fmt.Errorf("release lock %s: %w", run.Key, err)
	}

	if err := r.dropLeaseFinalizer(ctx, gj.Namespace, run.JobName); err != nil {
		return err
	}
	r.Keeper.Untrack(run.Token)
	if result == batchv1alpha1.RunResultSucceeded {
		if nh == nil && !run.Unguarded {
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.OccurrenceDoneReason, "Marked occurrence %s done", run.OccurrenceKey)
		}
		gj.Status.LastSuccessfulTime = ptrTime(s.now)
	}
	if released {
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.LockReleasedReason, "Released lock %s held by %s%s", run.Key, run.Holder, fenceSuffix(run.Fence))
		setLock(gj, batchv1alpha1.LockStateFree, run.Key, "", 0)
	}
	finishRun(gj, *run, result, "", msg, s.now)
	setLockHeld(gj, "", "", s.now)
	return r.applyHistoryLimits(ctx, gj)
}

// dropLeaseFinalizer removes the lease finalizer from a Job, once its lease is
// released.
func (r *GuardedJobReconciler) dropLeaseFinalizer(ctx context.Context, namespace, name string) error {
	job := &batchv1.Job{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, job); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !controllerutil.ContainsFinalizer(job, batchv1alpha1.LeaseFinalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(job.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(job, batchv1alpha1.LeaseFinalizer)
	if err := r.Patch(ctx, job, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove lease finalizer from job %s: %w", name, err)
	}
	return nil
}

// jobFinished returns Complete or Failed once the Job controller has set it.
// SuccessCriteriaMet and FailureTarget are not enough: Pods may still run.
func jobFinished(job *batchv1.Job) (batchv1.JobConditionType, bool) {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.Type, true
		}
	}
	return "", false
}

func jobFailureMessage(job *batchv1.Job) string {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			if c.Message != "" {
				return c.Reason + ": " + c.Message
			}
			return c.Reason
		}
	}
	return ""
}

// applyHistoryLimits deletes the oldest finished Jobs beyond the history limits.
// Jobs being deleted or still part of a run are left alone.
func (r *GuardedJobReconciler) applyHistoryLimits(ctx context.Context, gj *batchv1alpha1.GuardedJob) error {
	jobs, err := r.ownedJobs(ctx, gj)
	if err != nil {
		return err
	}
	var succeeded, failed []*batchv1.Job
	for i := range jobs {
		j := &jobs[i]
		if !j.DeletionTimestamp.IsZero() || runByName(gj, j.Name) != nil {
			continue
		}
		switch kind, ok := jobFinished(j); {
		case ok && kind == batchv1.JobComplete:
			succeeded = append(succeeded, j)
		case ok:
			failed = append(failed, j)
		}
	}
	for _, set := range []struct {
		jobs  []*batchv1.Job
		limit int32
	}{{succeeded, gj.Spec.SuccessfulHistoryLimit()}, {failed, gj.Spec.FailedHistoryLimit()}} {
		sortJobsByAge(set.jobs)
		for i := 0; i < len(set.jobs)-int(set.limit); i++ {
			if err := r.Delete(ctx, set.jobs[i], client.PropagationPolicy(metav1.DeletePropagationForeground)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete old job %s: %w", set.jobs[i].Name, err)
			}
		}
	}
	return nil
}

// ownedJobs lists the Jobs controlled by gj.
func (r *GuardedJobReconciler) ownedJobs(ctx context.Context, gj *batchv1alpha1.GuardedJob) ([]batchv1.Job, error) {
	list := &batchv1.JobList{}
	if err := r.List(ctx, list, client.InNamespace(gj.Namespace), client.MatchingFields{jobOwnerKey: gj.Name}); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	out := list.Items[:0]
	for _, j := range list.Items {
		if metav1.IsControlledBy(&j, gj) {
			out = append(out, j)
		}
	}
	return out, nil
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// markerTTLFor is the done-marker lifetime of an occurrence. A schedule that no
// longer parses (changed while the run was active) falls back to a day.
func markerTTLFor(gj *batchv1alpha1.GuardedJob, scheduled, now time.Time) time.Duration {
	keep := gj.Spec.Lock.KeepAfterSuccessOrDefault()
	if sched, err := ParseSchedule(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault()); err == nil {
		return MarkerTTL(sched, scheduled, now, gj.Spec.StartingDeadline(), keep)
	}
	return 24*time.Hour + gj.Spec.StartingDeadline() + 5*time.Minute + keep
}

// sortJobsByAge orders Jobs oldest first. Creation times have a one-second
// resolution, so ties go by the occurrence the Job ran for, then by name.
func sortJobsByAge(jobs []*batchv1.Job) {
	slices.SortFunc(jobs, func(a, b *batchv1.Job) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		if c := strings.Compare(a.Annotations[batchv1alpha1.ScheduledTimeAnnotation], b.Annotations[batchv1alpha1.ScheduledTimeAnnotation]); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}
