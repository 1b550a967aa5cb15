package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// Stories for what schedule users ask for beyond CronJob (issue 32): a pause
// with a note that ends by itself, a pause after failures in a row, runs that
// wait for the one before (BufferOne, BufferAll), and parameters for a manual
// run. The test plays the Job controller, as elsewhere; backfills are in
// backfill_story_test.go.

// setSpec changes gj's spec with one patch.
func (h *harness) setSpec(gj *batchv1alpha1.GuardedJob, change func(*batchv1alpha1.GuardedJobSpec)) {
	h.t.Helper()
	h.g.Eventually(func() error {
		cur := &batchv1alpha1.GuardedJob{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(gj), cur); err != nil {
			return err
		}
		patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
		change(&cur.Spec)
		return k8s.Patch(context.Background(), cur, patch)
	}).Should(Succeed())
}

// condition returns gj's condition of type typ, or nil.
func (h *harness) condition(gj *batchv1alpha1.GuardedJob, typ string) *metav1.Condition {
	return findCond(h.get(gj).Status.Conditions, typ)
}

// jobFor returns the Job of gj's run for the occurrence at, once it exists.
func (h *harness) jobFor(gj *batchv1alpha1.GuardedJob, at time.Time) *batchv1.Job {
	h.t.Helper()
	return h.jobOf(gj, at, func(batchv1.Job) bool { return true }, "a Job")
}

// jobOf waits for a Job of gj's occurrence at that accept takes.
func (h *harness) jobOf(gj *batchv1alpha1.GuardedJob, at time.Time, accept func(batchv1.Job) bool, what string) *batchv1.Job {
	h.t.Helper()
	var found *batchv1.Job
	h.g.Eventually(func() *batchv1.Job {
		for _, j := range h.jobs() {
			if j.Labels[batchv1alpha1.GuardedJobLabel] == gj.Name && j.Annotations[batchv1alpha1.ScheduledTimeAnnotation] == at.UTC().Format(time.RFC3339) && accept(j) {
				found = &j
				return found
			}
		}
		return nil
	}).WithTimeout(20*time.Second).ShouldNot(BeNil(), "%s for %s", what, at.UTC().Format(time.RFC3339))
	return found
}

func TestSuspendNote_APauseWithANoteIsShownAndEndsByItselfAtUntilWithoutTouchingSpec(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.minutely("paused", h.ns+":paused")
	h.clock.SetTime(time.Now())
	until := metav1.NewTime(h.clock.Now().Add(3 * time.Minute).Truncate(time.Second))
	gj.Spec.Suspend = ptr.To(true)
	gj.Spec.SuspendNote = &batchv1alpha1.SuspendNote{By: "alice", Reason: "database migration", Until: &until}
	h.create(gj)
	g := h.g

	want := "suspended: no new runs are scheduled (by alice, until " + until.UTC().Format(time.RFC3339) + "): database migration"
	g.Eventually(func() *metav1.Condition { return h.condition(gj, batchv1alpha1.SuspendedCondition) }).Should(And(Not(BeNil()),
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", batchv1alpha1.SuspendRequestedReason), HaveField("Message", want)))
	g.Expect(h.condition(gj, batchv1alpha1.ReadyCondition)).To(And(HaveField("Reason", batchv1alpha1.SuspendedReason), HaveField("Message", want)))
	g.Expect(h.kstatusOf(h.get(gj))).To(BeEquivalentTo("Current"), "a suspended GuardedJob is Current, as before")
	g.Expect(h.get(gj).Status.Suspended).To(BeTrue(), "the SUSPEND column")

	// An occurrence due while suspended does not run.
	h.clock.SetTime(h.occurrence(gj, 1).Add(2 * time.Second))
	h.poke(gj)
	g.Consistently(h.jobs).WithTimeout(2 * time.Second).Should(BeEmpty())

	// At until runs are scheduled again. The spec is Git's: it still says
	// suspend: true with its note, the generation never moves, and status says
	// the manifest should be changed, with an event; the occurrence due then runs.
	generation := h.get(gj).Generation
	h.clock.SetTime(until.Add(time.Second))
	h.poke(gj)
	g.Eventually(func() *metav1.Condition { return h.condition(gj, batchv1alpha1.SuspendedCondition) }).Should(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", batchv1alpha1.SuspendExpiredReason),
		HaveField("Message", ContainSubstring("spec.suspendNote.until "+until.UTC().Format(time.RFC3339)+" passed (spec.suspend is still true: set it to false in the manifest) (by alice"))))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(
		"SuspendExpired: Runs are scheduled again: spec.suspendNote.until " + until.UTC().Format(time.RFC3339) + " passed (spec.suspend stays true until the manifest sets it to false)"))
	h.jobFor(gj, until.Add(time.Second).Truncate(time.Minute))
	g.Expect(h.condition(gj, batchv1alpha1.ReadyCondition)).To(HaveField("Reason", batchv1alpha1.ScheduledReason))
	after := h.get(gj)
	g.Expect(after.Spec.Suspend).To(Equal(ptr.To(true)))
	g.Expect(after.Spec.SuspendNote).To(Equal(gj.Spec.SuspendNote))
	g.Expect(after.Generation).To(Equal(generation), "the manager never writes spec")
	g.Expect(after.Status.Suspended).To(BeFalse())
}

