package controllers_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
)

func TestAManualTriggerCreatesExactlyOneJobCarryingTheFence(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":settlement"
	gj := h.create(h.guardedJob("settlement", key))
	h.trigger(gj)

	job := h.waitJobs(1)[0]
	g := h.g
	g.Expect(envOf(&job, "GUARDEDJOB_FENCE")).To(Equal("1"))
	g.Expect(job.Annotations).To(HaveKeyWithValue(batchv1alpha1.FenceAnnotation, "1"))
	g.Expect(job.Spec.Template.Annotations).To(HaveKeyWithValue(batchv1alpha1.FenceAnnotation, "1"))
	g.Expect(job.Finalizers).To(ContainElement(batchv1alpha1.LeaseFinalizer))
	g.Expect(metav1.IsControlledBy(&job, h.get(gj))).To(BeTrue())
	g.Expect(*job.Spec.PodReplacementPolicy).To(Equal(batchv1.Failed))
	g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(24 * 3600)))
	g.Expect(*job.Spec.Template.Spec.ActiveDeadlineSeconds).To(Equal(int64(24 * 3600)))
	g.Expect(strings.HasPrefix(job.Name, "settlement-")).To(BeTrue())

	// What `kubectl describe` shows: the holder and the fence.
	g.Eventually(func() *batchv1alpha1.GuardedJobStatus { return &h.get(gj).Status }).Should(And(
		HaveField("LastFence", int64(1)),
		HaveField("Lock.State", batchv1alpha1.LockStateHeld),
		HaveField("Lock.Holder", "cluster-a/"+h.ns+"/"+job.Name),
		HaveField("Lock.Fence", int64(1)),
		HaveField("Active", ConsistOf(And(
			HaveField("JobName", job.Name), HaveField("JobUID", job.UID),
			HaveField("Phase", batchv1alpha1.RunPhaseRunning), HaveField("Fence", int64(1)))))))
	st := h.get(gj).Status
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(st.Active[0].Token))
	g.Expect(leasetoken.HolderOf(st.Active[0].Token)).To(Equal("cluster-a/" + h.ns + "/" + job.Name))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElements(
		HavePrefix("LockAcquired: Acquired lock "+key), HavePrefix("JobCreated: Created Job "+job.Name+" (fence 1)")))
	for _, e := range h.events(gj) {
		g.Expect(e).NotTo(ContainSubstring(st.Active[0].Token), "the token never appears in events")
	}
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(2 * time.Second).Should(HaveLen(1))
}

func TestASucceededRunMarksTheOccurrenceDoneAndReleasesTheLease(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":report"
	gj := h.create(h.guardedJob("report", key))
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	token := h.get(gj).Status.Active[0].Token

	h.complete(&job)

	g := h.g
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultSucceeded), HaveField("JobName", job.Name), HaveField("Fence", int64(1))))
	st := h.get(gj).Status
	g.Expect(st.Active).To(BeEmpty())
	g.Expect(st.LastSuccessfulTime).NotTo(BeNil())
	g.Expect(st.Lock.State).To(Equal(batchv1alpha1.LockStateFree))
	g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero(), "the lease is released")
	marker := key + ":done:" + itoa(yearStart().Unix())
	g.Expect(h.rdb.Get(ctx, marker).Val()).To(Equal(token), "the done-marker names the run that succeeded")
	g.Eventually(func() ([]string, error) {
		j := &batchv1.Job{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(&job), j)
		return j.Finalizers, err
	}).ShouldNot(ContainElement(batchv1alpha1.LeaseFinalizer))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElements(
		HavePrefix("OccurrenceDone: Marked occurrence "+marker), HavePrefix("LockReleased: Released lock "+key)))

	// A second trigger of the same occurrence is skipped: it already succeeded.
	h.clock.Step(time.Second)
	h.annotate(gj, h.clock.Now().UTC().Format(time.RFC3339))
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		HaveField("Result", batchv1alpha1.RunResultSkipped),
		HaveField("Message", ContainSubstring("already done by cluster-a/"+h.ns+"/"+job.Name))))
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(2 * time.Second).Should(HaveLen(1))
}

