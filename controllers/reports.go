package controllers

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// routeReports turns keeper reports into work for both controllers: the stop
// controller acts on the Job at once, the GuardedJob reconciler records what
// happened. A report carries only keys; the details stay in the keeper.
func (r *GuardedJobReconciler) routeReports(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case rep := <-r.Keeper.Reports():
			obj, jobName, ok := parseOwner(rep.Owner)
			if !ok {
				continue
			}
			namespace, name := obj.Namespace, obj.Name
			switch rep.Kind {
			case lockclient.ReportLost, lockclient.ReportDeadlineReached, lockclient.ReportMaxHoldReached:
				if r.Stopper != nil {
					r.Stopper.owe(namespace, jobName)
				}
			default:
				r.pokeStopper(namespace, jobName)
			}
			gj := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
			select {
			case r.events <- event.GenericEvent{Object: gj}:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// pokeStopper asks the stop controller to look at a Job now.
func (r *GuardedJobReconciler) pokeStopper(namespace, jobName string) {
	if r.Stopper != nil {
		r.Stopper.poke(namespace, jobName)
	}
}
