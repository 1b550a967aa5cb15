package controllers_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/schedule"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// Stories for backfills (issue 32): every occurrence of a range runs once
// through the lock, occurrences done already are skipped, the progress is in
// status and survives a restart, bad requests are refused, and the same
// backfill started in two clusters sharing a store runs each occurrence once.

// followRealTime moves the harness clock along with the real one until the
// test ends, for stories whose manager waits on its own (a busy occurrence's
// retry).
func (h *harness) followRealTime() {
	done := make(chan struct{})
	h.t.Cleanup(func() { close(done) })
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				h.clock.SetTime(time.Now())
			}
		}
	}()
}

// backfill asks for a backfill of gj's occurrences in [from, to], as kubectl
// guardedjob backfill does, and returns the request's value.
func (h *harness) backfill(gj *batchv1alpha1.GuardedJob, from, to time.Time, parallelism int) string {
	h.t.Helper()
	value := h.clock.Now().UTC().Format(time.RFC3339Nano)
	h.request(gj, map[string]string{
		batchv1alpha1.BackfillAnnotation:            value,
		batchv1alpha1.BackfillFromAnnotation:        from.UTC().Format(time.RFC3339),
		batchv1alpha1.BackfillToAnnotation:          to.UTC().Format(time.RFC3339),
		batchv1alpha1.BackfillParallelismAnnotation: strconv.Itoa(parallelism),
	})
	return value
}

// unfinished returns the Jobs of gj that have neither completed nor failed.
func (h *harness) unfinished(gj *batchv1alpha1.GuardedJob) []batchv1.Job {
	var out []batchv1.Job
	for _, j := range h.jobs() {
		if j.Labels[batchv1alpha1.GuardedJobLabel] == gj.Name && len(j.Status.Conditions) == 0 {
			out = append(out, j)
		}
	}
	return out
}

// hourlyBackfill is a GuardedJob on an hourly schedule whose busy lock is
// tried again within seconds.
func (h *harness) hourlyBackfill(name, key string) *batchv1alpha1.GuardedJob {
	gj := h.guardedJob(name, key)
	gj.Spec.Schedule = "0 * * * *"
	gj.Spec.Lock.BusyRetry = &batchv1alpha1.BusyRetry{Initial: &metav1.Duration{Duration: time.Second}, Max: &metav1.Duration{Duration: 2 * time.Second}}
	return gj
}

// hours returns the occurrences of "0 * * * *" in [from, to].
func hours(t *testing.T, from, to time.Time) []time.Time {
	s, err := schedule.Parse("0 * * * *", "UTC")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return s.Between(from, to, 1000)
}