// failedRun triggers a run of gj, fails its Job once status records the run,
// and returns the Job once the run is recorded as Failed.
func (h *harness) failedRun(gj *batchv1alpha1.GuardedJob) batchv1.Job {
	h.t.Helper()
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	h.fail(&job)
	h.g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultFailed), HaveField("JobName", job.Name), HaveField("Message", ContainSubstring("BackoffLimitExceeded"))))
	return job
}

// retry asks for a run of the same occurrence again, a second later.
func (h *harness) retry(gj *batchv1alpha1.GuardedJob) {
	h.t.Helper()
	h.clock.Step(time.Second)
	h.annotate(gj, h.clock.Now().UTC().Format(time.RFC3339))
}

func TestAFailedRunReleasesAndARetryRunsWithAHigherFence(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":payout"
	gj := h.create(h.guardedJob("payout", key))
	first := h.failedRun(gj)

	g := h.g
	g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero())
	g.Expect(h.rdb.Keys(ctx, key+":done:*").Val()).To(BeEmpty(), "a failed run does not mark the occurrence done")

	h.retry(gj)
	jobs := h.waitJobs(2)
	var retry batchv1.Job
	for _, j := range jobs {
		if j.Name != first.Name {
			retry = j
		}
	}
	g.Expect(envOf(&retry, "GUARDEDJOB_FENCE")).To(Equal("2"))
	g.Eventually(func() int64 { return h.get(gj).Status.LastFence }).Should(Equal(int64(2)))
}

func TestALockHeldByAnotherClusterIsRecordedAsBusyNamingTheHolder(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":shared"
	other := "cluster-b/" + h.ns + "/shared-29123456-5f3a9c#00112233445566778899aabbccddeeff"
	h.g.Expect(h.rdb.Set(ctx, key, other, time.Minute).Err()).To(Succeed())
	gj := h.create(h.guardedJob("shared", key))
	h.trigger(gj)

	g := h.g
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultBusy),
		HaveField("HeldBy", "cluster-b/"+h.ns+"/shared-29123456-5f3a9c"),
		HaveField("Message", MatchRegexp(`lock \S+ is held by cluster-b/\S+, expires in [0-9hms]+`))))
	st := h.get(gj).Status
	g.Expect(st.Active).To(BeEmpty())
	g.Expect(st.Lock.State).To(Equal(batchv1alpha1.LockStateBusy))
	g.Expect(h.jobs()).To(BeEmpty())
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(other), "the other holder's lease is untouched")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("LockBusy:")))
	for _, e := range h.events(gj) {
		g.Expect(e).NotTo(ContainSubstring("00112233445566778899aabbccddeeff"), "a holder's random part never appears")
	}
}

func TestAStaleTriggerIsSkippedAndAGarbledOneIsRejected(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.create(h.guardedJob("stale", h.ns+":stale"))

	h.annotate(gj, "2020-01-01T00:00:00Z")
	g := h.g
	g.Eventually(func() *batchv1alpha1.GuardedJobStatus { return &h.get(gj).Status }).Should(And(
		HaveField("LastRunNow", "2020-01-01T00:00:00Z"),
		HaveField("LastRun.Result", batchv1alpha1.RunResultSkipped)))
	h.annotate(gj, "yesterday")
	g.Eventually(func() string { return h.get(gj).Status.LastRunNow }).Should(Equal("yesterday"))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("InvalidTrigger:")))
	g.Expect(h.jobs()).To(BeEmpty())
}

func TestAScheduledRunStartsWhenItIsDue(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.guardedJob("minutely", h.ns+":minutely")
	gj.Spec.Schedule = "* * * * *"
	h.create(gj)
	created := h.get(gj).CreationTimestamp.Time
	// The next minute has come: touch the object so the manager looks now.
	due := created.Truncate(time.Minute).Add(time.Minute)
	h.clock.SetTime(due.Add(2 * time.Second))
	h.annotate(gj, "")

	job := h.waitJobs(1)[0]
	g := h.g
	g.Expect(job.Annotations).To(HaveKeyWithValue(batchv1alpha1.ScheduledTimeAnnotation, due.UTC().Format(time.RFC3339)))
	g.Eventually(func() *batchv1alpha1.GuardedJobStatus { return &h.get(gj).Status }).Should(And(
		HaveField("LastScheduleTime.Time", BeTemporally("==", due)),
		HaveField("NextScheduleTime.Time", BeTemporally("==", due.Add(time.Minute)))))
}

