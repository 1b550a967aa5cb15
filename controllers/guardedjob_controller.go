package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
	"github.com/guardedjob/guardedjob/internal/keys"
	"github.com/guardedjob/guardedjob/internal/leadership"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// GuardedJobReconciler runs GuardedJobs: schedule or trigger -> intent -> acquire
// -> Job -> observe -> release. It is the only writer of GuardedJob status and the
// only creator of Jobs. Renewals happen in the Keeper, never here.
type GuardedJobReconciler struct {
	client.Client
	// requestsServed is set when the API server serves the request objects'
	// kinds (GuardedJobRun, GuardedJobBackfill): a manager upgraded before its
	// CRDs runs without them rather than failing to start.
	requestsServed bool
	// APIReader reads objects the cache does not hold (store Secrets).
	APIReader client.Reader
	Recorder  recorder.EventRecorder
	Clock     clock.Clock

	// Store is the manager's own lock store; Keeper renews leases in it.
	Store  *lockclient.Client
	Keeper *lockclient.Keeper

	// ClusterName goes into every lease holder; runs recorded under another
	// cluster name are never renewed here.
	ClusterName string
	KeyGrants   keys.Grants
	// Grants publishes KeyGrants in the store and refuses keys that another
	// manager sharing it grants differently. Nil: no check.
	Grants *GrantsCheck
	// ClockSkew is how far another replica's clock may be ahead of this one's:
	// subtracted from a recorded acquisition time before it counts as evidence
	// that a resumed lease is still valid.
	ClockSkew time.Duration
	// Namespace, when set, is the only namespace this manager serves (its cache
	// holds no other): leases of GuardedJobs elsewhere are not resumed here.
	Namespace string
	// Selector, when set, is this manager's shard (--watch-label-selector): it
	// serves only the GuardedJobs whose labels match, and its cache (see
	// CacheOptionsFor) holds no other. Nil serves every GuardedJob.
	Selector labels.Selector
	// StoreAllow limits the hosts storeRef stores may have; nil allows any.
	StoreAllow *lockclient.AllowList
	// GuardImage is the image of the pod guard sidecar (lock.podGuard): the
	// manager's own. Empty: GuardedJobs with a pod guard are Ready=False.
	GuardImage string
	// Leader election timing, for the lease-timing check.
	LeaderElection      bool
	LeaderLeaseDuration time.Duration
	LeaderRetryPeriod   time.Duration

	MaxConcurrentReconciles int

	// Stopper is told to act at once on runs that must stop.
	Stopper *StopReconciler

	// Handovers holds the runs of GuardedJobs that left this shard whose leases
	// this manager renews until another shard takes them over (shared with the
	// stop controller); HandoverTimeout is how long it waits for that
	// (--shard-handover-timeout) before it stops them.
	Handovers       *Handovers
	HandoverTimeout time.Duration

	// Guard says whether this manager is known to lead: a pass of a manager that
	// is not does nothing, and every side effect asks it again (the clients,
	// the stores and the recorder are wrapped with it). Nil: always leads.
	Guard *leadership.Guard

	// Identity detects another live manager claiming this manager's cluster
	// identity in its store; while one does, no run starts and nothing is taken
	// up. Nil: not checked.
	Identity *IdentityCheck

	// events carries keeper reports to this controller (only the object key).
	events chan event.GenericEvent

	// superseded maps an object to the resourceVersions this manager wrote over
	// ([]string) since the cache last caught up with it. A pass that reads one of
	// them from the cache works from state that is known to be stale: it waits
	// for the cache instead of acting (acting would repeat an acquisition and
	// waste a fence). A pass may write several times, so the cache can hold any
	// of the versions in between.
	superseded sync.Map
	// jobsCreated maps a run's token to the UID of the Job this process created
	// for it, until status records it: a run whose Job vanished before that is
	// seen as such, never given a second Job.
	jobsCreated sync.Map
	// pendingAdoption: Jobs created ahead of a status write that failed
	// (guardedjob_jobfirst.go).
	pendingAdoption unrecordedJobs
	// takeOvers carries the objects that moved into this shard to runTakeOvers.
	takeOvers chan types.NamespacedName

	// objectLocks holds a *sync.Mutex per GuardedJob: a pass holds it, and so does
	// a take-over outside the work queue (takeOverOnSight), so that the latter
	// never tracks again the lease of a run a pass has just ended.
	objectLocks sync.Map

	// resumed is closed once the leases in status.active are renewed after this
	// manager became the leader; reconciles wait for it.
	resumed    chan struct{}
	resumeOnce sync.Once

	// stores holds the clients of tenant stores (storeRef).
	stores storeSet
}