func TestBackfill_EveryOccurrenceOfTheRangeRunsOnceOneAtATimeSkippingThoseDoneAlready(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	g := h.g
	key := h.ns + ":history"
	gj := h.create(h.hourlyBackfill("history", key))
	h.clock.SetTime(time.Now())
	now := h.clock.Now()
	from, to := now.Add(-5*time.Hour).Truncate(time.Hour), now
	occurrences := hours(t, from, to)
	g.Expect(occurrences).To(HaveLen(6))
	// The second one ran elsewhere already: its done-marker exists.
	done := occurrences[1]
	g.Expect(h.rdb.Set(ctx, key+":done:"+itoa(done.Unix()), "cluster-b/payments/history-1-abcdef#ffff", time.Hour).Err()).To(Succeed())
	failing := occurrences[3]

	request := h.backfill(gj, from, to, 1)
	g.Eventually(func() *batchv1alpha1.BackfillRequestRecord { return h.get(gj).Status.LastBackfillRequest }).Should(And(Not(BeNil()),
		HaveField("Request", request), HaveField("Result", batchv1alpha1.BackfillAccepted),
		HaveField("Message", "6 occurrence(s) from "+from.UTC().Format(time.RFC3339)+" to "+to.UTC().Format(time.RFC3339)+", 1 at a time")))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("BackfillStarted: Backfill " + request + ": 6 occurrence(s)")))

	// Play the Job controller: each occurrence's Job, one at a time.
	ran := map[string]bool{}
	restarted := false
	for len(ran) < 5 {
		var jobs []batchv1.Job
		g.Eventually(func() []batchv1.Job { jobs = h.unfinished(gj); return jobs }).WithTimeout(20 * time.Second).ShouldNot(BeEmpty())
		g.Expect(jobs).To(HaveLen(1), "one at a time (parallelism 1)")
		job := jobs[0]
		at := job.Annotations[batchv1alpha1.ScheduledTimeAnnotation]
		g.Expect(ran).NotTo(HaveKey(at), "each occurrence runs once")
		g.Expect(at).NotTo(Equal(done.UTC().Format(time.RFC3339)), "an occurrence done already does not run")
		ran[at] = true
		g.Eventually(func() bool {
			run := runNamed(h.get(gj), job.Name)
			return run != nil && run.JobUID != "" && run.Backfill == request
		}).Should(BeTrue())
		if at == failing.UTC().Format(time.RFC3339) {
			h.fail(&job)
		} else {
			h.complete(&job)
		}
		if len(ran) == 2 && !restarted {
			// The manager restarts mid-way: the backfill goes on from status.
			h.stop()
			h.start()
			restarted = true
		}
	}
	g.Eventually(func() *batchv1alpha1.BackfillStatus { return h.get(gj).Status.Backfill }).WithTimeout(20 * time.Second).Should(And(
		HaveField("State", batchv1alpha1.BackfillComplete), HaveField("Total", int32(6)),
		HaveField("Succeeded", int32(4)), HaveField("Skipped", int32(1)), HaveField("Failed", int32(1)), HaveField("Remaining", BeZero()),
		HaveField("FailedOccurrences", ConsistOf(HaveField("Time", BeTemporally("==", failing)))),
		HaveField("Current", BeEmpty()), HaveField("Next", BeNil())))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(
		"BackfillFinished: Backfill " + request + " finished: 4 succeeded, 1 skipped (done already), 1 failed"))
	g.Expect(h.jobs()).To(HaveLen(5))
	for _, at := range occurrences {
		marker := key + ":done:" + itoa(at.Unix())
		switch at {
		case done:
			g.Expect(h.rdb.Get(ctx, marker).Val()).To(HavePrefix("cluster-b/"), "the other cluster's marker is left alone")
		case failing:
			g.Expect(h.rdb.Exists(ctx, marker).Val()).To(BeZero(), "a failed occurrence is not marked done: a later backfill runs it again")
		default:
			g.Expect(h.rdb.PTTL(ctx, marker).Val()).To(BeNumerically(">", 6*24*time.Hour), "a backfilled occurrence's marker lives long enough for another cluster's backfill")
		}
	}
	g.Expect(h.get(gj).Status.LastScheduleTime.Time).To(BeTemporally("<=", now))
	g.Expect(h.get(gj).Status.ConsecutiveFailures).To(BeZero(), "a backfill's failures are its own")

	// A second backfill of the same range runs only what failed.
	h.clock.Step(time.Second)
	again := h.backfill(gj, from, to, 1)
	var retried []batchv1.Job
	g.Eventually(func() []batchv1.Job { retried = h.unfinished(gj); return retried }).Should(HaveLen(1))
	g.Expect(retried[0].Annotations).To(HaveKeyWithValue(batchv1alpha1.ScheduledTimeAnnotation, failing.UTC().Format(time.RFC3339)))
	g.Eventually(func() *batchv1alpha1.ActiveRun { return runNamed(h.get(gj), retried[0].Name) }).Should(HaveField("JobUID", Not(BeEmpty())))
	h.complete(&retried[0])
	g.Eventually(func() *batchv1alpha1.BackfillStatus { return h.get(gj).Status.Backfill }).Should(And(
		HaveField("Request", again), HaveField("State", batchv1alpha1.BackfillComplete), HaveField("Succeeded", int32(1)), HaveField("Skipped", int32(5))))
}

