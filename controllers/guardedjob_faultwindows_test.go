package controllers_test

// Stories for fault windows where two things break at once, or one breaks at an
// unlucky moment. Each is named after its row in docs/failure-semantics.md.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runtoken"
	"github.com/guardedjob/guardedjob/internal/testutil/apirecorder"
)

// waitRenewal waits until the manager has just renewed key: its PTTL, having
// dropped below low, is back above high. It returns when that was seen.
func (h *harness) waitRenewal(key string, low, high time.Duration) time.Time {
	h.t.Helper()
	ctx := context.Background()
	h.g.Eventually(func() time.Duration { return h.rdb.PTTL(ctx, key).Val() }).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).
		Should(BeNumerically("<", low))
	h.g.Eventually(func() time.Duration { return h.rdb.PTTL(ctx, key).Val() }).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).
		Should(BeNumerically(">", high))
	return time.Now()
}

func TestWindowResumedLease_ARestartWhileCutOffFromRedisStopsThePodsBeforeTheKeyCouldExpire(t *testing.T) {
	h := newHarnessAlone(t)
	proxy := h.storeViaProxy()
	h.start()
	ctx := context.Background()
	const ttl, interval = 20 * time.Second, 4 * time.Second
	key := h.ns + ":resumed"
	gj := h.guardedJob("resumed", key)
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: ttl}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: interval}
	gj.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(2))
	job, pod := h.runningJob(gj)

	// Cut this manager off from Redis just before a renewal would land (other
	// clusters still reach it), then kill it and start it again, still cut off.
	h.waitRenewal(key, ttl-interval/2, ttl-interval/4)
	h.g.Eventually(func() time.Duration { return h.rdb.PTTL(ctx, key).Val() }).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).
		Should(BeNumerically("<", ttl-interval+400*time.Millisecond))
	proxy.Blackhole()
	expires := time.Now().Add(h.rdb.PTTL(ctx, key).Val())
	time.Sleep(3 * time.Second) // the manager keeps running, cut off, for a few seconds
	h.stop()
	h.start()

	g := h.g
	var deleted *corev1.Pod
	g.Eventually(func() *corev1.Pod { deleted = h.podDeletion(pod); return deleted }).WithTimeout(ttl).ShouldNot(BeNil())
	g.Expect(h.jobDeleted(job)).To(BeTrue())
	// deletionTimestamp is the moment the grace period ends, rounded down to the
	// second: the Pod is gone before it + 1s, which must be at least the design's
	// margin (5s) before the key could expire.
	podGone := deleted.DeletionTimestamp.Add(time.Second)
	g.Expect(podGone).To(BeTemporally("<=", expires.Add(-5*time.Second)),
		"Pods stopped %s before the key expires", expires.Sub(podGone))
	g.Expect(*deleted.DeletionGracePeriodSeconds).To(BeNumerically("<=", 2))
	g.Expect(h.rdb.Get(ctx, key).Val()).To(HavePrefix("cluster-a/"), "nobody else took the key meanwhile")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("StoreUnavailable: Stopping " + job.Name)))
	t.Logf("Pods gone %s before the key could expire", expires.Sub(podGone).Round(time.Millisecond))
}

func TestWindowTimingTie_AHealthyRunAtTheSmallestSafeTTLIsNeverStopped(t *testing.T) {
	h := newHarnessAlone(t)
	h.start()
	// renewInterval 1s + call timeout 1s + grace 2s + margin 5s = 9s: the smallest
	// safe ttl is 10s. Redis answering late is not a fault.
	gj := h.guardedJob("boundary", h.ns+":boundary")
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 10 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	gj.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(2))
	job, _ := h.runningJob(gj)

	for range 3 {
		h.redis.Pause()
		time.Sleep(800 * time.Millisecond) // a slow Redis: each renewal in this window answers late
		h.redis.Resume()
		time.Sleep(time.Second)
	}
	g := h.g
	g.Expect(h.jobDeleted(job)).To(BeFalse(), "a healthy run is never stopped")
	run := h.get(gj).Status.Active
	g.Expect(run).To(HaveLen(1))
	g.Expect(run[0].Phase).To(Equal(batchv1alpha1.RunPhaseRunning))
	g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix("StoreUnavailable:")))
}

// hideJobsFromCache makes the manager's cached reads of Jobs answer NotFound, as
// a cache that has not yet seen a Job created moments ago. Lists and the API
// reader are unaffected.
func (h *harness) hideJobsFromCache(hidden *atomic.Bool) {
	h.intercept = &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*batchv1.Job); ok && hidden.Load() {
			return apierrors.NewNotFound(batchv1.Resource("jobs"), key.Name)
		}
		return c.Get(ctx, key, obj, opts...)
	}}
}

