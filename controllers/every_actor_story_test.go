package controllers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/controllers"
	"github.com/guardedjob/guardedjob/internal/keys"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
	"github.com/guardedjob/guardedjob/internal/runtoken"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// Stories of two actors at once: each reproduces an interleaving in which one
// actor's promise held on its own and broke beside another's.

// TestEveryActor_ANamespaceWhoseNameStartsAnotherTenantsGrantGetsNoneOfItsKeys:
// the admin grants namespace reports the prefix "<ns>:reports:", which lies inside
// this namespace's default "<ns>:". A GuardedJob here naming reports' key must not
// hold it, and this namespace's tenant can neither inspect nor delete reports'
// done-marker through the manager.
func TestEveryActor_ANamespaceWhoseNameStartsAnotherTenantsGrantGetsNoneOfItsKeys(t *testing.T) {
	h := newHarness(t)
	h.keyGrants = keys.Grants{"reports": {h.ns + ":reports:"}}
	h.start()
	ctx := context.Background()
	g := h.g
	key := h.ns + ":reports:daily"
	gj := h.create(h.guardedJob("impostor", key))
	g.Eventually(func() *batchv1alpha1.GuardedJobStatus { return &h.get(gj).Status }).Should(HaveField("Conditions",
		ContainElement(And(HaveField("Type", batchv1alpha1.ReadyCondition), HaveField("Reason", batchv1alpha1.KeyNotAllowedReason),
			HaveField("Message", ContainSubstring("--key-grants gives it to namespace reports"))))))

	// reports' run (in any cluster) completed the occurrence: its done-marker.
	due := time.Date(h.clock.Now().UTC().Year(), 1, 1, 0, 0, 0, 0, time.UTC)
	marker := key + ":done:" + itoa(due.Unix())
	const reportsRun = "cluster-b/reports/daily-29000000-abcdef"
	g.Expect(h.rdb.Set(ctx, marker, reportsRun+"#0123456789abcdef0123456789abcdef", time.Hour).Err()).To(Succeed())
	rec := h.unlock(gj, h.requestValue(), marker, reportsRun)
	g.Expect(rec.Result).To(Equal(batchv1alpha1.UnlockRefused), rec.Message)
	g.Expect(h.rdb.Get(ctx, marker).Val()).To(HavePrefix(reportsRun), "reports' done-marker is untouched")
	view := h.inspect(gj)
	g.Expect(view.Entries).To(BeEmpty(), "reports' holders are not shown")
	g.Expect(view.Error).NotTo(BeEmpty())

	h.trigger(gj)
	g.Consistently(h.jobs).WithTimeout(2*time.Second).Should(BeEmpty(), "no run of reports' key starts here")
	g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero())
}

// leftToExpire runs a guarded GuardedJob whose Pod's node is cut off: the Pod is
// force-deleted (nothing says its containers stopped) and the Job controller
// fails the Job. The run ends leaving its lease to expire, so that the Pod's
// guard stops the workload before another holder can start. It returns the run
// and its Job.
func (h *harness) leftToExpire(gj *batchv1alpha1.GuardedJob) (batchv1alpha1.ActiveRun, *batchv1.Job) {
	h.t.Helper()
	h.guardSecret("guard-redis")
	job, pod := h.runningJob(gj)
	run := h.get(gj).Status.Active[0]
	h.g.Expect(k8s.Delete(context.Background(), pod, client.GracePeriodSeconds(0))).To(Succeed())
	h.fail(job)
	h.g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(20 * time.Second).Should(And(
		Not(BeNil()), HaveField("JobName", run.JobName), HaveField("Result", batchv1alpha1.RunResultFailed),
		HaveField("Message", ContainSubstring("left to expire"))))
	h.g.Expect(h.rdb.Get(context.Background(), run.Key).Val()).To(Equal(run.Token), "the lease is left in the store")
	return run, job
}

// gcRemoves plays the garbage collector for a Job deleted in the foreground whose
// Pods are gone: it removes the Job's foregroundDeletion finalizer, and the Job
// goes.
func (h *harness) gcRemoves(job *batchv1.Job) {
	h.t.Helper()
	ctx := context.Background()
	h.g.Eventually(func() error {
		cur := &batchv1.Job{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
		cur.Finalizers = nil
		return k8s.Patch(ctx, cur, patch)
	}).Should(Succeed())
	h.g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{}))
	}).Should(BeTrue())
}