func TestBackfill_ParallelismRunsThatManyOccurrencesAtOnceAndCancelStopsTheRest(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	gj := h.hourlyBackfill("wide", h.ns+":wide:{{ .ScheduledTime.Unix }}")
	gj = h.create(gj)
	h.clock.SetTime(time.Now())
	now := h.clock.Now()
	from := now.Add(-9 * time.Hour).Truncate(time.Hour)
	request := h.backfill(gj, from, now, 3)
	g.Eventually(func() []batchv1.Job { return h.unfinished(gj) }).Should(HaveLen(3))
	g.Consistently(func() []batchv1.Job { return h.unfinished(gj) }).WithTimeout(time.Second).Should(HaveLen(3), "no more than the parallelism")
	g.Eventually(func() *batchv1alpha1.BackfillStatus { return h.get(gj).Status.Backfill }).Should(And(
		HaveField("Current", HaveLen(3)), HaveField("Remaining", int32(10)), HaveField("Next.Time", BeTemporally("==", from.Add(3*time.Hour)))))

	// Cancelled: the three running go on and are counted; nothing else starts.
	h.request(gj, map[string]string{batchv1alpha1.BackfillCancelAnnotation: request})
	g.Eventually(func() batchv1alpha1.BackfillState { return h.get(gj).Status.Backfill.State }).Should(Equal(batchv1alpha1.BackfillCancelled))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(And(HavePrefix("BackfillCancelled: Backfill "+request+" cancelled at"), ContainSubstring("(3 still running)"))))
	for _, j := range h.unfinished(gj) {
		g.Eventually(func() *batchv1alpha1.ActiveRun { return runNamed(h.get(gj), j.Name) }).Should(HaveField("JobUID", Not(BeEmpty())))
		h.complete(&j)
	}
	g.Eventually(func() *batchv1alpha1.BackfillStatus { return h.get(gj).Status.Backfill }).Should(And(
		HaveField("Succeeded", int32(3)), HaveField("Current", BeEmpty())))
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(2 * time.Second).Should(HaveLen(3))
}