func TestFailurePolicy_AGuardedJobPausesItselfInStatusAfterFailuresInARow(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	key := h.ns + ":flaky"
	gj := h.guardedJob("flaky", key)
	gj.Spec.FailurePolicy = &batchv1alpha1.FailurePolicy{SuspendAfter: 2}
	h.create(gj)
	g := h.g
	runOnce := func(end func(*batchv1.Job)) {
		h.t.Helper()
		h.clock.Step(time.Second)
		before := len(h.jobs())
		h.annotate(gj, h.clock.Now().UTC().Format(time.RFC3339))
		jobs := h.waitJobs(before + 1)
		var job batchv1.Job
		for _, j := range jobs {
			if j.Status.CompletionTime == nil && len(j.Status.Conditions) == 0 {
				job = j
			}
		}
		h.waitRecorded(gj)
		end(&job)
		g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).Should(BeEmpty())
	}

	h.trigger(gj)
	first := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	h.fail(&first)
	g.Eventually(func() int32 { return h.get(gj).Status.ConsecutiveFailures }).Should(Equal(int32(1)))

	// A success starts the count again.
	runOnce(h.complete)
	g.Eventually(func() int32 { return h.get(gj).Status.ConsecutiveFailures }).Should(BeZero())
	g.Expect(h.get(gj).Status.Pause).To(BeNil())

	// Two failures in a row pause it (the occurrence's done-marker goes, so
	// that it runs again), in status: the spec is never written.
	generation := h.get(gj).Generation
	g.Expect(h.rdb.Del(ctx, key+":done:"+itoa(yearStart().Unix())).Err()).To(Succeed())
	runOnce(h.fail)
	g.Expect(h.get(gj).Status.Pause).To(BeNil(), "one failure is not yet two in a row")
	runOnce(h.fail)
	g.Eventually(func() *batchv1alpha1.Pause { return h.get(gj).Status.Pause }).Should(And(Not(BeNil()),
		HaveField("By", batchv1alpha1.FailurePolicySuspender),
		HaveField("Reason", And(ContainSubstring("2 runs in a row failed (the Job failed, MaxHoldExceeded; spec.failurePolicy.suspendAfter 2)"), ContainSubstring("BackoffLimitExceeded")))))
	paused := h.get(gj)
	g.Expect(paused.Spec.Suspend).To(Equal(ptr.To(false)), "the schema's default, as created")
	g.Expect(paused.Spec.SuspendNote).To(BeNil())
	g.Expect(paused.Generation).To(Equal(generation), "the manager never writes spec")
	g.Expect(paused.Status.Suspended).To(BeTrue())
	for _, typ := range []string{batchv1alpha1.SuspendedCondition, batchv1alpha1.PausedCondition} {
		g.Expect(h.condition(gj, typ)).To(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", batchv1alpha1.TooManyFailuresReason)), typ)
	}
	g.Expect(h.get(gj).Status.ConsecutiveFailures).To(BeZero(), "pausing starts the count again")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(And(
		HavePrefix("SuspendedAfterFailures: Suspended: 2 runs in a row"), ContainSubstring("kubectl guardedjob resume flaky"))))
	g.Expect(h.kstatusOf(h.get(gj))).To(BeEquivalentTo("Current"))

	// While paused nothing is scheduled, whatever the spec says (an apply of
	// the manifest with suspend: false changes nothing).
	h.setSpec(gj, func(s *batchv1alpha1.GuardedJobSpec) { s.Suspend = ptr.To(false) })
	g.Eventually(func() int64 { return h.get(gj).Status.ObservedGeneration }).Should(Equal(h.get(gj).Generation))
	g.Expect(h.get(gj).Status).To(And(HaveField("NextScheduleTime", BeNil()), HaveField("Suspended", BeTrue()), HaveField("Pause", Not(BeNil()))))

	// A resume request ends the pause.
	h.request(gj, map[string]string{batchv1alpha1.ResumeAnnotation: "resume-1"})
	g.Eventually(func() *metav1.Condition { return h.condition(gj, batchv1alpha1.PausedCondition) }).Should(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", batchv1alpha1.ResumedReason)))
	g.Expect(h.condition(gj, batchv1alpha1.SuspendedCondition)).To(HaveField("Status", metav1.ConditionFalse))
	g.Expect(h.get(gj).Status).To(And(HaveField("Pause", BeNil()), HaveField("LastResumeRequest", "resume-1"), HaveField("Suspended", BeFalse())))
	runOnce(h.fail)
	g.Expect(h.get(gj).Status.Pause).To(BeNil(), "after a resume the count starts from zero")
	g.Expect(h.get(gj).Status.ConsecutiveFailures).To(Equal(int32(1)))
}