// triggerAgain sets the run-now trigger to a time after the previous trigger's
// (a value equal to the last one handled is not a new request).
func (h *harness) triggerAgain(gj *batchv1alpha1.GuardedJob) {
	h.t.Helper()
	last := h.get(gj).Status.LastRunNow
	h.g.Eventually(func() string { return time.Now().UTC().Format(time.RFC3339) }).WithTimeout(3 * time.Second).ShouldNot(Equal(last))
	h.trigger(gj)
}

// TestEveryActor_ARunNowNeverTakesUpTheLeaseItsFailedRunLeftToExpire: a guarded
// run that ended uncleanly leaves its token in the store for up to its ttl, so
// that a Pod the API server no longer shows is stopped by its guard first. A
// run-now of the same occurrence in that window mints a token with the same
// binding; take-up is for a lease that never had a Job, so it must not adopt the
// left one (which would extend it, hand out a fence and recreate the Job of the
// same name while the stranded Pod's guard keeps confirming the token).
func TestEveryActor_ARunNowNeverTakesUpTheLeaseItsFailedRunLeftToExpire(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	g := h.g
	key := h.ns + ":leftlease"
	gj := h.guardedJobWithPodGuard("leftlease", key)
	gj.Spec.FailedJobsHistoryLimit = ptr.To(int32(0))
	old, oldJob := h.leftToExpire(gj)
	left := h.rdb.PTTL(ctx, key).Val()
	g.Expect(left).To(BeNumerically(">", 0))
	// failedJobsHistoryLimit 0 deleted the Job; the garbage collector removes it
	// once its Pods are gone: nothing of the run is left in the API server but
	// the ledger.
	g.Eventually(func() bool { return h.jobDeleted(oldJob) }).Should(BeTrue())
	h.gcRemoves(oldJob)

	h.triggerAgain(gj)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultBusy), HaveField("HeldBy", old.Holder)),
		"the left lease is another holder's for the new run: it waits for it to expire (onBusy Skip: it skips)")
	g.Consistently(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).WithTimeout(2*time.Second).
		ShouldNot(ContainElement(HaveField("Token", old.Token)), "the left token is never taken up")
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(old.Token))
	g.Expect(h.rdb.PTTL(ctx, key).Val()).To(BeNumerically("<=", left), "the left lease is never extended")
	for _, j := range h.jobs() {
		g.Expect(j.Name).NotTo(Equal(old.JobName), "no Job of the old name again")
	}
	st := h.get(gj).Status
	g.Expect(st.Leases).To(ContainElement(And(HaveField("Holder", old.Holder), HaveField("State", batchv1alpha1.LeaseLeftToExpire),
		HaveField("ExpiresBy", Not(BeNil())))), "the ledger says the lease was left to expire, and until when")
}

// TestEveryActor_ATenantsUnlockNeverDeletesAnotherClustersLiveLease: cluster-b's
// run holds the key; a tenant of cluster-a pastes the holder status.storeView
// shows into an unlock request. The lease may be working in cluster-b and
// expires by itself within its ttl: the manager refuses, and the key stays.
func TestEveryActor_ATenantsUnlockNeverDeletesAnotherClustersLiveLease(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	g := h.g
	key := h.ns + ":crosscluster"
	gj := h.create(h.guardedJob("crosscluster", key))
	theirs := "cluster-b/" + h.ns + "/crosscluster-29000000-abcdef#0123456789abcdef0123456789abcdef"
	g.Expect(h.rdb.Set(ctx, key, theirs, 30*time.Second).Err()).To(Succeed())
	view := h.inspect(gj)
	g.Expect(view.Entries).To(HaveLen(1))
	g.Expect(view.Entries[0].Lock.Whose).To(Equal(batchv1alpha1.LockWhoseOtherCluster))
	rec := h.unlock(gj, h.requestValue(), key, view.Entries[0].Lock.Holder)
	g.Expect(rec.Result).To(Equal(batchv1alpha1.UnlockRefused), rec.Message)
	g.Expect(rec.Message).To(ContainSubstring("expires by itself"))
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(theirs), "cluster-b's lease is untouched")
}

