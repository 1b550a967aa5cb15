// Package mink8s runs one GuardedJob to completion on the API server in
// $KUBEBUILDER_ASSETS. `make test` runs it on the version the project is built
// against; `make test-min-k8s` on the oldest Kubernetes the operator supports
// (hack/tools/k8s-min), built from Go modules, to show that it is one: the CRD is
// accepted with its validation rules, and the API server keeps what the manager's
// Jobs rely on (podReplacementPolicy, native sidecars for the pod guard).
package mink8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/bins"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/testproc"
)

// ExpectVersionEnv names the Kubernetes version the API server must report
// (make test-min-k8s sets it, so that the test never passes on other binaries).
const ExpectVersionEnv = "GUARDEDJOB_EXPECT_K8S_VERSION"

func guardedJob(name string, guard bool) *batchv1alpha1.GuardedJob {
	gj := &batchv1alpha1.GuardedJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: batchv1alpha1.GuardedJobSpec{
			Schedule: "@daily",
			Lock:     batchv1alpha1.LockSpec{Key: "default:" + name},
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "work", Image: "busybox:1.36"}},
				TerminationGracePeriodSeconds: ptr.To(int64(10)),
			}}}},
		},
	}
	if guard {
		gj.Spec.Lock.PodGuard = &batchv1alpha1.PodGuardSpec{SecretRef: batchv1alpha1.StoreReference{Name: "guard-redis"}}
	}
	return gj
}

// A GuardedJob, and one with the pod guard, each triggered and run to completion
// under the manager binary (leader election on, as installed), the test playing
// the Job controller.
func TestAGuardedJobRunsToCompletion(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with `make test` or `make test-min-k8s`")
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred(), "the API server starts and accepts the CRD")
	t.Cleanup(func() { _ = env.Stop() })
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	version, err := dc.ServerVersion()
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("kube-apiserver %s", version.GitVersion)
	if want := os.Getenv(ExpectVersionEnv); want != "" {
		g.Expect(version.GitVersion).To(Equal(want))
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(batchv1alpha1.AddToScheme(scheme))
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := user.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	dir := t.TempDir()
	kubeconfigPath := filepath.Join(dir, "kubeconfig")
	g.Expect(os.WriteFile(kubeconfigPath, kubeconfig, 0o600)).To(Succeed())

	// The CRD's validation rules run here (x-kubernetes-validations with fieldPath).
	bad := guardedJob("bad", false)
	bad.Spec.Lock.TTL, bad.Spec.Lock.RenewInterval = &metav1.Duration{Duration: 30 * time.Second}, &metav1.Duration{Duration: 30 * time.Second}
	g.Expect(k8s.Create(ctx, bad)).To(MatchError(And(ContainSubstring("lock.renewInterval must be shorter than lock.ttl"),
		ContainSubstring("spec.lock.renewInterval"))))

	redis := redisserver.Start(t)
	g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "guard-redis", Namespace: "default"},
		StringData: map[string]string{"url": "redis://" + redis.Addr()}})).To(Succeed())
	mgr, err := testproc.Start("manager", filepath.Join(dir, "manager.log"), bins.Manager(t),
		"--kubeconfig="+kubeconfigPath, "--redis-url=redis://"+redis.Addr(), "--cluster-name=min-k8s",
		"--leader-elect", "--leader-election-namespace=default", "--guard-image=registry.example/guardedjob-manager:test",
		"--metrics-bind-address=0", "--health-probe-bind-address=0")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { mgr.Stop(20 * time.Second) })

	for _, gj := range []*batchv1alpha1.GuardedJob{guardedJob("plain", false), guardedJob("guarded", true)} {
		t.Run(gj.Name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(k8s.Create(ctx, gj)).To(Succeed())
			patch := client.MergeFrom(gj.DeepCopy())
			metav1.SetMetaDataAnnotation(&gj.ObjectMeta, batchv1alpha1.RunNowAnnotation, time.Now().UTC().Format(time.RFC3339))
			g.Expect(k8s.Patch(ctx, gj, patch)).To(Succeed())

			job := &batchv1.Job{}
			g.Eventually(func() error {
				cur := &batchv1alpha1.GuardedJob{}
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(gj), cur); err != nil {
					return err
				}
				if len(cur.Status.Active) != 1 || cur.Status.Active[0].JobUID == "" {
					return errNotYet
				}
				return k8s.Get(ctx, client.ObjectKey{Namespace: gj.Namespace, Name: cur.Status.Active[0].JobName}, job)
			}).WithTimeout(90*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), func() string {
				cur := &batchv1alpha1.GuardedJob{}
				_ = k8s.Get(ctx, client.ObjectKeyFromObject(gj), cur)
				return fmt.Sprintf("conditions: %+v\nlast run: %+v\nmanager log:\n%s", cur.Status.Conditions, cur.Status.LastRun, mgr.Tail(30))
			})

			// What the API server kept of the manager's Job.
			g.Expect(job.Spec.PodReplacementPolicy).To(HaveValue(Equal(batchv1.Failed)),
				"a Pod is replaced only once it is gone (podReplacementPolicy, on by default from 1.29)")
			if gj.Spec.Lock.PodGuard != nil {
				g.Expect(job.Spec.Template.Spec.InitContainers).To(ContainElement(And(
					HaveField("Image", "registry.example/guardedjob-manager:test"),
					HaveField("RestartPolicy", HaveValue(Equal(corev1.ContainerRestartPolicyAlways))))),
					"the pod guard is a native sidecar (restartPolicy Always, on by default from 1.29)")
			}

			// The Job succeeds: the run releases its lease and records the result.
			// The manager may still be opening the Job's gate: each try reads it
			// again.
			g.Eventually(func() error {
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
					return err
				}
				now := metav1.Now()
				job.Status = batchv1.JobStatus{StartTime: &now, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
					{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
				}}
				if complete := successCriteriaMet(version.Minor); complete != nil {
					job.Status.Conditions = append([]batchv1.JobCondition{*complete}, job.Status.Conditions...)
				}
				return k8s.Status().Update(ctx, job)
			}).WithTimeout(30 * time.Second).Should(Succeed())
			g.Eventually(func() batchv1alpha1.RunResult {
				cur := &batchv1alpha1.GuardedJob{}
				_ = k8s.Get(ctx, client.ObjectKeyFromObject(gj), cur)
				if cur.Status.LastRun == nil {
					return ""
				}
				return cur.Status.LastRun.Result
			}).WithTimeout(60*time.Second).Should(Equal(batchv1alpha1.RunResultSucceeded), func() string { return mgr.Tail(30) })
			g.Expect(redis.Client(t).Exists(ctx, gj.Spec.Lock.Key).Val()).To(BeZero(), "the lease is released")
		})
	}
	g.Expect(mgr.Exited()).To(BeFalse(), "the manager runs on: %s", mgr.Tail(30))
}

type notYet struct{}

func (notYet) Error() string { return "the run has no Job yet" }

var errNotYet error = notYet{}

// successCriteriaMet is the condition the API server requires before Complete
// from Kubernetes 1.31 on (JobSuccessPolicy); older ones do not know it.
func successCriteriaMet(minor string) *batchv1.JobCondition {
	if m, err := strconv.Atoi(strings.TrimRight(minor, "+")); err != nil || m < 31 {
		return nil
	}
	return &batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}
}
