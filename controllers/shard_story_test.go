package controllers_test

import (
	"cmp"
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/controllers"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// shardManager is one shard's manager in a story: its own cache (restricted by
// its selector), controllers and keeper, against the harness' API server and
// Redis.
type shardManager struct {
	keeper *lockclient.Keeper
	cancel context.CancelFunc
	done   chan struct{}
}

// startShard runs a manager that serves the GuardedJobs selector matches, as
// --watch-label-selector does, until stop is called or the test ends.
func (h *harness) startShard(selector string) *shardManager {
	h.t.Helper()
	sel, err := controllers.ParseShardSelector(selector)
	h.g.Expect(err).NotTo(HaveOccurred())
	opts := ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: func() cache.Options {
			o := controllers.CacheOptionsFor(sel)
			o.DefaultNamespaces = map[string]cache.Config{h.ns: {}}
			return o
		}(),
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if h.shardIntercept != nil {
		opts.NewClient = interceptedClient(*h.shardIntercept)
	}
	cfg := rest.CopyConfig(restCfg)
	cfg.Wrap(apiCalls.Wrap)
	mgr, err := ctrl.NewManager(cfg, opts)
	h.g.Expect(err).NotTo(HaveOccurred())
	parts, err := controllers.Setup(mgr, controllers.ManagerOptions{
		Store: h.store, RESTConfig: cfg, ClusterName: "cluster-a", ClockSkew: time.Second, Namespace: h.ns, Selector: sel,
		HandoverTimeout: cmp.Or(h.handoverTimeout, time.Minute), Clock: h.clock, IdentityBeat: 100 * time.Millisecond, LeaderElectionID: "shard " + selector,
		MaxConcurrentReconciles: h.shardWorkers, EarlyGate: h.earlyGate(),
	})
	h.g.Expect(err).NotTo(HaveOccurred())
	keeper := parts.Keeper
	ctx, cancel := context.WithCancel(context.Background())
	m := &shardManager{keeper: keeper, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		kctx, kcancel := context.WithCancel(ctx)
		defer kcancel()
		go func() { _ = keeper.Run(kctx) }()
		if err := mgr.Start(ctx); err != nil {
			h.t.Errorf("manager (shard %q): %v", selector, err)
		}
	}()
	h.t.Cleanup(m.stop)
	return m
}

// stop ends the shard's manager and keeper, like a crash.
func (m *shardManager) stop() {
	if m.cancel != nil {
		m.cancel()
		<-m.done
		m.cancel = nil
	}
}

// renews says whether the shard's keeper renews token, and since when it has
// (the send time of its last successful renewal).
func (m *shardManager) renews(token string) (bool, time.Time) {
	st, ok := m.keeper.Get(token)
	if !ok || !st.Confirmed || st.State != lockclient.StateHeld {
		return false, time.Time{}
	}
	return true, st.LastRenewed
}

// keyWatch samples a lock key every 20 ms until stopped and remembers the lowest
// time to live it saw and any moment it held something other than want.
type keyWatch struct {
	mu      sync.Mutex
	minPTTL time.Duration
	samples int
	other   []string
	stopped chan struct{}
	done    chan struct{}
}

func (h *harness) watchKey(key, want string) *keyWatch {
	w := &keyWatch{minPTTL: time.Hour, stopped: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		ctx := context.Background()
		for {
			select {
			case <-w.stopped:
				return
			case <-time.After(20 * time.Millisecond):
			}
			pipe := h.rdb.TxPipeline()
			get := pipe.Get(ctx, key)
			pttl := pipe.PTTL(ctx, key)
			_, _ = pipe.Exec(ctx)
			w.mu.Lock()
			w.samples++
			if v := get.Val(); v != want {
				w.other = append(w.other, v)
			}
			w.minPTTL = min(w.minPTTL, pttl.Val())
			w.mu.Unlock()
		}
	}()
	h.t.Cleanup(w.stop)
	return w
}

func (w *keyWatch) stop() {
	select {
	case <-w.stopped:
	default:
		close(w.stopped)
	}
	<-w.done
}

// relabel sets (or, with value "", removes) the shard label of a GuardedJob.
func (h *harness) relabel(gj *batchv1alpha1.GuardedJob, value string) {
	h.t.Helper()
	h.g.Eventually(func() error {
		cur := &batchv1alpha1.GuardedJob{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(gj), cur); err != nil {
			return err
		}
		patch := client.MergeFrom(cur.DeepCopy())
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		if value == "" {
			delete(cur.Labels, batchv1alpha1.ShardLabel)
		} else {
			cur.Labels[batchv1alpha1.ShardLabel] = value
		}
		return k8s.Patch(context.Background(), cur, patch)
	}).Should(Succeed())
}

// TestShardMove_ARunInFlightIsHandedOverToTheNewShardWithNoSecondJobAndNoLapse moves
// a GuardedJob with a running run from the default shard to shard b by
// relabelling it. The new shard renews the recorded lease before the key could
// expire and resumes the run; the old shard stops renewing it without stopping or
// deleting the Job, and does not take it up again when it restarts; the run gets
// no second Job and ends normally in the new shard.
func TestShardMove_ARunInFlightIsHandedOverToTheNewShardWithNoSecondJobAndNoLapse(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	g := h.g
	unlabelled := "!" + batchv1alpha1.ShardLabel
	shardA := h.startShard(unlabelled)
	shardB := h.startShard(batchv1alpha1.ShardLabel + "=b")

	key := h.ns + ":moved"
	gj := h.guardedJob("moved", key)
	ttl, renew := 10*time.Second, 2*time.Second
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: ttl}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: renew}
	h.create(gj)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	run := h.get(gj).Status.Active[0]
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(run.Token))
	g.Eventually(func() bool { ok, _ := shardA.renews(run.Token); return ok }).Should(BeTrue(), "the default shard runs the unlabelled object")
	g.Expect(shardB.keeper.Snapshot()).To(BeEmpty(), "shard b serves only objects labelled b")

	watch := h.watchKey(key, run.Token)
	movedAt := time.Now()
	h.relabel(gj, "b")

	// The new shard renews the lease it found in status, well before the key
	// could have expired (at least ttl - renewInterval after the old shard's
	// last renewal).
	g.Eventually(func() time.Time { _, at := shardB.renews(run.Token); return at }).WithTimeout(ttl-renew).
		Should(BeTemporally(">", movedAt), "shard b renews the moved run's lease")
	g.Eventually(func() bool { _, tracked := shardA.keeper.Get(run.Token); return tracked }).Should(BeFalse(),
		"the old shard stops renewing the moved run's lease")

	// Two renew intervals later: the old shard renews nothing, the new one goes on;
	// still one Job, the same, neither stopped nor deleted.
	renewalsA := shardA.keeper.Stats().RenewalsOK
	g.Consistently(func(g Gomega) {
		g.Expect(shardA.keeper.Stats().RenewalsOK).To(Equal(renewalsA), "the old shard renews nothing any more")
		jobs := h.jobs()
		g.Expect(jobs).To(ConsistOf(HaveField("UID", job.UID)), "no second Job")
		g.Expect(jobs[0].DeletionTimestamp).To(BeNil(), "neither shard stops the moved run's Job")
	}).WithTimeout(2 * renew).WithPolling(100 * time.Millisecond).Should(Succeed())
	_, lastB := shardB.renews(run.Token)
	g.Expect(lastB).To(BeTemporally(">", movedAt.Add(renew)), "the new shard keeps renewing")

	// The old shard restarts (a crash, a leader change): its resume does not take
	// up the moved object's lease again.
	shardA.stop()
	shardA = h.startShard(unlabelled)
	g.Consistently(func() []lockclient.LeaseStatus { return shardA.keeper.Snapshot() }).WithTimeout(2*renew).Should(BeEmpty(),
		"the restarted old shard resumes no lease of an object outside its shard")

	watch.stop()
	watch.mu.Lock()
	g.Expect(watch.samples).To(BeNumerically(">", 50))
	g.Expect(watch.other).To(BeEmpty(), "the key held the run's token all along")
	g.Expect(watch.minPTTL).To(BeNumerically(">", ttl-renew-2*time.Second), "the lease never ran down: no lapse at the handover")
	watch.mu.Unlock()

	// The run ends in the new shard as any run does.
	h.complete(&job)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultSucceeded), HaveField("JobName", job.Name)))
	g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero(), "released")
	g.Expect(h.rdb.Get(ctx, run.OccurrenceKey).Val()).To(Equal(run.Token), "the occurrence is marked done by the run")
	g.Expect(h.jobs()).To(ConsistOf(And(HaveField("UID", job.UID), HaveField("DeletionTimestamp", BeNil()))), "%v", h.eventsAll())
	g.Expect(h.get(gj).Status.Active).To(BeEmpty())
}

