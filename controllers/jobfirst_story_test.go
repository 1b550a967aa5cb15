package controllers_test

// Stories of the Job-first run order: lease, then the Job (suspended behind its
// start gate, carrying the run), then status, then the gate. Each is named
// after its row in docs/failure-semantics.md.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
)

// failRunWrites makes every status write that records a run fail, as a manager
// that dies (or whose writes conflict) right before it records its run.
func failRunWrites() *interceptor.Funcs {
	return &interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		if gj, ok := obj.(*batchv1alpha1.GuardedJob); ok && len(gj.Status.Active) > 0 {
			return errors.New("injected: the manager dies before it records the run")
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}}
}

// unrecordedJob starts a run whose manager dies between creating the run's Job
// and recording the run, and returns the Job as it was left, and the key's
// value then.
func (h *harness) unrecordedJob(name string) (*batchv1alpha1.GuardedJob, batchv1.Job, string) {
	h.t.Helper()
	ctx := context.Background()
	h.intercept = failRunWrites()
	h.start()
	key := h.ns + ":" + name
	gj := h.create(h.guardedJob(name, key))
	h.trigger(gj)
	h.waitJobs(1)
	h.g.Eventually(func() string { return h.rdb.Get(ctx, key).Val() }).ShouldNot(BeEmpty())
	h.stop()
	h.intercept = nil
	g := h.g
	g.Expect(h.get(gj).Status.Active).To(BeEmpty(), "no status records the run")
	job := h.waitJobs(1)[0]
	g.Expect(jobbuild.Gated(&job)).To(BeTrue(), "a Job no status records stays suspended behind its start gate")
	return gj, job, h.rdb.Get(ctx, key).Val()
}

// TestJobFirst_ARunCreatesItsJobBeforeItsFirstStatusWrite: a run takes its
// lease, creates its Job (suspended, carrying its fence and its run without the
// token), records the run with the Job's UID, then opens the Job's start gate:
// the Job create is the only API write before the Job exists.
func TestJobFirst_ARunCreatesItsJobBeforeItsFirstStatusWrite(t *testing.T) {
	h := newHarness(t)
	h.order = orderRecordFirst // its Job waits at its gate for the status write
	log := &writeLog{}
	h.restWrap = log.wrap
	h.start()
	ctx := context.Background()
	gj := h.create(h.guardedJob("jobfirst", h.ns+":jobfirst"))
	h.g.Eventually(func() *batchv1alpha1.GuardedJobStatus { return &h.get(gj).Status }).Should(HaveField("NextScheduleTime", Not(BeNil())))
	log.reset()
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	g := h.g
	g.Expect(log.upToJob()).To(Equal([]string{"create jobs"}), "the Job is the first write of a run")
	writes := func() []string {
		log.mu.Lock()
		defer log.mu.Unlock()
		return append([]string(nil), log.writes...)
	}
	// A busy API server may make the gate's update go again; nothing else follows.
	afterStatus := func() []string {
		w := writes()
		if len(w) < 2 {
			return nil
		}
		g.Expect(w[:2]).To(HaveExactElements("create jobs", "update guardedjobs/status"), "then the status write that records the run")
		return w[2:]
	}
	g.Eventually(afterStatus).Should(Not(BeEmpty()), "then the start gate")
	g.Consistently(afterStatus).WithTimeout(2*time.Second).Should(HaveEach("update jobs"), "and nothing more while the run works")
	run := h.get(gj).Status.Active[0]
	g.Expect(run.Phase).To(Equal(batchv1alpha1.RunPhaseRunning))
	g.Expect(run.JobUID).To(Equal(job.UID))
	g.Expect(envOf(&job, "GUARDEDJOB_FENCE")).To(Equal("1"))
	g.Expect(job.Annotations).To(HaveKeyWithValue(batchv1alpha1.FenceAnnotation, "1"))
	var rec map[string]any
	g.Expect(json.Unmarshal([]byte(job.Annotations[batchv1alpha1.RunAnnotation]), &rec)).To(Succeed())
	g.Expect(rec).To(HaveKeyWithValue("jobName", job.Name))
	g.Expect(rec).To(HaveKeyWithValue("key", run.Key))
	g.Expect(rec).NotTo(HaveKey("token"))
	secret := run.Token[strings.LastIndexByte(run.Token, '#')+1:][:16] // the token's random half
	for k, v := range job.Annotations {
		g.Expect(v).NotTo(ContainSubstring(secret), "annotation %s never holds the token", k)
	}
	g.Expect(job.Spec.Template.Annotations).NotTo(HaveKey(batchv1alpha1.RunAnnotation), "the run is on the Job only")
	g.Eventually(func() bool {
		cur := &batchv1.Job{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&job), cur)).To(Succeed())
		return jobbuild.Gated(cur)
	}).Should(BeFalse(), "the start gate opens once status records the run")
	g.Expect(h.rdb.Get(ctx, h.ns+":jobfirst").Val()).To(Equal(run.Token))
}

