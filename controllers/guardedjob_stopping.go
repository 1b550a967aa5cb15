package controllers

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// beginStop marks a run Stopping. The stop controller deletes its Job and Pods;
// the lease is kept (and renewed, where still ours) until the Pods are gone.
func (r *GuardedJobReconciler) beginStop(s *scope, run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult, msg, reason string, lock batchv1alpha1.LockState, holder string) error {
	run.Phase = batchv1alpha1.RunPhaseStopping
	setStop(run, result, msg)
	run.StopCause = reason
	runcore.SetLock(s.gj, lock, run.Key, holder, run.Fence)
	eventType := corev1.EventTypeWarning
	if result == batchv1alpha1.RunResultFailed && reason == batchv1alpha1.JobDeletedReason {
		eventType = corev1.EventTypeNormal
	}
	runcore.SetLockHeld(s.gj, reason, msg, s.now)
	r.event(s.gj, nil, eventType, reason, "Stopping %s: %s", run.JobName, msg)
	r.pokeStopper(s.gj.Namespace, run.JobName)
	return nil
}

// setStop records how a run ends: the result it ends with, and why.
func setStop(run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult, msg string) {
	run.StopResult = result
	run.StopReason = string(result) + ": " + msg
}

// stopOf returns the result a run ends with and why. A run recorded by an older
// manager has only the text.
func stopOf(run *batchv1alpha1.ActiveRun) (batchv1alpha1.RunResult, string) {
	text, msg, _ := strings.Cut(run.StopReason, ": ")
	if run.StopResult != "" {
		return run.StopResult, msg
	}
	return batchv1alpha1.RunResult(text), msg
}

// stopping waits until the run's Pods are gone (the stop controller deletes them),
// then releases.
func (r *GuardedJobReconciler) stopping(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client) error {
	r.track(s.gj, run, store, resumed)
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
	job, err := r.getJobConfirmed(ctx, s.gj.Namespace, run.JobName)
	if err != nil {
		return err
	}
	if job != nil && job.DeletionTimestamp.IsZero() {
		if _, done := jobFinished(job); !done {
			return nil // the stop controller has not deleted the Job yet
		}
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

// getJobConfirmed reads a Job from the cache and, when the cache does not have it,
// from the API server: a Job created moments ago may not have reached the cache,
// and releasing a lease on a cached "not found" would let its Pods run unguarded.
// It returns nil when the Job does not exist.
func (r *GuardedJobReconciler) getJobConfirmed(ctx context.Context, namespace, name string) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	key := client.ObjectKey{Namespace: namespace, Name: name}
	err := r.Get(ctx, key, job)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, job)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get job %s: %w", name, err)
	}
	return job, nil
}