func TestBufferOne_ARunDueWhileAnotherRunsStartsRightAfterItAndKeepsItsScheduledTime(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.minutely("buffered", h.ns+":buffered")
	gj.Spec.ConcurrencyPolicy = batchv1alpha1.BufferOneConcurrent
	h.create(gj)
	g := h.g
	m1, m2, m3 := h.occurrence(gj, 1), h.occurrence(gj, 2), h.occurrence(gj, 3)

	h.clock.SetTime(m1.Add(2 * time.Second))
	h.poke(gj)
	first := h.jobFor(gj, m1)
	h.waitRecorded(gj)

	// Due while the first runs: it waits, with its own scheduled time.
	h.clock.SetTime(m2.Add(2 * time.Second))
	h.poke(gj)
	g.Eventually(func() []batchv1alpha1.BufferedRun { return h.get(gj).Status.Buffered }).Should(ConsistOf(
		HaveField("ScheduledTime.Time", BeTemporally("==", m2))))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(
		"RunBuffered: The run for " + m2.UTC().Format(time.RFC3339) + " waits for " + first.Name + " to end (concurrencyPolicy BufferOne, 1 waiting)"))

	// A further one is skipped, as with Forbid.
	h.clock.SetTime(m3.Add(2 * time.Second))
	h.poke(gj)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultSkipped), HaveField("ScheduledTime.Time", BeTemporally("==", m3)),
		HaveField("Message", "concurrencyPolicy BufferOne and 1 run(s) already wait for "+first.Name)))

	// The waiting run survives a restart of the manager (it is in status) ...
	h.stop()
	h.start()
	g.Consistently(func() []batchv1alpha1.BufferedRun { return h.get(gj).Status.Buffered }).WithTimeout(time.Second).Should(HaveLen(1))
	g.Expect(h.jobs()).To(HaveLen(1))

	// ... and starts as soon as the first run ends.
	h.complete(first)
	second := h.jobFor(gj, m2)
	g.Eventually(func() []batchv1alpha1.BufferedRun { return h.get(gj).Status.Buffered }).Should(BeEmpty())
	g.Expect(second.Name).NotTo(Equal(first.Name))
	g.Consistently(h.jobs).WithTimeout(2 * time.Second).Should(HaveLen(2))
}

