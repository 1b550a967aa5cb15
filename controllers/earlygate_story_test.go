package controllers_test

// Stories of the early gate (--early-gate): lease, the Job (behind its gate,
// carrying the run), the lease confirmed, the gate opened, and only then the
// status write. The Job is the run's record until status catches up. Each is
// named after its row in docs/failure-semantics.md.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	gtypes "github.com/onsi/gomega/types"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
)

// failRunWritesWhile fails every status write that records a run while failing
// is set: a manager whose status writes conflict, or that dies before them.
func failRunWritesWhile(failing *atomic.Bool) *interceptor.Funcs {
	fails := func(obj client.Object) bool {
		gj, ok := obj.(*batchv1alpha1.GuardedJob)
		return ok && len(gj.Status.Active) > 0 && failing.Load()
	}
	return &interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if fails(obj) {
				return errors.New("injected: the status write that records the run fails")
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if fails(obj) {
				return errors.New("injected: the status write that records the run fails")
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}

// failingEarly returns a harness whose managers start runs in the early order,
// and a switch, set, for failRunWritesWhile.
func failingEarly(t *testing.T) (*harness, *atomic.Bool) {
	h := newHarness(t)
	h.order = orderEarly
	failing := &atomic.Bool{}
	failing.Store(true)
	return h, failing
}

// earlyGuardedJob is a minutely GuardedJob whose lease expires 12 s after its
// last renewal (its self-fence deadline 6 s after it, room for renewals late on
// two busy cores): a lease nobody renews lapses within a story.
func (h *harness) earlyGuardedJob(name string) *batchv1alpha1.GuardedJob {
	gj := h.minutely(name, h.ns+":"+name)
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 12 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	return gj
}

// due makes the first occurrence of a minutely GuardedJob due and brings a
// pass: its scheduled run starts. The early gate's order is a scheduled run's
// (a run a request started is recorded before its gate opens).
func (h *harness) due(gj *batchv1alpha1.GuardedJob) {
	h.t.Helper()
	h.clock.SetTime(h.occurrence(gj, 1).Add(2 * time.Second))
	h.poke(gj)
}

// openedUnrecorded waits for the run's Job to be past its gate while no status
// records the run, and returns it with the token its key holds.
func (h *harness) openedUnrecorded(gj *batchv1alpha1.GuardedJob) (batchv1.Job, string) {
	h.t.Helper()
	g := h.g
	var job batchv1.Job
	g.Eventually(func() bool {
		jobs := h.jobs()
		if len(jobs) != 1 {
			return false
		}
		job = jobs[0]
		return !jobbuild.Gated(&job)
	}).Should(BeTrue(), "the run's Job opens before its status write")
	g.Expect(h.get(gj).Status.Active).To(BeEmpty(), "no status records the run")
	token := h.rdb.Get(context.Background(), gj.Spec.Lock.Key).Val()
	g.Expect(token).To(HavePrefix("cluster-a/" + h.ns + "/" + job.Name + "#"))
	return job, token
}

// heldPastTTL watches the run's key for longer than its ttl (after then, when
// given, starts watching) and checks that it held the run's token throughout,
// never lapsing, and that the Job was not stopped.
func (h *harness) heldPastTTL(gj *batchv1alpha1.GuardedJob, job *batchv1.Job, token string, then func()) {
	h.t.Helper()
	w := h.watchKey(gj.Spec.Lock.Key, token)
	if then != nil {
		then()
	}
	time.Sleep(14 * time.Second) // longer than the ttl
	w.stop()
	g := h.g
	g.Expect(w.other).To(BeEmpty(), "the key held the run's token throughout")
	g.Expect(w.minPTTL).To(BeNumerically(">", 0), "the key never lapsed")
	g.Expect(h.live(job).DeletionTimestamp).To(BeNil(), "the stop controller leaves a Job whose lease is renewed here")
}

// earlyUnrecorded starts a manager with the early gate whose status writes that
// record runs fail while failing is set (set at first), runs name once, and
// returns the run's Job, past its gate with no status recording it, and the
// token its key holds.
func earlyUnrecorded(t *testing.T, name string) (*harness, *atomic.Bool, *batchv1alpha1.GuardedJob, batchv1.Job, string) {
	h, failing := failingEarly(t)
	h.intercept = failRunWritesWhile(failing)
	h.start()
	gj := h.create(h.earlyGuardedJob(name))
	h.due(gj)
	job, token := h.openedUnrecorded(gj)
	return h, failing, gj, job, token
}

// TestEarlyGate_AGateUpdateRefusedOpensWithAPatch: the manager opens a gate
// with an update of the Job. Refused, it opens the gate with the patch, which
// names only the gate's fields, and the run starts.
//   - Forbidden: a ClusterRole from an earlier version grants no update (the
//     image upgraded before the RBAC); the next run's gate opens with the
//     patch at once.
//   - Invalid: the update sends the whole Job as this version's types know it,
//     and an API server that knows fields this version drops refuses it; the
//     next gate tries the update again, since the refusal was about that Job.
func TestEarlyGate_AGateUpdateRefusedOpensWithAPatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refusal func(obj client.Object) error
		// updates is what the number of refused updates must satisfy over two gates.
		updates gtypes.GomegaMatcher
		why     string
	}{
		{"forbidden", func(obj client.Object) error {
			return apierrors.NewForbidden(batchv1.Resource("jobs"), obj.GetName(), errors.New("injected: the ClusterRole grants no update on jobs"))
		}, BeEquivalentTo(1), "the update was tried for the first gate only"},
		{"invalid", func(obj client.Object) error {
			return apierrors.NewInvalid(batchv1.SchemeGroupVersion.WithKind("Job").GroupKind(), obj.GetName(), nil)
		}, BeNumerically(">=", 2), "each gate tried the update first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.order = orderEarly
			var refused atomic.Int32
			h.intercept = &interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if _, ok := obj.(*batchv1.Job); ok {
					refused.Add(1)
					return tc.refusal(obj)
				}
				return c.Update(ctx, obj, opts...)
			}}
			h.start()
			g := h.g
			for i, name := range []string{tc.name, tc.name + "-next"} {
				gj := h.create(h.earlyGuardedJob(name))
				g.Eventually(func() *batchv1alpha1.GuardedJobStatus { return &h.get(gj).Status }).Should(HaveField("NextScheduleTime", Not(BeNil())))
				h.due(gj)
				jobs := h.waitJobs(i + 1)
				for j := range jobs {
					g.Eventually(func() bool { return jobbuild.Gated(h.live(&jobs[j])) }).Should(BeFalse(), "the gate of %s opens", jobs[j].Name)
				}
				h.waitRecorded(gj)
				g.Expect(h.get(gj).Status.Active).To(ConsistOf(HaveField("Phase", batchv1alpha1.RunPhaseRunning)))
			}
			g.Expect(refused.Load()).To(tc.updates, tc.why)
		})
	}
}