// TestJobFirst_AManagerThatDiesBetweenTheJobAndTheStatusWriteLeavesAJobTheNextOneAdopts:
// the next manager finds a Job that no status records, whose lock key still
// holds the token minted for it and whose fence the counter still shows: it
// records the run from the Job (the same Job, token and fence; status.lastFence
// raised to it), resumes the lease, and opens the gate. The stop controller
// leaves the Job alone meanwhile.
func TestJobFirst_AManagerThatDiesBetweenTheJobAndTheStatusWriteLeavesAJobTheNextOneAdopts(t *testing.T) {
	h := newHarness(t)
	h.order = orderRecordFirst // its Job waits at its gate for the status write
	ctx := context.Background()
	gj, job, token := h.unrecordedJob("adopted")
	g := h.g
	g.Expect(token).To(HavePrefix("cluster-a/" + h.ns + "/" + job.Name + "#"))
	fence := job.Annotations[batchv1alpha1.FenceAnnotation]

	h.start()
	h.waitRecorded(gj)
	st := h.get(gj).Status
	g.Expect(st.Active).To(ConsistOf(And(HaveField("JobName", job.Name), HaveField("JobUID", job.UID), HaveField("Token", token),
		HaveField("Phase", batchv1alpha1.RunPhaseRunning), HaveField("Fence", WithTransform(itoa, Equal(fence))))),
		"the run is recorded from the Job it found")
	g.Expect(itoa(st.LastFence)).To(Equal(fence), "status.lastFence is raised to the adopted Job's fence")
	g.Expect(st.Leases).To(ContainElement(And(HaveField("Holder", st.Active[0].Holder), HaveField("State", batchv1alpha1.LeaseLive))))
	g.Eventually(func() bool {
		cur := &batchv1.Job{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&job), cur)).To(Succeed())
		return jobbuild.Gated(cur)
	}).Should(BeFalse(), "its start gate opens once status records it")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("RunAdopted: Adopted Job " + job.Name)))
	g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix("StaleJob:")))
	g.Expect(h.rdb.Get(ctx, h.ns+":adopted").Val()).To(Equal(token), "the lease is the run's own, renewed")
	g.Consistently(h.jobs).WithTimeout(2*time.Second).Should(ConsistOf(HaveField("UID", job.UID)), "no second Job")

	h.complete(&job)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultSucceeded), HaveField("JobName", job.Name)))
	g.Expect(h.rdb.Exists(ctx, h.ns+":adopted").Val()).To(BeZero(), "released when the Job completed")
}

// TestJobFirst_AJobLeftUnrecordedWhoseLeaseExpiredIsDeletedNeverStarted: the
// lease of a Job that no status records expired before a manager came back. The
// Job never had a Pod; it is deleted, never started, and the occurrence runs
// with a new lease and a new Job.
func TestJobFirst_AJobLeftUnrecordedWhoseLeaseExpiredIsDeletedNeverStarted(t *testing.T) {
	h := newHarness(t)
	h.order = orderRecordFirst // its Job waits at its gate for the status write
	ctx := context.Background()
	gj, job, _ := h.unrecordedJob("expired")
	g := h.g
	g.Expect(h.rdb.Del(ctx, h.ns+":expired").Err()).To(Succeed(), "the lease expires while no manager runs")

	h.start()
	h.unadoptedDeleted(gj, &job, "is free")
	h.waitRecorded(gj)
	run := h.get(gj).Status.Active[0]
	g.Expect(run.JobName).NotTo(Equal(job.Name), "the occurrence runs with a new lease and a new Job")
	g.Expect(h.rdb.Get(ctx, h.ns+":expired").Val()).To(Equal(run.Token))
}

