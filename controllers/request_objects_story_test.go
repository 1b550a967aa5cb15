package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// Stories of the request objects: an on-call user who may only create requests
// (the shipped guardedjob-requester role) runs a GuardedJob now and backfills
// it, sees what became of each request in its status, and cannot change the
// GuardedJob; a bad request is refused with its reason and deleted after its
// TTL; a request naming no GuardedJob is refused after a grace period.

// requesterClient returns a client for a user bound, in the harness's
// namespace, to the ClusterRole config/rbac/guardedjob_requester_role.yaml
// ships, and nothing else.
func (h *harness) requesterClient() client.Client {
	h.t.Helper()
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join("..", "config", "rbac", "guardedjob_requester_role.yaml"))
	h.g.Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	h.g.Expect(yaml.Unmarshal(raw, role)).To(Succeed())
	if err := k8s.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
		h.t.Fatalf("create the requester role: %v", err)
	}
	name := "oncall-" + h.ns
	h.g.Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "oncall", Namespace: h.ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	})).To(Succeed())
	user, err := testEnv.AddUser(envtest.User{Name: name}, nil)
	h.g.Expect(err).NotTo(HaveOccurred())
	c, err := client.New(user.Config(), client.Options{Scheme: scheme})
	h.g.Expect(err).NotTo(HaveOccurred())
	return c
}

func (h *harness) runRequest(c client.Client, req *batchv1alpha1.GuardedJobRun) *batchv1alpha1.GuardedJobRun {
	h.t.Helper()
	cur := &batchv1alpha1.GuardedJobRun{}
	h.g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(req), cur)).To(Succeed())
	return cur
}

