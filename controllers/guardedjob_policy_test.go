package controllers_test

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// Stories for the policies of issue 6: concurrencyPolicy, onBusy Retry, deletion
// (onDelete, --cascade=orphan), suspend and history limits. As elsewhere, the test
// plays the Job controller, the kubelet and (where it matters) the garbage
// collector; envtest runs none of them.

// minutely returns a GuardedJob on the schedule "* * * * *", so that triggers at
// different minutes name different occurrences.
func (h *harness) minutely(name, key string) *batchv1alpha1.GuardedJob {
	gj := h.guardedJob(name, key)
	gj.Spec.Schedule = "* * * * *"
	return gj
}

// occurrence returns the n-th schedule time of a minutely object after its
// creation (n >= 1), which a trigger may name: it is after the creation time.
func (h *harness) occurrence(gj *batchv1alpha1.GuardedJob, n int) time.Time {
	created := h.get(gj).CreationTimestamp.Time
	return created.Truncate(time.Minute).Add(time.Duration(n) * time.Minute)
}

// triggerAt moves the manager's clock to at and sets the run-now trigger to at:
// the run of the occurrence due at at, started now.
func (h *harness) triggerAt(gj *batchv1alpha1.GuardedJob, at time.Time) {
	h.t.Helper()
	h.clock.SetTime(at)
	h.annotate(gj, at.UTC().Format(time.RFC3339))
}

// recordedRun waits until status.active has a run with a Job (its UID recorded)
// whose name is not one of except, and returns that run and its Job.
func (h *harness) recordedRun(gj *batchv1alpha1.GuardedJob, except ...string) (batchv1alpha1.ActiveRun, *batchv1.Job) {
	h.t.Helper()
	var run batchv1alpha1.ActiveRun
	h.g.Eventually(func() bool {
		for _, r := range h.get(gj).Status.Active {
			if r.JobUID != "" && !slices.Contains(except, r.JobName) {
				run = r
				return true
			}
		}
		return false
	}).WithTimeout(20*time.Second).Should(BeTrue(), "a new run with a Job")
	job := &batchv1.Job{}
	h.g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: run.JobName}, job)).To(Succeed())
	return run, job
}

// gone says whether the GuardedJob no longer exists.
func (h *harness) gone(gj *batchv1alpha1.GuardedJob) bool {
	err := k8s.Get(context.Background(), client.ObjectKeyFromObject(gj), &batchv1alpha1.GuardedJob{})
	return apierrors.IsNotFound(err)
}

// orphanAsTheGarbageCollector plays the garbage collector for a GuardedJob deleted
// with --cascade=orphan: it removes the object's owner reference from its Jobs,
// then the orphan finalizer from the object.
func (h *harness) orphanAsTheGarbageCollector(gj *batchv1alpha1.GuardedJob) {
	h.t.Helper()
	ctx := context.Background()
	uid := h.get(gj).UID
	for _, j := range h.jobs() {
		h.g.Eventually(func() error {
			cur := &batchv1.Job{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(&j), cur); err != nil {
				return err
			}
			patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
			cur.OwnerReferences = slices.DeleteFunc(cur.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == uid })
			return k8s.Patch(ctx, cur, patch)
		}).Should(Succeed())
	}
	h.g.Eventually(func() error {
		cur := &batchv1alpha1.GuardedJob{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(gj), cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
		cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == metav1.FinalizerOrphanDependents })
		return k8s.Patch(ctx, cur, patch)
	}).Should(Succeed())
}

// --- concurrencyPolicy -------------------------------------------------------

func TestPolicyForbidSkipsANewOccurrenceWhileARunIsActive(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.create(h.minutely("forbid", h.ns+":forbid"))
	first := h.occurrence(gj, 1)
	h.triggerAt(gj, first.Add(2*time.Second))
	run, job := h.recordedRun(gj)

	second := first.Add(time.Minute)
	h.triggerAt(gj, second.Add(2*time.Second))
	g := h.g
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultSkipped),
		HaveField("ScheduledTime.Time", BeTemporally("==", second)),
		HaveField("Message", And(ContainSubstring("Forbid"), ContainSubstring(job.Name)))))
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(2 * time.Second).Should(ConsistOf(HaveField("UID", job.UID)))
	g.Expect(h.get(gj).Status.Active).To(ConsistOf(HaveField("JobName", run.JobName)), "the active run goes on")
	g.Expect(h.rdb.Get(context.Background(), h.ns+":forbid").Val()).To(Equal(run.Token))
}

