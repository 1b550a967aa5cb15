// Package undeploy_test runs hack/undeploy.sh (make undeploy) with kubectl against a
// real API server: it must not remove the manager while a GuardedJob still has a run
// to stop, must say what is still running when it gives up, and must remove the
// manager and the CRD once the GuardedJobs are gone.
package undeploy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/bins"
)

// world is an API server with what make deploy installs. sh runs a command in the
// checkout with the API server's kubeconfig, UNDEPLOY_TIMEOUT and KUBECTL (the real
// kubectl, kctl, unless given another).
type world struct {
	k8s  client.Client
	gj   *batchv1alpha1.GuardedJob
	sh   func(timeout, kubectl string, args ...string) *exec.Cmd
	kctl string
}

// start starts cmd in a process group of its own and returns where its exit comes;
// the test's end kills the group: the script and the kubectl it waits on (a kubectl
// delete that waits for a CRD whose objects keep their finalizers never returns).
func start(t *testing.T, cmd *exec.Cmd) <-chan error {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return exited
}

// deployed starts an API server, installs what make deploy installs with kubectl, and
// creates a GuardedJob whose run the manager is still stopping (its finalizer stays
// until the run's Pods are gone and the lease is released).
func deployed(t *testing.T) *world {
	t.Helper()
	g := NewWithT(t)
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds kube-apiserver and etcd")
	}
	kubectl := bins.Kubectl(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	g.Expect(err).NotTo(HaveOccurred())

	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kc, err := user.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, kc, 0o600)).To(Succeed())

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(batchv1alpha1.AddToScheme(scheme))
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()

	sh := func(timeout, kctl string, args ...string) *exec.Cmd {
		if kctl == "" {
			kctl = kubectl
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "UNDEPLOY_TIMEOUT="+timeout, "KUBECTL="+kctl)
		return cmd
	}
	// What make deploy installs.
	if out, err := sh("", "", kubectl, "apply", "--server-side", "-k", "config/default").CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -k config/default: %v\n%s", err, out)
	}
	// Every kind served, as on a cluster where the operator has run: deleted while the
	// API server still initializes a kind's storage, a CRD waits on its clean-up
	// ("could not list instances: storage is (re)initializing"), retried with a
	// growing backoff, for minutes.
	for _, list := range []client.ObjectList{&batchv1alpha1.GuardedJobList{}, &batchv1alpha1.GuardedJobRunList{},
		&batchv1alpha1.GuardedJobBackfillList{}, &batchv1alpha1.GuardedJobInspectList{}, &batchv1alpha1.GuardedJobUnlockList{}} {
		g.Eventually(func() error { return k8s.List(ctx, list) }).WithTimeout(30 * time.Second).Should(Succeed())
	}

	// A GuardedJob whose run the manager is still stopping: its finalizer stays
	// until the run's Pods are gone and the lease is released.
	gj := &batchv1alpha1.GuardedJob{
		ObjectMeta: metav1.ObjectMeta{Name: "settle", Namespace: "default", Finalizers: []string{batchv1alpha1.GuardedJobFinalizer}},
		Spec: batchv1alpha1.GuardedJobSpec{
			Schedule: "@daily", Lock: batchv1alpha1.LockSpec{Key: "default:settle"}, OnDelete: batchv1alpha1.OnDeleteWait,
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "w", Image: "busybox"}}}}}},
		},
	}
	g.Expect(k8s.Create(ctx, gj)).To(Succeed())
	gj.Status.Active = []batchv1alpha1.ActiveRun{{JobName: "settle-29412000-5f3a9c", Phase: batchv1alpha1.RunPhaseRunning, ScheduledTime: metav1.Now()}}
	g.Expect(k8s.Status().Update(ctx, gj)).To(Succeed())
	return &world{k8s: k8s, gj: gj, sh: sh, kctl: kubectl}
}

func TestUndeployWaitsForRunsThenRemovesManagerAndCRD(t *testing.T) {
	g := NewWithT(t)
	w := deployed(t)
	k8s, gj, ctx := w.k8s, w.gj, context.Background()
	sh := func(timeout string, args ...string) *exec.Cmd { return w.sh(timeout, "", args...) }

	// Gives up after UNDEPLOY_TIMEOUT, says what is still running, removes nothing.
	var stderr bytes.Buffer
	giveUp := sh("3s", "hack/undeploy.sh")
	giveUp.Stderr = &stderr
	err := giveUp.Run()
	g.Expect(err).To(HaveOccurred(), "exit 1 when runs are still going")
	g.Expect(stderr.String()).To(ContainSubstring("gave up after 3s"))
	g.Expect(stderr.String()).To(MatchRegexp(`default\s+settle\s+Wait\s+settle-29412000-5f3a9c`))
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "guardedjob-system", Name: "guardedjob-manager"}, &appsv1.Deployment{})).To(Succeed(), "the manager must stay to finish the runs")
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "guardedjob-manager-role"}, &rbacv1.ClusterRole{})).To(Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(gj), gj)).To(Succeed())
	g.Expect(gj.DeletionTimestamp).NotTo(BeNil(), "the GuardedJob was deleted, its finalizer holds it")

	// Once the run has stopped (the manager drops the finalizer), everything goes.
	var out bytes.Buffer
	finish := sh("60s", "hack/undeploy.sh")
	finish.Stdout, finish.Stderr = &out, &out
	exited := start(t, finish)
	g.Consistently(exited).WithTimeout(3*time.Second).ShouldNot(Receive(), "undeploy waits for the GuardedJob")
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "guardedjob-system", Name: "guardedjob-manager"}, &appsv1.Deployment{})).To(Succeed())
	patch := client.MergeFrom(gj.DeepCopy())
	gj.Finalizers = nil
	g.Expect(k8s.Patch(ctx, gj, patch)).To(Succeed())
	var runErr error
	// The CRDs' deletion waits for the API server's own clean-up of their objects,
	// which a busy 2-core machine can take a minute or more to get to.
	g.Eventually(exited).WithTimeout(3*time.Minute).Should(Receive(&runErr), "output:\n%s\nCRDs:\n%s", &out, crdStates{ctx, k8s})
	g.Expect(runErr).NotTo(HaveOccurred(), "output:\n%s", &out)

	gone := func(obj client.Object, key client.ObjectKey) {
		t.Helper()
		err := k8s.Get(ctx, key, obj)
		g.Expect(apierrors.IsNotFound(err) || (err == nil && obj.GetDeletionTimestamp() != nil)).To(BeTrue(), "%T %s still there: %v", obj, key, err)
	}
	gone(&appsv1.Deployment{}, client.ObjectKey{Namespace: "guardedjob-system", Name: "guardedjob-manager"})
	gone(&rbacv1.ClusterRole{}, client.ObjectKey{Name: "guardedjob-manager-role"})
	gone(&apiextensionsv1.CustomResourceDefinition{}, client.ObjectKey{Name: "guardedjobs.batch.guardedjob.dev"})
}