func TestWindowCachedJobNotFound_AGuardedJobDeletedRightAfterItsJobWasCreatedNeverReleasesBeforeThePodsAreGone(t *testing.T) {
	h := newHarness(t)
	var hidden atomic.Bool
	h.hideJobsFromCache(&hidden)
	h.start()
	ctx := context.Background()
	key := h.ns + ":fresh"
	gj := h.create(h.guardedJob("fresh", key))
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	token := h.rdb.Get(ctx, key).Val()

	// The Job exists, its Pods do not yet, and the cache has not seen it: delete
	// the GuardedJob now (onDelete: Stop).
	hidden.Store(true)
	h.g.Expect(k8s.Delete(ctx, gj)).To(Succeed())
	time.Sleep(2 * time.Second) // the cache lags this long
	g := h.g
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(token), "no release while the Job may still start Pods")
	hidden.Store(false)

	// The Job controller starts a Pod meanwhile: it must be stopped, and the lease
	// released only once it is gone.
	pod := h.podFor(&job)
	g.Eventually(func() bool { return h.jobDeleted(&job) }).Should(BeTrue())
	g.Eventually(func() *corev1.Pod { return h.podDeletion(pod) }).ShouldNot(BeNil())
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(token), "the lease is kept while the Pod terminates")
	h.kubeletRemoves(pod)
	g.Eventually(func() string { return h.rdb.Get(ctx, key).Val() }).Should(BeEmpty(), "released once the Pod is gone")
	g.Eventually(func() bool {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(gj), &batchv1alpha1.GuardedJob{})
		return apierrors.IsNotFound(err)
	}).Should(BeTrue(), "the GuardedJob goes once its run is over")
}

func TestWindowJobVanishesBeforeItsUIDIsRecorded_TheRunEndsAndGetsNoSecondJob(t *testing.T) {
	h := newHarness(t)
	// From the Job's creation on, status writes fail (an API server that takes
	// creates but not this object's updates), so status cannot record the Job.
	var blocked atomic.Bool
	h.intercept = &interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			err := c.Create(ctx, obj, opts...)
			if _, ok := obj.(*batchv1.Job); ok && err == nil {
				blocked.Store(true)
			}
			return err
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if blocked.Load() {
				return apierrors.NewServiceUnavailable("status writes are failing")
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
	h.start()
	ctx := context.Background()
	// A run whose Job is created after status records the run (the status-first
	// order): here its Job asks to be suspended, for a queue to start it.
	vanish := h.guardedJob("vanish", h.ns+":vanish")
	vanish.Spec.JobTemplate.Spec.Suspend = ptr.To(true)
	gj := h.create(vanish)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	g := h.g
	g.Expect(h.get(gj).Status.Active).To(HaveLen(1), "status records the run before its Job")
	g.Consistently(func() types.UID { return h.get(gj).Status.Active[0].JobUID }).WithTimeout(time.Second).Should(BeEmpty())

	// The Job goes (its finalizer removed by hand) before status records it.
	g.Expect(k8s.Patch(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: job.Name, Namespace: h.ns}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))).To(Succeed())
	g.Expect(k8s.Delete(ctx, &job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	g.Eventually(func() []batchv1.Job { return h.jobs() }).Should(BeEmpty())
	blocked.Store(false)

	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(20 * time.Second).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultFailed), HaveField("Message", ContainSubstring("was deleted"))))
	g.Expect(h.jobs()).To(BeEmpty(), "the run got no second Job")
	created := 0
	for _, e := range h.events(gj) {
		if strings.HasPrefix(e, batchv1alpha1.JobCreatedReason+":") {
			created++
		}
	}
	g.Expect(created).To(Equal(1))
}

func TestWindowCachedJobNotFound_AJobWithTheLeaseFinalizerThatNoRunClaimsIsAlwaysStopped(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":lost-status"
	gj := h.guardedJob("lost-status", key)
	gj.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(3))
	job, pod := h.runningJob(gj)
	token := h.rdb.Get(ctx, key).Val()

	// The GuardedJob disappears without the manager's help (its finalizer removed
	// by hand), taking the run's token with it.
	h.stop()
	cur := h.get(gj)
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Finalizers = nil
	h.g.Expect(k8s.Patch(ctx, cur, patch)).To(Succeed())
	h.g.Expect(k8s.Delete(ctx, cur)).To(Succeed())
	h.start()

	g := h.g
	var deleted *corev1.Pod
	g.Eventually(func() *corev1.Pod { deleted = h.podDeletion(pod); return deleted }).ShouldNot(BeNil())
	g.Expect(*deleted.DeletionGracePeriodSeconds).To(Equal(int64(3)), "the Pods' own grace period")
	g.Expect(h.jobDeleted(job)).To(BeTrue())
	g.Eventually(func() []string { return h.eventsAll() }).Should(ContainElement(
		HavePrefix("StaleJob: Stopping Job " + job.Name + ": its GuardedJob lost-status is gone")))
	g.Consistently(func() ([]string, error) { return jobFinalizers(job) }).WithTimeout(time.Second).Should(ContainElement(batchv1alpha1.LeaseFinalizer),
		"the finalizer stays while a Pod may run")

	h.kubeletRemoves(pod)
	g.Eventually(func() ([]string, error) { return jobFinalizers(job) }).ShouldNot(ContainElement(batchv1alpha1.LeaseFinalizer))
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(token), "the lease is left to expire: its token is unknown to the manager")
}