func TestBackfill_BadRequestsAreRefusedWithAReasonAndAWarning(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	gj := h.create(h.hourlyBackfill("refused", h.ns+":refused"))
	minutely := h.create(h.minutely("refused-minutely", h.ns+":refused-minutely"))
	yearly := h.create(h.guardedJob("refused-yearly", h.ns+":refused-yearly"))
	h.clock.SetTime(time.Now())
	now := h.clock.Now()
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	tests := []struct {
		name string
		gj   *batchv1alpha1.GuardedJob
		ann  map[string]string
		msg  string
	}{
		{"a range ending in the future", gj, map[string]string{batchv1alpha1.BackfillFromAnnotation: ts(now.Add(-time.Hour)), batchv1alpha1.BackfillToAnnotation: ts(now.Add(time.Hour))},
			"the range ends in the future"},
		{"a range that ends before it starts", gj, map[string]string{batchv1alpha1.BackfillFromAnnotation: ts(now.Add(-time.Hour)), batchv1alpha1.BackfillToAnnotation: ts(now.Add(-2 * time.Hour))},
			"before it starts"},
		{"more occurrences than the maximum", minutely, map[string]string{batchv1alpha1.BackfillFromAnnotation: ts(now.Add(-48 * time.Hour)), batchv1alpha1.BackfillToAnnotation: ts(now)},
			"holds more than 1000 occurrences"},
		{"a range with no occurrence", yearly, map[string]string{batchv1alpha1.BackfillFromAnnotation: ts(now.Add(-time.Hour)), batchv1alpha1.BackfillToAnnotation: ts(now)},
			"has no occurrence from"},
		{"a time that does not parse", gj, map[string]string{batchv1alpha1.BackfillFromAnnotation: "yesterday", batchv1alpha1.BackfillToAnnotation: ts(now)},
			`batch.guardedjob.dev/backfill-from "yesterday" is not an RFC 3339 time`},
		{"a parallelism out of bounds", gj, map[string]string{batchv1alpha1.BackfillFromAnnotation: ts(now.Add(-time.Hour)), batchv1alpha1.BackfillToAnnotation: ts(now),
			batchv1alpha1.BackfillParallelismAnnotation: "11"}, "must be a whole number from 1 to 10"},
		{"a request from long ago (a manifest applied later)", gj, map[string]string{batchv1alpha1.BackfillAnnotation: ts(now.Add(-time.Hour)),
			batchv1alpha1.BackfillFromAnnotation: ts(now.Add(-2 * time.Hour)), batchv1alpha1.BackfillToAnnotation: ts(now)}, "a request is carried out only when it is fresh"},
	}
	for _, tt := range tests {
		h.clock.Step(time.Millisecond)
		if tt.ann[batchv1alpha1.BackfillAnnotation] == "" {
			tt.ann[batchv1alpha1.BackfillAnnotation] = h.clock.Now().UTC().Format(time.RFC3339Nano)
		}
		if tt.ann[batchv1alpha1.BackfillParallelismAnnotation] == "" {
			tt.ann[batchv1alpha1.BackfillParallelismAnnotation] = "1"
		}
		value := tt.ann[batchv1alpha1.BackfillAnnotation]
		h.request(tt.gj, tt.ann)
		g.Eventually(func() *batchv1alpha1.BackfillRequestRecord { return h.get(tt.gj).Status.LastBackfillRequest }).Should(And(Not(BeNil()),
			HaveField("Request", value), HaveField("Result", batchv1alpha1.BackfillRefused), HaveField("Message", ContainSubstring(tt.msg))), tt.name)
		g.Eventually(func() []string { return h.events(tt.gj) }).Should(ContainElement(And(
			HavePrefix("BackfillRefused: Refused "+batchv1alpha1.BackfillAnnotation+"="+value), ContainSubstring(tt.msg))), tt.name)
		g.Expect(h.get(tt.gj).Status.Backfill).To(BeNil(), tt.name)
	}

	// A request while a backfill runs is refused, naming the running one.
	h.clock.Step(time.Second)
	running := h.backfill(gj, now.Add(-3*time.Hour), now, 1)
	g.Eventually(func() []batchv1.Job { return h.unfinished(gj) }).Should(HaveLen(1))
	h.clock.Step(time.Second)
	second := h.backfill(gj, now.Add(-3*time.Hour), now, 1)
	g.Eventually(func() *batchv1alpha1.BackfillRequestRecord { return h.get(gj).Status.LastBackfillRequest }).Should(And(
		HaveField("Request", second), HaveField("Result", batchv1alpha1.BackfillRefused),
		HaveField("Message", And(HavePrefix("backfill "+running+" is running ("), ContainSubstring("remaining): cancel it first")))))
	g.Expect(h.get(gj).Status.Backfill).To(And(HaveField("Request", running), HaveField("State", batchv1alpha1.BackfillRunning)))
	g.Expect(h.backfillJobs(gj)).To(HaveLen(1))
}

// backfillJobs returns the Jobs of gj that run an occurrence of a backfill. The
// story's other GuardedJobs, and gj's own schedule, start runs of their own
// when the clock passes a minute or an hour.
func (h *harness) backfillJobs(gj *batchv1alpha1.GuardedJob) []batchv1.Job {
	var out []batchv1.Job
	for _, j := range h.jobs() {
		if j.Labels[batchv1alpha1.GuardedJobLabel] != gj.Name {
			continue
		}
		var run batchv1alpha1.ActiveRun
		h.g.Expect(json.Unmarshal([]byte(j.Annotations[batchv1alpha1.RunAnnotation]), &run)).To(Succeed(), j.Name)
		if run.Backfill != "" {
			out = append(out, j)
		}
	}
	return out
}