// crdStates prints, when formatted, what holds each of the operator's CRDs that is
// still there: its finalizers and its Terminating condition (the API server's clean-up
// of its objects).
type crdStates struct {
	ctx context.Context
	k8s client.Client
}

func (c crdStates) String() string {
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := c.k8s.List(c.ctx, list); err != nil {
		return "list: " + err.Error()
	}
	var b bytes.Buffer
	for _, crd := range list.Items {
		if crd.Spec.Group != batchv1alpha1.GroupVersion.Group {
			continue
		}
		fmt.Fprintf(&b, "%s deleting=%t finalizers=%v", crd.Name, crd.DeletionTimestamp != nil, crd.Finalizers)
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Terminating {
				fmt.Fprintf(&b, " terminating=%s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// failingKubectl is kubectl, but every call whose arguments contain what fails as when
// the API server does not answer.
func failingKubectl(t *testing.T, w *world, what string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubectl")
	script := "#!/bin/sh\ncase \"$*\" in *'" + what + "'*) echo 'Unable to connect to the server: net/http: TLS handshake timeout' >&2; exit 1 ;; esac\nexec '" + w.kctl + "' \"$@\"\n"
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

// removedNothing asserts that the manager and the CRD are still in place.
func removedNothing(t *testing.T, w *world) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(w.k8s.Get(ctx, client.ObjectKey{Namespace: "guardedjob-system", Name: "guardedjob-manager"}, &appsv1.Deployment{})).To(Succeed(), "the manager must stay to finish the runs")
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(w.k8s.Get(ctx, client.ObjectKey{Name: "guardedjobs.batch.guardedjob.dev"}, crd)).To(Succeed())
	g.Expect(crd.DeletionTimestamp).To(BeNil(), "the CRD stays")
}

// A lookup or a list that fails (an API server that does not answer) is no answer.
// A failed lookup of the CRD is not "the CRD is not installed": the script stops at
// once, removing nothing. A failed list of GuardedJobs is not "no GuardedJob left":
// the script keeps waiting and gives up at UNDEPLOY_TIMEOUT, removing nothing. Either
// taken for the empty answer would remove the manager while a run still goes on,
// leaving a finalizer and a lease that nobody releases.
func TestUndeployTakesAFailedListForRunsStillGoing(t *testing.T) {
	g := NewWithT(t)
	w := deployed(t)

	// The CRD's lookup fails: nothing is known, nothing is removed.
	var stderr bytes.Buffer
	undeploy := w.sh("3s", failingKubectl(t, w, "get crd"), "hack/undeploy.sh")
	undeploy.Stderr = &stderr
	exited := start(t, undeploy)
	var err error
	g.Eventually(exited).WithTimeout(45*time.Second).Should(Receive(&err), "stderr:\n%s", &stderr)
	g.Expect(err).To(HaveOccurred(), "exit 1: it could not tell whether the CRD is installed; stderr:\n%s", &stderr)
	g.Expect(stderr.String()).To(ContainSubstring("the API server did not answer whether guardedjobs.batch.guardedjob.dev exists"))
	g.Expect(stderr.String()).NotTo(ContainSubstring("removing the manager"))
	removedNothing(t, w)

	// Every list of GuardedJobs fails: it waits, gives up, removes nothing.
	stderr.Reset()
	undeploy = w.sh("3s", failingKubectl(t, w, "get guardedjobs"), "hack/undeploy.sh")
	undeploy.Stderr = &stderr
	exited = start(t, undeploy)
	g.Eventually(exited).WithTimeout(45*time.Second).Should(Receive(&err), "stderr:\n%s", &stderr)
	g.Expect(err).To(HaveOccurred(), "exit 1: it could not tell that the runs are over; stderr:\n%s", &stderr)
	g.Expect(stderr.String()).To(ContainSubstring("gave up after 3s"))
	g.Expect(stderr.String()).NotTo(ContainSubstring("no GuardedJob left"))
	g.Expect(stderr.String()).To(ContainSubstring("the API server did not answer the list of GuardedJobs"), "the lists did fail")
	removedNothing(t, w)
}