// The verbs are the calls the manager makes, no more: finalizers are added and
// removed with patches; guardedjobs/finalizers update is what the API server asks of
// a Job's owner reference with blockOwnerDeletion; Pods are only listed from the
// cache and deleted; the kube-system namespace is read once, for the default
// --cluster-name.
// +kubebuilder:rbac:groups=batch.guardedjob.dev,resources=guardedjobs,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=batch.guardedjob.dev,resources=guardedjobs/status,verbs=update;patch
// +kubebuilder:rbac:groups=batch.guardedjob.dev,resources=guardedjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch.guardedjob.dev,resources=guardedjobruns;guardedjobbackfills;guardedjobinspects;guardedjobunlocks,verbs=list;watch;delete
// +kubebuilder:rbac:groups=batch.guardedjob.dev,resources=guardedjobruns/status;guardedjobbackfills/status;guardedjobinspects/status;guardedjobunlocks/status,verbs=update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch;delete;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get,resourceNames=kube-system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=list

// jobOwnerKey indexes Jobs by the name of their GuardedJob.
const jobOwnerKey = ".metadata.guardedjob"

// CacheOptions restricts the manager's cache to the Jobs and Pods of GuardedJobs,
// so a cluster with thousands of unrelated Pods costs nothing, and keeps no field
// the manager never reads (see slimForCache).
func CacheOptions() cache.Options {
	ours, _ := labels.Parse(batchv1alpha1.GuardedJobLabel)
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&batchv1.Job{}: {Label: ours},
			&corev1.Pod{}:  {Label: ours},
		},
		DefaultTransform: slimForCache,
	}
}

// lastApplied is the annotation a client-side kubectl apply keeps a copy of the
// whole object in.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// slimForCache drops what the manager never reads from every cached object: its
// managedFields and kubectl's last-applied copy of it, which together are often
// larger than the object itself. Writes are unaffected: status is written through
// the status subresource (which ignores metadata), other writes are patches of
// the fields they change, and an update without managedFields keeps the API
// server's.
func slimForCache(in any) (any, error) {
	if o, ok := in.(client.Object); ok {
		o.SetManagedFields(nil)
		if a := o.GetAnnotations(); a[lastApplied] != "" {
			a = maps.Clone(a)
			delete(a, lastApplied)
			o.SetAnnotations(a)
		}
	}
	return in, nil
}

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
		Watches(&batchv1.Job{}, byLabel).
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

// scope is one reconcile pass: the object, its status as read, and what the pass
// decided.
type scope struct {
	gj   *batchv1alpha1.GuardedJob
	orig *batchv1alpha1.GuardedJob
	now  time.Time
	// spec is the object's spec compiled, or nil while it is not valid (or
	// the object is being deleted).
	spec *compiledSpec
	// requeue is the earliest time the pass wants to look again.
	requeue time.Time
	// guardedWriteFailed is set when a resourceVersion-guarded write failed: the
	// pass worked from a stale object and must write nothing else.
	guardedWriteFailed bool
	// abandoned says the pass gave up an occurrence's tries (startRetry); the
	// series counts it once a status write succeeded.
	abandoned bool
	// unrecorded names the run this pass started that the API server's status
	// does not have yet: its first status write records its intent with the
	// result of its acquisition.
	unrecorded string
	// requests are the request objects naming the object (requests.go), and
	// triggerParams the parameters of the run-now request this pass handles.
	requests      *requestSet
	triggerParams map[string]string
	// recordLater is set when the pass created its run's Job: the pass ends
	// without a status write, and the pass the Job's own watch event brings
	// records it (adoptJob). That pass is queued behind every run due now, so
	// at the due-time burst the API server takes the writes that start runs
	// first.
	recordLater bool
}