// A backfill's acceptance is in status before its first Job exists. Here a person
// asks for a second backfill right after the first one's Job appeared, and their
// edit makes the status write that records the first run conflict: the second
// request finds the first backfill running and is refused, and the first goes on.
// (Accepted and started in one pass, the first backfill's record went with the
// failed write: the second was accepted while the first one's run went on.)
func TestBackfill_ARequestThatConflictsWithTheFirstRunsRecordFindsTheBackfillRunning(t *testing.T) {
	h := newHarness(t)
	h.clock.SetTime(time.Now())
	now := h.clock.Now()
	from, to := now.Add(-3*time.Hour), now
	first := now.UTC().Format(time.RFC3339Nano)
	second := now.Add(time.Second).UTC().Format(time.RFC3339Nano)
	var edited atomic.Bool
	var editErr error
	h.intercept = &interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		gj, ok := obj.(*batchv1alpha1.GuardedJob)
		if !ok || len(gj.Status.Active) == 0 || gj.Status.Active[0].Backfill == "" || !edited.CompareAndSwap(false, true) {
			return c.SubResource(sub).Update(ctx, obj, opts...)
		}
		cur := &batchv1alpha1.GuardedJob{}
		if editErr = c.Get(ctx, client.ObjectKeyFromObject(gj), cur); editErr == nil {
			patch := client.MergeFrom(cur.DeepCopy())
			cur.Annotations[batchv1alpha1.BackfillAnnotation] = second
			editErr = c.Patch(ctx, cur, patch)
		}
		return apierrors.NewConflict(batchv1alpha1.GroupVersion.WithResource("guardedjobs").GroupResource(), gj.Name, errors.New("the object has been modified"))
	}}
	h.start()
	g := h.g
	gj := h.create(h.hourlyBackfill("conflict", h.ns+":conflict"))
	h.request(gj, map[string]string{
		batchv1alpha1.BackfillAnnotation: first, batchv1alpha1.BackfillParallelismAnnotation: "1",
		batchv1alpha1.BackfillFromAnnotation: from.UTC().Format(time.RFC3339), batchv1alpha1.BackfillToAnnotation: to.UTC().Format(time.RFC3339),
	})
	g.Eventually(func() *batchv1alpha1.BackfillRequestRecord { return h.get(gj).Status.LastBackfillRequest }).Should(And(Not(BeNil()),
		HaveField("Request", second), HaveField("Result", batchv1alpha1.BackfillRefused),
		HaveField("Message", HavePrefix("backfill "+first+" is running ("))))
	g.Expect(edited.Load()).To(BeTrue(), "the first run's record was written while the person edited the object")
	g.Expect(editErr).NotTo(HaveOccurred())
	g.Expect(h.get(gj).Status.Backfill).To(And(HaveField("Request", first), HaveField("State", batchv1alpha1.BackfillRunning)))
	g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).Should(ConsistOf(HaveField("Backfill", first)))
	g.Expect(h.unfinished(gj)).To(HaveLen(1), "one Job: the first backfill's first occurrence")
}

// Two clusters, each with its own API objects and manager (--cluster-name
// cluster-a and cluster-b), share one Redis. The same backfill started in both
// runs each occurrence once: whichever manager gets an occurrence's lock runs
// it, the other finds the lock busy, tries again, and then finds the
// occurrence's done-marker.
func TestBackfill_TheSameBackfillInTwoClustersSharingAStoreRunsEachOccurrenceOnce(t *testing.T) {
	a := newHarness(t)
	b := newHarness(t)
	b.clusterName = "cluster-b"
	ctx := context.Background()
	shared := a.redis
	clusters := []*harness{a, b}
	objects := make([]*batchv1alpha1.GuardedJob, 2)
	for i, h := range clusters {
		h.followRealTime()
		h.start()
		h.sharedStore(shared)
		gj := h.hourlyBackfill("settlement", "shared:settlement")
		gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "shared-store"}
		objects[i] = h.create(gj)
	}
	now := time.Now()
	from := now.Add(-5 * time.Hour).Truncate(time.Hour)
	occurrences := hours(t, from, now)
	requests := make([]string, 2)
	for i, h := range clusters {
		requests[i] = h.backfill(objects[i], from, now, 1)
	}

	// Play the Job controller of both clusters until both backfills are done.
	g := NewWithT(t)
	completed := map[string]bool{}
	g.Eventually(func() bool {
		for i, h := range clusters {
			for _, j := range h.unfinished(objects[i]) {
				run := runNamed(h.get(objects[i]), j.Name)
				if run == nil || run.JobUID == "" || completed[h.ns+"/"+j.Name] {
					continue
				}
				completed[h.ns+"/"+j.Name] = true
				h.complete(&j)
			}
		}
		for i, h := range clusters {
			if st := h.get(objects[i]).Status.Backfill; st == nil || st.Request != requests[i] || st.State != batchv1alpha1.BackfillComplete {
				return false
			}
		}
		return true
	}).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(BeTrue(), "both backfills complete")

	ranIn := map[string][]string{}
	for _, h := range clusters {
		for _, j := range h.jobs() {
			at := j.Annotations[batchv1alpha1.ScheduledTimeAnnotation]
			ranIn[at] = append(ranIn[at], h.clusterName)
		}
	}
	g.Expect(ranIn).To(HaveLen(len(occurrences)), "every occurrence ran")
	for at, where := range ranIn {
		g.Expect(where).To(HaveLen(1), "occurrence %s ran once, not in %v", at, where)
	}
	sa, sb := a.get(objects[0]).Status.Backfill, b.get(objects[1]).Status.Backfill
	n := int32(len(occurrences)) //nolint:gosec // six
	g.Expect(sa.Succeeded+sb.Succeeded).To(Equal(n), "between them, each occurrence succeeded once")
	for _, st := range []*batchv1alpha1.BackfillStatus{sa, sb} {
		g.Expect(st.Succeeded+st.Skipped).To(Equal(n), "each cluster ran or skipped every occurrence")
		g.Expect(st.Failed).To(BeZero())
	}
	rdb := shared.Client(t)
	for _, at := range occurrences {
		g.Expect(rdb.Exists(ctx, "shared:settlement:done:"+itoa(at.Unix())).Val()).To(Equal(int64(1)))
	}
}