// jobFinalizers returns the Job's finalizers; an error (the Job gone) makes an
// Eventually keep waiting, so an absence check cannot pass on a failed read.
func jobFinalizers(job *batchv1.Job) ([]string, error) {
	cur := &batchv1.Job{}
	err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), cur)
	return cur.Finalizers, err
}

// leftRun records in gj's status a run as a manager that crashed would have left
// it: the intent (phase Acquiring) or, with fence > 0, the fence too (phase
// Running, no Job yet). The manager must not be running. It returns the run.
func (h *harness) leftRun(gj *batchv1alpha1.GuardedJob, cluster string, scheduled time.Time, fence int64) batchv1alpha1.ActiveRun {
	h.t.Helper()
	random, err := leasetoken.NewRandom()
	h.g.Expect(err).NotTo(HaveOccurred())
	cur := h.get(gj)
	name := runtoken.JobName(gj.Name, scheduled, random)
	holder := leasetoken.FormatHolder(cluster, gj.Namespace, name)
	run := batchv1alpha1.ActiveRun{
		JobName: name, Phase: batchv1alpha1.RunPhaseAcquiring, ScheduledTime: metav1.NewTime(scheduled),
		Key: gj.Spec.Lock.Key, OccurrenceKey: fmt.Sprintf("%s:done:%d", gj.Spec.Lock.Key, scheduled.Unix()), FenceKey: gj.Spec.Lock.Key + ":fence",
		Holder: holder, Token: leasetoken.Format(holder, random), Cluster: cluster, OwnerUID: cur.UID,
		TTL: metav1.Duration{Duration: gj.Spec.Lock.TTLOrDefault()}, RenewInterval: metav1.Duration{Duration: gj.Spec.Lock.RenewIntervalOrDefault()},
		MaxHold: metav1.Duration{Duration: gj.Spec.Lock.MaxHoldOrDefault()}, EnvName: "GUARDEDJOB_FENCE",
		FencingPolicy: batchv1alpha1.FencingInject, StoreFailurePolicy: batchv1alpha1.FailClosed,
	}
	if fence > 0 {
		run.Phase, run.Fence, run.AcquiredAt = batchv1alpha1.RunPhaseRunning, fence, ptr.To(metav1.NewTime(scheduled))
	}
	cur.Status.Active = append(cur.Status.Active, run)
	cur.Status.LastScheduleTime = ptr.To(metav1.NewTime(scheduled))
	h.g.Expect(k8s.Status().Update(context.Background(), cur)).To(Succeed())
	return run
}

func TestWindowStartingDeadline_ARunLeftBeforeItsJobExistedIsSkippedPastItsDeadlineAndReleased(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fence int64
	}{
		{"the intent was written, the acquisition never came back", 0},
		{"the lease and the fence were recorded, the Job never created", 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			ctx := context.Background()
			gj := h.create(h.guardedJob("late", h.ns+":late"))
			// Due at 00:05, the manager down until 09:00 (startingDeadlineSeconds 300).
			scheduled := time.Now().Add(-9 * time.Hour).Truncate(time.Minute)
			run := h.leftRun(gj, "cluster-a", scheduled, tc.fence)
			h.g.Expect(h.rdb.Set(ctx, run.Key, run.Token, time.Minute).Err()).To(Succeed(), "the acquisition went through before the crash")
			h.start()

			g := h.g
			g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
				Not(BeNil()),
				HaveField("JobName", run.JobName),
				HaveField("Result", batchv1alpha1.RunResultSkipped),
				HaveField("Message", ContainSubstring("did not start before its starting deadline"))))
			g.Expect(h.get(gj).Status.Active).To(BeEmpty())
			g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("StartingDeadlineExceeded: Skipped " + run.JobName)))
			g.Expect(h.rdb.Exists(ctx, run.Key).Val()).To(BeZero(), "the lease it held is released")
			g.Consistently(h.jobs).WithTimeout(2*time.Second).Should(BeEmpty(), "no Job hours late")
			_, tracked := h.keeper.Get(run.Token)
			g.Expect(tracked).To(BeFalse())
		})
	}
}

