package controllers_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
	"github.com/guardedjob/guardedjob/internal/runtoken"
)

// Stories of input a tenant can write: a Job of its own making, or an
// annotation it changed, is a hint to the manager, never an input.

// forgedJob is a Job a tenant created in its namespace that looks like a run's
// Job waiting for adoption: gated, owned by gj, carrying run.
func (h *harness) forgedJob(gj *batchv1alpha1.GuardedJob, run batchv1alpha1.ActiveRun) *batchv1.Job {
	h.t.Helper()
	job, _ := jobbuild.Build(gj, &run)
	raw, err := json.Marshal(run)
	h.g.Expect(err).NotTo(HaveOccurred())
	job.Annotations[batchv1alpha1.RunAnnotation] = string(raw)
	h.g.Expect(jobbuild.Gated(job)).To(BeTrue())
	h.g.Expect(k8s.Create(context.Background(), job)).To(Succeed())
	return job
}

// editRunAnnotation changes a Job's run annotation as a tenant who may edit
// Jobs can.
func (h *harness) editRunAnnotation(job *batchv1.Job, edit func(*batchv1alpha1.ActiveRun)) {
	h.t.Helper()
	var run batchv1alpha1.ActiveRun
	h.g.Expect(json.Unmarshal([]byte(job.Annotations[batchv1alpha1.RunAnnotation]), &run)).To(Succeed())
	edit(&run)
	raw, err := json.Marshal(run)
	h.g.Expect(err).NotTo(HaveOccurred())
	patch := client.MergeFrom(job.DeepCopy())
	job.Annotations[batchv1alpha1.RunAnnotation] = string(raw)
	h.g.Expect(k8s.Patch(context.Background(), job, patch)).To(Succeed())
}

// TestUntrusted_ATenantsJobNamingAnotherNamespacesKeyNeverMakesTheManagerReadIt:
// a tenant who may create Jobs in its namespace creates one that looks like a
// run's Job waiting for adoption, whose run annotation names a key of another
// namespace in the shared store. The manager must never ask the store about
// that key (the keys of a run come from the spec, checked against the
// namespace's grants, before any store call), and no event may repeat that
// key's value: the Job is deleted, saying only that it does not match.
func TestUntrusted_ATenantsJobNamingAnotherNamespacesKeyNeverMakesTheManagerReadIt(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	g := h.g
	gj := h.create(h.guardedJob("mine", h.ns+":mine"))
	g.Eventually(func() *metav1.Time { return h.get(gj).Status.NextScheduleTime }).ShouldNot(BeNil())
	gj = h.get(gj)
	const victim, secret = "victim:payroll", "s3cr3t-payroll-value"
	g.Expect(h.rdb.Set(ctx, victim, secret, time.Hour).Err()).To(Succeed())
	store := h.redis.Monitor(t)

	scheduled := time.Now().Truncate(time.Minute)
	name := runtoken.JobName(gj.Name, scheduled, "abcdef")
	forged := h.forgedJob(gj, batchv1alpha1.ActiveRun{
		JobName: name, ScheduledTime: metav1.Time{Time: scheduled}, Key: victim, OccurrenceKey: victim + ":done", FenceKey: victim + ":fence",
		Holder: "cluster-a/" + h.ns + "/" + name, Cluster: "cluster-a", OwnerUID: gj.UID, Fence: 1,
		TTL: metav1.Duration{Duration: time.Minute}, RenewInterval: metav1.Duration{Duration: 20 * time.Second},
		MaxHold: metav1.Duration{Duration: 24 * time.Hour}, EnvName: batchv1alpha1.DefaultFenceEnvName,
		FencingPolicy: batchv1alpha1.FencingInject, StoreFailurePolicy: batchv1alpha1.FailClosed,
	})
	g.Eventually(func() bool { return h.jobDeleted(forged) }).Should(BeTrue(), "the forged Job is deleted")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(And(HavePrefix("StaleJob: Deleted Job "+name), ContainSubstring("does not match"))))
	store.Stop()
	g.Expect(store.Mentioning(victim)).To(BeEmpty(), "the store was never asked about another namespace's key")
	for _, e := range h.eventsAll() {
		g.Expect(e).NotTo(ContainSubstring(secret), "no event repeats another key's value")
	}
	g.Expect(h.rdb.Get(ctx, victim).Val()).To(Equal(secret))
	g.Expect(h.get(gj).Status.Active).To(BeEmpty(), "nothing was adopted")
}

