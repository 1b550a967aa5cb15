package controllers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

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
			if next := s.now.Add(busyRetryWait()); next.Before(deadline) {
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

// busyRetryWait is the wait before trying a busy lock again (onBusy Retry): a
// fixed 5s plus up to 5s of jitter, so that runs of many clusters waiting for one
// key do not retry in step. It does not grow: the run gives up at its starting
// deadline instead.
func busyRetryWait() time.Duration {
	return 5*time.Second + rand.N(5*time.Second)
}