func TestBufferAll_RunsDueWhileAnotherRunsStartOneAfterTheOtherUpToTheLimit(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.minutely("queue", h.ns+":queue")
	gj.Spec.ConcurrencyPolicy = batchv1alpha1.BufferAllConcurrent
	gj.Spec.BufferLimit = ptr.To(int32(2))
	h.create(gj)
	g := h.g
	m := []time.Time{h.occurrence(gj, 1), h.occurrence(gj, 2), h.occurrence(gj, 3), h.occurrence(gj, 4)}

	h.clock.SetTime(m[0].Add(2 * time.Second))
	h.poke(gj)
	first := h.jobFor(gj, m[0])
	h.waitRecorded(gj)
	for _, at := range m[1:] {
		h.clock.SetTime(at.Add(2 * time.Second))
		h.poke(gj)
		g.Eventually(func() time.Time { return h.get(gj).Status.LastScheduleTime.Time }).Should(BeTemporally("==", at))
	}
	g.Expect(h.get(gj).Status.Buffered).To(HaveExactElements(
		HaveField("ScheduledTime.Time", BeTemporally("==", m[1])), HaveField("ScheduledTime.Time", BeTemporally("==", m[2]))))
	g.Expect(h.get(gj).Status.LastRun).To(And(HaveField("Result", batchv1alpha1.RunResultSkipped), HaveField("ScheduledTime.Time", BeTemporally("==", m[3]))))

	h.complete(first)
	second := h.jobFor(gj, m[1])
	g.Consistently(h.jobs).WithTimeout(time.Second).Should(HaveLen(2), "one after the other")
	h.waitRecorded(gj)
	h.complete(second)
	h.jobFor(gj, m[2])
	g.Eventually(func() []batchv1alpha1.BufferedRun { return h.get(gj).Status.Buffered }).Should(BeEmpty())
}

// Two clusters share one store and run the same BufferOne GuardedJob. A run
// that waits in one cluster while the other cluster runs its occurrence finds
// that occurrence's done-marker when it starts: each occurrence runs once.
func TestBufferOne_AWaitingRunWhoseOccurrenceRanInAnotherClusterIsSkipped(t *testing.T) {
	a, b := newHarness(t), newHarness(t)
	b.clusterName = "cluster-b"
	objects := map[*harness]*batchv1alpha1.GuardedJob{}
	for _, h := range []*harness{a, b} {
		h.start()
		h.sharedStore(a.redis)
		// One key per occurrence: a cluster can run m2 while the other runs m1.
		gj := h.minutely("buffered", "shared:buffered:{{ .ScheduledTime.Unix }}")
		gj.Spec.ConcurrencyPolicy = batchv1alpha1.BufferOneConcurrent
		gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "shared-store"}
		objects[h] = h.create(gj)
	}
	g := NewWithT(t)
	created := a.get(objects[a]).CreationTimestamp.Time
	if c := b.get(objects[b]).CreationTimestamp.Time; c.After(created) {
		created = c
	}
	m1 := created.Truncate(time.Minute).Add(time.Minute)
	m2 := m1.Add(time.Minute)
	at := func(h *harness, when time.Time) {
		h.clock.SetTime(when.Add(2 * time.Second))
		h.poke(objects[h])
	}

	// Cluster a runs m1; cluster b finds its lock held (onBusy Skip).
	at(a, m1)
	first := a.jobFor(objects[a], m1)
	a.waitRecorded(objects[a])
	at(b, m1)
	g.Eventually(func() *batchv1alpha1.RunRecord { return b.get(objects[b]).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultBusy), HaveField("HeldBy", "cluster-a/"+a.ns+"/"+first.Name)))

	// m2: a's run of it waits for m1; b, with nothing running, runs it.
	at(a, m2)
	g.Eventually(func() []batchv1alpha1.BufferedRun { return a.get(objects[a]).Status.Buffered }).Should(HaveLen(1))
	at(b, m2)
	other := b.jobFor(objects[b], m2)
	b.waitRecorded(objects[b])
	b.complete(other)
	g.Eventually(func() *batchv1alpha1.RunRecord { return b.get(objects[b]).Status.LastRun }).Should(HaveField("Result", batchv1alpha1.RunResultSucceeded))

	// m1 ends in a: its waiting m2 starts, and finds m2 done by cluster b.
	a.complete(first)
	g.Eventually(func() *batchv1alpha1.RunRecord { return a.get(objects[a]).Status.LastRun }).Should(And(
		HaveField("ScheduledTime.Time", BeTemporally("==", m2)), HaveField("Result", batchv1alpha1.RunResultSkipped),
		HaveField("HeldBy", "cluster-b/"+b.ns+"/"+other.Name)))
	g.Expect(a.get(objects[a]).Status.Buffered).To(BeEmpty())
	g.Expect(a.jobs()).To(HaveLen(1), "cluster a ran m1 only")
	g.Expect(b.jobs()).To(HaveLen(1), "cluster b ran m2 only")
}

