package controllers

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// reconcileDelete handles a GuardedJob being deleted. onDelete Stop stops every
// active run (the stop controller deletes Jobs and Pods); Wait lets them finish,
// and so does a delete with --cascade=orphan, which asks to keep the Jobs.
// Either way a lease is released only once its Pods are gone, and the finalizer
// goes only when no run is left.
func (r *GuardedJobReconciler) reconcileDelete(ctx context.Context, s *scope) error {
	gj := s.gj
	stop := stopsRunsOnDelete(gj)
	for i := range gj.Status.Active {
		run := &gj.Status.Active[i]
		switch run.Phase {
		case batchv1alpha1.RunPhaseAcquiring:
			// No Job exists; the lease, if the acquisition went through, is ours.
			run.Phase = batchv1alpha1.RunPhaseReleasing
			setStop(run, batchv1alpha1.RunResultSkipped, "the GuardedJob was deleted before the run started")
		case batchv1alpha1.RunPhaseRunning:
			orphaned, err := r.jobOrphaned(ctx, gj, run)
			if err != nil {
				return err
			}
			if stop && !orphaned {
				if err := r.beginStop(s, run, batchv1alpha1.RunResultFailed, "the GuardedJob is being deleted (onDelete: Stop)",
					batchv1alpha1.JobStoppedReason, batchv1alpha1.LockStateHeld, run.Holder); err != nil {
					return err
				}
			}
		}
	}
	if err := r.observeRuns(ctx, s); err != nil {
		return err
	}
	if len(gj.Status.Active) > 0 {
		return nil // runs are stopping or finishing; their events bring us back
	}
	if !controllerutil.ContainsFinalizer(gj, batchv1alpha1.GuardedJobFinalizer) {
		return nil
	}
	if err := r.patchStatus(ctx, s); err != nil {
		return err
	}
	s.orig = gj.DeepCopy()
	patch := client.MergeFrom(gj.DeepCopy())
	controllerutil.RemoveFinalizer(gj, batchv1alpha1.GuardedJobFinalizer)
	if err := r.Patch(ctx, gj, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	return nil
}

// stopsRunsOnDelete says whether deleting gj stops its active runs: onDelete Stop,
// unless the delete orphans the dependents.
func stopsRunsOnDelete(gj *batchv1alpha1.GuardedJob) bool {
	return gj.Spec.OnDeleteOrDefault() == batchv1alpha1.OnDeleteStop &&
		!controllerutil.ContainsFinalizer(gj, metav1.FinalizerOrphanDependents)
}

// jobOrphaned reports whether a run's Job was orphaned by a delete with
// --cascade=orphan: the garbage collector removed its owner reference (and may
// already have removed the orphan finalizer from the GuardedJob).
func (r *GuardedJobReconciler) jobOrphaned(ctx context.Context, gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) (bool, error) {
	job, err := r.getJobConfirmed(ctx, gj.Namespace, run.JobName)
	if err != nil || job == nil {
		return false, err
	}
	return !metav1.IsControlledBy(job, gj), nil
}