// unadoptedDeleted waits until the manager has deleted a Job that no status
// records, saying why, and checks that it never started and was never adopted.
func (h *harness) unadoptedDeleted(gj *batchv1alpha1.GuardedJob, job *batchv1.Job, why string) {
	h.t.Helper()
	g := h.g
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(And(
		HavePrefix("StaleJob: Deleted Job "+job.Name+", which was created before its run was recorded and never started"),
		ContainSubstring(why))))
	g.Eventually(func() bool {
		cur := &batchv1.Job{}
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), cur)
		if err != nil {
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			return true
		}
		g.Expect(jobbuild.Gated(cur)).To(BeTrue(), "never started: still suspended at its start gate")
		return !cur.DeletionTimestamp.IsZero()
	}).Should(BeTrue(), "the Job is deleted")
	g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix("RunAdopted:")))
	for _, r := range h.get(gj).Status.Active {
		g.Expect(r.JobName).NotTo(Equal(job.Name), "no run is recorded from it")
	}
}

// TestJobFirst_AJobLeftUnrecordedWhoseKeyWasAcquiredAgainIsNotAdopted: the key
// holds the token minted for the Job, but the fence counter has moved past the
// Job's fence (the key was acquired again since, and a run may have worked with
// that fence): the Job is deleted, never started.
func TestJobFirst_AJobLeftUnrecordedWhoseKeyWasAcquiredAgainIsNotAdopted(t *testing.T) {
	h := newHarness(t)
	h.order = orderRecordFirst // its Job waits at its gate for the status write
	ctx := context.Background()
	gj, job, _ := h.unrecordedJob("moved")
	g := h.g
	g.Expect(h.rdb.Incr(ctx, h.ns+":moved:fence").Err()).To(Succeed(), "another acquisition took a fence meanwhile")

	h.start()
	h.unadoptedDeleted(gj, &job, "the key was acquired again since")
}

// TestJobFirst_ARunWaitingForItsKeyAdoptsTheJobItsFailedStatusWriteLeft: a run
// recorded while it waits for a busy key (onBusy Retry) takes the key, creates
// its Job, and its status write fails. The next pass finds that Job under the
// recorded run's name: it records the run from the Job (same Job, same fence,
// the recorded token still in the key) instead of acquiring again and getting
// a fence the Job does not carry.
func TestJobFirst_ARunWaitingForItsKeyAdoptsTheJobItsFailedStatusWriteLeft(t *testing.T) {
	h := newHarness(t)
	var failOnce atomic.Bool
	failOnce.Store(true)
	h.intercept = &interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		if gj, ok := obj.(*batchv1alpha1.GuardedJob); ok && len(gj.Status.Active) > 0 &&
			gj.Status.Active[0].Phase == batchv1alpha1.RunPhaseRunning && failOnce.CompareAndSwap(true, false) {
			return errors.New("injected: the status write after the Job fails")
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}}
	h.start()
	ctx := context.Background()
	g := h.g
	key := h.ns + ":waiting"
	gj := h.minutely("waiting", key)
	gj.Spec.Lock.OnBusy = batchv1alpha1.OnBusyRetry
	h.create(gj)
	foreign := "cluster-b/" + h.ns + "/waiting-1-abcdef#ffffffffffffffffffffffffffffffff"
	g.Expect(h.rdb.Set(ctx, key, foreign, 4*time.Second).Err()).To(Succeed())
	h.triggerAt(gj, h.occurrence(gj, 1).Add(2*time.Second))
	g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).Should(
		ConsistOf(HaveField("Phase", batchv1alpha1.RunPhaseAcquiring)), "recorded while it waits for the key")
	waiting := h.get(gj).Status.Active[0]

	// The foreign key expires; a retry takes it, creates the Job, and fails its write.
	run, _ := h.recordedRun(gj)
	g.Expect(failOnce.Load()).To(BeFalse(), "the status write after the Job failed once")
	job := h.waitJobs(1)[0]
	g.Expect(run.Token).To(Equal(waiting.Token))
	g.Expect(run.JobUID).To(Equal(job.UID), "the Job its failed write left")
	g.Expect(itoa(run.Fence)).To(Equal(job.Annotations[batchv1alpha1.FenceAnnotation]), "with the fence the Job carries")
	g.Expect(h.rdb.Get(ctx, key+":fence").Val()).To(Equal(itoa(run.Fence)), "no second acquisition")
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(run.Token))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("RunAdopted: Adopted Job " + job.Name)))
	g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix("StaleJob:")))
}