// TestEarlyGate_ARunsGateOpensBeforeAnyWriteToItsGuardedJob: acquire, create
// the Job, confirm the lease, open the gate; the status write that records the
// run comes from the next pass (brought by the Job's update). No write to the
// GuardedJob stands between a due run and its Job's start, and the pass that
// starts it writes none.
func TestEarlyGate_ARunsGateOpensBeforeAnyWriteToItsGuardedJob(t *testing.T) {
	h := newHarness(t)
	h.order = orderEarly
	log := &writeLog{}
	h.restWrap = log.wrap
	h.start()
	gj := h.create(h.earlyGuardedJob("early"))
	g := h.g
	g.Eventually(func() *batchv1alpha1.GuardedJobStatus { return &h.get(gj).Status }).Should(HaveField("NextScheduleTime", Not(BeNil())))
	log.reset()
	h.due(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	writes := func() []string {
		log.mu.Lock()
		defer log.mu.Unlock()
		return append([]string(nil), log.writes...)
	}
	g.Eventually(writes).Should(ContainElement(HavePrefix("patch guardedjobs/status")))
	// A busy API server may refuse the gate's update (a conflict): the run is
	// then recorded first, and its recorded pass opens the gate.
	g.Expect(writes()[:2]).To(HaveExactElements("create jobs", "update jobs"), "the Job, then its gate")
	g.Expect(writes()).To(HaveExactElements("create jobs", "update jobs", "patch guardedjobs/status"),
		"then the next pass's status write that records the run")
	st := h.get(gj).Status
	g.Expect(st.Active).To(ConsistOf(And(HaveField("JobUID", job.UID), HaveField("Phase", batchv1alpha1.RunPhaseRunning))))
	g.Expect(h.events(gj)).To(ContainElements(HavePrefix("JobCreated: Created Job "+job.Name), HavePrefix("LockAcquired: Acquired lock")))
	// kubectl get's SUSPEND column reads status.suspended, which no status
	// patch of this run names (it stays false): the API server has it all the
	// same.
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(batchv1alpha1.GroupVersion.WithKind("GuardedJob"))
	g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(gj), u)).To(Succeed())
	suspended, found, err := unstructured.NestedBool(u.Object, "status", "suspended")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(found).To(BeTrue(), "status.suspended, the SUSPEND column")
	g.Expect(suspended).To(BeFalse())

	h.complete(&job)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultSucceeded), HaveField("JobName", job.Name)))
	g.Expect(h.rdb.Exists(context.Background(), gj.Spec.Lock.Key).Val()).To(BeZero(), "released when the Job completed")
}