// TestEveryActor_AnUnlockOfALeftLeaseStaysRefusedWhateverOverwritesLastRun: the
// refusal to delete a lease left to expire must not hang on status.lastRun (a
// stale run-now, a skipped or busy occurrence overwrites it) nor on today's
// lock.ttl (a user may lower it below what the left lease still has).
func TestEveryActor_AnUnlockOfALeftLeaseStaysRefusedWhateverOverwritesLastRun(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	g := h.g
	key := h.ns + ":leftunlock"
	gj := h.guardedJobWithPodGuard("leftunlock", key)
	old, _ := h.leftToExpire(gj)

	// A run-now dated ten minutes back is stale: its Skipped record overwrites lastRun.
	h.annotate(gj, h.clock.Now().Add(-10*time.Minute).UTC().Format(time.RFC3339))
	g.Eventually(func() string { return h.get(gj).Status.LastRun.JobName }).Should(BeEmpty())
	rec := h.unlock(gj, h.requestValue(), key, old.Holder)
	g.Expect(rec.Result).To(Equal(batchv1alpha1.UnlockRefused), rec.Message)
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(old.Token))

	// A lowered ttl does not shorten what the left lease has.
	cur := h.get(gj)
	cur.Spec.Lock.TTL = &metav1.Duration{Duration: 10 * time.Second}
	cur.Spec.Lock.RenewInterval = &metav1.Duration{Duration: 2 * time.Second}
	cur.Spec.Lock.PodGuard = nil
	g.Expect(k8s.Update(ctx, cur)).To(Succeed())
	h.clock.Step(11 * time.Second)
	rec = h.unlock(gj, h.requestValue(), key, old.Holder)
	g.Expect(rec.Result).To(Equal(batchv1alpha1.UnlockRefused), rec.Message)
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(old.Token), "the left lease expires by itself, never earlier")
}

// TestEveryActor_AnOldLeaderRenewingAloneNeverWritesBackAKeyTheNewLeaderReleased:
// a manager that lost its leadership while cut off from the API server renews
// its leases alone (renew-only) so that Pods it cannot see keep their lease.
// Meanwhile the new leader completes a FailOpen run and releases its key. The
// old leader's renewals must not take that key again (FailOpen re-acquires an
// absent key): that would be a ghost lock that comes back after every unlock,
// for as long as the old leader is cut off.
func TestEveryActor_AnOldLeaderRenewingAloneNeverWritesBackAKeyTheNewLeaderReleased(t *testing.T) {
	h := newHarness(t)
	h.keeperOutlives = true
	h.start()
	ctx := context.Background()
	g := h.g
	key := h.ns + ":ghost"
	gj := h.guardedJob("ghost", key)
	gj.Spec.Lock.StoreFailurePolicy = batchv1alpha1.FailOpen
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 10 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	h.runningJob(gj)
	run := h.get(gj).Status.Active[0]

	// Leadership lost while the API server does not answer: the controllers stop,
	// the keeper goes on alone.
	h.stop()
	renewOnly, stopRenewOnly := context.WithCancel(ctx)
	defer stopRenewOnly()
	go func() {
		_ = controllers.RenewOnly(renewOnly, h.keeper, func() bool { return false }, time.Hour, logr.Discard())
	}()
	g.Eventually(func() time.Duration { return h.rdb.PTTL(ctx, key).Val() }).WithTimeout(5*time.Second).
		Should(BeNumerically(">", 9*time.Second), "it keeps renewing")

	// The new leader's run completed: marker written, key released.
	g.Expect(h.rdb.Del(ctx, key).Err()).To(Succeed())
	g.Consistently(func() int64 { return h.rdb.Exists(ctx, key).Val() }).WithTimeout(3500*time.Millisecond).WithPolling(100*time.Millisecond).
		Should(BeZero(), "the released key is never written back")
	_, tracked := h.keeper.Get(run.Token)
	g.Expect(tracked).To(BeFalse(), "a key found absent is a lost lease: no longer renewed")
}