// TestShardMove_AJobWhoseGuardedJobVanishedIsStoppedByTheShardThatCreatedIt: a
// Job whose GuardedJob is gone (its finalizer removed by hand) is stopped by the
// shard that created it (the Job carries the shard label), never left running
// because its GuardedJob is in no shard's cache, and never judged by the shard
// whose selector does not match it.
func TestShardMove_AJobWhoseGuardedJobVanishedIsStoppedByTheShardThatCreatedIt(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	g := h.g
	h.startShard("!" + batchv1alpha1.ShardLabel)
	shardB := h.startShard(batchv1alpha1.ShardLabel + "=b")

	gj := h.guardedJob("vanish", h.ns+":vanish")
	gj.Labels = map[string]string{batchv1alpha1.ShardLabel: "b"}
	h.create(gj)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	g.Expect(job.Labels).To(HaveKeyWithValue(batchv1alpha1.ShardLabel, "b"), "the Job names the shard that created it")
	token := h.get(gj).Status.Active[0].Token
	g.Eventually(func() bool { ok, _ := shardB.renews(token); return ok }).Should(BeTrue())

	// The GuardedJob vanishes: its finalizer removed by hand, then deleted. The
	// shard adds its finalizer back if it sees the object without it first: only
	// the version without it is deleted, so it goes at once and no shard ever
	// sees it being deleted.
	g.Eventually(func() error {
		cur := h.get(gj)
		patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
		cur.Finalizers = nil
		if err := k8s.Patch(ctx, cur, patch); err != nil {
			return err
		}
		rv := cur.ResourceVersion
		return k8s.Delete(ctx, cur, client.Preconditions{ResourceVersion: &rv})
	}).Should(Succeed())

	g.Eventually(func() *metav1.Time {
		j := &batchv1.Job{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&job), j)).To(Succeed())
		return j.DeletionTimestamp
	}).ShouldNot(BeNil(), "the Job of the vanished GuardedJob is stopped")
	g.Eventually(func() bool { _, tracked := shardB.keeper.Get(token); return tracked }).Should(BeFalse(),
		"nobody renews the vanished object's lease")
	stale := 0
	for _, e := range h.eventsAll() {
		if len(e) > len(batchv1alpha1.StaleJobReason) && e[:len(batchv1alpha1.StaleJobReason)] == batchv1alpha1.StaleJobReason {
			stale++
		}
	}
	g.Expect(stale).To(Equal(1), "one shard, the Job's, stops it and says so: %v", h.eventsAll())
}