func TestRequests_AUserWhoMayOnlyCreateRequestsRunsAndBackfillsAGuardedJobButCannotChangeIt(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	g := h.g
	oncall := h.requesterClient()

	gj := h.hourlyBackfill("settlement", h.ns+":settlement")
	gj.Spec.Parameters = []batchv1alpha1.RunParameter{{Name: "REGION", Default: ptr.To("eu"), Pattern: "^[a-z]+$"}}
	h.create(gj)
	h.clock.SetTime(time.Now())

	// The on-call user can read the GuardedJob but not change it: no patch, so no
	// annotation, no template, no parameters of their own making.
	seen := &batchv1alpha1.GuardedJob{}
	g.Expect(oncall.Get(ctx, client.ObjectKeyFromObject(gj), seen)).To(Succeed())
	patch := client.MergeFrom(seen.DeepCopy())
	seen.Annotations = map[string]string{batchv1alpha1.RunNowAnnotation: time.Now().UTC().Format(time.RFC3339)}
	err := oncall.Patch(ctx, seen, patch)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "patch guardedjobs must be forbidden, got %v", err)

	// A run now, with a parameter the GuardedJob declares.
	run := &batchv1alpha1.GuardedJobRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, GenerateName: "settlement-"},
		Spec:       batchv1alpha1.GuardedJobRunSpec{GuardedJobName: gj.Name, Parameters: map[string]string{"REGION": "us"}},
	}
	g.Expect(oncall.Create(ctx, run)).To(Succeed())
	var job batchv1.Job
	g.Eventually(func() []batchv1.Job { return h.unfinished(gj) }).WithTimeout(20 * time.Second).Should(HaveLen(1))
	job = h.unfinished(gj)[0]
	g.Expect(envOf(&job, "GUARDEDJOB_REQUEST")).To(Equal(batchv1alpha1.RunRequestPrefix+string(run.UID)), "the Pods know which request started them")
	g.Expect(envOf(&job, "GUARDEDJOB_TRIGGER")).To(Equal(batchv1alpha1.TriggerRunNow))
	g.Expect(envOf(&job, "REGION")).To(Equal("us"))
	g.Eventually(func() batchv1alpha1.GuardedJobRunStatus { return h.runRequest(oncall, run).Status }).WithTimeout(20 * time.Second).Should(And(
		HaveField("Phase", batchv1alpha1.RequestRunning), HaveField("JobName", job.Name), HaveField("Fence", BeNumerically(">=", 1)),
		HaveField("AcceptedAt", Not(BeNil()))))
	h.complete(&job)
	g.Eventually(func() batchv1alpha1.GuardedJobRunStatus { return h.runRequest(oncall, run).Status }).WithTimeout(20 * time.Second).Should(And(
		HaveField("Phase", batchv1alpha1.RequestFinished), HaveField("Result", batchv1alpha1.RunResultSucceeded), HaveField("JobName", job.Name),
		HaveField("Conditions", ContainElement(And(HaveField("Type", batchv1alpha1.RequestCompleteCondition), HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", string(batchv1alpha1.RunResultSucceeded)))))))
	g.Expect(h.get(gj).Status.RecentRuns).To(ContainElement(And(HaveField("Request", batchv1alpha1.RunRequestPrefix+string(run.UID)),
		HaveField("Result", batchv1alpha1.RunResultSucceeded))), "history names the request")
	g.Expect(h.jobs()).To(HaveLen(1), "one request, one run")

	// A backfill of the two hours before this one (the run above was this
	// hour's occurrence: run-now runs the occurrence due now).
	now := h.clock.Now()
	from, to := now.Add(-3*time.Hour).Truncate(time.Hour).Add(time.Minute), now.Truncate(time.Hour).Add(-time.Minute)
	backfill := &batchv1alpha1.GuardedJobBackfill{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, GenerateName: "settlement-"},
		Spec:       batchv1alpha1.GuardedJobBackfillSpec{GuardedJobName: gj.Name, From: from.UTC().Format(time.RFC3339), To: to.UTC().Format(time.RFC3339)},
	}
	g.Expect(oncall.Create(ctx, backfill)).To(Succeed())
	want := hours(t, from, to)
	g.Expect(want).To(HaveLen(2))
	ran := map[string]bool{}
	for len(ran) < 2 {
		var jobs []batchv1.Job
		g.Eventually(func() []batchv1.Job { jobs = h.unfinished(gj); return jobs }).WithTimeout(20*time.Second).ShouldNot(BeEmpty(), func() string {
			cur := &batchv1alpha1.GuardedJobBackfill{}
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(backfill), cur)
			return fmt.Sprintf("request: %+v\nguardedjob: %+v\nevents: %v", cur.Status, h.get(gj).Status.Backfill, h.events(gj))
		})
		j := jobs[0]
		g.Expect(envOf(&j, "GUARDEDJOB_TRIGGER")).To(Equal(batchv1alpha1.TriggerBackfill))
		ran[j.Annotations[batchv1alpha1.ScheduledTimeAnnotation]] = true
		h.complete(&j)
		g.Eventually(func() []batchv1.Job { return h.unfinished(gj) }).WithTimeout(20 * time.Second).ShouldNot(ContainElement(HaveField("Name", j.Name)))
	}
	for _, at := range want {
		g.Expect(ran).To(HaveKey(at.UTC().Format(time.RFC3339)))
	}
	g.Eventually(func() batchv1alpha1.GuardedJobBackfillStatus {
		cur := &batchv1alpha1.GuardedJobBackfill{}
		g.Expect(oncall.Get(ctx, client.ObjectKeyFromObject(backfill), cur)).To(Succeed())
		return cur.Status
	}).WithTimeout(20 * time.Second).Should(And(HaveField("Phase", batchv1alpha1.RequestFinished),
		HaveField("Total", int32(2)), HaveField("Succeeded", int32(2)), HaveField("Remaining", int32(0))))
	g.Expect(h.events(gj)).To(ContainElement(HavePrefix("BackfillStarted: Backfill " + batchv1alpha1.BackfillRequestPrefix + string(backfill.UID))))
}

func TestRequests_ABadRequestIsRefusedWithItsReasonAndDeletedAfterItsTTL(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	g := h.g
	gj := h.create(h.guardedJob("report", h.ns+":report"))

	bad := &batchv1alpha1.GuardedJobRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "report-bad"},
		Spec: batchv1alpha1.GuardedJobRunSpec{GuardedJobName: gj.Name, Parameters: map[string]string{"EXTRA_ENV": "x"},
			TTLSecondsAfterFinished: ptr.To(int32(2))},
	}
	g.Expect(k8s.Create(ctx, bad)).To(Succeed())
	g.Eventually(func() batchv1alpha1.GuardedJobRunStatus { return h.runRequest(k8s, bad).Status }).WithTimeout(20 * time.Second).Should(And(
		HaveField("Phase", batchv1alpha1.RequestRefused), HaveField("Message", ContainSubstring("EXTRA_ENV"))))
	g.Expect(h.jobs()).To(BeEmpty(), "a refused request runs nothing")
	g.Expect(h.events(gj)).To(ContainElement(HavePrefix("InvalidParameters: ")))

	// Its TTL is counted on the manager's clock.
	h.clock.SetTime(time.Now().Add(3 * time.Second))
	g.Eventually(func() bool {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(bad), &batchv1alpha1.GuardedJobRun{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(20*time.Second).Should(BeTrue(), "a finished request is deleted after ttlSecondsAfterFinished")

	// A request naming no GuardedJob waits for one (a sync may create it
	// second), then is refused.
	orphan := &batchv1alpha1.GuardedJobRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "nobody"},
		Spec:       batchv1alpha1.GuardedJobRunSpec{GuardedJobName: "missing"},
	}
	g.Expect(k8s.Create(ctx, orphan)).To(Succeed())
	g.Eventually(func() batchv1alpha1.GuardedJobRunStatus { return h.runRequest(k8s, orphan).Status }).WithTimeout(20 * time.Second).Should(And(
		HaveField("Phase", batchv1alpha1.RequestPending), HaveField("Message", "waits for GuardedJob missing to exist in namespace "+h.ns)))
	g.Consistently(func() batchv1alpha1.RequestPhase { return h.runRequest(k8s, orphan).Status.Phase }).WithTimeout(time.Second).Should(Equal(batchv1alpha1.RequestPending))
	h.clock.SetTime(time.Now().Add(time.Duration(batchv1alpha1.RequestWaitForGuardedJob+1) * time.Second))
	g.Eventually(func() error { // any change brings a pass
		cur := h.runRequest(k8s, orphan)
		cur.Labels = map[string]string{"poke": time.Now().Format("150405.000")}
		return k8s.Update(ctx, cur)
	}).Should(Succeed())
	g.Eventually(func() batchv1alpha1.GuardedJobRunStatus { return h.runRequest(k8s, orphan).Status }).WithTimeout(20 * time.Second).Should(And(
		HaveField("Phase", batchv1alpha1.RequestRefused), HaveField("Message", "there is no GuardedJob missing in namespace "+h.ns)))

	// A backfill whose range does not read is refused, with the reason, and
	// deleted after its TTL like any finished request.
	badRange := &batchv1alpha1.GuardedJobBackfill{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "report-last-week"},
		Spec: batchv1alpha1.GuardedJobBackfillSpec{GuardedJobName: gj.Name, From: "last week!", To: "2026-11-30",
			TTLSecondsAfterFinished: ptr.To(int32(0))},
	}
	g.Expect(k8s.Create(ctx, badRange)).To(Succeed())
	g.Eventually(func() []string { return h.events(gj) }).WithTimeout(20 * time.Second).Should(
		ContainElement(HavePrefix("BackfillRefused: Refused GuardedJobBackfill report-last-week: spec.from \"last week!\"")))
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(badRange), &batchv1alpha1.GuardedJobBackfill{}))
	}).WithTimeout(20*time.Second).Should(BeTrue(), "deleted at once with ttlSecondsAfterFinished 0")

	// A request's spec cannot change once made.
	cur := h.runRequest(k8s, orphan)
	cur.Spec.GuardedJobName = gj.Name
	err := k8s.Update(ctx, cur)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
}