// sharedStore creates the Secret "shared-store" naming srv, a store that
// several harnesses (clusters) share through spec.lock.storeRef.
func (h *harness) sharedStore(srv *redisserver.Server) {
	h.t.Helper()
	h.g.Expect(k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "shared-store", Namespace: h.ns},
		StringData: map[string]string{"url": srv.URL()},
	})).To(Succeed())
}

// runNamed returns gj's active run of the given Job, or nil.
func runNamed(gj *batchv1alpha1.GuardedJob, jobName string) *batchv1alpha1.ActiveRun {
	for i := range gj.Status.Active {
		if gj.Status.Active[i].JobName == jobName {
			return &gj.Status.Active[i]
		}
	}
	return nil
}

// TestBackfill_ABackfillStartsNoOccurrenceAfterItsMarkersCouldHaveExpired: the
// done-marker of an occurrence a backfill ran, in any cluster, lives seven days
// (and the request window) after its run. A backfill held up longer than that
// (its runs waited behind a long run, the manager was down) stops starting
// occurrences: another cluster's run of the next one may have completed and its
// marker expired, so running it now could run it twice.
func TestBackfill_ABackfillStartsNoOccurrenceAfterItsMarkersCouldHaveExpired(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	gj := h.create(h.hourlyBackfill("stale-backfill", h.ns+":stale-backfill"))
	h.clock.SetTime(time.Now())
	now := h.clock.Now()
	from, to := now.Add(-2*time.Hour).Truncate(time.Hour), now
	request := h.backfill(gj, from, to, 1)
	var first []batchv1.Job
	g.Eventually(func() []batchv1.Job { first = h.unfinished(gj); return first }).WithTimeout(20 * time.Second).Should(HaveLen(1))

	// Past the backfill's window, at half past an hour: the schedule's own
	// occurrence of that hour is past its starting deadline and starts no Job
	// (at a few minutes past, it would, and look like a backfill start).
	h.clock.SetTime(now.Truncate(time.Hour).Add(batchv1alpha1.BackfillDoneMarkerTTL + 90*time.Minute))
	h.complete(&first[0])
	g.Eventually(func() batchv1alpha1.BackfillState {
		if b := h.get(gj).Status.Backfill; b != nil {
			return b.State
		}
		return ""
	}).WithTimeout(20 * time.Second).Should(Equal(batchv1alpha1.BackfillCancelled))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(And(
		HavePrefix("BackfillCancelled: Backfill "+request+" stopped at"), ContainSubstring("a backfill starts occurrences until"))))
	g.Consistently(func() []batchv1.Job { return h.unfinished(gj) }).WithTimeout(time.Second).Should(BeEmpty(), "no further occurrence starts")
	g.Expect(h.jobs()).To(HaveLen(1))
}