// competitor tries, every 100 ms, to take a key with SET NX as another process
// would, and remembers when it first got it.
type competitor struct {
	mu      sync.Mutex
	wonAt   time.Time
	stopped chan struct{}
	done    chan struct{}
}

func (h *harness) compete(key string) *competitor {
	c := &competitor{stopped: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stopped:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if ok, err := h.rdb.SetNX(context.Background(), key, "competitor", time.Minute).Result(); err == nil && ok {
				c.mu.Lock()
				c.wonAt = time.Now()
				c.mu.Unlock()
				return
			}
		}
	}()
	h.t.Cleanup(func() { c.stop() })
	return c
}

// stop ends the competitor and returns when it got the key (zero: never).
func (c *competitor) stop() time.Time {
	select {
	case <-c.stopped:
	default:
		close(c.stopped)
	}
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wonAt
}

// movedRun starts shard a (the unlabelled objects) with one GuardedJob running a
// Pod, ready to be moved to shard b.
func (h *harness) movedRun(name string) (*shardManager, *batchv1alpha1.GuardedJob, batchv1alpha1.ActiveRun, *batchv1.Job, *corev1.Pod) {
	h.t.Helper()
	shardA := h.startShard("!" + batchv1alpha1.ShardLabel)
	gj := h.guardedJob(name, h.ns+":"+name)
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 10 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: 2 * time.Second}
	job, pod := h.runningJob(gj)
	run := h.get(gj).Status.Active[0]
	h.g.Eventually(func() bool { ok, _ := shardA.renews(run.Token); return ok }).Should(BeTrue())
	return shardA, gj, run, job, pod
}

// TestEveryActor_AShardMoveKeepsTheLeaseUntilTheNewShardHoldsIt: a running
// GuardedJob is relabelled to a shard that is down (failing over, scaled to 0,
// its work queue far behind) for longer than the lease's ttl. Make before break:
// the old shard keeps renewing until it sees that the new shard has taken the run
// over; the key never lapses, and a competitor never gets it while the Pod runs.
func TestEveryActor_AShardMoveKeepsTheLeaseUntilTheNewShardHoldsIt(t *testing.T) {
	h := newHarness(t)
	h.handoverTimeout = time.Hour
	ctx := context.Background()
	g := h.g
	shardA, gj, run, _, _ := h.movedRun("handover")
	rival := h.compete(run.Key)

	h.relabel(gj, "b") // shard b is not running yet
	g.Consistently(func() string { return h.rdb.Get(ctx, run.Key).Val() }).WithTimeout(13*time.Second).WithPolling(100*time.Millisecond).
		Should(Equal(run.Token), "the old shard keeps renewing: the key never lapses")

	shardB := h.startShard(batchv1alpha1.ShardLabel + "=b")
	g.Eventually(func() string { return h.get(gj).Status.Shard }).Should(Equal(batchv1alpha1.ShardLabel+"=b"),
		"the new shard says it holds the run's lease")
	g.Eventually(func() bool { ok, _ := shardB.renews(run.Token); return ok }).Should(BeTrue())
	g.Eventually(func() bool { _, tracked := shardA.keeper.Get(run.Token); return tracked }).WithTimeout(10*time.Second).Should(BeFalse(),
		"then the old shard lets go")
	g.Consistently(func() string { return h.rdb.Get(ctx, run.Key).Val() }).WithTimeout(3 * time.Second).Should(Equal(run.Token))
	g.Expect(rival.stop()).To(BeZero(), "nobody else got the key")
}