func TestWindowLeaseLeak_ADoneOccurrenceReleasesTheKeyTheRunAlreadyHeld(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	gj := h.create(h.guardedJob("leak", h.ns+":leak"))
	scheduled := time.Now().Add(-time.Minute).Truncate(time.Minute)
	run := h.leftRun(gj, "cluster-a", scheduled, 0)
	// The acquisition went through before a crash; meanwhile another process
	// marked the occurrence done.
	h.g.Expect(h.rdb.Set(ctx, run.Key, run.Token, time.Minute).Err()).To(Succeed())
	h.g.Expect(h.rdb.Set(ctx, run.OccurrenceKey, "cluster-b/ns/other#1", time.Hour).Err()).To(Succeed())
	h.start()

	g := h.g
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultSkipped), HaveField("HeldBy", "cluster-b/ns/other")))
	g.Expect(h.rdb.Exists(ctx, run.Key).Val()).To(BeZero(), "no lease is left that nobody renews or releases")
	_, tracked := h.keeper.Get(run.Token)
	g.Expect(tracked).To(BeFalse())
}

func TestWindowWrongType_AKeyOfAnotherTypeWritesNothingAndKeepsReadyFalseUntilFixed(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":wrongtype"
	gj := h.create(h.guardedJob("wrongtype", key))
	h.g.Expect(h.rdb.HSet(ctx, key+":fence", "not", "a counter").Err()).To(Succeed())
	h.trigger(gj)

	g := h.g
	ready := func() *metav1.Condition { return findCond(h.get(gj).Status.Conditions, batchv1alpha1.ReadyCondition) }
	g.Eventually(ready).Should(And(Not(BeNil()),
		HaveField("Status", metav1.ConditionFalse),
		HaveField("Reason", batchv1alpha1.StoreKeyWrongTypeReason),
		HaveField("Message", ContainSubstring(key+":fence"))))
	g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero(), "the lock was not written")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("StoreKeyWrongType: Did not start")))

	// Later passes (another trigger, an unrelated annotation) do not flip Ready back.
	h.annotateOther(gj, "unrelated", "1")
	g.Consistently(func() string { return string(ready().Status) }).WithTimeout(2 * time.Second).Should(Equal("False"))

	// Fixed in the store: the next run starts and Ready turns True.
	h.g.Expect(h.rdb.Del(ctx, key+":fence").Err()).To(Succeed())
	h.clock.Step(2 * time.Second)
	h.trigger(gj)
	g.Eventually(func() []batchv1.Job { return h.jobs() }).Should(HaveLen(1))
	g.Eventually(func() string { return string(ready().Status) }).Should(Equal("True"))
}

// annotateOther sets an annotation that means nothing to the manager: it causes
// a pass and nothing else.
func (h *harness) annotateOther(gj *batchv1alpha1.GuardedJob, k, v string) {
	h.t.Helper()
	cur := h.get(gj)
	patch := client.MergeFrom(cur.DeepCopy())
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations[k] = v
	h.g.Expect(k8s.Patch(context.Background(), cur, patch)).To(Succeed())
}

func TestWindowFailOpen_AnUnguardedRunWhoseKeyWasTakenBackWritesTheDoneMarker(t *testing.T) {
	h := newHarness(t)
	proxy := h.storeViaProxy()
	h.start()
	ctx := context.Background()
	key := h.ns + ":failopen"
	gj := h.guardedJob("failopen", key)
	gj.Spec.Lock.StoreFailurePolicy = batchv1alpha1.FailOpen
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 10 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	h.create(gj)
	proxy.Cut()
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	g := h.g
	g.Expect(h.get(gj).Status.Active[0].Unguarded).To(BeTrue())

	proxy.Restore(t)
	token := h.get(gj).Status.Active[0].Token
	g.Eventually(func() string { return h.rdb.Get(ctx, key).Val() }).Should(Equal(token), "the keeper takes the key for the run")
	h.complete(&job)
	g.Eventually(func() string { return h.rdb.Get(ctx, key+":done:"+scheduledUnix(&job)).Val() }).Should(Equal(token),
		"the occurrence is marked done by the run that succeeded")
	g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero(), "and its key released")
}

// scheduledUnix returns the Job's scheduled time in Unix seconds, as the default
// occurrence key has it.
func scheduledUnix(job *batchv1.Job) string {
	t, err := time.Parse(time.RFC3339, job.Annotations[batchv1alpha1.ScheduledTimeAnnotation])
	if err != nil {
		return "<no scheduled time>"
	}
	return strconv.FormatInt(t.Unix(), 10)
}