// TestJobFirst_AStoreThatDoesNotAnswerTheAdoptionStartsNoRunBesideTheJob: a
// manager dies between a run's Job and its status write, and the next one
// comes back while the store does not answer. The run-now annotation that
// started the run is still unanswered in status, and the GuardedJob fails
// open; but until the store says whether the Job waiting for adoption holds
// its lease, no run starts beside it (a FailOpen run would start without a
// lease). Once the store answers, the Job is adopted.
func TestJobFirst_AStoreThatDoesNotAnswerTheAdoptionStartsNoRunBesideTheJob(t *testing.T) {
	h := newHarness(t)
	h.order = orderRecordFirst // its Job waits at its gate for the status write
	ctx := context.Background()
	proxy := h.storeViaProxy()
	h.intercept = failRunWrites()
	h.start()
	key := h.ns + ":blind"
	gj := h.guardedJob("blind", key)
	gj.Spec.Lock.StoreFailurePolicy = batchv1alpha1.FailOpen
	gj = h.create(gj)
	h.trigger(gj)
	h.waitJobs(1)
	g := h.g
	g.Eventually(func() string { return h.rdb.Get(ctx, key).Val() }).ShouldNot(BeEmpty())
	h.stop()
	h.intercept = nil
	g.Expect(h.get(gj).Status.Active).To(BeEmpty(), "no status records the run")
	job := h.waitJobs(1)[0]

	proxy.Blackhole()
	h.start()
	g.Eventually(func() *metav1.Condition { return h.condition(gj, batchv1alpha1.StoreReachableCondition) }).Should(
		HaveField("Status", metav1.ConditionFalse), "a pass tried to adopt the Job and the store did not answer")
	g.Consistently(func(g Gomega) {
		g.Expect(h.jobs()).To(ConsistOf(HaveField("UID", job.UID)), "no run starts beside the Job waiting for adoption")
		cur := &batchv1.Job{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&job), cur)).To(Succeed())
		g.Expect(jobbuild.Gated(cur)).To(BeTrue(), "and that Job stays at its gate")
	}).WithTimeout(4 * time.Second).Should(Succeed())
	g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix("Unguarded:")))
	g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix("StaleJob:")))

	proxy.Restore(t)
	h.waitRecorded(gj)
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("RunAdopted: Adopted Job " + job.Name)))
	g.Expect(h.get(gj).Status.Active).To(ConsistOf(HaveField("JobUID", job.UID)))
	g.Expect(h.jobs()).To(ConsistOf(HaveField("UID", job.UID)), "the Job it adopted is the only one")
}

