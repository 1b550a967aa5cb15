package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/gjspec"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
	"github.com/guardedjob/guardedjob/internal/keys"
	"github.com/guardedjob/guardedjob/internal/leadership"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/podguard"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/runparams"
	"github.com/guardedjob/guardedjob/internal/schedule"
	"github.com/guardedjob/guardedjob/internal/specerror"
	"github.com/guardedjob/guardedjob/internal/storeconfig"
)

// GuardedJobReconciler runs GuardedJobs: schedule or trigger -> intent -> acquire
// -> Job -> observe -> release. It is the only writer of GuardedJob status and the
// only creator of Jobs. Renewals happen in the Keeper, never here.
type GuardedJobReconciler struct {
	client.Client
	// gatesByPatch is set once the API server refused to let the manager
	// update a Job (a ClusterRole from before it did): gates open with the
	// patch that role allows from then on.
	gatesByPatch atomic.Bool
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

	// EarlyGate opens a run's start gate before the status write that records
	// it (--early-gate): the Job carries its run and is the run's record until
	// status catches up (docs/reliability.md, "The early gate").
	EarlyGate bool

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
	// memory is what this process remembers between passes that changes what a
	// pass decides: the Jobs it created that status does not record yet.
	memory createdJobs
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
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch;delete;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get,resourceNames=kube-system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=list

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
	// goOn names the run whose phase a step has just moved on, for the run
	// dispatcher to take its next phase in this pass (next).
	goOn string
	// ahead is what stands ahead of any run the pass may start, beside the
	// runs status records: the Jobs the schedule step found waiting for
	// adoption or claimed by no run (reapUnclaimedJobs).
	ahead due.Ahead
}

// next ends a phase's step with the run moved on to its next phase, which the
// run dispatcher (advanceRun) takes in this same pass.
func (s *scope) next(run *batchv1alpha1.ActiveRun) error {
	s.goOn = run.JobName
	return nil
}

// mayStartWaiting says whether a run that waited in status (a retry, a
// buffered occurrence, a backfill's next occurrence) may start in this pass
// (due.AdmitWaiting); when it may not, a later pass is asked for as it says.
func (s *scope) mayStartWaiting() bool {
	admit := due.AdmitWaiting(s.ahead)
	if admit.Act != due.Wait {
		return true
	}
	if admit.RetryAfter > 0 {
		s.requeueAfter(admit.RetryAfter)
	}
	return false
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

// cacheLagRetry is how soon a pass that found the cache behind its own last
// write looks again.
const cacheLagRetry = 50 * time.Millisecond

// createdJobs is the process's memory of the Jobs it created that status does
// not record yet, per GuardedJob and Job name: the Job of a recorded run whose
// UID the next pass records (recordLater), and a Job created before its run's
// status write, which failed (unrecorded: the next pass adopts or deletes it,
// even before its cache has seen it). A Job remembered here is never taken for
// missing, nor given a second Job.
type createdJobs struct {
	mu   sync.Mutex
	jobs map[types.NamespacedName]map[string]createdJob
}

type createdJob struct {
	uid        types.UID
	unrecorded bool
	// opened: this process opened its gate and left its run's record to the
	// next pass (the early gate).
	opened bool
}

func (c *createdJobs) created(gj types.NamespacedName, job string, uid types.UID, unrecorded bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil {
		c.jobs = map[types.NamespacedName]map[string]createdJob{}
	}
	if c.jobs[gj] == nil {
		c.jobs[gj] = map[string]createdJob{}
	}
	c.jobs[gj][job] = createdJob{uid: uid, unrecorded: unrecorded}
}

// createdOpen remembers a Job this process created and opened before any
// status recorded its run (the early gate).
func (c *createdJobs) createdOpen(gj types.NamespacedName, job string, uid types.UID) {
	c.created(gj, job, uid, true)
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.jobs[gj][job]
	j.opened = true
	c.jobs[gj][job] = j
}

// openedHere says whether this process opened the gate of the Job of that
// name and UID and left its run's record to a later pass.
func (c *createdJobs) openedHere(gj types.NamespacedName, job string, uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.jobs[gj][job]
	return ok && j.opened && j.uid == uid
}

// uid is the UID of the Job of that name this process created, if it
// remembers one.
func (c *createdJobs) uid(gj types.NamespacedName, job string) (types.UID, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.jobs[gj][job]
	return j.uid, ok
}

func (c *createdJobs) forget(gj types.NamespacedName, job string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.jobs[gj], job)
	if len(c.jobs[gj]) == 0 {
		delete(c.jobs, gj)
	}
}

