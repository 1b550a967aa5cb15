package controllers_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/bins"
)

// Git owns the spec. These stories apply a GuardedJob's manifest with the real
// kubectl, as Argo CD (client-side apply) and Flux (server-side apply) do,
// after the manager paused it, and check that every apply is accepted, that
// kubectl diff finds no drift, and that the object does not flap.

// gitops applies manifests to the test API server with the real kubectl.
type gitops struct {
	h          *harness
	kubeconfig string
	dir        string
}

func newGitops(h *harness) *gitops {
	h.t.Helper()
	dir := h.t.TempDir()
	user, err := testEnv.AddUser(envtest.User{Name: "gitops-" + h.ns, Groups: []string{"system:masters"}}, nil)
	h.g.Expect(err).NotTo(HaveOccurred())
	kc, err := user.KubeConfig()
	h.g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(dir, "kubeconfig")
	h.g.Expect(os.WriteFile(path, kc, 0o600)).To(Succeed())
	return &gitops{h: h, kubeconfig: path, dir: dir}
}

// kubectl runs kubectl and returns its exit code, stdout and stderr.
func (o *gitops) kubectl(args ...string) (int, string, string) {
	o.h.t.Helper()
	cmd := exec.Command(bins.Kubectl(o.h.t), append(args, "--kubeconfig", o.kubeconfig, "-n", o.h.ns)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		o.h.t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errOut.String()
}

// apply writes manifest to a file and applies it: client-side as Argo CD does,
// or server-side (without --force-conflicts: a field another manager owns
// would be refused) as Flux does, under the field manager it names.
func (o *gitops) apply(manifest string, serverSide bool) {
	o.h.t.Helper()
	path := filepath.Join(o.dir, "guardedjob.yaml")
	o.h.g.Expect(os.WriteFile(path, []byte(manifest), 0o600)).To(Succeed())
	args := []string{"apply", "-f", path}
	if serverSide {
		args = append(args, "--server-side", "--field-manager", "kustomize-controller")
	}
	code, stdout, stderr := o.kubectl(args...)
	o.h.g.Expect(code).To(Equal(0), "kubectl %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), stdout, stderr)
}

// inSync asserts that kubectl diff of the manifest finds nothing to change, as
// Argo CD's and Flux's drift detection would.
func (o *gitops) inSync(manifest string) {
	o.h.t.Helper()
	path := filepath.Join(o.dir, "diff.yaml")
	o.h.g.Expect(os.WriteFile(path, []byte(manifest), 0o600)).To(Succeed())
	code, stdout, stderr := o.kubectl("diff", "-f", path)
	o.h.g.Expect(code).To(Equal(0), "kubectl diff found drift:\n%s%s", stdout, stderr)
}

// settleManifest is the manifest in Git: a GuardedJob whose failure policy
// pauses it after one failed run, with spec.suspend as given (and a note).
func settleManifest(ns, suspendLines string) string {
	return fmt.Sprintf(`apiVersion: batch.guardedjob.dev/v1alpha1
kind: GuardedJob
metadata:
  name: settle
  namespace: %s
spec:
  schedule: "0 0 1 1 *"
%s  failurePolicy:
    suspendAfter: 1
  lock:
    key: %s:settle
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          terminationGracePeriodSeconds: 1
          containers:
          - name: work
            image: busybox
`, ns, suspendLines, ns)
}

func TestGitOps_AnApplyOfTheGitManifestAfterTheManagersPauseIsAcceptedAndNothingFlaps(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	git := newGitops(h)
	manifest := settleManifest(h.ns, "  suspend: false\n")
	for _, serverSide := range []bool{false, true} {
		name := map[bool]string{false: "client-side apply (Argo CD)", true: "server-side apply (Flux)"}[serverSide]
		t.Run(name, func(t *testing.T) {
			gj := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: "settle", Namespace: h.ns}}
			git.apply(manifest, serverSide)

			// One failed run pauses it.
			before := len(h.jobs())
			h.trigger(gj)
			var job batchv1.Job
			for _, j := range h.waitJobs(before + 1) {
				if len(j.Status.Conditions) == 0 {
					job = j
				}
			}
			h.waitRecorded(gj)
			h.fail(&job)
			g.Eventually(func() *batchv1alpha1.Pause { return h.get(gj).Status.Pause }).ShouldNot(BeNil())
			generation := h.get(gj).Generation

			// Git's manifest applies cleanly, again and again, and shows no drift;
			// the pause stays, and the spec stays Git's.
			for range 3 {
				git.apply(manifest, serverSide)
				git.inSync(manifest)
			}
			code, out, errOut := git.kubectl("get", "guardedjob", "settle")
			g.Expect(code).To(BeZero(), "kubectl get guardedjob settle: %s", errOut)
			code, cond, errOut := git.kubectl("get", "guardedjob", "settle", "-o", `jsonpath={range .status.conditions[?(@.type=="Paused")]}{.type}={.status} {.reason}: {.message}{end}`)
			g.Expect(code).To(BeZero(), errOut)
			g.Expect(cond).To(HavePrefix("Paused=True"))
			t.Logf("after the pause and three applies of the manifest:\n%s%s", out, cond)
			g.Consistently(func() int64 { return h.get(gj).Generation }).WithTimeout(2 * time.Second).Should(Equal(generation))
			cur := h.get(gj)
			g.Expect(cur.Status.Pause).NotTo(BeNil(), "an apply of the manifest does not end the manager's pause")
			g.Expect(cur.Spec.SuspendNote).To(BeNil())
			g.Expect(*cur.Spec.Suspend).To(BeFalse())
			for _, f := range cur.ManagedFields {
				if f.Subresource == "" && f.Manager != "kubectl-client-side-apply" && f.Manager != "kustomize-controller" && f.Manager != "before-first-apply" {
					g.Expect(f.FieldsV1.String()).NotTo(ContainSubstring(`"f:spec"`), "manager %s owns spec fields", f.Manager)
				}
			}

			// A resume request ends it; the manifest is still in sync.
			h.request(gj, map[string]string{batchv1alpha1.ResumeAnnotation: h.clock.Now().UTC().Format(time.RFC3339Nano) + name})
			g.Eventually(func() *batchv1alpha1.Pause { return h.get(gj).Status.Pause }).Should(BeNil())
			git.inSync(manifest)
			g.Expect(k8s.Delete(context.Background(), gj)).To(Succeed())
			g.Eventually(func() bool { return h.gone(gj) }).Should(BeTrue())
		})
	}
}