// TestRequests_AUserWhoMayOnlyCreateRequestsLooksAtTheStoreAndUnlocksAStaleLock:
// the on-call user of the requester role, with no access to the store and no
// patch on the GuardedJob, asks what holds its lock (a process outside
// GuardedJob that set it without an expiry), deletes that stale lock by the
// holder it saw, and an unlock naming a holder the key no longer has deletes
// nothing. Each answer is in the request's status, and the GuardedJob's events
// name the request.
func TestRequests_AUserWhoMayOnlyCreateRequestsLooksAtTheStoreAndUnlocksAStaleLock(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	g := h.g
	oncall := h.requesterClient()
	key := h.ns + ":stale"
	gj := h.create(h.guardedJob("stale", key))
	g.Expect(h.rdb.Set(ctx, key, "batch-host-7", 0).Err()).To(Succeed())
	h.clock.SetTime(time.Now())

	inspect := &batchv1alpha1.GuardedJobInspect{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, GenerateName: "stale-"},
		Spec:       batchv1alpha1.GuardedJobInspectSpec{GuardedJobName: gj.Name},
	}
	g.Expect(oncall.Create(ctx, inspect)).To(Succeed())
	var seen batchv1alpha1.GuardedJobInspectStatus
	g.Eventually(func() batchv1alpha1.RequestPhase {
		cur := &batchv1alpha1.GuardedJobInspect{}
		g.Expect(oncall.Get(ctx, client.ObjectKeyFromObject(inspect), cur)).To(Succeed())
		seen = cur.Status
		return cur.Status.Phase
	}).WithTimeout(20 * time.Second).Should(Equal(batchv1alpha1.RequestFinished))
	g.Expect(seen.Request).To(Equal(inspect.RequestValue()))
	g.Expect(seen.View).NotTo(BeNil())
	g.Expect(seen.View.Entries).To(HaveLen(1))
	g.Expect(seen.View.Entries[0].Lock).To(And(HaveField("Key", key), HaveField("Holder", "batch-host-7"),
		HaveField("Whose", batchv1alpha1.LockWhoseForeign), HaveField("NoExpiry", true)))
	g.Expect(seen.Conditions).To(ContainElement(And(HaveField("Type", batchv1alpha1.RequestCompleteCondition), HaveField("Status", metav1.ConditionTrue))))
	g.Expect(h.get(gj).Status.StoreView.Request).To(Equal(inspect.RequestValue()), "the GuardedJob's status records the answer too")

	unlock := func(holder string) (batchv1alpha1.GuardedJobUnlockStatus, string) {
		t.Helper()
		req := &batchv1alpha1.GuardedJobUnlock{
			ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, GenerateName: "stale-"},
			Spec:       batchv1alpha1.GuardedJobUnlockSpec{GuardedJobName: gj.Name, Holder: holder},
		}
		g.Expect(oncall.Create(ctx, req)).To(Succeed())
		var st batchv1alpha1.GuardedJobUnlockStatus
		g.Eventually(func() bool {
			cur := &batchv1alpha1.GuardedJobUnlock{}
			g.Expect(oncall.Get(ctx, client.ObjectKeyFromObject(req), cur)).To(Succeed())
			st = cur.Status
			return cur.Status.Phase.Final()
		}).WithTimeout(20 * time.Second).Should(BeTrue())
		g.Expect(st.Request).To(Equal(req.RequestValue()))
		return st, req.Name
	}
	st, name := unlock("batch-host-7")
	g.Expect(st).To(And(HaveField("Phase", batchv1alpha1.RequestFinished), HaveField("Result", batchv1alpha1.UnlockDeleted), HaveField("Key", key)), st.Message)
	g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero(), "the stale lock is gone")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement("ManualUnlock: Deleted lock " + key + " held by batch-host-7 (GuardedJobUnlock " + name + ")"))

	g.Expect(h.rdb.Set(ctx, key, "batch-host-8", 0).Err()).To(Succeed())
	st, _ = unlock("batch-host-7")
	g.Expect(st).To(And(HaveField("Phase", batchv1alpha1.RequestFinished), HaveField("Result", batchv1alpha1.UnlockChanged), HaveField("FoundHolder", "batch-host-8")), st.Message)
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal("batch-host-8"), "a lock that changed hands is left alone")
	g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix("DeprecatedAnnotation:")), "requests objects are not deprecated")

	// Answered requests go after their ttlSecondsAfterFinished.
	now := ptr.To(int32(0))
	shortLived := []client.Object{
		&batchv1alpha1.GuardedJobInspect{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, GenerateName: "stale-"},
			Spec: batchv1alpha1.GuardedJobInspectSpec{GuardedJobName: gj.Name, TTLSecondsAfterFinished: now}},
		&batchv1alpha1.GuardedJobUnlock{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, GenerateName: "stale-"},
			Spec: batchv1alpha1.GuardedJobUnlockSpec{GuardedJobName: gj.Name, Holder: "batch-host-9", TTLSecondsAfterFinished: now}},
	}
	for _, obj := range shortLived {
		g.Expect(oncall.Create(ctx, obj)).To(Succeed())
		g.Eventually(func() bool {
			err := oncall.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			return apierrors.IsNotFound(err)
		}).WithTimeout(20*time.Second).Should(BeTrue(), "%T %s is deleted once answered", obj, obj.GetName())
	}
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal("batch-host-8"))
}