// TestUntrusted_AnAnnotationThatLengthensTheLeaseIsNeverAdopted: a run's Job
// waits for adoption after its manager died before recording the run; a
// tenant edits the Job's run annotation to a ttl of an hour and a maxHold of a
// month. Adopted as written, the run's renewals would keep the key an hour
// past any crash and its run past the spec's maxHold. The lease timing of a run
// comes from the spec: the Job is not adopted and its key is not renewed with
// the tenant's timing.
func TestUntrusted_AnAnnotationThatLengthensTheLeaseIsNeverAdopted(t *testing.T) {
	h := newHarness(t)
	h.order = orderRecordFirst // its Job waits at its gate for the status write
	ctx := context.Background()
	g := h.g
	gj, job, token := h.unrecordedJob("lengthened")
	key := h.ns + ":lengthened"

	h.editRunAnnotation(&job, func(run *batchv1alpha1.ActiveRun) {
		run.TTL = metav1.Duration{Duration: time.Hour}
		run.MaxHold = metav1.Duration{Duration: 30 * 24 * time.Hour}
	})

	h.start()
	h.unadoptedDeleted(gj, &job, "does not match")
	g.Expect(h.rdb.PTTL(ctx, key).Val()).To(BeNumerically("<=", gj.Spec.Lock.TTLOrDefault()), "never renewed with the tenant's ttl")
	if v := h.rdb.Get(ctx, key).Val(); v != "" {
		g.Expect(v).To(Equal(token), "nobody else took it")
	}
	g.Expect(ptr.Deref(job.Spec.Suspend, false)).To(BeTrue())
}

// TestUntrusted_AnAnnotationNamingAPendingRequestNeverAnswersIt: a run's Job
// waits for adoption after its manager died before recording the run, a run
// the run-now annotation started. A GuardedJobRun is created meanwhile, and a
// tenant who may edit Jobs changes the Job's run annotation to say that the
// request started it. Adopted as written, the request would read Running with
// that Job (a run it never asked for, without its parameters), and no run of
// its own would start. What started a run (its trigger or request, parameters,
// backfill, retry and start deadline) is bound into its lease token, which
// only the manager writes: the Job is not adopted, and the request gets an
// answer of its own.
func TestUntrusted_AnAnnotationNamingAPendingRequestNeverAnswersIt(t *testing.T) {
	h := newHarness(t)
	h.order = orderRecordFirst // its Job waits at its gate for the status write
	ctx := context.Background()
	g := h.g
	gj, job, _ := h.unrecordedJob("answered")

	req := &batchv1alpha1.GuardedJobRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, GenerateName: "answered-"},
		Spec:       batchv1alpha1.GuardedJobRunSpec{GuardedJobName: gj.Name},
	}
	g.Expect(k8s.Create(ctx, req)).To(Succeed())
	h.editRunAnnotation(&job, func(run *batchv1alpha1.ActiveRun) {
		g.Expect(run.RunNow).NotTo(BeEmpty(), "the run-now annotation started the run")
		run.RunNow = req.RequestValue()
	})

	h.start()
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(And(
		HavePrefix("StaleJob: Deleted Job "+job.Name+", which was created before its run was recorded and never started"),
		ContainSubstring("does not match the run"))))
	g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix("RunAdopted:")))
	g.Eventually(func() bool {
		cur := &batchv1.Job{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(&job), cur)
		if err != nil {
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			return true
		}
		if cur.UID != job.UID {
			return true
		}
		g.Expect(jobbuild.Gated(cur)).To(BeTrue(), "never started: still suspended at its start gate")
		return !cur.DeletionTimestamp.IsZero()
	}).Should(BeTrue(), "the Job is deleted")
	// The request's answer, once it has one, names a Job started for it: its
	// Pods are told which request started them. (A Job of the same name may
	// answer it: a run that takes up the lease the deleted Job left gets that
	// lease's Job name, and a Job of its own.)
	var answered batchv1alpha1.GuardedJobRunStatus
	g.Eventually(func() batchv1alpha1.RequestPhase {
		cur := &batchv1alpha1.GuardedJobRun{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(req), cur)).To(Succeed())
		answered = cur.Status
		return cur.Status.Phase
	}).WithTimeout(30*time.Second).Should(BeElementOf(batchv1alpha1.RequestRunning, batchv1alpha1.RequestFinished), "the request gets an answer of its own")
	if answered.JobName != "" {
		var mine batchv1.Job
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: h.ns, Name: answered.JobName}, &mine)).To(Succeed())
		g.Expect(mine.UID).NotTo(Equal(job.UID), "the request is never answered with a Job it did not start")
		g.Expect(envOf(&mine, "GUARDEDJOB_REQUEST")).To(Equal(req.RequestValue()))
	}
}