// TestJobFirst_AnUnlockOfTheLeaseOfAJobWaitingForAdoptionIsRefused: a tenant
// asks to unlock the key of a run whose manager died between its Job and its
// status write, and the next manager serves the request before it adopts the
// Job. The Job exists and the lease is live: the unlock is refused, and the Job
// is adopted with its lease.
func TestJobFirst_AnUnlockOfTheLeaseOfAJobWaitingForAdoptionIsRefused(t *testing.T) {
	h := newHarness(t)
	h.order = orderRecordFirst // its Job waits at its gate for the status write
	ctx := context.Background()
	gj, job, token := h.unrecordedJob("tenant")
	g := h.g
	key := h.ns + ":tenant"
	holder := token[:strings.LastIndexByte(token, '#')]
	value := h.requestValue()
	h.request(gj, map[string]string{batchv1alpha1.UnlockAnnotation: value,
		batchv1alpha1.UnlockKeyAnnotation: key, batchv1alpha1.UnlockHolderAnnotation: holder})

	h.start()
	g.Eventually(func() *batchv1alpha1.UnlockRecord { return h.get(gj).Status.LastUnlock }).Should(And(Not(BeNil()),
		HaveField("Request", value), HaveField("Result", batchv1alpha1.UnlockRefused)), "the lease of a Job that exists is never unlocked")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("UnlockRefused: Refused " + batchv1alpha1.UnlockAnnotation + "=" + value)))
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(token))
	h.waitRecorded(gj)
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("RunAdopted: Adopted Job " + job.Name)))
	g.Expect(h.get(gj).Status.Active).To(ConsistOf(And(HaveField("JobUID", job.UID), HaveField("Token", token))))
	g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix("StaleJob:")))
}

// TestJobFirst_AJobWaitingForAdoptionIsAdoptedByTheShardItsGuardedJobMovedTo:
// a shard creates a run's Job and cannot record the run (every status write of
// it fails), and the GuardedJob is moved to another shard. The new shard adopts
// the Job with the lease the key still holds; the old one renews nothing of it
// and there is one Job.
func TestJobFirst_AJobWaitingForAdoptionIsAdoptedByTheShardItsGuardedJobMovedTo(t *testing.T) {
	h := newHarness(t)
	h.order = orderRecordFirst // its Job waits at its gate for the status write
	ctx := context.Background()
	h.shardIntercept = failRunWrites()
	shardA := h.startShard(batchv1alpha1.ShardLabel + "=a")
	h.shardIntercept = nil
	key := h.ns + ":moving"
	gj := h.guardedJob("moving", key)
	gj.Labels = map[string]string{batchv1alpha1.ShardLabel: "a"}
	gj = h.create(gj)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	g := h.g
	g.Eventually(func() string { return h.rdb.Get(ctx, key).Val() }).ShouldNot(BeEmpty())
	token := h.rdb.Get(ctx, key).Val()
	g.Consistently(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).WithTimeout(time.Second).Should(BeEmpty(),
		"the first shard cannot record the run")

	h.relabel(gj, "b")
	h.startShard(batchv1alpha1.ShardLabel + "=b")
	h.waitRecorded(gj)
	g.Expect(h.get(gj).Status.Active).To(ConsistOf(And(HaveField("JobUID", job.UID), HaveField("Token", token))),
		"the new shard records the run from the Job, with the lease the key holds")
	g.Expect(h.get(gj).Status.Shard).To(Equal(batchv1alpha1.ShardLabel + "=b"))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("RunAdopted: Adopted Job " + job.Name)))
	g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix("StaleJob:")))
	g.Eventually(func() bool {
		cur := &batchv1.Job{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&job), cur)).To(Succeed())
		return jobbuild.Gated(cur)
	}).Should(BeFalse(), "its gate opens")
	_, renewedByA := shardA.keeper.Get(token)
	g.Expect(renewedByA).To(BeFalse(), "the first shard renews nothing of a run it never recorded")
	g.Consistently(h.jobs).WithTimeout(2*time.Second).Should(ConsistOf(HaveField("UID", job.UID)), "one Job")
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(token))
}