func TestPolicyReplaceStopsTheActiveRunAndStartsTheNewOneOnceItsPodsAreGone(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":replace"
	gj := h.minutely("replace", key)
	gj.Spec.ConcurrencyPolicy = batchv1alpha1.ReplaceConcurrent
	h.create(gj)
	first := h.occurrence(gj, 1)
	h.triggerAt(gj, first.Add(2*time.Second))
	old, oldJob := h.recordedRun(gj)
	pod := h.podFor(oldJob)
	g := h.g
	g.Expect(old.Fence).To(Equal(int64(1)))

	second := first.Add(time.Minute)
	h.triggerAt(gj, second.Add(2*time.Second))
	g.Eventually(func() bool { return h.jobDeleted(oldJob) }).WithTimeout(10 * time.Second).Should(BeTrue())
	g.Eventually(func() *corev1.Pod { return h.podDeletion(pod) }).Should(HaveField("DeletionGracePeriodSeconds", HaveValue(Equal(int64(1)))),
		"the replaced run's Pods get their own grace period")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("JobStopped: Stopping " + oldJob.Name + ": replaced by")))
	// While the old Pod terminates, the old run keeps its lease and no new run starts.
	g.Consistently(func() string { return h.rdb.Get(ctx, key).Val() }).WithTimeout(2*time.Second).Should(Equal(old.Token),
		"the lease is kept until the replaced run's Pods are gone")
	g.Expect(h.jobs()).To(HaveLen(1))
	g.Expect(h.get(gj).Status.Active).To(ConsistOf(And(HaveField("JobName", old.JobName), HaveField("Phase", batchv1alpha1.RunPhaseStopping))))

	h.kubeletRemoves(pod)
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("LockReleased: Released lock " + key + " held by " + old.Holder)))
	next, nextJob := h.recordedRun(gj, old.JobName)
	g.Expect(next.ScheduledTime.Time).To(BeTemporally("==", second))
	g.Expect(next.Fence).To(BeNumerically(">", old.Fence))
	g.Expect(envOf(nextJob, "GUARDEDJOB_FENCE")).To(Equal(itoa(next.Fence)))
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(next.Token))
	st := h.get(gj).Status
	g.Expect(st.LastRun).To(And(
		Not(BeNil()),
		HaveField("JobName", old.JobName),
		HaveField("Result", batchv1alpha1.RunResultFailed),
		HaveField("Message", ContainSubstring("replaced by the run for "+second.UTC().Format(time.RFC3339)))))
	g.Expect(st.Active).To(ConsistOf(HaveField("JobName", next.JobName)))
}

func TestPolicyAllowLetsRunsWithPerOccurrenceKeysOverlap(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	gj := h.minutely("allow", h.ns+":allow:{{ .ScheduledTime.Unix }}")
	gj.Spec.ConcurrencyPolicy = batchv1alpha1.AllowConcurrent
	h.create(gj)
	first := h.occurrence(gj, 1)
	h.triggerAt(gj, first.Add(2*time.Second))
	a, jobA := h.recordedRun(gj)
	second := first.Add(time.Minute)
	h.triggerAt(gj, second.Add(2*time.Second))
	b, jobB := h.recordedRun(gj, a.JobName)

	g := h.g
	g.Expect(a.Key).To(Equal(h.ns + ":allow:" + itoa(first.Unix())))
	g.Expect(b.Key).To(Equal(h.ns + ":allow:" + itoa(second.Unix())))
	g.Expect(h.rdb.Get(ctx, a.Key).Val()).To(Equal(a.Token), "each run holds its own lease")
	g.Expect(h.rdb.Get(ctx, b.Key).Val()).To(Equal(b.Token))
	g.Expect(h.jobs()).To(ConsistOf(HaveField("UID", jobA.UID), HaveField("UID", jobB.UID)))
	g.Expect(h.get(gj).Status.Active).To(HaveLen(2))
	for _, e := range h.events(gj) {
		g.Expect(e).NotTo(HavePrefix("FixedKeyWithAllow:"), "the key depends on .ScheduledTime")
	}

	// One ends, the other keeps its lease.
	h.complete(jobA)
	g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).Should(ConsistOf(HaveField("JobName", b.JobName)))
	g.Expect(h.rdb.Exists(ctx, a.Key).Val()).To(BeZero())
	g.Expect(h.rdb.Get(ctx, b.Key).Val()).To(Equal(b.Token))
}