// slowAPI delays every request of the manager to the API server, as a proxy in
// front of a loaded API server would.
type slowAPI struct {
	next  http.RoundTripper
	delay time.Duration
}

func (s slowAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	time.Sleep(s.delay) // the latency under test
	return s.next.RoundTrip(req)
}

func TestWindowResumeWaitsOnTheAPIServer_FiveHundredLeasesAcrossFiftyTenantStoresAreRenewedWithinTheHandoverMargin(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 500 GuardedJobs")
	}
	const runs, secrets = 500, 50
	const ttl = 20 * time.Second
	h := newHarnessAlone(t)
	ctx := context.Background()
	for i := range secrets {
		h.g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("store-%d", i), Namespace: h.ns},
			StringData: map[string]string{"url": h.redis.URL()}})).To(Succeed())
	}
	keys, tokens := make([]string, runs), make([]string, runs)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			secret := fmt.Sprintf("store-%d", i%secrets)
			gj := h.guardedJob(fmt.Sprintf("resume-%d", i), fmt.Sprintf("tenant:resume-%d", i))
			gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: secret}
			gj.Spec.Lock.TTL = &metav1.Duration{Duration: ttl}
			h.create(gj)
			run := h.leftRun(gj, "cluster-a", time.Now().Truncate(time.Second), int64(i+1))
			run.Store = "secret:" + h.ns + "/" + secret + ":" + lockclient.Redact(h.redis.URL())
			cur := h.get(gj)
			cur.Status.Active[0].Store = run.Store
			cur.Status.Active[0].JobUID = "running" // the Job exists
			h.g.Expect(k8s.Status().Update(ctx, cur)).To(Succeed())
			keys[i], tokens[i] = run.Key, run.Token
		}()
	}
	wg.Wait()
	// Half of each lease is left when the new leader starts.
	pipe := h.rdb.Pipeline()
	for i := range keys {
		pipe.Set(ctx, keys[i], tokens[i], ttl/2)
	}
	_, err := pipe.Exec(ctx)
	h.g.Expect(err).NotTo(HaveOccurred())

	h.restWrap = func(rt http.RoundTripper) http.RoundTripper { return slowAPI{next: rt, delay: 200 * time.Millisecond} }
	started := time.Now()
	h.start()
	lowest := ttl
	var renewedAfter time.Duration
	h.g.Eventually(func() int {
		pipe := h.rdb.Pipeline()
		cmds := make([]*redis.DurationCmd, len(keys))
		for i, k := range keys {
			cmds[i] = pipe.PTTL(ctx, k)
		}
		_, _ = pipe.Exec(ctx)
		renewed := 0
		for _, c := range cmds {
			lowest = min(lowest, c.Val())
			if c.Val() > ttl/2 {
				renewed++
			}
		}
		renewedAfter = time.Since(started)
		return renewed
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(runs))
	t.Logf("%d leases in %d tenant stores renewed %s after the manager started behind a 200 ms API server; lowest PTTL seen %s",
		runs, secrets, renewedAfter.Round(time.Millisecond), lowest.Round(time.Millisecond))
	// The design's leader handover margin.
	h.g.Expect(renewedAfter).To(BeNumerically("<", 5*time.Second))
}

func TestWindowStoppingManyAtOnce_TwoHundredRunsAreStoppedBeforeTheirLeasesCouldExpireWhenRedisDies(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 200 GuardedJobs")
	}
	const n = 200
	const ttl, interval = 20 * time.Second, 2 * time.Second
	h := newHarnessAlone(t)
	h.start()
	pods := h.massRuns(n, "mass", ttl, interval)

	killed := time.Now()
	h.redis.Kill()
	// Every lease was renewed at most one renew interval before the kill, so none
	// can expire before killed + ttl - interval: every Pod must be gone by then.
	expiresNoSoonerThan := killed.Add(ttl - interval)
	g := h.g
	late, latest := h.podsGoneBy(pods, expiresNoSoonerThan, ttl)
	g.Expect(late).To(BeZero(), "Pods still running when their lease could have expired")
	for _, job := range h.jobs() {
		g.Expect(job.DeletionTimestamp).NotTo(BeNil(), "Job %s", job.Name)
	}
	t.Logf("%d runs: the last Pod is gone %s before the earliest moment a lease could expire", n, expiresNoSoonerThan.Sub(latest).Round(time.Millisecond))
}

// apiCapacity lets the manager's writes through to the API server at a fixed
// rate once it is on, as an API server saturated by the rest of the cluster
// would. Reads pass: the manager serves them from its cache. It notes the grace
// of every Pod delete (podDeletes).
type apiCapacity struct {
	next       http.RoundTripper
	on         *atomic.Bool
	limit      *rate.Limiter
	podDeletes *podDeleteLog
}

