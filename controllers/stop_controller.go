package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leadership"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
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
	// Guard says whether this manager is known to lead: a manager that is not
	// stops nothing (its Writer refuses too).
	Guard *leadership.Guard
	// Clock times the stops the keeper asked for (real time when nil).
	Clock clock.Clock
	// Recorder, when set, records why a Job no run claims is stopped.
	Recorder recorder.EventRecorder
	// Selector is the manager's shard (GuardedJobReconciler.Selector): Jobs of
	// GuardedJobs outside it are left to their own shard. Nil: every GuardedJob.
	Selector labels.Selector
	// Handovers holds the runs of GuardedJobs that left this shard whose leases
	// this manager still renews: it stops such a run's Job when the lease must
	// stop, or the hand-over timed out.
	Handovers *Handovers
	// WaitResumed, when set, waits until the manager's start has renewed the
	// leases it resumes (GuardedJobReconciler.resumeLeases): a Job past its gate
	// that no status records is judged by whether its lease is renewed here.
	WaitResumed func(context.Context) error

	MaxConcurrentReconciles int

	events chan event.GenericEvent

	// owed holds the Jobs the keeper reported must stop (lease lost, self-fence
	// deadline, maxHold) whose deletes have not been issued yet, with when they
	// were reported.
	owedMu sync.Mutex
	owed   map[types.NamespacedName]time.Time

	// timed holds the tokens whose stop was timed (guardedjob_stop_latency_seconds),
	// with when, so a second delete issued from a cache that has not seen the
	// first is not timed again.
	timedMu sync.Mutex
	timed   map[string]time.Time

	// podDeletes holds the shortest grace this manager deleted each Pod with,
	// by UID. A Pod in the cache may not show a delete issued a moment ago;
	// deleting it again with the same grace changes nothing and spends the
	// writes a mass stop is short of.
	podDeletesMu sync.Mutex
	podDeletes   map[types.UID]issuedDelete
}

// The stop path's budget. When Redis dies with many active runs, every run
// reaches its self-fence deadline within one renew interval of the others, and
// each needs a Job delete and at least one Pod delete issued within the stop
// margin (5s). 1,000 runs are about 2,000 deletes: a burst of 1,000 and 500 per
// second afterwards issue them in about 2s when the API server keeps up, and 32
// workers keep that many requests in flight.
const (
	StopQPS     = 500
	StopBurst   = 1000
	stopWorkers = 32
)

// NewStopClient returns the client the stop controller deletes with: a rate
// budget of its own (StopQPS, StopBurst), so stops never wait behind status
// writes in a shared limiter.
func NewStopClient(cfg *rest.Config, opts client.Options) (client.Client, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = StopQPS, StopBurst
	return client.New(c, opts)
}

