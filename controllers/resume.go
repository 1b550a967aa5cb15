package controllers

import (
	"context"
	"errors"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// resumeLeases runs once when this manager becomes the leader, before any
// reconcile: it renews every lease recorded in status.active (read from the
// cache, which is warm before the election is won) in one pipeline per store,
// so a handover never lets a lease lapse while reconcilers catch up. Then it
// opens the gate the reconciler waits on.
func (r *GuardedJobReconciler) resumeLeases(ctx context.Context) error {
	defer r.resumeOnce.Do(func() { close(r.resumed) })
	log := ctrl.LoggerFrom(ctx).WithName("resume")
	list := &batchv1alpha1.GuardedJobList{}
	if err := r.List(ctx, list); err != nil {
		return fmt.Errorf("list guardedjobs to resume their leases: %w", err)
	}
	var reqs []lockclient.TrackRequest
	for i := range list.Items {
		gj := &list.Items[i]
		for j := range gj.Status.Active {
			run := &gj.Status.Active[j]
			if !r.ownsRun(gj, run) || run.Phase == batchv1alpha1.RunPhaseAcquiring {
				continue // not ours, or not acquired yet (the reconciler acquires it)
			}
			store, err := r.runStore(ctx, gj, run)
			if err != nil {
				log.Error(err, "Cannot resume a lease: its store is unknown", "guardedjob", gj.Namespace+"/"+gj.Name, "job", run.JobName)
				continue
			}
			reqs = append(reqs, r.trackRequest(gj, run, store, resumed))
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	results := r.Keeper.ResumeAll(ctx, reqs)
	lost, failed := 0, 0
	for _, err := range results {
		switch {
		case errors.Is(err, lockclient.ErrNotHeld):
			lost++
		case err != nil:
			failed++
		}
	}
	log.Info("Resumed leases", "runs", len(reqs), "lost", lost, "storeErrors", failed)
	return nil
}

// waitResumed blocks a reconcile until the leases of the previous leader are
// renewed.
func (r *GuardedJobReconciler) waitResumed(ctx context.Context) error {
	select {
	case <-r.resumed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
