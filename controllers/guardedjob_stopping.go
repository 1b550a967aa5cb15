package controllers

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

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
