package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/bins"
	"github.com/guardedjob/guardedjob/internal/testutil/testproc"
)

// startAggregation runs kube-controller-manager's ClusterRole aggregation, so
// that the project's editor and viewer roles become part of the built-in edit
// and view roles, as in a real cluster.
func startAggregation(t *testing.T, w *world) {
	t.Helper()
	p, err := testproc.Start("kube-controller-manager", filepath.Join(t.TempDir(), "kcm.log"),
		filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager"),
		"--kubeconfig="+w.kubeconfig, "--secure-port=0", "--leader-elect=false",
		"--controllers=clusterrole-aggregation-controller", "--use-service-account-credentials=false")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
}

// applyClusterRole creates a ClusterRole from a file of config/rbac.
func (w *world) applyClusterRole(g Gomega, file string) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", file))
	g.Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	g.Expect(yaml.Unmarshal(raw, role)).To(Succeed())
	g.Expect(w.k8s.Create(context.Background(), role)).To(Succeed())
}

// bind gives user the built-in ClusterRole role in namespace.
func (w *world) bind(g Gomega, namespace, user, role string) {
	g.Expect(w.k8s.Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-" + role, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	})).To(Succeed())
}

// may asks the API server whether user may verb the resource.
func (w *world) may(g Gomega, user, verb, group, resource, namespace, name string) bool {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: group, Resource: resource, Name: name}}}
	g.Expect(w.k8s.Create(context.Background(), sar)).To(Succeed())
	return sar.Status.Allowed
}

// kubectl runs the kubectl built at the API server's version with the plugin on
// its PATH, as a user would type the command.
func (w *world) kubectl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bins.Kubectl(t), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+w.kubeconfig, "HOME="+t.TempDir(),
		"PATH="+filepath.Dir(bins.Plugin(t))+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errOut.String()
	}
	if err != nil {
		t.Fatalf("kubectl %v: %v", args, err)
	}
	return 0, out.String(), errOut.String()
}

// events lists the events.k8s.io events of a namespace.
func (w *world) events(g Gomega, namespace string) []eventsv1.Event {
	list := &eventsv1.EventList{}
	g.Expect(w.k8s.List(context.Background(), list, client.InNamespace(namespace))).To(Succeed())
	return list.Items
}

func tenantJob(namespace, name, key string) *batchv1alpha1.GuardedJob {
	return &batchv1alpha1.GuardedJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: batchv1alpha1.GuardedJobSpec{Schedule: "@daily", Lock: batchv1alpha1.LockSpec{Key: key},
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "w", Image: "busybox"}}}}}}},
	}
}