// TestEveryActor_ANewShardWhoseQueueIsBusyTakesAMovedRunOverOnSight: the new
// shard's work queue is stuck behind another object's pass when a running
// GuardedJob moves into it. Its leases are renewed the moment its cache sees the
// object, from a context that outlives the watch event that announced it: the
// run's first renewal in the new shard succeeds, so a lease whose recorded
// evidence is older than its self-fence deadline is not taken for lost, and the
// healthy run is not stopped.
func TestEveryActor_ANewShardWhoseQueueIsBusyTakesAMovedRunOverOnSight(t *testing.T) {
	h := newHarness(t)
	h.handoverTimeout = time.Hour
	ctx := context.Background()
	g := h.g
	_, gj, run, job, _ := h.movedRun("onsight")

	// Shard b has one worker, and the pass of its other object never ends.
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { close(release) })
	h.shardWorkers = 1
	h.shardIntercept = &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*batchv1alpha1.GuardedJob); ok && key.Name == "busy" {
			once.Do(func() { close(blocked) })
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	shardB := h.startShard(batchv1alpha1.ShardLabel + "=b")
	busy := h.guardedJob("busy", h.ns+":busy")
	busy.Labels = map[string]string{batchv1alpha1.ShardLabel: "b"}
	h.create(busy)
	g.Eventually(blocked).WithTimeout(20 * time.Second).Should(BeClosed())

	// The run's recorded evidence (its acquisition) is past its self-fence
	// deadline by now: only a renewal the new shard sends itself confirms it.
	ttl, grace := gj.Spec.Lock.TTL.Duration, gj.Spec.PodGracePeriod()
	time.Sleep(time.Until(run.AcquiredAt.Add(ttl - grace - leasetiming.StopMargin + time.Second)))
	h.relabel(gj, "b")
	g.Eventually(func() bool { ok, _ := shardB.renews(run.Token); return ok }).WithTimeout(5*time.Second).Should(BeTrue(),
		"the new shard renews the moved run's lease while its queue is busy")
	g.Consistently(func() bool { return h.jobDeleted(job) }).WithTimeout(3*time.Second).Should(BeFalse(), "and the healthy run goes on")
	g.Expect(h.rdb.Get(ctx, run.Key).Val()).To(Equal(run.Token))
}

// TestEveryActor_AShardMoveToAShardThatNeverComesStopsTheRunBeforeItsLeaseExpires:
// when the new shard does not take the run over within the hand-over timeout,
// the old shard stops the run (its Job and Pods) while it still renews the
// lease, and lets the lease go only once the Pods are gone: the run is stopped,
// never abandoned with its lease running out under it.
func TestEveryActor_AShardMoveToAShardThatNeverComesStopsTheRunBeforeItsLeaseExpires(t *testing.T) {
	h := newHarness(t)
	h.handoverTimeout = 4 * time.Second
	ctx := context.Background()
	g := h.g
	shardA, gj, run, job, pod := h.movedRun("nohandover")
	rival := h.compete(run.Key)

	h.relabel(gj, "b") // shard b never comes
	g.Eventually(func() bool { return h.jobDeleted(job) }).WithTimeout(15*time.Second).Should(BeTrue(), "the old shard stops the run")
	g.Eventually(func() *corev1.Pod { return h.podDeletion(pod) }).Should(Not(BeNil()), "and its Pods")
	g.Consistently(func() string { return h.rdb.Get(ctx, run.Key).Val() }).WithTimeout(12*time.Second).WithPolling(100*time.Millisecond).
		Should(Equal(run.Token), "while a Pod is left the lease is renewed")
	g.Expect(rival.stop()).To(BeZero(), "nobody else got the key while the Pod was there")
	h.kubeletRemoves(pod)
	g.Eventually(func() bool { _, tracked := shardA.keeper.Get(run.Token); return tracked }).WithTimeout(10*time.Second).Should(BeFalse(),
		"once the Pods are gone the old shard lets the lease go")
}