func (c apiCapacity) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.on.Load() && req.Method != http.MethodGet {
		if err := c.limit.Wait(req.Context()); err != nil {
			return nil, err
		}
	}
	if r := apirecorder.Parse(req); r.Verb == "delete" && r.Resource == "pods" && c.podDeletes != nil && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		var opts metav1.DeleteOptions
		if _, _, err := serializer.NewCodecFactory(scheme).UniversalDeserializer().Decode(body, nil, &opts); err != nil {
			return nil, fmt.Errorf("pod delete options (%s): %w", req.Header.Get("Content-Type"), err)
		}
		c.podDeletes.add(r.Namespace+"/"+r.Name, opts.GracePeriodSeconds)
	}
	return c.next.RoundTrip(req)
}

// podDeleteLog holds the grace periods each Pod was deleted with, in order
// (-1: none given), by the Pod's namespace/name.
type podDeleteLog struct {
	mu    sync.Mutex
	grace map[string][]int64
}

func (l *podDeleteLog) add(pod string, grace *int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.grace == nil {
		l.grace = map[string][]int64{}
	}
	l.grace[pod] = append(l.grace[pod], ptr.Deref(grace, -1))
}

// needless returns the Pod deletes that asked for no shorter grace than an
// earlier delete of the same Pod: the API server keeps the earlier deadline,
// so they changed nothing and took a write from the stops still waiting.
func (l *podDeleteLog) needless() (needless, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, graces := range l.grace {
		total += len(graces)
		for i := 1; i < len(graces); i++ {
			if graces[i] < 0 || graces[i] >= slices.Min(graces[:i]) {
				needless++
			}
		}
	}
	return needless, total
}

func TestWindowStoppingManyAtOnce_WhenTheAPIServerIsTheLimitTheDeletesGoFirstAndStartEarlyEnough(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 200 GuardedJobs")
	}
	const n = 200
	const ttl, interval = 20 * time.Second, 2 * time.Second
	// The API server takes 60 of the manager's writes per second: stopping one
	// run is two deletes (its Job and its Pod), so at most 30 runs a second can
	// be stopped, and the manager is told it can count on 25.
	const writesPerSecond, stopRate = 60, 25
	h := newHarnessAlone(t)
	h.stopRate = stopRate
	saturated := &atomic.Bool{}
	limit := rate.NewLimiter(writesPerSecond, 1)
	podDeletes := &podDeleteLog{}
	h.restWrap = func(rt http.RoundTripper) http.RoundTripper {
		return apiCapacity{next: rt, on: saturated, limit: limit, podDeletes: podDeletes}
	}
	h.start()
	pods := h.massRuns(n, "busy", ttl, interval)

	saturated.Store(true)
	killed := time.Now()
	h.redis.Kill()
	// Every lease was renewed at most one renew interval before the kill, so none
	// can expire before killed + ttl - interval. The self-fence deadlines fall
	// 2 s apart at most: deleted only from their deadlines on, with the status
	// writes beside them, the last of 200 runs would be stopped too late.
	expiresNoSoonerThan := killed.Add(ttl - interval)
	g := h.g
	late, latest := h.podsGoneBy(pods, expiresNoSoonerThan, 2*ttl)
	t.Logf("%d runs, %d writes/s: the last Pod is gone %s before the earliest moment a lease could expire; %d Pods too late",
		n, writesPerSecond, expiresNoSoonerThan.Sub(latest).Round(time.Millisecond), late)
	g.Expect(late).To(BeZero(), "Pods still running when their lease could have expired")
	// A Pod the cache does not yet show terminating is not deleted again with
	// the same grace: the stops are short of writes.
	needless, total := podDeletes.needless()
	t.Logf("%d Pod deletes, %d of them asking for no shorter grace than an earlier one", total, needless)
	g.Expect(needless).To(BeZero(), "Pod deletes that changed nothing")

	// Once the deletes are out, each run says why it stopped.
	g.Eventually(func() int {
		list := &batchv1alpha1.GuardedJobList{}
		g.Expect(k8s.List(context.Background(), list, client.InNamespace(h.ns))).To(Succeed())
		told := 0
		for _, gj := range list.Items {
			if a := gj.Status.Active; len(a) == 1 && a[0].Phase == batchv1alpha1.RunPhaseStopping &&
				strings.HasPrefix(a[0].StopReason, string(batchv1alpha1.RunResultStoreUnavailable)) {
				told++
			}
		}
		return told
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Equal(n))
}