// unrecorded names the remembered Jobs whose run no status records.
func (c *createdJobs) unrecorded(gj types.NamespacedName) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for name, j := range c.jobs[gj] {
		if j.unrecorded {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

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

// notLeadingRetry is how soon a pass, or a stop, that found this manager not
// known to lead looks again: a false alarm (a short pause) ends with the next
// leader-election renewal, a deposition with the manager's exit.
const notLeadingRetry = time.Second

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
	if err := r.updateStatus(ctx, s.gj); err != nil {
		s.guardedWriteFailed = true
		return fmt.Errorf("record run state: %w", err)
	}
	r.markSuperseded(client.ObjectKeyFromObject(s.gj), before, s.gj.ResourceVersion)
	s.orig = s.gj.DeepCopy()
	countAbandoned(s)
	return nil
}

// logStep logs a step of the run protocol at V(1), named as model/run.pml names
// it, so that a story's log reads like a spin trail.
func logStep(ctx context.Context, step runcore.Step, keysAndValues ...any) {
	ctrl.LoggerFrom(ctx).V(1).Info("step", append([]any{"step", string(step)}, keysAndValues...)...)
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

// runDueTime is when a run was due: its scheduled time, or a run-now trigger's
// time (its start deadline less startingDeadlineSeconds, as recorded at intent).
func runDueTime(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) time.Time {
	if run.StartDeadline == nil {
		return run.ScheduledTime.Time
	}
	return run.StartDeadline.Add(-gj.Spec.StartingDeadline())
}

// markerTTLFor is the done-marker lifetime of an occurrence: until the latest
// start of it any cluster running this spec may make (a schedule that no longer
// parses counts a day to the next occurrence).
func markerTTLFor(gj *batchv1alpha1.GuardedJob, scheduled, now time.Time) time.Duration {
	sched, _ := schedule.Parse(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	return leasetiming.MarkerTTL(sched, scheduled, now, due.StartsOf(&gj.Spec), gj.Spec.Lock.KeepAfterSuccessOrDefault())
}

// runStartDeadline is the run's own deadline to start (due.StartDeadline).
func runStartDeadline(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) time.Time {
	sched, _ := schedule.Parse(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	return due.StartDeadline(&gj.Spec, sched, run)
}

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
// the status subresource (which ignores metadata), an update without
// managedFields keeps the API server's, and the one whole-object write of
// something else, the update that opens a Job's start gate, finds a Job's
// last-applied copy kept (a run's Job seldom has one).
func slimForCache(in any) (any, error) {
	if o, ok := in.(client.Object); ok {
		o.SetManagedFields(nil)
		if _, job := o.(*batchv1.Job); job {
			return in, nil
		}
		if a := o.GetAnnotations(); a[lastApplied] != "" {
			a = maps.Clone(a)
			delete(a, lastApplied)
			o.SetAnnotations(a)
		}
	}
	return in, nil
}

// compiledSpec is what a valid spec turns into: parsed schedule and templates, and
// the store the lease lives in.
type compiledSpec struct {
	rules *gjspec.Rules
	store *lockclient.Client
	// confined is true for the manager's shared store, where keys must stay inside
	// the namespace's prefix or a granted one.
	confined bool
	// guard is the pod guard a run gets (lock.podGuard), or nil.
	guard *batchv1alpha1.RunPodGuard
}

// keys renders the keys of the occurrence at scheduled and checks them against the
// store's rules. Errors are *specerror.Error.
func (c *compiledSpec) keys(r *GuardedJobReconciler, gj *batchv1alpha1.GuardedJob, scheduled time.Time) (lockclient.Keys, error) {
	k, err := c.rules.Keys(scheduled)
	if err != nil {
		return k, err
	}
	if c.confined {
		if err := r.KeyGrants.CheckKeys(gj.Namespace, k.Lock, k.Occurrence, k.Fence); err != nil {
			return k, err
		}
		if err := r.Grants.Agree(gj.Namespace, k.Lock, k.Occurrence, k.Fence); err != nil {
			return k, err
		}
	}
	return k, nil
}

// compile checks everything about the spec that the CRD schema cannot: cron syntax,
// time zone, templates, key rules and lease timing. Errors are *specerror.Error (the
// user must fix the spec) or plain errors (retry).
func (r *GuardedJobReconciler) compile(ctx context.Context, gj *batchv1alpha1.GuardedJob) (*compiledSpec, error) {
	c := &compiledSpec{}
	var err error
	if c.rules, err = gjspec.Compile(gj); err != nil {
		return nil, err
	}
	if err := checkParameters(gj); err != nil {
		return nil, err
	}
	if c.store, c.confined, err = r.storeFor(ctx, gj); err != nil {
		return nil, err
	}
	timing := leasetiming.Timing{
		TTL: gj.Spec.Lock.TTLOrDefault(), RenewInterval: gj.Spec.Lock.RenewIntervalOrDefault(), PodGrace: gj.Spec.PodGracePeriod(),
		CallTimeout:    c.store.Timeout(),
		LeaderElection: r.LeaderElection, LeaderLeaseDuration: r.LeaderLeaseDuration, LeaderRetryPeriod: r.LeaderRetryPeriod,
	}
	if err := timing.Check(); err != nil {
		return nil, err
	}
	if c.guard, err = r.compilePodGuard(ctx, gj); err != nil {
		return nil, err
	}
	// Render once with a sample occurrence so that a bad key is reported now, not
	// at 3 a.m. when the run is due.
	if _, err := c.keys(r, gj, c.rules.Schedule.Next(gj.CreationTimestamp.Time)); err != nil {
		return nil, err
	}
	return c, nil
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

// checkParameters reports what the schema cannot check of spec.parameters: a
// pattern that does not compile (Ready=False, InvalidParameters).
func checkParameters(gj *batchv1alpha1.GuardedJob) error {
	if err := runparams.CheckDeclarations(gj.Spec.Parameters); err != nil {
		return specerror.Errorf(batchv1alpha1.InvalidParametersReason, "%v", err)
	}
	return nil
}

// compilePodGuard checks lock.podGuard and returns the guard a run would get now,
// or nil when the object has none. Errors are *specerror.Error.
func (r *GuardedJobReconciler) compilePodGuard(ctx context.Context, gj *batchv1alpha1.GuardedJob) (*batchv1alpha1.RunPodGuard, error) {
	pg := gj.Spec.Lock.PodGuard
	if pg == nil {
		return nil, nil
	}
	if r.GuardImage == "" {
		return nil, specerror.Errorf(batchv1alpha1.PodGuardUnavailableReason,
			"lock.podGuard is set, but this manager does not know the guard's image: run it with --guard-image (or GUARDEDJOB_GUARD_IMAGE), or in a Pod with POD_NAME and POD_NAMESPACE set, where it uses its own image")
	}
	name := pg.SecretRef.Name
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return nil, specerror.Errorf(batchv1alpha1.StoreSecretInvalidReason,
			"lock.podGuard.secretRef.name must name a Secret in namespace %s: %s", gj.Namespace, strings.Join(msgs, "; "))
	}
	secret := &corev1.Secret{}
	if err := r.getSecretLive(ctx, client.ObjectKey{Namespace: gj.Namespace, Name: name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, specerror.Errorf(batchv1alpha1.StoreSecretNotFoundReason,
				"lock.podGuard.secretRef: Secret %s/%s was not found; create it with the guard's read-only store credentials (key \"url\"; docs/security.md, Pod guard credentials)", gj.Namespace, name)
		}
		return nil, fmt.Errorf("read pod guard Secret %s: %w", name, err)
	}
	if _, err := storeconfig.FromSecret(fmt.Sprintf("lock.podGuard.secretRef: Secret %s/%s", gj.Namespace, name), secret.Data); err != nil {
		return nil, specerror.Errorf(batchv1alpha1.PodGuardUnavailableReason, "%v", err)
	}
	margin := pg.MarginOrDefault()
	interval, err := podguard.ReadInterval(gj.Spec.Lock.TTLOrDefault(), gj.Spec.Lock.RenewIntervalOrDefault(), gj.Spec.PodGracePeriod(), margin)
	if err != nil {
		return nil, specerror.Errorf(batchv1alpha1.UnsafeLeaseTimingReason, "lock.podGuard: %v", err)
	}
	uid := pg.RunAsUser
	if uid == nil {
		uid, _ = jobbuild.GuardUser(&gj.Spec.JobTemplate.Spec.Template.Spec)
	}
	return &batchv1alpha1.RunPodGuard{
		Image: r.GuardImage, SecretName: name,
		Interval: metav1.Duration{Duration: interval}, Margin: metav1.Duration{Duration: margin},
		RunAsUser: uid,
	}, nil
}

// shardLabelOnJob copies the GuardedJob's ShardLabel onto its new Job (see
// judgesOrphans).
func shardLabelOnJob(gj *batchv1alpha1.GuardedJob, job *batchv1.Job) {
	v, ok := gj.Labels[batchv1alpha1.ShardLabel]
	if !ok {
		delete(job.Labels, batchv1alpha1.ShardLabel)
		return
	}
	if job.Labels == nil {
		job.Labels = map[string]string{}
	}
	job.Labels[batchv1alpha1.ShardLabel] = v
}