// --- onBusy: Retry -----------------------------------------------------------

// retryingBehindForeignHolder creates a minutely GuardedJob with onBusy Retry
// whose key another cluster holds for 4 s, and makes its first occurrence due:
// its run waits for the key. It returns the object and its key.
func (h *harness) retryingBehindForeignHolder() (*batchv1alpha1.GuardedJob, string) {
	h.t.Helper()
	gj, key := h.behindForeignHolder()
	h.triggerAt(gj, h.occurrence(gj, 1).Add(2*time.Second))
	return gj, key
}

// behindForeignHolder creates a minutely GuardedJob with onBusy Retry whose key
// another cluster's run holds for 4 s.
func (h *harness) behindForeignHolder() (*batchv1alpha1.GuardedJob, string) {
	h.t.Helper()
	key := h.ns + ":retry"
	gj := h.minutely("retry", key)
	gj.Spec.Lock.OnBusy = batchv1alpha1.OnBusyRetry
	h.create(gj)
	foreign := "cluster-b/" + h.ns + "/retry-1-abcdef#ffffffffffffffffffffffffffffffff"
	h.g.Expect(h.rdb.Set(context.Background(), key, foreign, 4*time.Second).Err()).To(Succeed())
	return gj, key
}

func TestPolicyRetryAcquiresOnceTheForeignHolderLetsGo(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	gj, key := h.retryingBehindForeignHolder()

	g := h.g
	g.Eventually(func() *batchv1alpha1.GuardedJobStatus { return &h.get(gj).Status }).Should(And(
		HaveField("Active", ConsistOf(HaveField("Phase", batchv1alpha1.RunPhaseAcquiring))),
		HaveField("Conditions", ContainElement(And(
			HaveField("Type", batchv1alpha1.LockHeldCondition), HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", batchv1alpha1.LockBusyReason), HaveField("Message", ContainSubstring("retrying until"))))),
		HaveField("Lock.State", batchv1alpha1.LockStateBusy),
		HaveField("Lock.Holder", "cluster-b/"+h.ns+"/retry-1-abcdef")))
	g.Expect(h.jobs()).To(BeEmpty())
	g.Expect(h.get(gj).Status.LastRun).To(BeNil(), "no Busy result while retrying")

	// The foreign key expires; a retry (5-10s backoff) takes it.
	run, _ := h.recordedRun(gj)
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(run.Token))
	g.Expect(h.jobs()).To(HaveLen(1))
}

// A manual trigger names an occurrence that may be long past (here the yearly one
// of the harness schedule); it is run now, so Retry gets startingDeadlineSeconds
// counted from the trigger, as a scheduled run does from its schedule time.
func TestPolicyRetryOfAManualTriggerOfAnOlderOccurrenceRetries(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":retryold"
	gj := h.guardedJob("retryold", key)
	gj.Spec.Lock.OnBusy = batchv1alpha1.OnBusyRetry
	h.create(gj)
	foreign := "cluster-b/" + h.ns + "/retryold-1-abcdef#ffffffffffffffffffffffffffffffff"
	h.g.Expect(h.rdb.Set(ctx, key, foreign, 4*time.Second).Err()).To(Succeed())
	h.trigger(gj)

	run, _ := h.recordedRun(gj)
	g := h.g
	g.Expect(h.get(gj).Status.LastRun).To(BeNil(), "the run retried instead of giving up: %+v", h.get(gj).Status.LastRun)
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(run.Token))
}

func TestPolicyRetryGivesUpAtTheStartingDeadline(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":giveup"
	gj := h.minutely("giveup", key)
	gj.Spec.Lock.OnBusy = batchv1alpha1.OnBusyRetry
	// Longer than the 5-10s backoff, so that the first attempt retries.
	gj.Spec.StartingDeadlineSeconds = ptr.To(int64(20))
	h.create(gj)
	foreign := "cluster-b/" + h.ns + "/giveup-1-abcdef#ffffffffffffffffffffffffffffffff"
	h.g.Expect(h.rdb.Set(ctx, key, foreign, time.Hour).Err()).To(Succeed())
	due := h.occurrence(gj, 1)
	h.triggerAt(gj, due)

	g := h.g
	g.Eventually(func() []metav1.Condition { return h.get(gj).Status.Conditions }).Should(ContainElement(And(
		HaveField("Type", batchv1alpha1.LockHeldCondition), HaveField("Reason", batchv1alpha1.LockBusyReason),
		HaveField("Message", ContainSubstring("retrying until")))))
	g.Expect(h.get(gj).Status.Active).To(ConsistOf(HaveField("Phase", batchv1alpha1.RunPhaseAcquiring)))

	// The start deadline passes (the manager reads the injected clock); the next
	// retry gives up.
	h.clock.SetTime(due.Add(21 * time.Second))
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(20 * time.Second).Should(And(
		Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultBusy),
		HaveField("HeldBy", "cluster-b/"+h.ns+"/giveup-1-abcdef"),
		HaveField("Message", ContainSubstring("gave up at the starting deadline"))))
	g.Expect(h.get(gj).Status.Active).To(BeEmpty())
	g.Expect(h.jobs()).To(BeEmpty())
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(foreign), "the foreign lease is untouched")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("LockBusy: Skipped")))
}