func TestGitOps_ATimedSuspensionCommittedToGitEndsAtUntilWithoutALoop(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	git := newGitops(h)
	h.clock.SetTime(time.Now())
	until := h.clock.Now().Add(time.Hour).UTC().Truncate(time.Second)
	manifest := settleManifest(h.ns, fmt.Sprintf("  suspend: true\n  suspendNote:\n    by: platform-team\n    reason: quarter close\n    until: %q\n", until.Format(time.RFC3339)))
	gj := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: "settle", Namespace: h.ns}}
	git.apply(manifest, true)
	g.Eventually(func() bool { return h.get(gj).Status.Suspended }).Should(BeTrue())

	h.clock.SetTime(until.Add(time.Second))
	h.poke(gj)
	g.Eventually(func() *metav1.Condition { return h.condition(gj, batchv1alpha1.SuspendedCondition) }).Should(
		HaveField("Reason", batchv1alpha1.SuspendExpiredReason))
	generation := h.get(gj).Generation
	// Self-heal applies Git again: accepted, no drift, no write back.
	for range 3 {
		git.apply(manifest, true)
		git.apply(manifest, false)
		git.inSync(manifest)
		h.poke(gj)
	}
	g.Consistently(func() int64 { return h.get(gj).Generation }).WithTimeout(2 * time.Second).Should(Equal(generation))
	g.Expect(h.get(gj).Status.Suspended).To(BeFalse(), "runs are scheduled again after until")
	g.Expect(h.get(gj).Status.NextScheduleTime).NotTo(BeNil())
}

