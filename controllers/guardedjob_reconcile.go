package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// The top of the reconciler: its watches, one pass read as a table of contents
// (Reconcile), the status write that ends it, and the deletion of a
// GuardedJob. The passes' steps live in the files below it: the schedule
// (guardedjob_schedule.go, guardedjob_backfill.go), the runs' phases
// (guardedjob_runs.go, then acquire, jobfirst, running, release), requests,
// and the shard and keeper custody.

// jobOwnerKey indexes Jobs by the name of their GuardedJob.
const jobOwnerKey = ".metadata.guardedjob"

// SetupWithManager registers the controller, its watches and the keeper's report
// source.
func (r *GuardedJobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.events == nil {
		r.events = make(chan event.GenericEvent, 1024)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &batchv1.Job{}, jobOwnerKey, func(o client.Object) []string {
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "GuardedJob" && ref.APIVersion == batchv1alpha1.GroupVersion.String() {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index jobs: %w", err)
	}
	// Jobs and Pods name their GuardedJob in a label, which survives a delete
	// with --cascade=orphan (that removes the owner reference, and the run must
	// still see its Job end).
	byLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrl.Request {
		name := o.GetLabels()[batchv1alpha1.GuardedJobLabel]
		if name == "" {
			return nil
		}
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	if err := mgr.Add(manager.RunnableFunc(r.routeReports)); err != nil {
		return err
	}
	r.resumed = make(chan struct{})
	if err := mgr.Add(manager.RunnableFunc(r.resumeLeases)); err != nil {
		return err
	}
	if r.HandoverTimeout <= 0 {
		r.HandoverTimeout = DefaultHandoverTimeout
	}
	if err := mgr.Add(manager.RunnableFunc(r.watchHandovers)); err != nil {
		return err
	}
	r.takeOvers = make(chan types.NamespacedName, takeOverQueue)
	if err := mgr.Add(manager.RunnableFunc(r.runTakeOvers)); err != nil {
		return err
	}
	if r.Identity != nil {
		if err := mgr.Add(manager.RunnableFunc(r.Identity.Run)); err != nil {
			return err
		}
		if err := mgr.Add(r.Identity.FollowerCheck(mgr.Elected())); err != nil {
			return err
		}
	}
	if r.Grants != nil {
		if err := mgr.Add(manager.RunnableFunc(r.Grants.Run)); err != nil {
			return err
		}
	}
	if err := registerMetrics(r.Keeper, mgr.GetCache(), mgr.Elected()); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).For(&batchv1alpha1.GuardedJob{})
	served, err := r.setupRequests(mgr) // requests.go
	if err != nil {
		return err
	}
	for _, obj := range served {
		b = b.Watches(obj, byRequest)
	}
	return b.
		Watches(&batchv1.Job{}, r.jobEvents(byLabel)).
		Watches(&corev1.Pod{}, byLabel, builder.WithPredicates(predicate.Funcs{
			// A Pod's disappearance moves a stopping run on, a pod guard that
			// stopped its workload moves its run on, and a Pod waiting at the
			// lease's scheduling gate has its run confirm its lease.
			CreateFunc: func(e event.CreateEvent) bool {
				pod, ok := e.Object.(*corev1.Pod)
				return ok && jobbuild.PodGated(pod)
			},
			UpdateFunc: guardExitChanged,
		})).
		// A GuardedJob that moved into this shard has its leases renewed the
		// moment the cache sees it, not when the work queue gets to it.
		Watches(&batchv1alpha1.GuardedJob{}, handler.Funcs{
			CreateFunc: func(_ context.Context, e event.CreateEvent, _ workqueue.TypedRateLimitingInterface[ctrl.Request]) {
				if gj, ok := e.Object.(*batchv1alpha1.GuardedJob); ok {
					r.takeOverOnSight(gj)
				}
			},
		}).
		WatchesRawSource(source.Channel(r.events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Complete(r)
}

// DefaultHandoverTimeout is how long a shard that a GuardedJob left keeps
// renewing its runs' leases for the new shard to take them over, before it stops
// the runs (--shard-handover-timeout).
const DefaultHandoverTimeout = 5 * time.Minute

// secretRecheck is how soon a missing or invalid store Secret is read again.
const secretRecheck = 30 * time.Second

// Reconcile runs one pass over a GuardedJob. What a pass knows comes from the
// object (status, including the lease ledger status.leases) and the store; what
// this process keeps between passes is named here, and nothing else is:
//   - resumed: closed once resumeLeases has renewed every recorded lease after
//     this manager became the leader; passes wait for it.
//   - the keeper's tracked tokens: the leases this process renews. A pass tracks
//     its runs' leases (ensureTracked: an object new to this manager, such as one
//     moved into its shard; takeOverOnSight does the same before the object's
//     first pass), and a status write untracks every run that left
//     status.active (patchStatus).
//   - superseded: the resourceVersions this manager wrote over; a pass that
//     reads one from the cache waits for the cache (cacheBehind).
//   - memory and scope.recordLater: the Jobs a pass created that status does
//     not record yet (the UID of a recorded run's Job, left for the next pass
//     to record; a Job whose run's status write failed, left to adoption; with
//     the early gate, a Job whose gate this process opened, its run left for
//     the next pass to record).
//   - objectLocks: one pass (or take-over) at a time per object.
//   - Handovers: runs of objects that left this shard, renewed until another
//     shard holds them (watchHandovers).
func (r *GuardedJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := r.reconcilePass(ctx, req)
	if r.EarlyGate && res.Priority == nil {
		// A pass brought at low priority (see jobEvents) requeues at the
		// usual one: its object's next due run must not wait behind records.
		res.Priority = ptr.To(0)
	}
	return res, err
}

// jobEvents maps a Job's events to its GuardedJob. With the early gate, the
// creation of a gated Job and the update that opens its gate bring the pass
// that records its run from the Job at low priority: the pass that created the
// Job opens its gate itself, and a burst of due runs opens every gate before
// the queue gives a worker to the records (each a CRD status write); a run's
// Job is its record meanwhile. (The queue keeps an object's highest priority,
// so the creation at the usual one would undo the update's.)
func (r *GuardedJobReconciler) jobEvents(byLabel handler.EventHandler) handler.EventHandler {
	if !r.EarlyGate {
		return byLabel
	}
	low := func(q workqueue.TypedRateLimitingInterface[ctrl.Request], job *batchv1.Job) bool {
		pq, isPriority := q.(priorityqueue.PriorityQueue[ctrl.Request])
		if !isPriority {
			return false
		}
		if name := job.Labels[batchv1alpha1.GuardedJobLabel]; name != "" {
			pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(handler.LowPriority)},
				ctrl.Request{NamespacedName: types.NamespacedName{Namespace: job.Namespace, Name: name}})
		}
		return true
	}
	return handler.Funcs{
		DeleteFunc: byLabel.Delete, GenericFunc: byLabel.Generic,
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
			if job, ok := e.Object.(*batchv1.Job); !ok || !jobbuild.Gated(job) || !low(q, job) {
				byLabel.Create(ctx, e, q)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
			before, okBefore := e.ObjectOld.(*batchv1.Job)
			after, okAfter := e.ObjectNew.(*batchv1.Job)
			if !okBefore || !okAfter || !jobbuild.Gated(before) || jobbuild.Gated(after) || !low(q, after) {
				byLabel.Update(ctx, e, q)
			}
		},
	}
}

// reconcilePass is one pass over a GuardedJob (Reconcile).
func (r *GuardedJobReconciler) reconcilePass(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	if err := r.waitResumed(ctx); err != nil {
		return ctrl.Result{}, err
	}
	if r.Guard.Err() != nil {
		// Not known to lead (paused, or deposed): a pass on a cache from before
		// a pause would act on what another leader has changed since.
		return ctrl.Result{RequeueAfter: notLeadingRetry}, nil
	}
	gj := &batchv1alpha1.GuardedJob{}
	if err := r.getGuardedJob(ctx, req.NamespacedName, gj); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted, or moved to another shard: this manager no longer renews
			// the object's leases. A Job left behind by a deleted object is
			// stopped by the stop controller once the API server confirms the
			// object gone, and its lease left to expire; a moved object's runs
			// are resumed by its new shard.
			r.leftShard(req.NamespacedName)
			if r.requestsServed {
				after, err := r.orphanRequests(ctx, req.NamespacedName, r.Clock.Now())
				return ctrl.Result{RequeueAfter: after}, err
			}
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	unlock := r.lockObject(req.NamespacedName)
	defer unlock()
	if r.cacheBehind(req.NamespacedName, gj.ResourceVersion) {
		return ctrl.Result{RequeueAfter: cacheLagRetry}, nil
	}
	r.ensureTracked(ctx, gj)
	s := &scope{gj: gj, orig: gj.DeepCopy(), now: r.Clock.Now()}
	r.claimShard(ctx, gj)
	if r.requestsServed {
		set, err := r.loadRequests(ctx, gj.Namespace, gj.Name)
		if err != nil {
			return ctrl.Result{}, err
		}
		s.requests = set
	}

	defer func() {
		if retErr == nil {
			gj.Status.ObservedGeneration = gj.Generation
		}
		if s.guardedWriteFailed {
			return
		}
		if s.recordLater && retErr == nil {
			s.requeueAfter(recordLaterBackstop)
			res = s.result()
			if r.EarlyGate {
				// The record this pass left to the next one waits behind due
				// runs (jobEvents): the queue keeps the highest priority it is
				// given for an object.
				res.Priority = ptr.To(handler.LowPriority)
			}
			return
		}
		setQueued(gj, s.now) // guardedjob_running.go
		runcore.SetKstatus(gj, s.now)
		runcore.SetActiveCount(gj)
		if err := r.patchStatus(ctx, s); err != nil {
			retErr = errors.Join(retErr, err)
		} else if err := r.answerRequests(ctx, s); err != nil { // requests.go: after the record they derive from
			retErr = errors.Join(retErr, err)
		}
		if retErr == nil {
			res = s.result()
		}
	}()

	if !gj.DeletionTimestamp.IsZero() {
		if r.serveRequests(ctx, s, nil, nil) {
			s.requeueAfter(time.Millisecond)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, r.reconcileDelete(ctx, s)
	}
	if !controllerutil.ContainsFinalizer(gj, batchv1alpha1.GuardedJobFinalizer) {
		patch := client.MergeFrom(gj.DeepCopy())
		controllerutil.AddFinalizer(gj, batchv1alpha1.GuardedJobFinalizer)
		before := gj.ResourceVersion
		if err := r.patchGuardedJob(ctx, gj, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
		r.markSuperseded(client.ObjectKeyFromObject(gj), before, gj.ResourceVersion)
		s.orig.ResourceVersion = gj.ResourceVersion
	}

	spec, specErr := r.compile(ctx, gj)
	s.spec = spec
	if _, dup := r.Identity.Duplicate(s.storeIdentity()); !dup || specErr != nil {
		runcore.SetReady(gj, specErr, s.now) // a duplicate identity holds Ready at DuplicateClusterName
	}

	if err := r.observeRuns(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	r.setMaxHoldAtRisk(s) // lock.maxHold may have changed
	if r.serveRequests(ctx, s, spec, specErr) {
		// An unlock deleted a key: its record is written now (the defer), and
		// the next pass goes on from there.
		s.requeueAfter(time.Millisecond)
		return ctrl.Result{}, nil
	}
	if specErr != nil {
		var se *specerror.Error
		if errors.As(specErr, &se) {
			r.warnOnce(s, se.Reason, se.Message)
			if se.Reason == batchv1alpha1.StoreSecretNotFoundReason || se.Reason == batchv1alpha1.StoreSecretInvalidReason ||
				se.Reason == batchv1alpha1.PodGuardUnavailableReason {
				s.requeueAfter(secretRecheck) // Secrets are not watched
			}
			return ctrl.Result{}, nil // fixing the spec starts a new pass
		}
		return ctrl.Result{}, specErr
	}
	if gj.Status.ObservedGeneration != gj.Generation {
		r.warnFixedKeyWithAllow(gj, spec)
		r.warnGuardUser(gj)
	}
	r.setStoreSafe(ctx, gj, spec.store, s.now)
	if r.identityHolds(s) {
		return ctrl.Result{}, nil
	}
	if err := r.scheduleAll(ctx, s, spec); err != nil { // suspensions, the schedule, buffered runs, backfills (guardedjob_schedule.go)
		return ctrl.Result{}, err
	}
	r.watchOccurrence(ctx, s, spec) // a Busy run's occurrence done by another cluster? (guardedjob_schedule.go)
	return ctrl.Result{}, nil
}

// recordLaterBackstop is when a pass that created a Job looks again if the
// Job's watch event has not brought a pass before.
const recordLaterBackstop = 10 * time.Second

// patchStatus writes the status once, if it changed, with an optimistic lock: a
// pass that read a stale object never overwrites a newer status.
func (r *GuardedJobReconciler) patchStatus(ctx context.Context, s *scope) error {
	if equality.Semantic.DeepEqual(s.orig.Status, s.gj.Status) {
		return nil
	}
	patch := client.MergeFromWithOptions(s.orig, client.MergeFromWithOptimisticLock{})
	before := s.gj.ResourceVersion
	if err := r.patchGuardedJobStatus(ctx, s.gj, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patch status: %w", err)
	}
	r.markSuperseded(client.ObjectKeyFromObject(s.gj), before, s.gj.ResourceVersion)
	// A run that left status.active is over, whichever path ended it: its lease
	// must not be renewed any more.
	for _, run := range s.orig.Status.Active {
		if runcore.RunByName(s.gj, run.JobName) == nil {
			r.untrack(run.Token)
			r.memory.forget(client.ObjectKeyFromObject(s.gj), run.JobName)
		}
	}
	if last := s.gj.Status.LastRun; last != nil && !equality.Semantic.DeepEqual(last, s.orig.Status.LastRun) {
		runsTotal.WithLabelValues(string(last.Result)).Inc()
		guardedJobMetrics.countRun(s.gj, last.Result)
	}
	r.countDoneElsewhere(s)
	countAbandoned(s)
	return nil
}

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
		orphaned := false
		if runcore.ReadsJobOnDelete(run.Phase, stop) {
			var err error
			if orphaned, err = r.jobOrphaned(ctx, gj, run); err != nil {
				return err
			}
		}
		switch runcore.OnDelete(run.Phase, stop, orphaned) {
		case runcore.DeleteEndsUnstarted:
			// No Job exists; the lease, if the acquisition went through, is ours.
			run.Phase = batchv1alpha1.RunPhaseReleasing
			runcore.SetStop(run, batchv1alpha1.RunResultSkipped, "the GuardedJob was deleted before the run started")
		case runcore.DeleteStopsRun:
			if err := r.beginStop(s, run, batchv1alpha1.RunResultFailed, "the GuardedJob is being deleted (onDelete: Stop)",
				batchv1alpha1.JobStoppedReason, batchv1alpha1.LockStateHeld, run.Holder); err != nil {
				return err
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
	if err := r.patchGuardedJob(ctx, gj, patch); client.IgnoreNotFound(err) != nil {
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