func (s *scope) requeueAt(t time.Time) {
	if s.requeue.IsZero() || t.Before(s.requeue) {
		s.requeue = t
	}
}

func (s *scope) requeueAfter(d time.Duration) { s.requeueAt(s.now.Add(d)) }

func (s *scope) result() ctrl.Result {
	if s.requeue.IsZero() {
		return ctrl.Result{}
	}
	d := s.requeue.Sub(s.now)
	if d < time.Millisecond {
		d = time.Millisecond
	}
	return ctrl.Result{RequeueAfter: d}
}

// secretRecheck is how soon a missing or invalid store Secret is read again.
const secretRecheck = 30 * time.Second

// cacheLagRetry is how soon a pass that found the cache behind its own last
// write looks again.
const cacheLagRetry = 50 * time.Millisecond

// lockObject takes the lock of one GuardedJob (see objectLocks) and returns its
// unlock.
func (r *GuardedJobReconciler) lockObject(key types.NamespacedName) func() {
	m, _ := r.objectLocks.LoadOrStore(key, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// markSuperseded records that this manager wrote over version rv of an object.
// A write the API server found to change nothing keeps the version: that one is
// not superseded (the cache would never get past it).
func (r *GuardedJobReconciler) markSuperseded(key types.NamespacedName, rv, now string) {
	if rv == now {
		return
	}
	var stale []string
	if v, ok := r.superseded.Load(key); ok {
		stale = v.([]string)
	}
	// A new slice: a pass reading the map never sees one that is being appended to.
	r.superseded.Store(key, append(stale[:len(stale):len(stale)], rv))
}

// cacheBehind says whether rv, read from the cache, is a version this manager
// has already written over. A version that is not is the latest write or newer
// (the cache never goes back), so the record is dropped. Passes over one object
// never run in parallel, so the record cannot change in between.
func (r *GuardedJobReconciler) cacheBehind(key types.NamespacedName, rv string) bool {
	v, ok := r.superseded.Load(key)
	if !ok {
		return false
	}
	if slices.Contains(v.([]string), rv) {
		return true
	}
	r.superseded.Delete(key)
	return false
}

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
//   - jobsCreated and scope.recordLater: the UID of a Job a pass created and
//     left for the next pass to record.
//   - objectLocks: one pass (or take-over) at a time per object.
//   - Handovers: runs of objects that left this shard, renewed until another
//     shard holds them (watchHandovers).
func (r *GuardedJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	if err := r.waitResumed(ctx); err != nil {
		return ctrl.Result{}, err
	}
	if r.Guard.Err() != nil {
		// Not known to lead (paused, or deposed): a pass on a cache from before
		// a pause would act on what another leader has changed since.
		return ctrl.Result{RequeueAfter: notLeadingRetry}, nil
	}
	gj := &batchv1alpha1.GuardedJob{}
	if err := r.Get(ctx, req.NamespacedName, gj); err != nil {
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
	r.claimShard(gj)
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
			return
		}
		setQueued(gj, s.now) // guardedjob_queued.go
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
		if err := r.Patch(ctx, gj, patch); err != nil {
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
	if r.duplicateIdentity(s) || !r.identitySettled(s) {
		return ctrl.Result{}, nil
	}
	if err := r.scheduleAll(ctx, s, spec); err != nil { // suspensions, the schedule, buffered runs, backfills (guardedjob_buffer.go)
		return ctrl.Result{}, err
	}
	r.watchOccurrence(ctx, s, spec) // a Busy run's occurrence done by another cluster? (guardedjob_occurrence.go)
	return ctrl.Result{}, nil
}

// notLeadingRetry is how soon a pass, or a stop, that found this manager not
// known to lead looks again: a false alarm (a short pause) ends with the next
// leader-election renewal, a deposition with the manager's exit.
const notLeadingRetry = time.Second

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
	if err := r.Status().Patch(ctx, s.gj, patch); err != nil {
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
			r.Keeper.Untrack(run.Token)
			r.jobsCreated.Delete(run.Token)
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

// countAbandoned counts an occurrence the pass gave up (startRetry) once a
// status write recorded it: a pass whose write fails gives it up again.
func countAbandoned(s *scope) {
	if s.abandoned {
		guardedJobMetrics.occurrenceAbandoned(s.gj)
		s.abandoned = false
	}
}

// writeGuarded makes the status durable before a side effect (acquiring a lease,
// creating a Job), with the object's resourceVersion as precondition. A conflict
// means the pass worked from a stale object: nothing happened, the pass ends and
// the next one starts over. On success the pass may go on, but only with the
// object the API server returned (s.gj now), never with a cached read: pointers
// into the old status are stale, find runs again by name.
func (r *GuardedJobReconciler) writeGuarded(ctx context.Context, s *scope) error {
	before := s.gj.ResourceVersion
	runcore.SetKstatus(s.gj, s.now)
	runcore.SetActiveCount(s.gj)
	if err := r.Status().Update(ctx, s.gj); err != nil {
		s.guardedWriteFailed = true
		return fmt.Errorf("record run state: %w", err)
	}
	r.markSuperseded(client.ObjectKeyFromObject(s.gj), before, s.gj.ResourceVersion)
	s.orig = s.gj.DeepCopy()
	countAbandoned(s)
	return nil
}

// untrackOwner stops renewing every lease of the runs of one GuardedJob.
func (r *GuardedJobReconciler) untrackOwner(namespace, name string) {
	prefix := ownerPrefix(namespace, name)
	for _, st := range r.Keeper.Snapshot() {
		if strings.HasPrefix(st.Owner, prefix) {
			r.Keeper.Untrack(st.Token)
		}
	}
}

// logStep logs a step of the run protocol at V(1), named as model/run.pml names
// it, so that a story's log reads like a spin trail.
func logStep(ctx context.Context, step runcore.Step, keysAndValues ...any) {
	ctrl.LoggerFrom(ctx).V(1).Info("step", append([]any{"step", string(step)}, keysAndValues...)...)
}

// event records an event about the GuardedJob (and the Job it concerns, if any).
func (r *GuardedJobReconciler) event(gj *batchv1alpha1.GuardedJob, job *batchv1.Job, eventType, reason, format string, args ...any) {
	if r.Recorder == nil {
		return
	}
	var related runtime.Object
	if job != nil {
		related = job
	}
	r.Recorder.Eventf(gj, related, eventType, reason, reason, format, args...)
}

// warnFixedKeyWithAllow warns (once per spec generation) when concurrencyPolicy
// Allow meets a lock key that is the same for every occurrence: the runs then
// wait for each other's lease, so Allow behaves like Forbid.
func (r *GuardedJobReconciler) warnFixedKeyWithAllow(gj *batchv1alpha1.GuardedJob, spec *compiledSpec) {
	if gj.Spec.ConcurrencyPolicyOrDefault() != batchv1alpha1.AllowConcurrent {
		return
	}
	at := func(t time.Time) string {
		k, _ := spec.rules.LockKey(t)
		return k
	}
	first := spec.rules.Schedule.Next(gj.CreationTimestamp.Time)
	if key := at(first); key == at(spec.rules.Schedule.Next(first)) {
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.FixedKeyWithAllowReason,
			"concurrencyPolicy Allow with lock.key %q, which is the same for every occurrence: overlapping runs wait for each other's lease (onBusy applies), as with Forbid; use {{ .ScheduledTime }} in lock.key to let them overlap", key)
	}
}

// warnOnce emits a Warning the first time a spec problem is seen (the Ready
// condition holds it afterwards).
func (r *GuardedJobReconciler) warnOnce(s *scope, reason, msg string) {
	before := runcore.FindCondition(s.orig.Status.Conditions, batchv1alpha1.ReadyCondition)
	if before != nil && before.Reason == reason && before.Message == msg {
		return
	}
	r.event(s.gj, nil, corev1.EventTypeWarning, reason, "%s", msg)
}