// TestEarlyGate_AStatusWriteThatFailsAfterTheGateOpenedKeepsTheLeaseUntilAPassAdoptsTheJob:
// the gate opened, then the status write failed (and keeps failing). The Job's
// Pods may work: its lease is renewed on (the key never lapses, though its ttl
// passes), the stop controller leaves the Job alone, and once a status
// write goes through a pass records the same Job: one Job, one run.
func TestEarlyGate_AStatusWriteThatFailsAfterTheGateOpenedKeepsTheLeaseUntilAPassAdoptsTheJob(t *testing.T) {
	h, failing, gj, job, token := earlyUnrecorded(t, "early-failed-write")
	g := h.g

	h.heldPastTTL(gj, &job, token, nil)

	failing.Store(false)
	h.waitRecorded(gj)
	g.Expect(h.get(gj).Status.Active).To(ConsistOf(And(HaveField("JobUID", job.UID), HaveField("Token", token))), "the same Job, recorded")
	g.Consistently(h.jobs).WithTimeout(2*time.Second).Should(ConsistOf(HaveField("UID", job.UID)), "no second Job")
	h.complete(&job)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultSucceeded), HaveField("JobName", job.Name)))
}

// TestEarlyGate_ARestartRenewsTheLeaseOfAJobPastItsGateThatNoStatusRecords: the
// manager died after the gate opened and before its status write. The next
// manager renews the Job's lease as it starts (the key holds the token minted
// for that Job) and keeps it renewed while its status writes fail, so the key
// never lapses under the working Job; then its pass adopts the Job.
func TestEarlyGate_ARestartRenewsTheLeaseOfAJobPastItsGateThatNoStatusRecords(t *testing.T) {
	h, failing, gj, job, token := earlyUnrecorded(t, "early-restart")
	h.stop()
	g := h.g

	h.heldPastTTL(gj, &job, token, h.start)

	failing.Store(false)
	h.waitRecorded(gj)
	g.Expect(h.get(gj).Status.Active).To(ConsistOf(And(HaveField("JobUID", job.UID), HaveField("Token", token))))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("RunAdopted: Adopted Job " + job.Name)))
	g.Consistently(h.jobs).WithTimeout(2*time.Second).Should(ConsistOf(HaveField("UID", job.UID)), "no second Job")
}

// TestEarlyGate_AJobPastItsGateWhoseLeaseIsLostBeforeAnyStatusRecordsItIsStopped:
// no status records the run (its writes fail) and its key is taken away. The
// keeper finds the lease lost; the stop controller stops the Job at once,
// and the occurrence does not start again.
func TestEarlyGate_AJobPastItsGateWhoseLeaseIsLostBeforeAnyStatusRecordsItIsStopped(t *testing.T) {
	h, failing, gj, job, _ := earlyUnrecorded(t, "early-lost")
	g := h.g
	g.Expect(h.rdb.Set(context.Background(), gj.Spec.Lock.Key, "someone-else", time.Minute).Err()).To(Succeed())
	g.Eventually(func() bool {
		cur := &batchv1.Job{}
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(&job), cur)
		return err != nil || !cur.DeletionTimestamp.IsZero()
	}).WithTimeout(10*time.Second).Should(BeTrue(), "the Job is stopped once its lease is lost")
	failing.Store(false)
	g.Consistently(func() []batchv1.Job {
		var left []batchv1.Job
		for _, j := range h.jobs() {
			if j.UID != job.UID {
				left = append(left, j)
			}
		}
		return left
	}).WithTimeout(3*time.Second).Should(BeEmpty(), "no second Job for the occurrence")
	fence, err := strconv.ParseInt(job.Annotations[batchv1alpha1.FenceAnnotation], 10, 64)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() int64 { return h.get(gj).Status.LastFence }).Should(BeNumerically(">=", fence), "status takes the Job's fence")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(And(
		HavePrefix(batchv1alpha1.UnrecordedRunCountedReason+": Job "+job.Name+" carries a run no status recorded"),
		ContainSubstring(fmt.Sprintf("fence %d", fence)))), "kubectl describe says why status moved")
}