// TestEveryActor_APausedOldLeaderNeverStartsTheJobOfARunThatAlreadyCompleted: an
// old leader acquires a run's lease, checks it, and is paused before its Job
// create reaches the API server. Meanwhile a new leader runs the occurrence to
// completion: marker written, key released, run recorded as done. Then the old
// leader resumes and its create lands. A create has no precondition, so the Job
// exists, and no status records it; it must never get a Pod: the manager
// creates a run's Job suspended, lets it start only once status records the run
// and a store call sent after the create confirms the lease, and adopts a Job
// no status records only while the key holds the token minted for it.
func TestEveryActor_APausedOldLeaderNeverStartsTheJobOfARunThatAlreadyCompleted(t *testing.T) {
	h := newHarness(t)
	paused, resume := make(chan *batchv1.Job, 1), make(chan struct{})
	var once sync.Once
	h.intercept = &interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if job, ok := obj.(*batchv1.Job); ok {
			first := false
			once.Do(func() { first = true })
			if first {
				paused <- job.DeepCopy()
				<-resume
			}
		}
		return c.Create(ctx, obj, opts...)
	}}
	h.start()
	ctx := context.Background()
	g := h.g
	key := h.ns + ":paused"
	gj := h.create(h.guardedJob("paused", key))
	h.trigger(gj)
	var creating *batchv1.Job
	g.Eventually(paused).WithTimeout(20 * time.Second).Should(Receive(&creating))
	g.Expect(h.get(gj).Status.Active).To(BeEmpty(), "the Job is created before status records its run")
	token := h.rdb.Get(ctx, key).Val()
	g.Expect(token).To(HavePrefix("cluster-a/"+h.ns+"/"+creating.Name+"#"), "its lease is taken")
	var rec batchv1alpha1.ActiveRun
	g.Expect(json.Unmarshal([]byte(creating.Annotations[batchv1alpha1.RunAnnotation]), &rec)).To(Succeed())

	// The new leader's run completed: done-marker, key released, run recorded.
	g.Expect(h.rdb.Set(ctx, rec.OccurrenceKey, token, time.Hour).Err()).To(Succeed())
	g.Expect(h.rdb.Del(ctx, key).Err()).To(Succeed())
	g.Eventually(func() error {
		cur := h.get(gj)
		now := metav1.Now()
		cur.Status.LastRun = &batchv1alpha1.RunRecord{JobName: creating.Name, Result: batchv1alpha1.RunResultSucceeded, FinishedAt: &now}
		cur.Status.LastRunNow = cur.Annotations[batchv1alpha1.RunNowAnnotation]
		cur.Status.Leases = []batchv1alpha1.LeaseRecord{{Holder: rec.Holder, Key: key, State: batchv1alpha1.LeaseReleased, Since: &now}}
		return k8s.Status().Update(ctx, cur)
	}).Should(Succeed())

	close(resume) // the old leader's create lands now
	h.unadoptedDeleted(gj, creating, "is free")
	g.Expect(h.get(gj).Status.Active).To(BeEmpty(), "no run is recorded from it")
	g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero(), "nobody took the released key back")
}

// TestEveryActor_AGuardedRunStoppedBeforeItsJobUIDWasRecordedLeavesItsLeaseToExpire:
// a guarded run's first Job create fails (the API server times out), so the run
// is recorded first and its Job created by the next step; the manager dies after
// creating the Job and before recording its UID. The next manager starts cut off from Redis: the resumed lease reaches its
// self-fence deadline and the run is stopped while status still names no Job
// UID. Its Pod's node is cut off too and the Pod is force-deleted. Such a run did
// have a Job: its lease must be left to expire (so the Pod's guard stops it
// first), as for any guarded run that did not end cleanly, never released.
func TestEveryActor_AGuardedRunStoppedBeforeItsJobUIDWasRecordedLeavesItsLeaseToExpire(t *testing.T) {
	h := newHarness(t)
	proxy := h.storeViaProxy()
	var creates atomic.Int32
	h.intercept = &interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*batchv1.Job); ok && creates.Add(1) == 1 {
				return apierrors.NewServerTimeout(batchv1.Resource("jobs"), "create", 1)
			}
			return c.Create(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if gj, ok := obj.(*batchv1alpha1.GuardedJob); ok && len(gj.Status.Active) > 0 && gj.Status.Active[0].JobUID != "" {
				return errors.New("injected: the manager dies before it records the Job's UID")
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
	h.start()
	h.guardSecret("guard-redis")
	ctx := context.Background()
	g := h.g
	key := h.ns + ":unrecorded"
	gj := h.create(h.guardedJobWithPodGuard("unrecorded", key))
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	pod := h.podFor(&job)
	run := h.get(gj).Status.Active[0]
	g.Consistently(func() string { return string(h.get(gj).Status.Active[0].JobUID) }).WithTimeout(time.Second).Should(BeEmpty())
	h.stop()

	// The next manager starts cut off from Redis, when the run's recorded
	// acquisition is too old for its self-fence deadline: its first pass stops
	// the run before it has looked at the Job.
	proxy.Blackhole()
	deadline := run.AcquiredAt.Add(run.TTL.Duration - leasetiming.StopBudget(time.Second))
	time.Sleep(time.Until(deadline.Add(time.Second)))
	g.Expect(h.rdb.PExpire(ctx, key, time.Minute).Err()).To(Succeed(), "the key is still there (a longer ttl would keep it)")
	h.intercept = nil
	h.start()
	g.Eventually(func() *corev1.Pod { return h.podDeletion(pod) }).WithTimeout(30*time.Second).Should(Not(BeNil()), "stopped at the self-fence deadline")
	g.Expect(k8s.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed()) // its node is cut off: force-deleted
	h.gcRemoves(&job)
	proxy.Restore(t)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(30 * time.Second).Should(And(
		Not(BeNil()), HaveField("JobName", run.JobName), HaveField("Message", ContainSubstring("left to expire"))))
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(run.Token), "the lease is left to expire, never released")
}