// --- deletion ----------------------------------------------------------------

func TestPolicyDeletingWithOnDeleteStopStopsTheRunAndReleasesOnceThePodsAreGone(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":delstop"
	gj := h.guardedJob("delstop", key)
	gj.Spec.OnDelete = batchv1alpha1.OnDeleteStop
	job, pod := h.runningJob(gj)
	token := h.get(gj).Status.Active[0].Token

	g := h.g
	g.Expect(k8s.Delete(ctx, h.get(gj))).To(Succeed())
	g.Eventually(func() bool { return h.jobDeleted(job) }).WithTimeout(10 * time.Second).Should(BeTrue())
	g.Eventually(func() *corev1.Pod { return h.podDeletion(pod) }).Should(HaveField("DeletionGracePeriodSeconds", HaveValue(Equal(int64(1)))))
	// The Pod still terminates: the lease is kept, and so is the GuardedJob.
	g.Consistently(func() string { return h.rdb.Get(ctx, key).Val() }).WithTimeout(2 * time.Second).Should(Equal(token))
	g.Expect(h.gone(gj)).To(BeFalse())
	g.Expect(h.get(gj).Finalizers).To(ContainElement(batchv1alpha1.GuardedJobFinalizer))

	h.kubeletRemoves(pod)
	g.Eventually(func() bool { return h.gone(gj) }).WithTimeout(20 * time.Second).Should(BeTrue())
	g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero(), "released once the Pods are gone")
	g.Expect(h.rdb.Keys(ctx, key+":done:*").Val()).To(BeEmpty(), "a stopped run does not mark its occurrence done")
	cur := &batchv1.Job{}
	g.Eventually(func() []string {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), cur); err != nil {
			return nil
		}
		return cur.Finalizers
	}).ShouldNot(ContainElement(batchv1alpha1.LeaseFinalizer))
}