// SetupWithManager registers the stop controller.
func (r *StopReconciler) SetupWithManager(mgr ctrl.Manager) error {
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
	// could race the cache and find the run not stopping yet. A GuardedJob that
	// leaves the cache (deleted, its finalizer removed by hand, or moved to
	// another shard) has each of its runs' Jobs looked at: whether it is gone is
	// the API server's to say.
	runJobs := func(gj *batchv1alpha1.GuardedJob, all bool, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
		for _, run := range gj.Status.Active {
			if all || run.Phase == batchv1alpha1.RunPhaseStopping || !gj.DeletionTimestamp.IsZero() {
				q.Add(ctrl.Request{NamespacedName: types.NamespacedName{Namespace: gj.Namespace, Name: run.JobName}})
			}
		}
	}
	stoppingRuns := handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
			if gj, ok := e.Object.(*batchv1alpha1.GuardedJob); ok {
				runJobs(gj, false, q)
			}
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
			if gj, ok := e.ObjectNew.(*batchv1alpha1.GuardedJob); ok {
				runJobs(gj, false, q)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
			if gj, ok := e.Object.(*batchv1alpha1.GuardedJob); ok {
				runJobs(gj, true, q)
			}
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("guardedjob-stop").
		For(&batchv1.Job{}).
		Watches(&corev1.Pod{}, podToJob).
		Watches(&batchv1alpha1.GuardedJob{}, stoppingRuns).
		WatchesRawSource(source.Channel(r.events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(stopWorkers, r.MaxConcurrentReconciles)}).
		Complete(r)
}

// clock is the stop controller's clock: real time unless one was injected.
func (r *StopReconciler) clock() clock.Clock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// Reconcile stops the Job if its run must stop.
func (r *StopReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := r.reconcile(ctx, req)
	if err == nil {
		r.settle(req.NamespacedName)
	}
	return res, err
}

func (r *StopReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.Guard.Err() != nil {
		return ctrl.Result{RequeueAfter: notLeadingRetry}, nil
	}
	job := &batchv1.Job{}
	if err := r.Reader.Get(ctx, req.NamespacedName, job); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ref := metav1.GetControllerOf(job)
	if ref == nil || ref.Kind != "GuardedJob" || ref.APIVersion != batchv1alpha1.GroupVersion.String() {
		return ctrl.Result{}, nil
	}
	gj := &batchv1alpha1.GuardedJob{}
	key := client.ObjectKey{Namespace: job.Namespace, Name: ref.Name}
	err := r.Reader.Get(ctx, key, gj)
	if apierrors.IsNotFound(err) {
		// Not in this shard's cache: the GuardedJob is gone, belongs to another
		// shard, or is so new that the cache lags behind it. A run this shard is
		// handing over is still its to stop; otherwise only the shard that judges
		// this Job's orphans asks the API server which.
		grace, mustStop, handing := r.handoverStop(job)
		if !handing && (!judgesOrphans(r.Selector, job) || !controllerutil.ContainsFinalizer(job, batchv1alpha1.LeaseFinalizer)) {
			return ctrl.Result{}, nil
		}
		err = r.APIReader.Get(ctx, key, gj)
		if err == nil && !inShard(r.Selector, gj) {
			// Another shard's: moved, or created there. A run this shard is
			// handing over is still its to stop when its lease must stop.
			if mustStop {
				return ctrl.Result{}, r.stop(ctx, job, grace)
			}
			return ctrl.Result{}, nil
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		// The GuardedJob is gone, and with it the only record of the run's token:
		// the garbage collector would give the Pods their full grace only after
		// the lease finalizer went. Stop them; the lease is left to expire.
		return r.stopOrphan(ctx, job, "its GuardedJob "+ref.Name+" is gone")
	case err != nil:
		return ctrl.Result{}, err
	}
	if runcore.RunByName(gj, job.Name) == nil {
		return r.unclaimed(ctx, gj, job)
	}
	grace, step := r.decide(gj, job)
	if step == "" {
		return ctrl.Result{}, nil
	}
	logStep(ctx, step, "job", job.Name)
	deleting := job.DeletionTimestamp.IsZero()
	if err := r.stop(ctx, job, grace); err != nil {
		return ctrl.Result{}, err
	}
	if deleting {
		r.observeStopLatency(gj, job)
	}
	return ctrl.Result{}, nil
}

// handoverStop says whether the Job of a run this shard is handing over
// (handing) must be stopped now, and with which Pod grace: its lease is lost,
// past its self-fence deadline or past maxHold, or no shard took it over in time.
func (r *StopReconciler) handoverStop(job *batchv1.Job) (grace time.Duration, stop, handing bool) {
	token, timedOut, ok := r.Handovers.run(client.ObjectKeyFromObject(job))
	if !ok {
		return 0, false, false
	}
	_, finished := jobFinished(job)
	grace, stop = runcore.HandoverStop(r.stopView(token, podGraceOf(job)), timedOut, finished)
	return grace, stop, true
}

// stopView is what the keeper reports of the lease of token, for the core's
// stop verdicts; the run and the deletion are the caller's to add.
func (r *StopReconciler) stopView(token string, podGrace time.Duration) runcore.StopView {
	v := runcore.StopView{PodGrace: podGrace}
	if st, tracked := r.Keeper.Get(token); tracked {
		v.Tracked, v.Lost, v.DeadlineReached, v.MaxHoldReached = true, st.State == lockclient.StateLost, st.DeadlineReached, st.MaxHoldReached
		v.ValidUntil, v.ValidFor = st.ValidUntil, st.ValidFor
	}
	return v
}

// observeStopLatency records how long after the keeper found a run's lease lost
// (or reached its self-fence deadline) its Job was deleted. Both times are on
// the wall clock the keeper runs on.
func (r *StopReconciler) observeStopLatency(gj *batchv1alpha1.GuardedJob, job *batchv1.Job) {
	token := runcore.RunByName(gj, job.Name).Token
	st, ok := r.Keeper.Get(token)
	if !ok || !r.firstStop(token) {
		return
	}
	switch {
	case st.State == lockclient.StateLost && !st.LostAt.IsZero():
		stopLatency.WithLabelValues("lost").Observe(max(r.clock().Since(st.LostAt), 0).Seconds())
	case st.DeadlineReached && !st.DeadlineReachedAt.IsZero():
		stopLatency.WithLabelValues("deadline").Observe(max(r.clock().Since(st.DeadlineReachedAt), 0).Seconds())
	}
}

// firstStop says whether the stop of a token's run is seen for the first time.
// Entries go after an hour: by then the run is long over.
func (r *StopReconciler) firstStop(token string) bool {
	r.timedMu.Lock()
	defer r.timedMu.Unlock()
	now := r.clock().Now()
	if r.timed == nil {
		r.timed = map[string]time.Time{}
	}
	if _, seen := r.timed[token]; seen {
		return false
	}
	for t, at := range r.timed {
		if now.Sub(at) > time.Hour {
			delete(r.timed, t)
		}
	}
	r.timed[token] = now
	return true
}

// unclaimed handles a Job of a GuardedJob whose status (as cached) has no run for
// it. The cache may simply not have the status that claims a brand-new Job yet,
// so the API server is asked before anything is stopped.
func (r *StopReconciler) unclaimed(ctx context.Context, gj *batchv1alpha1.GuardedJob, job *batchv1.Job) (ctrl.Result, error) {
	view := unclaimedJobView(gj, job, r.Keeper)
	if view.Started && !view.RenewedHere && r.WaitResumed != nil {
		if err := r.WaitResumed(ctx); err != nil {
			return ctrl.Result{}, err
		}
		view = unclaimedJobView(gj, job, r.Keeper)
	}
	u := runcore.NewUnclaimed(gj.Name, view)
	fresh := &batchv1alpha1.GuardedJob{}
	for {
		action, why := u.Next()
		switch action {
		case runcore.ReadOwner:
			err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(gj), fresh)
			if err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, err
			}
			u.DeliverOwner(runcore.OwnerView{Found: err == nil, UID: string(fresh.UID),
				Claims: err == nil && runcore.RunByName(fresh, job.Name) != nil, InShard: err == nil && inShard(r.Selector, fresh)})
			continue
		case runcore.ReadJob:
			err := r.readLive(ctx, job)
			if err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, err
			}
			_, finished := jobFinished(job)
			u.DeliverJob(runcore.JobView{Found: err == nil, Finished: err == nil && finished})
			continue
		}
		ctrl.LoggerFrom(ctx).V(1).Info("step", "step", runcore.StopUnclaimed, "job", job.Name, "decision", action, "why", why)
		switch action {
		case runcore.StopOrphan:
			return r.stopOrphan(ctx, job, why)
		case runcore.Stop:
			if job.DeletionTimestamp.IsZero() && r.Recorder != nil {
				why := "status lost or restored from a backup?"
				if says := runcore.LedgerSays(fresh, job.Annotations[batchv1alpha1.HolderAnnotation], r.clock().Now()); says != "" {
					why = "status.leases has " + says
				}
				r.Recorder.Eventf(fresh, job, corev1.EventTypeWarning, batchv1alpha1.StaleJobReason, batchv1alpha1.StaleJobReason,
					"Stopping Job %s: no active run of this GuardedJob claims it (%s)", job.Name, why)
			}
			logStep(ctx, runcore.StopUnclaimed, "job", job.Name)
			return ctrl.Result{}, r.stop(ctx, job, fresh.Spec.PodGracePeriod())
		default:
			return ctrl.Result{}, nil
		}
	}
}

