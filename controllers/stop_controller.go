package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// StopReconciler stops runs: it deletes a run's Job (Foreground) and then its
// Pods with a bounded grace period, as soon as the keeper reports the lease lost,
// past its self-fence deadline or past maxHold, or the GuardedJob reconciler
// marks the run Stopping. It makes no Redis calls and writes with its own client,
// so its rate budget is not shared with status writes: many lost leases are
// stopped as fast as one.
type StopReconciler struct {
	// Reader reads from the manager's cache.
	Reader client.Reader
	// APIReader reads around the cache, to confirm a Job is unclaimed.
	APIReader client.Reader
	// Writer deletes Jobs and Pods.
	Writer client.Writer
	Keeper *lockclient.Keeper
	Clock  clock.Clock

	MaxConcurrentReconciles int

	events chan event.GenericEvent
}

// SetupWithManager registers the stop controller.
func (r *StopReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.events == nil {
		r.events = make(chan event.GenericEvent, 1024)
	}
	podToJob := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrl.Request {
		name := o.GetLabels()[batchv1.JobNameLabel]
		if name == "" {
			return nil
		}
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	// A run marked Stopping in status (Replace, deletion, a Job deleted by hand)
	// reaches this controller through the GuardedJob's own update: a poke alone
	// could race the cache and find the run not stopping yet.
	stoppingRuns := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrl.Request {
		gj, ok := o.(*batchv1alpha1.GuardedJob)
		if !ok {
			return nil
		}
		var reqs []ctrl.Request
		for _, run := range gj.Status.Active {
			if run.Phase == batchv1alpha1.RunPhaseStopping || !gj.DeletionTimestamp.IsZero() {
				reqs = append(reqs, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: gj.Namespace, Name: run.JobName}})
			}
		}
		return reqs
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("guardedjob-stop").
		For(&batchv1.Job{}).
		Watches(&corev1.Pod{}, podToJob).
		Watches(&batchv1alpha1.GuardedJob{}, stoppingRuns).
		WatchesRawSource(source.Channel(r.events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(2, r.MaxConcurrentReconciles)}).
		Complete(r)
}

// Reconcile stops the Job if its run must stop.
func (r *StopReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	job := &batchv1.Job{}
	if err := r.Reader.Get(ctx, req.NamespacedName, job); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ref := metav1.GetControllerOf(job)
	if ref == nil || ref.Kind != "GuardedJob" || ref.APIVersion != batchv1alpha1.GroupVersion.String() {
		return ctrl.Result{}, nil
	}
	gj := &batchv1alpha1.GuardedJob{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: ref.Name}, gj); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil // the garbage collector takes it
		}
		return ctrl.Result{}, err
	}
	grace, stop, err := r.decide(ctx, gj, job)
	if err != nil || !stop {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.stop(ctx, job, grace)
}

// decide says whether the Job must stop now and with which Pod grace period.
func (r *StopReconciler) decide(ctx context.Context, gj *batchv1alpha1.GuardedJob, job *batchv1.Job) (time.Duration, bool, error) {
	podGrace := gj.Spec.PodGracePeriod()
	run := runByName(gj, job.Name)
	if run == nil {
		if _, finished := jobFinished(job); finished {
			return 0, false, nil
		}
		// The cache may not have the status that claims a brand-new Job yet: ask
		// the API server before stopping anything.
		fresh := &batchv1alpha1.GuardedJob{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(gj), fresh); err != nil {
			return 0, false, client.IgnoreNotFound(err)
		}
		if runByName(fresh, job.Name) != nil || metav1.GetControllerOf(job).UID != fresh.UID {
			return 0, false, nil
		}
		return podGrace, true, nil
	}
	now := r.Clock.Now()
	if st, ok := r.Keeper.Get(run.Token); ok {
		switch {
		case st.State == lockclient.StateLost:
			return time.Second, true, nil // another holder may be running already
		case st.DeadlineReached:
			return DeadlineGrace(podGrace, st.ValidUntil, now), true, nil
		case st.MaxHoldReached:
			return podGrace, true, nil
		}
	}
	if run.Phase == batchv1alpha1.RunPhaseStopping || !gj.DeletionTimestamp.IsZero() && stopsRunsOnDelete(gj) {
		if strings.HasPrefix(run.StopReason, string(batchv1alpha1.RunResultLockLost)) {
			return time.Second, true, nil
		}
		return podGrace, true, nil
	}
	return 0, false, nil
}

// stop deletes the Job (Foreground, so it stays until its Pods are gone) and its
// Pods with the given grace: the garbage collector alone would give the Pods their
// full terminationGracePeriodSeconds.
func (r *StopReconciler) stop(ctx context.Context, job *batchv1.Job, grace time.Duration) error {
	seconds := max(int64(grace.Seconds()), 1) // 0 would force-delete and leave the container running
	if job.DeletionTimestamp.IsZero() {
		if err := r.Writer.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationForeground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete job %s: %w", job.Name, err)
		}
	}
	pods := &corev1.PodList{}
	if err := r.Reader.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return fmt.Errorf("list pods of job %s: %w", job.Name, err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds <= seconds {
			continue // already going, at least as fast
		}
		if err := r.Writer.Delete(ctx, pod, client.GracePeriodSeconds(seconds)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete pod %s: %w", pod.Name, err)
		}
	}
	return nil
}

// poke asks the stop controller to look at a Job now.
func (r *StopReconciler) poke(namespace, name string) {
	select {
	case r.events <- event.GenericEvent{Object: &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}}:
	default:
		// The queue is full; the Job's own watch events still reach the controller.
	}
}