// A tenant with only the built-in edit role in namespace team-a sees what the
// lock store holds for team-a's GuardedJobs and unlocks a stale lock there,
// with no access to Redis or to the manager's store Secret; team-b's locks and
// keys outside team-a's grants are refused, a live run's lease cannot be
// unlocked, and a user who may only read is told what they can see instead.
func TestTenantSeesAndUnlocksItsLocksWithoutStoreCredentials(t *testing.T) {
	w := startWorld(t)
	g := NewWithT(t)
	ctx := context.Background()
	rdb := w.redis.Client(t)
	startAggregation(t, w)
	w.applyClusterRole(g, "guardedjob_editor_role.yaml")
	w.applyClusterRole(g, "guardedjob_viewer_role.yaml")
	w.applyClusterRole(g, "guardedjob_requester_role.yaml")
	for _, ns := range []string{"team-a", "team-b"} {
		g.Expect(w.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	w.bind(g, "team-a", "alice", "edit")
	w.bind(g, "team-a", "bob", "view")
	g.Eventually(func() bool {
		return w.may(g, "alice", "patch", batchv1alpha1.GroupVersion.Group, "guardedjobs", "team-a", "")
	}).
		WithTimeout(60*time.Second).Should(BeTrue(), "the editor role is aggregated into edit")
	g.Eventually(func() bool {
		return w.may(g, "bob", "watch", batchv1alpha1.GroupVersion.Group, "guardedjobs", "team-a", "")
	}).
		WithTimeout(60*time.Second).Should(BeTrue(), "the viewer role is aggregated into view")

	for _, gj := range []*batchv1alpha1.GuardedJob{
		tenantJob("team-a", "settle", "team-a:settle"),
		tenantJob("team-a", "foreign", "payments:settlement"),
		tenantJob("team-b", "other", "team-b:other"),
	} {
		g.Expect(w.k8s.Create(ctx, gj)).To(Succeed())
	}
	g.Expect(rdb.Set(ctx, "team-a:settle", "cluster-b/team-a/settle-1-abcdef#tokenpart", 10*time.Minute).Err()).To(Succeed())
	g.Expect(rdb.Set(ctx, "payments:settlement", "cluster-x/payments/settle-9-999999#paytoken", 10*time.Minute).Err()).To(Succeed())
	g.Expect(rdb.Set(ctx, "team-b:other", "cluster-b/team-b/other-1-bbbbbb#btoken", 10*time.Minute).Err()).To(Succeed())
	alice := func(stdin string, args ...string) (int, string, string) {
		return w.plugin(stdin, nil, append([]string{"--as", "alice"}, args...)...)
	}

	t.Run("alice may read neither the store Secret nor team-b", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(w.may(g, "alice", "get", "", "secrets", "guardedjob-system", "guardedjob-redis")).To(BeFalse())
		code, stdout, _ := w.kubectl(t, "auth", "can-i", "get", "secret/guardedjob-redis", "-n", "guardedjob-system", "--as", "alice")
		g.Expect(code).To(Equal(1))
		g.Expect(stdout).To(Equal("no\n"))
		g.Expect(w.may(g, "alice", "patch", batchv1alpha1.GroupVersion.Group, "guardedjobs/status", "team-a", "settle")).To(BeFalse(),
			"status, and so the manager's answers, are the manager's alone")

		code, _, stderr := alice("", "-n", "team-a", "status", "settle", "--redis-secret", storeSecret)
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring(`secrets "guardedjob-redis" is forbidden: User "alice" cannot get resource "secrets"`))
	})

	t.Run("kubectl guardedjob --as alice -n team-a status shows Redis now", func(t *testing.T) {
		g := NewWithT(t)
		code, stdout, stderr := w.kubectl(t, "guardedjob", "--as", "alice", "-n", "team-a", "status", "settle")
		g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s\nmanager:\n%s", stdout, stderr, w.managerLog)
		g.Expect(stdout).To(MatchRegexp(`lock\s+team-a:settle\s+held by cluster-b/team-a/settle-1-abcdef \(cluster cluster-b\), expires in \d`))
		g.Expect(stdout).To(MatchRegexp(`fence\s+team-a:settle:fence\s+0\n`))
		g.Expect(stdout).To(MatchRegexp(`done-marker\s+team-a:settle:done:\d+\s+absent`))
		g.Expect(stdout).NotTo(ContainSubstring("tokenpart"), "holders only, never tokens")
	})

	t.Run("team-b is refused", func(t *testing.T) {
		g := NewWithT(t)
		code, _, stderr := w.kubectl(t, "guardedjob", "--as", "alice", "-n", "team-b", "status", "other")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring(`Error from server (Forbidden): guardedjobs.batch.guardedjob.dev "other" is forbidden: User "alice" cannot get resource "guardedjobs"`))
		code, _, stderr = alice("", "-n", "team-b", "locks")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("Forbidden"))
		code, _, stderr = alice("", "-n", "team-b", "unlock", "other", "--force", "--yes")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("Forbidden"))
		g.Expect(rdb.Get(ctx, "team-b:other").Val()).To(HavePrefix("cluster-b/team-b/other-1-bbbbbb#"))
		gj := &batchv1alpha1.GuardedJob{}
		g.Expect(w.k8s.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "other"}, gj)).To(Succeed())
		g.Expect(gj.Annotations).NotTo(HaveKey(batchv1alpha1.InspectNowAnnotation))
	})

	t.Run("a key outside team-a's grants is not read", func(t *testing.T) {
		g := NewWithT(t)
		code, stdout, stderr := alice("", "-n", "team-a", "status", "foreign")
		g.Expect(code).To(Equal(1))
		g.Expect(stdout).To(ContainSubstring("Redis now: not available: the store is not read while the spec is invalid (Ready=False, KeyNotAllowed)"))
		g.Expect(stderr).To(ContainSubstring("KeyNotAllowed"))
		g.Expect(stdout + stderr).NotTo(ContainSubstring("cluster-x"))

		code, stdout, stderr = alice("", "-n", "team-a", "locks")
		g.Expect(code).To(Equal(1))
		g.Expect(stdout).To(MatchRegexp(`(?m)^settle\s+team-a:settle\s+cluster-b/team-a/settle-1-abcdef\s+cluster cluster-b\s+\d`))
		g.Expect(stderr).To(ContainSubstring("team-a/foreign: the store is not read while the spec is invalid (Ready=False, KeyNotAllowed)"))
		g.Expect(stdout + stderr).NotTo(ContainSubstring("cluster-x"))
	})

	t.Run("bob, who may only read, is told so and sees the last observation", func(t *testing.T) {
		g := NewWithT(t)
		code, stdout, stderr := w.plugin("", nil, "--as", "bob", "-n", "team-a", "status", "settle")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(ContainSubstring("Redis now: not available: asking the manager what the lock store holds needs create on guardedjobinspects in namespace team-a (the guardedjob-requester role, part of edit); you may only read."))
		g.Expect(stdout).To(MatchRegexp(`last answer of the manager, read at \S+:\n\s+lock\s+team-a:settle\s+held by cluster-b/team-a/settle-1-abcdef`))

		code, stdout, stderr = w.plugin("", nil, "--as", "bob", "-n", "team-a", "locks")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stderr).To(ContainSubstring("note: lines marked (recorded) are the last observation in status"))
		g.Expect(stdout).To(MatchRegexp(`(?m)^settle\s+team-a:settle\s+cluster-b/team-a/settle-1-abcdef\s+\(recorded\) cluster cluster-b\s`))

		code, _, stderr = w.plugin("", nil, "--as", "bob", "-n", "team-a", "unlock", "settle", "--force", "--yes")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("unlock needs create on guardedjobinspects and guardedjobunlocks in namespace team-a (the guardedjob-requester role, part of edit)"))
		g.Expect(rdb.Exists(ctx, "team-a:settle").Val()).To(Equal(int64(1)))
	})

	t.Run("alice unlocks the stale lock of team-a; the manager records it", func(t *testing.T) {
		g := NewWithT(t)
		// With time to live, cluster-b's lease is a run that may still be working
		// there: not even offered.
		code, stdout, stderr := alice("", "-n", "team-a", "unlock", "settle", "--force", "--yes")
		g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		g.Expect(stdout).To(ContainSubstring("lock team-a:settle is held by cluster-b/team-a/settle-1-abcdef (cluster cluster-b), a GuardedJob lease that expires by itself in"))
		g.Expect(rdb.Exists(ctx, "team-a:settle").Val()).To(Equal(int64(1)))
		// Stale for good: written back without an expiry.
		g.Expect(rdb.Persist(ctx, "team-a:settle").Err()).To(Succeed())
		code, stdout, stderr = alice("y\n", "-n", "team-a", "unlock", "settle", "--force")
		g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		g.Expect(stdout).To(ContainSubstring("Delete lock team-a:settle (held by cluster-b/team-a/settle-1-abcdef (cluster cluster-b), no expiry"))
		g.Expect(stdout).To(ContainSubstring("deleted lock team-a:settle"))
		g.Expect(rdb.Exists(ctx, "team-a:settle").Val()).To(BeZero())
		// The manager's event recorder writes events in the background.
		g.Eventually(func(g Gomega) []eventsv1.Event {
			return w.events(g, "team-a")
		}).Should(ContainElement(And(
			HaveField("Reason", batchv1alpha1.ManualUnlockReason), HaveField("Regarding.Name", "settle"),
			HaveField("ReportingController", Not(ContainSubstring("kubectl"))),
			HaveField("Note", HavePrefix("Deleted lock team-a:settle held by cluster-b/team-a/settle-1-abcdef")))))
	})

	t.Run("a live run's lease cannot be unlocked", func(t *testing.T) {
		g := NewWithT(t)
		code, stdout, stderr := alice("", "-n", "team-a", "run", "settle", "--timeout", "60s")
		g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s\nmanager:\n%s", stdout, stderr, w.managerLog)
		gj := &batchv1alpha1.GuardedJob{}
		g.Expect(w.k8s.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "settle"}, gj)).To(Succeed())
		g.Expect(gj.Status.Active).To(HaveLen(1))
		run := gj.Status.Active[0]

		code, stdout, _ = alice("", "-n", "team-a", "unlock", "settle", "--force", "--yes")
		g.Expect(code).To(Equal(0))
		g.Expect(stdout).To(ContainSubstring("lock team-a:settle is held by the active run " + run.Holder + " of this GuardedJob: not deleting it"))

		// Asking the manager directly, as kubectl annotate would, is refused too.
		value := time.Now().UTC().Format(time.RFC3339)
		code, _, stderr = w.kubectl(t, "annotate", "--as", "alice", "-n", "team-a", "gj", "settle", "--overwrite",
			batchv1alpha1.UnlockAnnotation+"="+value, batchv1alpha1.UnlockHolderAnnotation+"="+run.Holder)
		g.Expect(code).To(Equal(0), stderr)
		g.Eventually(func() *batchv1alpha1.UnlockRecord {
			_ = w.k8s.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "settle"}, gj)
			return gj.Status.LastUnlock
		}).Should(And(Not(BeNil()), HaveField("Request", value), HaveField("Result", batchv1alpha1.UnlockRefused),
			HaveField("Message", ContainSubstring("the active run "+run.JobName+" of this GuardedJob"))))
		g.Expect(rdb.Get(ctx, "team-a:settle").Val()).To(Equal(run.Token))
		g.Eventually(func(g Gomega) []eventsv1.Event {
			return w.events(g, "team-a")
		}).Should(ContainElement(HaveField("Reason", batchv1alpha1.UnlockRefusedReason)))
	})
}