func TestParameters_AManualRunSetsDeclaredValuesOnlyAndScheduledRunsGetTheDefaults(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	params := []batchv1alpha1.RunParameter{
		{Name: "REGION", Enum: []string{"eu-west-1", "us-east-1"}, Default: ptr.To("eu-west-1")},
		{Name: "DRY_RUN", Pattern: "true|false", Default: ptr.To("true"), Description: "only report what would change"},
	}
	gj := h.guardedJob("params", h.ns+":params")
	gj.Spec.Parameters = params
	h.create(gj)

	// A manual run with a value for one parameter.
	h.clock.SetTime(time.Now())
	value := h.clock.Now().UTC().Format(time.RFC3339)
	h.request(gj, map[string]string{
		batchv1alpha1.RunNowParametersAnnotation: `{"REGION":"us-east-1"}`,
		batchv1alpha1.RunNowAnnotation:           value,
	})
	job := h.waitJobs(1)[0]
	g.Expect(envOf(&job, "REGION")).To(Equal("us-east-1"))
	g.Expect(envOf(&job, "DRY_RUN")).To(Equal("true"), "the default of a parameter the request did not set")
	g.Expect(envOf(&job, "GUARDEDJOB_FENCE")).To(Equal("1"))
	g.Expect(job.Annotations).To(HaveKeyWithValue(batchv1alpha1.ParametersAnnotation, `{"DRY_RUN":"true","REGION":"us-east-1"}`))
	g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).Should(ConsistOf(
		HaveField("Parameters", map[string]string{"REGION": "us-east-1"})))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(
		"RunParameters: Run-now " + value + " with parameters REGION=us-east-1"))
	h.waitRecorded(gj)
	h.complete(&job)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultSucceeded), HaveField("Parameters", map[string]string{"REGION": "us-east-1"})))

	// Undeclared names and values outside the declaration are refused.
	for _, tc := range []struct{ values, msg string }{
		{`{"PATH":"/tmp"}`, `parameter "PATH" is not declared in spec.parameters (declared: DRY_RUN, REGION)`},
		{`{"REGION":"mars-1"}`, `parameter REGION="mars-1" is not one of "eu-west-1", "us-east-1"`},
		{`{"DRY_RUN":"yes"}`, `parameter DRY_RUN="yes" does not match its pattern true|false`},
		{`REGION=eu-west-1`, `must be a JSON object of names and string values`},
	} {
		h.clock.Step(time.Second)
		value := h.clock.Now().UTC().Format(time.RFC3339)
		h.request(gj, map[string]string{batchv1alpha1.RunNowParametersAnnotation: tc.values, batchv1alpha1.RunNowAnnotation: value})
		g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
			HaveField("Result", batchv1alpha1.RunResultSkipped), HaveField("Message", And(HavePrefix("run-now "+value+" refused: "), ContainSubstring(tc.msg)))))
		g.Expect(h.get(gj).Status.LastRunNow).To(Equal(value))
		g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(And(HavePrefix("InvalidParameters: run-now "+value+" refused"), ContainSubstring(tc.msg))))
	}
	g.Expect(h.jobs()).To(HaveLen(1), "no refused request started a run")

	// A scheduled run gets the defaults.
	scheduled := h.minutely("params-scheduled", h.ns+":params-scheduled")
	scheduled.Spec.Parameters = params
	h.create(scheduled)
	h.clock.SetTime(h.occurrence(scheduled, 1).Add(2 * time.Second))
	h.poke(scheduled)
	sj := h.jobFor(scheduled, h.occurrence(scheduled, 1))
	g.Expect(envOf(sj, "REGION")).To(Equal("eu-west-1"))
	g.Expect(envOf(sj, "DRY_RUN")).To(Equal("true"))
	g.Expect(sj.Annotations).To(HaveKeyWithValue(batchv1alpha1.ParametersAnnotation, `{"DRY_RUN":"true","REGION":"eu-west-1"}`))
}