// massRuns starts n runs with the given lease and a Pod each (2 s grace).
func (h *harness) massRuns(n int, prefix string, ttl, interval time.Duration) []*corev1.Pod {
	h.t.Helper()
	h.startMany(n, prefix, ttl, interval, func(gj *batchv1alpha1.GuardedJob) {
		gj.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(2))
	})
	var pods []*corev1.Pod
	for _, job := range h.jobs() {
		pods = append(pods, h.podFor(&job))
	}
	return pods
}

// podsGoneBy waits until every Pod was deleted and returns how many are gone
// (deletion time plus grace) only after by, and when the last one is gone.
func (h *harness) podsGoneBy(pods []*corev1.Pod, by time.Time, within time.Duration) (late int, latest time.Time) {
	h.t.Helper()
	h.g.Eventually(func() int {
		stopped := 0
		for _, p := range pods {
			if h.podDeletion(p) != nil {
				stopped++
			}
		}
		return stopped
	}).WithTimeout(within).WithPolling(250 * time.Millisecond).Should(Equal(len(pods)))
	for _, p := range pods {
		d := h.podDeletion(p)
		h.g.Expect(d).NotTo(BeNil())
		gone := d.DeletionTimestamp.Add(time.Second) // deletionTimestamp is rounded down to the second
		if gone.After(by) {
			late++
		}
		latest = maxTime(latest, gone)
	}
	return late, latest
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func TestWindowPodsNeverStart_ARunWhosePodsCannotStartIsStoppedAndReleasedAfterPodStartTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		// block plays the cluster refusing to start the run's Pods; it returns
		// the Pod it created, if any.
		block func(h *harness, job *batchv1.Job) *corev1.Pod
		why   string
	}{
		{"an unschedulable Pod", func(h *harness, job *batchv1.Job) *corev1.Pod {
			pod := h.podFor(job)
			pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
				Message: "0/3 nodes are available: 3 Insufficient memory."}}}
			h.g.Expect(k8s.Status().Update(context.Background(), pod)).To(Succeed())
			return pod
		}, "is not scheduled: 0/3 nodes are available: 3 Insufficient memory."},
		{"Pods refused by admission", func(h *harness, job *batchv1.Job) *corev1.Pod {
			now := metav1.Now()
			h.g.Expect(k8s.Create(context.Background(), &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: job.Name + ".failedcreate", Namespace: job.Namespace},
				InvolvedObject: corev1.ObjectReference{Kind: "Job", APIVersion: "batch/v1", Name: job.Name, Namespace: job.Namespace, UID: job.UID},
				Reason:         "FailedCreate", Type: corev1.EventTypeWarning, FirstTimestamp: now, LastTimestamp: now, Count: 1,
				Message: `Error creating: pods "x" is forbidden: violates PodSecurity "restricted:latest"`,
			})).To(Succeed())
			return nil
		}, `the Job controller could not create its Pods: Error creating: pods "x" is forbidden: violates PodSecurity "restricted:latest"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.start()
			ctx := context.Background()
			key := h.ns + ":nostart"
			gj := h.guardedJob("nostart", key)
			gj.Spec.Lock.PodStartTimeout = &metav1.Duration{Duration: 30 * time.Second}
			// A Pod that never started is the cluster's trouble, not the workload failing.
			gj.Spec.FailurePolicy = &batchv1alpha1.FailurePolicy{SuspendAfter: 1}
			h.create(gj)
			h.trigger(gj)
			job := h.waitJobs(1)[0]
			h.waitRecorded(gj)
			pod := tc.block(h, &job)

			g := h.g
			g.Consistently(func() bool { return h.jobDeleted(&job) }).WithTimeout(time.Second).Should(BeFalse(), "not before the timeout")
			h.clock.SetTime(job.CreationTimestamp.Add(31 * time.Second))
			h.annotateOther(gj, "nudge", "1")
			g.Eventually(func() bool { return h.jobDeleted(&job) }).Should(BeTrue())
			if pod != nil {
				g.Eventually(func() *corev1.Pod { return h.podDeletion(pod) }).ShouldNot(BeNil())
				g.Expect(h.rdb.Get(ctx, key).Val()).NotTo(BeEmpty(), "the lease is kept until the Pod is gone")
				h.kubeletRemoves(pod)
			}
			g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
				HaveField("Result", batchv1alpha1.RunResultFailed),
				HaveField("Message", ContainSubstring("started within lock.podStartTimeout 30s")),
				HaveField("Message", ContainSubstring(tc.why))))
			g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero(), "the lease is released")
			g.Expect(h.get(gj).Status.ConsecutiveFailures).To(BeZero(), "not counted by the failure policy")
			g.Expect(h.get(gj).Spec.Suspended()).To(BeFalse())
			g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("PodStartTimeout: Stopping " + job.Name)))
		})
	}
}

func TestWindowAbandonedRuns_ARunOfAnotherClusterNameIsStoppedHereAndItsLeaseLeftAlone(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	key := h.ns + ":renamed"
	gj := h.create(h.guardedJob("renamed", key))
	// Recorded by this cluster under its previous --cluster-name (or restored from
	// a backup of a cluster that is still alive): its Job and Pod run here.
	run := h.leftRun(gj, "cluster-old", time.Now().Add(-time.Minute).Truncate(time.Minute), 3)
	cur := h.get(gj)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: run.JobName, Namespace: h.ns,
			Labels:          map[string]string{batchv1alpha1.GuardedJobLabel: gj.Name},
			Finalizers:      []string{batchv1alpha1.LeaseFinalizer},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cur, batchv1alpha1.GroupVersion.WithKind("GuardedJob"))}},
		Spec: *gj.Spec.JobTemplate.Spec.DeepCopy(),
	}
	h.g.Expect(k8s.Create(ctx, job)).To(Succeed())
	pod := h.podFor(job)
	cur.Status.Active[0].JobUID = job.UID
	h.g.Expect(k8s.Status().Update(ctx, cur)).To(Succeed())
	h.g.Expect(h.rdb.Set(ctx, key, run.Token, 30*time.Second).Err()).To(Succeed())
	h.start()

	g := h.g
	g.Eventually(func() *corev1.Pod { return h.podDeletion(pod) }).ShouldNot(BeNil(), "its Pods here are stopped")
	g.Expect(h.jobDeleted(job)).To(BeTrue())
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(And(
		HavePrefix("StaleJob: Stopping "+run.JobName), ContainSubstring(`recorded by cluster "cluster-old"`))))

	// A new occurrence does not start while that Pod may still run.
	h.trigger(gj)
	g.Consistently(func() int { return len(h.jobs()) }).WithTimeout(2*time.Second).Should(Equal(1), "no second Job beside the old Pod")
	h.kubeletRemoves(pod)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("JobName", run.JobName), HaveField("Message", ContainSubstring("its lease is left alone"))))
	// Its lease was never renewed or released here.
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(run.Token))
	g.Expect(h.rdb.PTTL(ctx, key).Val()).To(BeNumerically("<", 29*time.Second))
	_, tracked := h.keeper.Get(run.Token)
	g.Expect(tracked).To(BeFalse())
}

func TestWindowLeaseLeak_AGuardedJobThatVanishesLeavesNoLeaseRenewedForever(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":vanish"
	gj := h.guardedJob("vanish", key)
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 9 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	_, pod := h.runningJob(gj)

	// The object disappears under the running manager (its finalizer removed by
	// hand right after the delete).
	h.g.Expect(k8s.Delete(ctx, h.get(gj))).To(Succeed())
	cur := h.get(gj)
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Finalizers = nil
	h.g.Expect(k8s.Patch(ctx, cur, patch)).To(Succeed())

	g := h.g
	g.Eventually(func() *corev1.Pod { return h.podDeletion(pod) }).ShouldNot(BeNil(), "its Pods are stopped")
	// Nothing renews the lease any more: it expires.
	g.Eventually(func() int64 { return h.rdb.Exists(ctx, key).Val() }).WithTimeout(20 * time.Second).Should(BeZero())
	for _, st := range h.keeper.Snapshot() {
		g.Expect(st.Owner).NotTo(HavePrefix(h.ns+"/vanish/"), "no lease of the vanished object is tracked")
	}
}

func TestAFinishedJobWhosePodObjectStaysDoesNotBlockTheNextRun(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	gj := h.create(h.guardedJob("next", h.ns+":next")) // concurrencyPolicy Forbid
	h.trigger(gj)
	first := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	// The Job controller keeps a finished Job's Pods, ended, until the Job goes.
	pod := h.podFor(&first)
	pod.Status.Phase = corev1.PodSucceeded
	h.g.Expect(k8s.Status().Update(ctx, pod)).To(Succeed())
	h.complete(&first)
	h.g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("JobName", first.Name), HaveField("Result", batchv1alpha1.RunResultSucceeded)))

	// Run the occurrence again (its done-marker deleted, as docs/failure-semantics.md
	// describes for a forced re-run).
	h.g.Expect(h.rdb.Del(ctx, h.ns+":next:done:"+scheduledUnix(&first)).Val()).To(Equal(int64(1)))
	time.Sleep(time.Second) // a trigger value must differ from the last one handled (1s resolution)
	h.trigger(gj)
	h.g.Eventually(func() []batchv1.Job { return h.jobs() }).Should(HaveLen(2), "the next run starts")
	h.g.Expect(h.events(gj)).NotTo(ContainElement(ContainSubstring("which no run claims")))
}