func TestARestartedManagerResumesRenewingTheSameJob(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":restart"
	gj := h.guardedJob("restart", key)
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 10 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: 2 * time.Second}
	h.create(gj)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)

	h.stop()
	// Nobody renews now; the key runs down.
	h.g.Eventually(func() time.Duration { return h.rdb.PTTL(ctx, key).Val() }).WithTimeout(5 * time.Second).Should(BeNumerically("<", 8*time.Second))
	h.start()
	g := h.g
	g.Eventually(func() time.Duration { return h.rdb.PTTL(ctx, key).Val() }).WithTimeout(10*time.Second).Should(BeNumerically(">", 9*time.Second),
		"the new manager renews the lease it found in status")
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(3 * time.Second).Should(ConsistOf(HaveField("UID", job.UID)))
	g.Expect(h.get(gj).Status.Active).To(ConsistOf(HaveField("JobName", job.Name)), "lastRun: %+v", h.get(gj).Status.LastRun)
}

func TestACrashBetweenAcquiringAndCreatingTheJobLeavesExactlyOneJob(t *testing.T) {
	h := newHarness(t)
	jobCreates := errors.New("injected: the manager dies before the Job is created")
	h.intercept = &interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*batchv1.Job); ok {
			return jobCreates
		}
		return c.Create(ctx, obj, opts...)
	}}
	h.start()
	gj := h.create(h.guardedJob("crash1", h.ns+":crash1"))
	h.trigger(gj)
	h.g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).Should(ConsistOf(
		And(HaveField("Phase", batchv1alpha1.RunPhaseRunning), HaveField("Fence", int64(1)))))
	h.stop()

	h.intercept = nil
	h.start()
	jobs := h.waitJobs(1)
	g := h.g
	g.Expect(envOf(&jobs[0], "GUARDEDJOB_FENCE")).To(Equal("1"), "the Job carries the fence recorded before the crash")
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(3 * time.Second).Should(HaveLen(1))
}

func TestACrashBetweenCreatingTheJobAndRecordingItLeavesExactlyOneJob(t *testing.T) {
	h := newHarness(t)
	h.intercept = &interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
		if gj, ok := obj.(*batchv1alpha1.GuardedJob); ok && len(gj.Status.Active) > 0 && gj.Status.Active[0].JobUID != "" {
			return errors.New("injected: the manager dies before it records the Job")
		}
		return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
	}}
	h.start()
	// A run whose Job is created after status records the run (the status-first
	// order): here its Job asks to be suspended, for a queue to start it.
	crash := h.guardedJob("crash2", h.ns+":crash2")
	crash.Spec.JobTemplate.Spec.Suspend = ptr.To(true)
	gj := h.create(crash)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.g.Consistently(func() string {
		a := h.get(gj).Status.Active
		if len(a) == 0 {
			return "none"
		}
		return string(a[0].JobUID)
	}).WithTimeout(time.Second).Should(BeEmpty())
	h.stop()

	h.intercept = nil
	h.start()
	g := h.g
	g.Eventually(func() string { return string(h.get(gj).Status.Active[0].JobUID) }).Should(Equal(string(job.UID)), "the Job is adopted")
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(3 * time.Second).Should(ConsistOf(HaveField("UID", job.UID)))
}