// TestOccurrence_EveryRunsPodsAreToldWhichOccurrenceTheyWorkOn: a run-now and
// each occurrence of a backfill tell their Pods which occurrence they are (in
// UTC and in the schedule's zone), its key, and which request started them:
// a backfill of three hours processes three different hours.
func TestOccurrence_EveryRunsPodsAreToldWhichOccurrenceTheyWorkOn(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	taipei, err := time.LoadLocation("Asia/Taipei")
	g.Expect(err).NotTo(HaveOccurred())
	gj := h.hourlyBackfill("told", h.ns+":told")
	gj.Spec.TimeZone = "Asia/Taipei"
	h.create(gj)

	runNow := h.trigger(gj)
	job := h.waitJobs(1)[0]
	scheduled := job.Annotations[batchv1alpha1.ScheduledTimeAnnotation]
	at, err := time.Parse(time.RFC3339, scheduled)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(envOf(&job, "GUARDEDJOB_SCHEDULED_TIME")).To(Equal(scheduled))
	g.Expect(envOf(&job, "GUARDEDJOB_SCHEDULED_TIME_LOCAL")).To(Equal(at.In(taipei).Format(time.RFC3339)))
	g.Expect(envOf(&job, "GUARDEDJOB_SCHEDULED_TIME_LOCAL")).To(HaveSuffix("+08:00"))
	g.Expect(envOf(&job, "GUARDEDJOB_TIME_ZONE")).To(Equal("Asia/Taipei"))
	g.Expect(envOf(&job, "GUARDEDJOB_OCCURRENCE")).To(Equal(h.ns + ":told:done:" + itoa(at.Unix())))
	g.Expect(envOf(&job, "GUARDEDJOB_TRIGGER")).To(Equal("run-now"))
	g.Expect(envOf(&job, "GUARDEDJOB_REQUEST")).To(Equal(runNow))
	h.waitRecorded(gj)
	h.complete(&job)
	g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).WithTimeout(20 * time.Second).Should(BeEmpty())

	now := h.clock.Now()
	from, to := now.Add(-3*time.Hour).Truncate(time.Hour), now.Add(-time.Hour)
	request := h.backfill(gj, from, to, 1)
	var told []string
	for range 3 { // one at a time: they share one lock key
		var jobs []batchv1.Job
		g.Eventually(func() []batchv1.Job { jobs = h.unfinished(gj); return jobs }).WithTimeout(20 * time.Second).Should(HaveLen(1))
		job := jobs[0]
		g.Expect(envOf(&job, "GUARDEDJOB_TRIGGER")).To(Equal("backfill"))
		g.Expect(envOf(&job, "GUARDEDJOB_REQUEST")).To(Equal(request))
		g.Expect(envOf(&job, "GUARDEDJOB_SCHEDULED_TIME")).To(Equal(job.Annotations[batchv1alpha1.ScheduledTimeAnnotation]))
		told = append(told, envOf(&job, "GUARDEDJOB_SCHEDULED_TIME"))
		h.waitRecorded(gj)
		h.complete(&job)
	}
	var want []string
	for _, at := range hours(t, from, to) {
		want = append(want, at.UTC().Format(time.RFC3339))
	}
	g.Expect(told).To(ConsistOf(want), "each Job works on its own hour")
}