// TestEveryActor_TwoClustersClaimingOneIdentityStartNoRun: two clusters restored
// from one etcd snapshot share the kube-system UID, so their managers derive the
// same --cluster-name, and their objects the same UIDs: each could take up a
// lease the other took. Their managers, sharing one store, each find the other's
// heartbeat over their own beat after beat: both refuse to start runs, say why,
// and start again once only one claims the identity.
func TestEveryActor_TwoClustersClaimingOneIdentityStartNoRun(t *testing.T) {
	a := newHarness(t)
	b := newHarness(t)
	b.redis, b.rdb, b.store = a.redis, a.rdb, a.store // one store for both "clusters"
	a.identityBeat, b.identityBeat = 200*time.Millisecond, 200*time.Millisecond
	a.start()
	b.start()
	g := a.g
	ready := func(h *harness, gj *batchv1alpha1.GuardedJob) func() *metav1.Condition {
		return func() *metav1.Condition { return findCond(h.get(gj).Status.Conditions, batchv1alpha1.ReadyCondition) }
	}
	gjA := a.create(a.guardedJob("twin", a.ns+":twin"))
	gjB := b.create(b.guardedJob("twin", b.ns+":twin"))
	for _, w := range []struct {
		h  *harness
		gj *batchv1alpha1.GuardedJob
	}{{a, gjA}, {b, gjB}} {
		g.Eventually(ready(w.h, w.gj)).Should(And(Not(BeNil()), HaveField("Reason", batchv1alpha1.DuplicateClusterNameReason),
			HaveField("Message", ContainSubstring("another manager claims this cluster's identity"))))
	}
	a.trigger(gjA)
	g.Consistently(a.jobs).WithTimeout(2*time.Second).Should(BeEmpty(), "no run starts while two managers claim one identity")
	g.Expect(a.rdb.Exists(context.Background(), a.ns+":twin").Val()).To(BeZero())

	// The other cluster's manager goes (renamed, or the duplicate removed): runs start.
	b.stop()
	g.Eventually(ready(a, gjA)).WithTimeout(20 * time.Second).Should(HaveField("Reason", batchv1alpha1.ScheduledReason))
	a.triggerAgain(gjA)
	a.waitJobs(1)
}