// TestEarlyGate_AJobPastItsGateIsHandedOverToTheShardItsGuardedJobMovedTo: a
// shard opened a run's Job and cannot record the run (every status write of it
// fails), and the GuardedJob moves to another shard. The shard it left renews
// the Job's lease on (it hands over every lease it renews for the object, not
// only those status records) until the new shard, which adopts the Job with the
// lease its key holds, names itself in status.shard: the key never lapses under
// the working Job, and there is one Job.
func TestEarlyGate_AJobPastItsGateIsHandedOverToTheShardItsGuardedJobMovedTo(t *testing.T) {
	h, failing := failingEarly(t)
	h.shardIntercept = failRunWritesWhile(failing)
	h.startShard(batchv1alpha1.ShardLabel + "=a")
	h.shardIntercept = nil
	gj := h.earlyGuardedJob("early-moving")
	gj.Labels = map[string]string{batchv1alpha1.ShardLabel: "a"}
	gj = h.create(gj)
	h.due(gj)
	job, token := h.openedUnrecorded(gj)

	h.relabel(gj, "b")
	h.heldPastTTL(gj, &job, token, func() { h.startShard(batchv1alpha1.ShardLabel + "=b") })
	g := h.g
	st := h.get(gj).Status
	g.Expect(st.Active).To(ConsistOf(And(HaveField("JobUID", job.UID), HaveField("Token", token))), "the new shard adopts the Job")
	g.Expect(st.Shard).To(Equal(batchv1alpha1.ShardLabel + "=b"))
	g.Consistently(h.jobs).WithTimeout(2*time.Second).Should(ConsistOf(HaveField("UID", job.UID)), "one Job")
}

// TestEarlyGate_ARunThatWaitedForItsKeyIsRecordedBeforeItsGateOpens: a run
// whose intent status already records (onBusy Retry waited for the key; a
// backfill, a request) is not one a later pass adopts from its Job, which it
// adopts only while no status names the run. Such a run takes the Job-first
// order: its Job, the status write that records it, then its gate.
func TestEarlyGate_ARunThatWaitedForItsKeyIsRecordedBeforeItsGateOpens(t *testing.T) {
	h := newHarness(t)
	h.order = orderEarly
	h.start()
	ctx := context.Background()
	// A scheduled run (a request's is recorded first anyway) finds the key
	// held by another cluster's run and waits for it (onBusy Retry).
	gj, key := h.behindForeignHolder()
	h.due(gj)

	g := h.g
	g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).Should(
		ConsistOf(HaveField("Phase", batchv1alpha1.RunPhaseAcquiring)), "the run waits for the key, recorded in status")

	// The foreign key expires; a retry takes it, and status records the run
	// with its Job before the Job may start.
	g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).WithTimeout(20*time.Second).Should(
		ConsistOf(And(HaveField("Phase", batchv1alpha1.RunPhaseRunning), HaveField("JobUID", Not(BeEmpty())))),
		func() string {
			return fmt.Sprintf("the run is recorded with its Job (the key holds %q)", h.rdb.Get(ctx, key).Val())
		})
	run := h.get(gj).Status.Active[0]
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(run.Token))
	jobs := h.jobs()
	g.Expect(jobs).To(HaveLen(1))
	g.Eventually(func() bool { js := h.jobs(); return len(js) != 1 || jobbuild.Gated(&js[0]) }).Should(BeFalse(), "its gate opens once status records it")
}