// unclaimedJobView is what step stop_unclaimed needs of a Job of gj as the cache
// shows it.
func unclaimedJobView(gj *batchv1alpha1.GuardedJob, job *batchv1.Job, keeper *lockclient.Keeper) runcore.JobView {
	_, finished := jobFinished(job)
	var owner string
	if ref := metav1.GetControllerOf(job); ref != nil {
		owner = string(ref.UID)
	}
	w := waitingOf(gj, job, true)
	v := runcore.JobView{Found: true, OwnerUID: owner, Finished: finished, WaitsForAdoption: w.WaitsForAdoption() && !w.Started()}
	if v.Started = workingUnrecorded(gj, job); v.Started && keeper != nil {
		v.RenewedHere = renewsJob(keeper, gj, job.Name)
	}
	return v
}

// readLive replaces a Job read from the cache with the Job as the API server has
// it now.
func (r *StopReconciler) readLive(ctx context.Context, job *batchv1.Job) error {
	return r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), job)
}

// orphanRecheck is how often a stopped Job that no run claims is looked at until
// its Pods are gone.
const orphanRecheck = 5 * time.Second

// stopOrphan stops a Job that carries the lease finalizer but that no live run
// claims (its GuardedJob was deleted, or its status lost): it deletes the Job and
// its Pods with their own grace period, and removes the lease finalizer once no
// Pod is left. The lease, whose token only the lost status knew, is left to
// expire.
func (r *StopReconciler) stopOrphan(ctx context.Context, job *batchv1.Job, why string) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(job, batchv1alpha1.LeaseFinalizer) {
		return ctrl.Result{}, nil // not a lease-holding Job (or already released)
	}
	// The cached Job may be older than the end of its run and the release of its
	// lease (a busy manager's cache lags): a finished run's Job that its owner
	// orphaned must stay, so decide on the Job as the API server has it.
	fresh := &batchv1.Job{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), fresh); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !controllerutil.ContainsFinalizer(fresh, batchv1alpha1.LeaseFinalizer) {
		return ctrl.Result{}, nil
	}
	job = fresh
	_, finished := jobFinished(job)
	if !finished {
		if job.DeletionTimestamp.IsZero() && r.Recorder != nil {
			r.Recorder.Eventf(job, nil, corev1.EventTypeWarning, batchv1alpha1.StaleJobReason, batchv1alpha1.StaleJobReason,
				"Stopping Job %s: %s; its lease is left to expire", job.Name, why)
		}
		if err := r.stop(ctx, job, podGraceOf(job)); err != nil {
			return ctrl.Result{}, err
		}
	}
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list pods of job %s: %w", job.Name, err)
	}
	// A finished Job's Pods have ended (their objects stay until the Job goes).
	if len(pods.Items) > 0 && !finished {
		return ctrl.Result{RequeueAfter: orphanRecheck}, nil
	}
	patch := client.MergeFromWithOptions(job.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(job, batchv1alpha1.LeaseFinalizer)
	if err := r.Writer.Patch(ctx, job, patch); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("remove lease finalizer from job %s: %w", job.Name, err)
	}
	return ctrl.Result{}, nil
}