// TestJobFirst_AJobThatFinishedBeforeItsGateOpenedKeepsItsHistory: a recorded
// run's Job failed while it still waited at its start gate (the gate's write
// had not got through). The run ends Failed and its lease is released; the Job
// is the run's history, not a Job waiting for adoption: no later pass deletes
// it as stale, and the retry gets a new Job beside it.
func TestJobFirst_AJobThatFinishedBeforeItsGateOpenedKeepsItsHistory(t *testing.T) {
	h := newHarness(t)
	var holdGates atomic.Bool
	holdGates.Store(true)
	held := func(obj client.Object) bool {
		job, ok := obj.(*batchv1.Job)
		return ok && holdGates.Load() && job.Spec.Suspend != nil && !*job.Spec.Suspend
	}
	h.intercept = &interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if held(obj) {
				return errors.New("injected: the start gate's update does not get through")
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if held(obj) {
				return errors.New("injected: the start gate's patch does not get through")
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}
	h.start()
	ctx := context.Background()
	key := h.ns + ":history"
	gj := h.create(h.guardedJob("history", key))
	h.trigger(gj)
	first := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	h.failAsItIs(&first)

	g := h.g
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultFailed), HaveField("JobName", first.Name), HaveField("Message", ContainSubstring("BackoffLimitExceeded"))))
	g.Expect(jobbuild.Gated(h.live(&first))).To(BeTrue(), "it failed at its start gate")
	g.Eventually(func() int64 { return h.rdb.Exists(ctx, key).Val() }).Should(BeZero(), "the lease is released")
	holdGates.Store(false)

	h.retry(gj)
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(And(HavePrefix("JobCreated: Created Job "),
		Not(ContainSubstring(first.Name)))), "the retry starts")
	g.Eventually(h.jobs).WithTimeout(20*time.Second).Should(HaveLen(2), "the retry's Job beside the failed one")
	h.historyKept(gj, &first)
}

// TestJobFirst_AStaleCacheNeverDeletesAJobThatHasChangedSince: the cache lists
// a run's Job as it was when it was created (suspended at its start gate,
// carrying its run) after the run completed and recorded its end. The Job then
// looks like one waiting for adoption whose lease is gone; the delete names
// the version judged, which the Job has left long ago, and deletes nothing.
func TestJobFirst_AStaleCacheNeverDeletesAJobThatHasChangedSince(t *testing.T) {
	h := newHarness(t)
	var stale atomic.Pointer[batchv1.Job]
	h.intercept = &interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if err := c.List(ctx, list, opts...); err != nil {
			return err
		}
		if jobs, ok := list.(*batchv1.JobList); ok && stale.Load() != nil {
			for i := range jobs.Items {
				if jobs.Items[i].UID == stale.Load().UID {
					jobs.Items[i] = *stale.Load().DeepCopy()
				}
			}
		}
		return nil
	}}
	h.start()
	ctx := context.Background()
	key := h.ns + ":stale"
	gj := h.create(h.guardedJob("stale", key))
	h.trigger(gj)
	first := h.waitJobs(1)[0] // some early version of the Job
	h.waitRecorded(gj)
	h.complete(h.gateOpened(&first))
	g := h.g
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultSucceeded), HaveField("JobName", first.Name)))
	g.Eventually(func() int64 { return h.rdb.Exists(ctx, key).Val() }).Should(BeZero(), "the lease is released")

	// From now on the cache lists the Job as it was created: suspended at its
	// start gate, not finished, at that early version.
	created := h.live(&first)
	created.ResourceVersion = first.ResourceVersion
	created.Spec.Suspend = ptr.To(true)
	created.Annotations[batchv1alpha1.StartGateAnnotation] = batchv1alpha1.StartGateLease
	created.Status = batchv1.JobStatus{}
	g.Expect(jobbuild.Gated(created)).To(BeTrue())
	stale.Store(created)
	h.poke(gj)
	h.historyKept(gj, created)
}

// live returns a Job as the API server has it now.
func (h *harness) live(job *batchv1.Job) *batchv1.Job {
	h.t.Helper()
	cur := &batchv1.Job{}
	h.g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(job), cur)).To(Succeed())
	return cur
}

// historyKept checks that a finished run's Job stays, and that no pass takes it
// for a stale Job.
func (h *harness) historyKept(gj *batchv1alpha1.GuardedJob, job *batchv1.Job) {
	h.t.Helper()
	h.g.Consistently(func() (bool, error) {
		cur := &batchv1.Job{}
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), cur)
		return cur.DeletionTimestamp.IsZero(), err
	}).WithTimeout(3*time.Second).Should(BeTrue(), "the finished Job is kept as the run's history")
	h.g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix("StaleJob:")))
}