// TestEarlyGate_ARunWhoseJobFinishedAndWentBeforeItsRecordIsRecordedAndReleased:
// a scheduled run's gate opened and its record was left to the next pass;
// before that pass, the Job succeeded and was deleted (ttlSecondsAfterFinished:
// 0, or a person). Its lease finalizer keeps it until status takes it in. The
// pass records the run from its Job (its key still holds the token minted for
// it) and ends it as its Job ended: Succeeded in the history, the lease
// released. Before, a Job being deleted was never adopted: status only counted
// its fence and occurrence, the run was missing from the history and its lease
// was left to expire.
func TestEarlyGate_ARunWhoseJobFinishedAndWentBeforeItsRecordIsRecordedAndReleased(t *testing.T) {
	h := newHarness(t)
	h.order = orderEarly
	var finishOnOpen atomic.Bool
	h.intercept = &interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		job, ok := obj.(*batchv1.Job)
		opening := ok && job.Spec.Suspend != nil && !*job.Spec.Suspend
		if err := c.Update(ctx, obj, opts...); err != nil || !opening || !finishOnOpen.CompareAndSwap(true, false) {
			return err
		}
		// Between the gate's update and the next pass: the Job ran, succeeded
		// and was deleted.
		now := metav1.Now()
		cur := &batchv1.Job{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), cur); err != nil {
			return err
		}
		cur.Status = batchv1.JobStatus{StartTime: &now, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}}
		if err := k8s.Status().Update(ctx, cur); err != nil {
			return err
		}
		if err := k8s.Delete(ctx, cur, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			return err
		}
		// The next pass (which waits for this one) sees it so: the manager's
		// cache shows the Job being deleted.
		return wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			seen := &batchv1.Job{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(job), seen); err != nil {
				return false, err
			}
			return !seen.DeletionTimestamp.IsZero(), nil
		})
	}}
	h.start()
	ctx := context.Background()
	gj := h.create(h.earlyGuardedJob("finished-early"))
	g := h.g
	g.Eventually(func() *batchv1alpha1.GuardedJobStatus { return &h.get(gj).Status }).Should(HaveField("NextScheduleTime", Not(BeNil())))
	finishOnOpen.Store(true)
	h.due(gj)

	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(20*time.Second).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultSucceeded), HaveField("Message", "the Job completed")), "the run ends as its Job did")
	g.Expect(finishOnOpen.Load()).To(BeFalse(), "the Job finished and went between its gate and its record")
	g.Expect(h.get(gj).Status.RecentRuns).To(ContainElement(And(HaveField("JobName", h.get(gj).Status.LastRun.JobName),
		HaveField("Trigger", batchv1alpha1.TriggerSchedule))), "in the history, as a scheduled run")
	g.Eventually(func() (int64, error) { return h.rdb.Exists(ctx, gj.Spec.Lock.Key).Result() }).Should(BeZero(), "the lease is released")
	g.Expect(h.rdb.Exists(ctx, gj.Spec.Lock.Key+":done:"+itoa(h.occurrence(gj, 1).Unix())).Result()).To(BeEquivalentTo(1),
		"the occurrence's done-marker is written")
	g.Eventually(h.jobs).Should(BeEmpty(), "the deleted Job goes once status took it in")
	created := func() []string {
		var out []string
		for _, e := range h.events(gj) {
			if strings.HasPrefix(e, "JobCreated: ") {
				out = append(out, e)
			}
		}
		return out
	}
	g.Consistently(created).WithTimeout(2*time.Second).Should(HaveLen(1), "one run")
}