func TestPolicyDeletingWithOnDeleteWaitLetsTheRunFinish(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":delwait"
	gj := h.guardedJob("delwait", key)
	gj.Spec.OnDelete = batchv1alpha1.OnDeleteWait
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 9 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	job, pod := h.runningJob(gj)
	token := h.get(gj).Status.Active[0].Token

	g := h.g
	g.Expect(k8s.Delete(ctx, h.get(gj))).To(Succeed())
	// The run goes on, renewed (a 8s lease stays above 5s for 4s).
	g.Consistently(func() time.Duration { return h.rdb.PTTL(ctx, key).Val() }).WithTimeout(4 * time.Second).Should(BeNumerically(">", 5*time.Second))
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(token))
	g.Expect(h.jobDeleted(job)).To(BeFalse())
	g.Expect(h.podDeletion(pod)).To(BeNil())
	g.Expect(h.get(gj).Status.Active).To(ConsistOf(HaveField("Phase", batchv1alpha1.RunPhaseRunning)))

	h.complete(job)
	h.kubeletRemoves(pod)
	g.Eventually(func() bool { return h.gone(gj) }).WithTimeout(20 * time.Second).Should(BeTrue())
	g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero())
	marker := key + ":done:" + itoa(yearStart().Unix())
	g.Expect(h.rdb.Get(ctx, marker).Val()).To(Equal(token), "the run succeeded: its occurrence is done")
}

// kubectl delete --cascade=orphan asks to keep the Jobs: even with onDelete Stop
// the run is waited for, as with Wait. (envtest has no garbage collector: the orphan
// finalizer stays until the test plays the collector at the end.)
func TestPolicyDeletingWithCascadeOrphanKeepsTheJob(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":orphaned"
	gj := h.guardedJob("orphaned", key)
	gj.Spec.OnDelete = batchv1alpha1.OnDeleteStop
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 9 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	job, pod := h.runningJob(gj)
	token := h.get(gj).Status.Active[0].Token

	g := h.g
	g.Expect(k8s.Delete(ctx, h.get(gj), client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
	g.Consistently(func() bool { return h.jobDeleted(job) }).WithTimeout(4*time.Second).Should(BeFalse(), "an orphaning delete keeps the Job")
	g.Expect(h.podDeletion(pod)).To(BeNil())
	g.Expect(h.rdb.PTTL(ctx, key).Val()).To(BeNumerically(">", 5*time.Second), "the lease is renewed")
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(token))

	h.complete(job)
	h.kubeletRemoves(pod)
	g.Eventually(func() []string { return h.get(gj).Finalizers }).WithTimeout(20 * time.Second).ShouldNot(ContainElement(batchv1alpha1.GuardedJobFinalizer))
	g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero())
	g.Expect(h.rdb.Get(ctx, key+":done:"+itoa(yearStart().Unix())).Val()).To(Equal(token))
	for _, e := range h.events(gj) {
		g.Expect(e).NotTo(HavePrefix("JobStopped:"))
	}

	h.orphanAsTheGarbageCollector(gj)
	g.Eventually(func() bool { return h.gone(gj) }).Should(BeTrue())
	g.Expect(h.jobDeleted(job)).To(BeFalse(), "the Job remains")
}

// In a cluster the garbage collector orphans the Jobs and removes the orphan
// finalizer within moments of the delete, possibly before the manager looks (it
// may be restarting). The Job, no longer ours, must still not be stopped, and
// its run must still end as it really ends.
func TestPolicyCascadeOrphanHandledByTheCollectorBeforeTheManagerLooks(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":orphangc"
	gj := h.guardedJob("orphangc", key)
	gj.Spec.OnDelete = batchv1alpha1.OnDeleteStop
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 10 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	job, pod := h.runningJob(gj)
	token := h.get(gj).Status.Active[0].Token

	h.stop()
	g := h.g
	g.Expect(k8s.Delete(ctx, h.get(gj), client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
	h.orphanAsTheGarbageCollector(gj)
	g.Expect(h.get(gj).Finalizers).To(ConsistOf(batchv1alpha1.GuardedJobFinalizer))
	h.start()

	g.Consistently(func() bool { return h.jobDeleted(job) }).WithTimeout(4*time.Second).Should(BeFalse(), "an orphaned Job is not stopped")
	g.Expect(h.podDeletion(pod)).To(BeNil())
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(token), "the lease is renewed")
	for _, e := range h.events(gj) {
		g.Expect(e).NotTo(HavePrefix("JobStopped:"))
	}

	start := time.Now()
	h.complete(job)
	h.kubeletRemoves(pod)
	g.Eventually(func() bool { return h.gone(gj) }).WithTimeout(20 * time.Second).Should(BeTrue())
	t.Logf("the GuardedJob went %s after the Job completed", time.Since(start).Round(100*time.Millisecond))
	g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero())
	g.Expect(h.rdb.Get(ctx, key+":done:"+itoa(yearStart().Unix())).Val()).To(Equal(token), "the run succeeded: its occurrence is done")
	g.Expect(h.jobDeleted(job)).To(BeFalse())
}