func TestGitOps_APauseAnEarlierVersionWroteIntoSpecMovesToStatusOnce(t *testing.T) {
	h := newHarness(t)
	g := h.g
	git := newGitops(h)
	ctx := context.Background()
	// What an earlier manager left, before this one starts: the manifest says
	// suspend: false, the object carries the failure policy's suspend: true
	// with its note (which made the schema refuse the next apply of the
	// manifest), and the status the old manager wrote says why.
	legacy := func(name string) *batchv1alpha1.GuardedJob {
		gj := h.guardedJob(name, h.ns+":"+name)
		gj.Spec.Suspend = ptr.To(true)
		gj.Spec.SuspendNote = &batchv1alpha1.SuspendNote{By: batchv1alpha1.FailurePolicySuspender, Reason: "3 runs in a row failed"}
		return h.create(gj)
	}
	gj := legacy("settle")
	since := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	gj.Status.Conditions = []metav1.Condition{{Type: batchv1alpha1.SuspendedCondition, Status: metav1.ConditionTrue,
		Reason: batchv1alpha1.TooManyFailuresReason, Message: "suspended: no new runs are scheduled (by guardedjob-manager): 3 runs in a row failed", LastTransitionTime: since}}
	g.Expect(k8s.Status().Update(ctx, gj)).To(Succeed())
	// The same note, written by whoever may edit the spec (no such status):
	// it is the manifest's own suspension, and stays.
	copied := legacy("copied")
	h.start()

	g.Eventually(func() *batchv1alpha1.Pause { return h.get(gj).Status.Pause }).Should(And(Not(BeNil()),
		HaveField("By", batchv1alpha1.FailurePolicySuspender), HaveField("Reason", "3 runs in a row failed"),
		HaveField("Since", Equal(since))))
	cur := h.get(gj)
	g.Expect(cur.Spec.Suspended()).To(BeFalse())
	g.Expect(cur.Spec.SuspendNote).To(BeNil())
	g.Expect(cur.Status.Suspended).To(BeTrue(), "still paused, now in status")
	g.Expect(h.condition(gj, batchv1alpha1.PausedCondition)).To(HaveField("Reason", batchv1alpha1.TooManyFailuresReason))
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("PauseMovedToStatus: ")))
	// The manifest applies again, server-side, without --force-conflicts.
	git.apply(settleManifest(h.ns, "  suspend: false\n"), true)

	// Git holding a copy of the old object puts the note back: it is the
	// manifest's now, and the manager never removes it again (no loop with
	// self-heal), during the pause and after its resume.
	withNote := settleManifest(h.ns, "  suspend: true\n  suspendNote:\n    by: guardedjob-manager\n    reason: 3 runs in a row failed\n")
	git.apply(withNote, false) // client-side: the test, not Git, created the object and owns its fields
	h.request(gj, map[string]string{batchv1alpha1.ResumeAnnotation: "resume-1"})
	g.Eventually(func() *batchv1alpha1.Pause { return h.get(gj).Status.Pause }).Should(BeNil())
	generation := h.get(gj).Generation
	h.poke(gj)
	g.Consistently(func() int64 { return h.get(gj).Generation }).WithTimeout(2 * time.Second).Should(Equal(generation))
	g.Expect(h.get(gj).Spec.SuspendNote).NotTo(BeNil())
	g.Expect(h.condition(gj, batchv1alpha1.SuspendedCondition)).To(HaveField("Reason", batchv1alpha1.SuspendRequestedReason))
	git.inSync(withNote)

	g.Eventually(func() *metav1.Condition { return h.condition(copied, batchv1alpha1.SuspendedCondition) }).Should(And(Not(BeNil()),
		HaveField("Reason", batchv1alpha1.SuspendRequestedReason)))
	g.Expect(h.get(copied).Spec.SuspendNote).To(Equal(copied.Spec.SuspendNote))
	g.Expect(h.get(copied).Status.Pause).To(BeNil())

	// A person's own note is never moved or removed.
	other := h.guardedJob("mine", h.ns+":mine")
	other.Spec.Suspend = ptr.To(true)
	other.Spec.SuspendNote = &batchv1alpha1.SuspendNote{By: "alice", Reason: "db migration"}
	h.create(other)
	g.Eventually(func() *metav1.Condition { return h.condition(other, batchv1alpha1.SuspendedCondition) }).Should(
		HaveField("Reason", batchv1alpha1.SuspendRequestedReason))
	g.Expect(h.get(other).Spec.SuspendNote).To(Equal(other.Spec.SuspendNote))
	g.Expect(h.get(other).Status.Pause).To(BeNil())
}