// TestEarlyGate_ARunNowIsRecordedBeforeItsGateOpens: the early gate's order is a
// scheduled run's. A run-now's run is recorded before its gate opens, since
// status answers the request and a Job's annotation may not. Here its status
// write fails, so its Job waits at its gate; then the manager dies and the
// run's lease is gone before the next one comes. That manager deletes the Job,
// which never started, and runs the request once: its Job opens only after
// status records the run. Had the first Job opened before its record, its
// work could have been done and the request, unanswered, run it again.
func TestEarlyGate_ARunNowIsRecordedBeforeItsGateOpens(t *testing.T) {
	h, failing := failingEarly(t)
	h.intercept = failRunWritesWhile(failing)
	h.start()
	ctx := context.Background()
	gj := h.create(h.earlyGuardedJob("early-request"))
	value := h.trigger(gj)
	first := h.waitJobs(1)[0]
	g := h.g
	g.Consistently(func() (bool, error) {
		cur := &batchv1.Job{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(&first), cur); err != nil {
			return false, err
		}
		return jobbuild.Gated(cur), nil
	}).WithTimeout(3*time.Second).Should(BeTrue(), "the run-now's Job waits at its gate while no status records its run")

	h.stop()
	g.Expect(h.rdb.Del(ctx, gj.Spec.Lock.Key).Err()).To(Succeed(), "the lease is gone")
	failing.Store(false)
	h.start()

	g.Eventually(func() (bool, error) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(&first), &batchv1.Job{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}).WithTimeout(20*time.Second).Should(BeTrue(), "the Job that never started is deleted")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(
		HavePrefix("StaleJob: Deleted Job " + first.Name + ", which was created before its run was recorded and never started")))
	g.Eventually(func() []batchv1alpha1.ActiveRun { return h.get(gj).Status.Active }).WithTimeout(20*time.Second).Should(
		ConsistOf(And(HaveField("RunNow", value), HaveField("JobUID", Not(BeEmpty())), HaveField("Phase", batchv1alpha1.RunPhaseRunning))),
		"the request runs, recorded with its Job")
	g.Expect(h.get(gj).Status.LastRunNow).To(Equal(value), "the request is answered")
	second := h.waitJobs(1)[0]
	g.Expect(second.UID).NotTo(Equal(first.UID))
	g.Eventually(func() bool { js := h.jobs(); return len(js) == 1 && !jobbuild.Gated(&js[0]) }).Should(BeTrue(), "its gate opens once status records it")
}

// TestEarlyGate_ARunThatWaitedStartsOnlyOnceAJobNoRunClaimsHasNoPodsLeft: a
// scheduled run opened its gate, its record was lost, and so was its lease (the
// store lost the key to another holder): its Job is stopped, and its Pod is
// still terminating. A run that waited (here a backfill's next occurrence; a
// retry and a buffered occurrence start the same way) takes the key once it is
// free, but starts no Job while that Pod may still work without a lease, as a
// due occurrence or a run-now waits for it (due.Admit).
func TestEarlyGate_ARunThatWaitedStartsOnlyOnceAJobNoRunClaimsHasNoPodsLeft(t *testing.T) {
	h, failing, gj, job, _ := earlyUnrecorded(t, "early-waited")
	g := h.g
	ctx := context.Background()
	pod := h.podFor(&job)
	g.Expect(h.rdb.Set(ctx, gj.Spec.Lock.Key, "someone-else", time.Minute).Err()).To(Succeed())
	g.Eventually(func() *corev1.Pod { return h.podDeletion(pod) }).WithTimeout(10*time.Second).ShouldNot(BeNil(), "the run's Pod is stopped once its lease is lost")
	g.Expect(h.rdb.Del(ctx, gj.Spec.Lock.Key).Err()).To(Succeed(), "the other holder lets go")
	failing.Store(false)

	occ := h.occurrence(gj, 1)
	request := h.backfill(gj, occ.Add(-2*time.Minute), occ.Add(-time.Minute), 1)
	g.Eventually(func() *batchv1alpha1.BackfillRequestRecord { return h.get(gj).Status.LastBackfillRequest }).Should(And(Not(BeNil()),
		HaveField("Request", request), HaveField("Result", batchv1alpha1.BackfillAccepted)))
	others := func() []string {
		var names []string
		for _, j := range h.jobs() {
			if j.UID != job.UID {
				names = append(names, j.Name)
			}
		}
		return names
	}
	g.Consistently(others).WithTimeout(3*time.Second).Should(BeEmpty(), "no Job starts beside a Pod that may work without a lease")
	g.Expect(h.rdb.Exists(ctx, gj.Spec.Lock.Key).Val()).To(BeZero(), "nor is the key taken for it")

	h.kubeletRemoves(pod)
	g.Eventually(others).WithTimeout(20*time.Second).ShouldNot(BeEmpty(), "the backfill starts once the Pod is gone")
}