// --- suspend -----------------------------------------------------------------

// A suspended GuardedJob schedules nothing, but an explicit run-now trigger still
// runs: the trigger is a deliberate act of an operator and wins over suspend (as
// `kubectl create job --from=cronjob/...` does for a suspended CronJob).
func TestPolicySuspendSchedulesNothingButAManualTriggerStillRuns(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.minutely("suspended", h.ns+":suspended")
	gj.Spec.Suspend = ptr.To(true)
	h.create(gj)
	due := h.occurrence(gj, 1)
	// The next minute has come; touch the object so that the manager looks now.
	h.clock.SetTime(due.Add(2 * time.Second))
	h.annotate(gj, "")

	g := h.g
	g.Eventually(func() *metav1.Condition { return findCond(h.get(gj).Status.Conditions, batchv1alpha1.ReadyCondition) }).Should(And(
		Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", batchv1alpha1.SuspendedReason)))
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(2 * time.Second).Should(BeEmpty())
	st := h.get(gj).Status
	g.Expect(st.NextScheduleTime).To(BeNil())
	g.Expect(st.Active).To(BeEmpty())

	h.annotate(gj, due.Add(2*time.Second).UTC().Format(time.RFC3339))
	job := h.waitJobs(1)[0]
	g.Expect(job.Annotations).To(HaveKeyWithValue(batchv1alpha1.ScheduledTimeAnnotation, due.UTC().Format(time.RFC3339)))
	g.Expect(h.get(gj).Status.NextScheduleTime).To(BeNil(), "still suspended")
}

// --- history limits ----------------------------------------------------------

func TestPolicySuccessfulJobsHistoryLimitDeletesTheOlderSucceededJob(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	gj := h.minutely("history", h.ns+":history")
	gj.Spec.SuccessfulJobsHistoryLimit = ptr.To(int32(1))
	h.create(gj)
	first := h.occurrence(gj, 1)
	h.triggerAt(gj, first.Add(2*time.Second))
	a, jobA := h.recordedRun(gj)
	h.complete(jobA)
	g := h.g
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		Not(BeNil()), HaveField("JobName", a.JobName), HaveField("Result", batchv1alpha1.RunResultSucceeded)))
	g.Expect(h.jobDeleted(jobA)).To(BeFalse(), "one succeeded Job is kept")

	h.triggerAt(gj, first.Add(time.Minute+2*time.Second))
	b, jobB := h.recordedRun(gj, a.JobName)
	h.complete(jobB)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		Not(BeNil()), HaveField("JobName", b.JobName), HaveField("Result", batchv1alpha1.RunResultSucceeded)))
	// envtest has no garbage collector: a deleted Job stays, with a deletionTimestamp.
	g.Eventually(func() *metav1.Time {
		cur := &batchv1.Job{}
		_ = k8s.Get(ctx, client.ObjectKeyFromObject(jobA), cur)
		return cur.DeletionTimestamp
	}).ShouldNot(BeNil(), "the older succeeded Job goes")
	g.Consistently(func() bool { return h.jobDeleted(jobB) }).WithTimeout(2*time.Second).Should(BeFalse(), "the newest succeeded Job stays")
}