// podGraceOf is the grace period a Job's Pod template asks for.
func podGraceOf(job *batchv1.Job) time.Duration {
	if g := job.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return corev1.DefaultTerminationGracePeriodSeconds * time.Second
}

// decide says whether the Job of an active run must stop now, with which Pod
// grace period, and as which step of the model's Stopper: the keeper reported
// the lease (stop_reported), or status has the run Stopping (stop_stopping);
// "" when it does not stop. The core judges it (runcore.StopVerdict) from what
// the keeper reports and status records.
func (r *StopReconciler) decide(gj *batchv1alpha1.GuardedJob, job *batchv1.Job) (time.Duration, runcore.Step) {
	run := runcore.RunByName(gj, job.Name)
	v := r.stopView(run.Token, gj.Spec.PodGracePeriod())
	v.Run, v.DeleteStops = run, !gj.DeletionTimestamp.IsZero() && stopsRunsOnDelete(gj)
	return runcore.StopVerdict(v)
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
		if pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds <= seconds || r.deletedWithin(pod.UID, seconds) {
			continue // already going, at least as fast
		}
		if err := r.Writer.Delete(ctx, pod, client.GracePeriodSeconds(seconds)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete pod %s: %w", pod.Name, err)
		}
		r.deleted(pod.UID, seconds)
	}
	return nil
}