// yearStart is the occurrence the test schedule "0 0 1 1 *" maps triggers to.
func yearStart() time.Time {
	return time.Date(time.Now().UTC().Year(), 1, 1, 0, 0, 0, 0, time.UTC)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestAJobNoRunClaimsIsStoppedWithAWarning(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	gj := h.create(h.guardedJob("orphan", h.ns+":orphan"))
	h.g.Eventually(func() []string { return h.get(gj).Finalizers }).Should(ContainElement(batchv1alpha1.GuardedJobFinalizer))
	owner := h.get(gj)

	// A Job of this GuardedJob that status does not know, as after a restore.
	stray := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: "orphan-29000000-abcdef", Namespace: h.ns,
			Labels:          map[string]string{batchv1alpha1.GuardedJobLabel: "orphan"},
			Finalizers:      []string{batchv1alpha1.LeaseFinalizer},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, batchv1alpha1.GroupVersion.WithKind("GuardedJob"))},
		},
		Spec: *owner.Spec.JobTemplate.Spec.DeepCopy(),
	}
	h.g.Expect(k8s.Create(ctx, stray)).To(Succeed())
	h.annotate(gj, "") // a pass of the GuardedJob notices it

	g := h.g
	g.Eventually(func() *metav1.Time {
		j := &batchv1.Job{}
		_ = k8s.Get(ctx, client.ObjectKeyFromObject(stray), j)
		return j.DeletionTimestamp
	}).ShouldNot(BeNil())
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("StaleJob: Stopping Job orphan-29000000-abcdef")))
	// Its Pods are gone (envtest has no kubelet), so the lease finalizer goes too.
	g.Eventually(func() ([]string, error) {
		j := &batchv1.Job{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(stray), j)
		return j.Finalizers, err
	}).ShouldNot(ContainElement(batchv1alpha1.LeaseFinalizer))
}

func TestRenewalsWriteNothingToTheAPIServer(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":quiet"
	gj := h.guardedJob("quiet", key)
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 9 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	h.create(gj)
	h.trigger(gj)
	h.waitJobs(1)
	h.waitRecorded(gj)
	h.g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("JobCreated:")))
	// The passes the run's start set off (its gate, its Job's status) are over
	// once the gate is open and the object and its events stay the same for a
	// second.
	h.gateOpened(&h.waitJobs(1)[0])
	var rv string
	var events int
	h.g.Eventually(func(g Gomega) {
		rv, events = h.get(gj).ResourceVersion, len(h.events(gj))
		g.Consistently(func() []any { return []any{h.get(gj).ResourceVersion, len(h.events(gj))} }).
			WithTimeout(time.Second).Should(Equal([]any{rv, events}))
	}).WithTimeout(20 * time.Second).Should(Succeed())
	renewed := h.keeper.Stats().RenewalsOK
	// Several renewals happen in this window (PTTL stays near the full TTL)...
	h.g.Consistently(func() time.Duration { return h.rdb.PTTL(ctx, key).Val() }).WithTimeout(4 * time.Second).Should(BeNumerically(">", 5*time.Second))
	h.g.Expect(h.keeper.Stats().RenewalsOK-renewed).To(BeNumerically(">=", 3), "renewals went on meanwhile")
	// ...and none of them wrote the object or an event.
	h.g.Expect(h.get(gj).ResourceVersion).To(Equal(rv))
	h.g.Expect(h.events(gj)).To(HaveLen(events))
}

func TestStrictFencesStayAboveEveryEarlierFenceAfterRedisIsFlushed(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	gj := h.guardedJob("strict", h.ns+":strict")
	gj.Spec.Fencing = &batchv1alpha1.FencingSpec{Policy: batchv1alpha1.FencingStrict}
	h.create(gj)
	h.trigger(gj)
	first := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	firstFence := h.get(gj).Status.LastFence
	h.g.Expect(envOf(&first, "GUARDEDJOB_FENCE")).To(Equal(itoa(firstFence)))
	h.fail(&first)
	h.g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).ShouldNot(BeNil())

	// Redis restarts without its data: the fence counter is gone.
	h.g.Expect(h.rdb.FlushAll(ctx).Err()).To(Succeed())
	h.clock.Step(time.Second)
	h.annotate(gj, h.clock.Now().UTC().Format(time.RFC3339))
	jobs := h.waitJobs(2)
	for _, j := range jobs {
		if j.Name != first.Name {
			fence, err := strconv.ParseInt(envOf(&j, "GUARDEDJOB_FENCE"), 10, 64)
			h.g.Expect(err).NotTo(HaveOccurred())
			h.g.Expect(fence).To(BeNumerically(">", firstFence))
		}
	}
}