// TestEveryActor_TwoClustersClaimingOneIdentityInATenantStoreStartNoRunInIt:
// clones of one cluster (restored from one snapshot) whose managers each have a
// store of their own (a Redis in each cluster) and share a tenant's store
// (spec.lock.storeRef). Their own stores show no twin; the tenant store, where
// each could take up the other's lease, does: no run starts in it. The tenant
// can write that store too, so what its heartbeat key holds stops only the
// GuardedJobs that use it: a GuardedJob in the manager's own store runs on.
func TestEveryActor_TwoClustersClaimingOneIdentityInATenantStoreStartNoRunInIt(t *testing.T) {
	a := newHarness(t)
	b := newHarness(t) // another own store: the managers' own stores are not shared
	a.identityBeat, b.identityBeat = 200*time.Millisecond, 200*time.Millisecond
	tenant := redisserver.Start(t)
	a.sharedStore(tenant)
	b.sharedStore(tenant)
	a.start()
	b.start()
	g := a.g
	ready := func(h *harness, gj *batchv1alpha1.GuardedJob) func() *metav1.Condition {
		return func() *metav1.Condition { return findCond(h.get(gj).Status.Conditions, batchv1alpha1.ReadyCondition) }
	}
	inTenantStore := func(h *harness) *batchv1alpha1.GuardedJob {
		gj := h.guardedJob("twin", "shared:twin")
		gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "shared-store"}
		return h.create(gj)
	}
	gjA, gjB := inTenantStore(a), inTenantStore(b)
	own := a.create(a.guardedJob("own", a.ns+":own"))
	for _, w := range []struct {
		h  *harness
		gj *batchv1alpha1.GuardedJob
	}{{a, gjA}, {b, gjB}} {
		g.Eventually(ready(w.h, w.gj)).WithTimeout(20*time.Second).Should(And(Not(BeNil()), HaveField("Reason", batchv1alpha1.DuplicateClusterNameReason),
			HaveField("Message", ContainSubstring("another manager claims this cluster's identity"))), "the twin is seen in the store both use")
	}
	a.trigger(gjA)
	g.Consistently(a.jobs).WithTimeout(2*time.Second).Should(BeEmpty(), "no run starts in the tenant store while two managers claim one identity in it")
	g.Expect(tenant.Client(t).Exists(context.Background(), "shared:twin").Val()).To(BeZero())

	a.trigger(own)
	a.waitJobs(1) // the manager's own store shows no twin: its GuardedJobs run
	g.Expect(ready(a, own)()).To(HaveField("Reason", Not(Equal(batchv1alpha1.DuplicateClusterNameReason))))

	// The other cluster's manager goes: runs start in the tenant store again.
	b.stop()
	g.Eventually(ready(a, gjA)).WithTimeout(20 * time.Second).Should(HaveField("Reason", batchv1alpha1.ScheduledReason))
	a.triggerAgain(gjA)
	a.waitJobs(2)
}

// TestEveryActor_AManagerJustStartedNeverTakesUpATwinsLease: a cluster just
// restored from a snapshot starts by catching up on the latest occurrence, the
// one its twin (the same cluster name and object UIDs) may be running. The twin's
// lease carries a token bound to this very object and occurrence, and no status
// here records it: take-up would adopt it at the manager's first pass, before its
// identity heartbeat could have seen the twin. Take-up waits until the heartbeat
// has had a few beats to itself; here it sees the twin and never takes up.
func TestEveryActor_AManagerJustStartedNeverTakesUpATwinsLease(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	g := h.g
	key := h.ns + ":twinlease"
	gj := h.create(h.guardedJob("twinlease", key))
	g.Eventually(func() types.UID { return h.get(gj).UID }).ShouldNot(BeEmpty())
	twin, _, err := runtoken.Mint(runtoken.Run{Cluster: "cluster-a", Namespace: h.ns, Name: gj.Name, UID: string(h.get(gj).UID), Occurrence: yearStart()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.rdb.Set(ctx, key, twin, time.Minute).Err()).To(Succeed())
	// The twin's manager beats too (same cluster name, same election ID).
	sum := sha256.Sum256([]byte(""))
	beatKey := "_guardedjob:identity:cluster-a:" + hex.EncodeToString(sum[:6])
	beats, stopBeats := context.WithCancel(ctx)
	defer stopBeats()
	go func() {
		for beats.Err() == nil {
			_ = h.rdb.Set(beats, beatKey, "host=twin pid=1 id=twin", 5*time.Second).Err()
			time.Sleep(time.Second)
		}
	}()

	h.trigger(gj)                // waiting for the manager as it starts
	h.identityBeat = time.Second // as the twin's: a few seconds before either could know of the other
	h.start()
	g.Consistently(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).WithTimeout(5*time.Second).
		ShouldNot(ContainElement(HaveField("Token", twin)), "the twin's lease is never taken up")
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(twin))
	g.Expect(h.jobs()).To(BeEmpty())
	g.Eventually(func() *metav1.Condition { return findCond(h.get(gj).Status.Conditions, batchv1alpha1.ReadyCondition) }).
		Should(HaveField("Reason", batchv1alpha1.DuplicateClusterNameReason))
}