// issuedDelete is a Pod delete this manager issued: its grace, and when.
type issuedDelete struct {
	seconds int64
	at      time.Time
}

// podDeleteMemory is how long an issued Pod delete is remembered: far longer
// than the cache takes to show it (after that, the cached Pod shows its grace).
const podDeleteMemory = 10 * time.Minute

// deletedWithin says whether this manager deleted the Pod with a grace of at
// most seconds. The API server keeps a terminating Pod's deadline unless a
// delete asks for a shorter grace, so such a delete would change nothing.
func (r *StopReconciler) deletedWithin(uid types.UID, seconds int64) bool {
	r.podDeletesMu.Lock()
	defer r.podDeletesMu.Unlock()
	d, ok := r.podDeletes[uid]
	return ok && d.seconds <= seconds && r.clock().Since(d.at) < podDeleteMemory
}

// deleted remembers that this manager deleted the Pod with the given grace;
// entries older than podDeleteMemory go.
func (r *StopReconciler) deleted(uid types.UID, seconds int64) {
	r.podDeletesMu.Lock()
	defer r.podDeletesMu.Unlock()
	now := r.clock().Now()
	if r.podDeletes == nil {
		r.podDeletes = map[types.UID]issuedDelete{}
	}
	if d, ok := r.podDeletes[uid]; ok && d.seconds <= seconds && now.Sub(d.at) < podDeleteMemory {
		return
	}
	for u, d := range r.podDeletes {
		if now.Sub(d.at) >= podDeleteMemory {
			delete(r.podDeletes, u)
		}
	}
	r.podDeletes[uid] = issuedDelete{seconds: seconds, at: now}
}

// owedLimit is how long a stop the keeper asked for holds back the status
// writes of the GuardedJob reconciler (see behind): a stop path that cannot
// delete (a webhook or RBAC refusing) must not hide why runs stop.
const owedLimit = 30 * time.Second

// owe records that the keeper asked for a Job to be stopped, and pokes the
// controller.
func (r *StopReconciler) owe(namespace, name string) {
	r.owedMu.Lock()
	if r.owed == nil {
		r.owed = map[types.NamespacedName]time.Time{}
	}
	key := types.NamespacedName{Namespace: namespace, Name: name}
	if _, ok := r.owed[key]; !ok {
		r.owed[key] = r.clock().Now()
	}
	r.owedMu.Unlock()
	r.poke(namespace, name)
}

// settle records that a Job was looked at and its deletes, if it needed any,
// were issued.
func (r *StopReconciler) settle(key types.NamespacedName) {
	r.owedMu.Lock()
	delete(r.owed, key)
	r.owedMu.Unlock()
}

// behind says whether stops the keeper asked for in the last owedLimit still
// wait for their deletes. The API server is shared: while it is, the
// GuardedJob reconciler holds back the status writes of stopping runs, so that
// when many runs must stop at once the deletes go first.
func (r *StopReconciler) behind() bool {
	r.owedMu.Lock()
	defer r.owedMu.Unlock()
	now := r.clock().Now()
	for key, at := range r.owed {
		if now.Sub(at) < owedLimit {
			return true
		}
		delete(r.owed, key)
	}
	return false
}

// poke asks the stop controller to look at a Job now.
func (r *StopReconciler) poke(namespace, name string) {
	select {
	case r.events <- event.GenericEvent{Object: &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}}:
	default:
		// The queue is full; the Job's own watch events still reach the controller.
	}
}
