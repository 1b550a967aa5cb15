package jobbuild

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/podguard"
)

const testToken = "cluster-a/payments/daily-settlement-29123456-5f3a9c#5f3a9c0123456789abcdef0123456789"

func guardedRun() *batchv1alpha1.ActiveRun {
	run := testRun(batchv1alpha1.FencingInject)
	run.Key, run.Token = "payments:settlement", testToken
	run.PodGuard = &batchv1alpha1.RunPodGuard{
		Image: "registry.example/guardedjob-manager:1.2.3", SecretName: "guard-redis",
		Interval: metav1.Duration{Duration: 4 * time.Second}, Margin: metav1.Duration{Duration: 2 * time.Second},
		RunAsUser: ptr.To(int64(1000)),
	}
	return run
}

func TestAGuardedRunsPodsGetTheGuardFirstAsANativeSidecar(t *testing.T) {
	g := NewWithT(t)
	obj := testObject(corev1.RestartPolicyNever)
	obj.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(20))
	job, warnings := Build(obj, guardedRun())
	pod := job.Spec.Template.Spec

	g.Expect(pod.ShareProcessNamespace).To(HaveValue(BeTrue()), "the guard must see the workload's processes")
	g.Expect(pod.InitContainers).To(HaveLen(2))
	guard := pod.InitContainers[0]
	g.Expect(guard.Name).To(Equal(podguard.ContainerName), "first, so that no workload init container starts before it")
	g.Expect(pod.InitContainers[1].Name).To(Equal("migrate"))
	g.Expect(guard.Image).To(Equal("registry.example/guardedjob-manager:1.2.3"))
	g.Expect(guard.Command).To(Equal([]string{"/guard"}))
	g.Expect(guard.RestartPolicy).To(HaveValue(Equal(corev1.ContainerRestartPolicyAlways)))
	g.Expect(guard.StartupProbe.Exec.Command).To(Equal([]string{"/guard", "probe"}))

	sum := sha256.Sum256([]byte(testToken))
	env := map[string]string{}
	for _, e := range guard.Env {
		env[e.Name] = e.Value
	}
	g.Expect(env).To(And(
		HaveKeyWithValue(podguard.EnvKey, "payments:settlement"),
		HaveKeyWithValue(podguard.EnvHolder, "cluster-a/payments/daily-settlement-29123456-5f3a9c"),
		HaveKeyWithValue(podguard.EnvTokenSHA256, hex.EncodeToString(sum[:])),
		HaveKeyWithValue(podguard.EnvInterval, "4s"),
		HaveKeyWithValue(podguard.EnvGrace, "20s"),
		HaveKeyWithValue(podguard.EnvMargin, "2s"),
	))
	// What the guard reads back is what the manager meant.
	s, err := podguard.FromEnv(func(k string) string { return env[k] })
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.TokenSHA256).To(Equal(podguard.TokenSHA256(testToken)))

	g.Expect(guard.SecurityContext.RunAsUser).To(HaveValue(Equal(int64(1000))))
	g.Expect(guard.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()))
	g.Expect(guard.SecurityContext.AllowPrivilegeEscalation).To(HaveValue(BeFalse()))
	g.Expect(guard.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
	g.Expect(guard.VolumeMounts).To(ConsistOf(
		corev1.VolumeMount{Name: podguard.StoreVolumeName, MountPath: podguard.DefaultStoreDir, ReadOnly: true},
		corev1.VolumeMount{Name: podguard.StateVolumeName, MountPath: podguard.DefaultStateDir},
	))
	for _, c := range append(pod.Containers, pod.InitContainers[1]) {
		g.Expect(c.VolumeMounts).To(BeEmpty(), "the guard's Secret and state are mounted into the guard only")
	}
	g.Expect(pod.Volumes).To(ContainElement(HaveField("VolumeSource.Secret.SecretName", "guard-redis")))

	g.Expect(job.Spec.BackoffLimit).To(HaveValue(Equal(int32(0))))
	g.Expect(warnings).To(ConsistOf(And(HaveField("Reason", batchv1alpha1.PodGuardSettingsReason), HaveField("Message", ContainSubstring("backoffLimit 2 replaced by 0")))))

	raw, err := json.Marshal(job)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(raw)).NotTo(ContainSubstring("#5f3a9c0123456789"), "the token's secret part is nowhere in the Job")
}

func TestARunWithoutAPodGuardGetsNone(t *testing.T) {
	g := NewWithT(t)
	job, _ := Build(testObject(corev1.RestartPolicyNever), testRun(batchv1alpha1.FencingInject))
	g.Expect(job.Spec.Template.Spec.ShareProcessNamespace).To(BeNil())
	g.Expect(job.Spec.Template.Spec.InitContainers).To(HaveLen(1))
	g.Expect(job.Spec.BackoffLimit).To(HaveValue(Equal(int32(2))))
}

func TestAGuardOfARootWorkloadRunsAsRootWithoutCapabilities(t *testing.T) {
	g := NewWithT(t)
	run := guardedRun()
	run.PodGuard.RunAsUser = ptr.To(int64(0))
	job, _ := Build(testObject(corev1.RestartPolicyNever), run)
	sc := job.Spec.Template.Spec.InitContainers[0].SecurityContext
	g.Expect(sc.RunAsUser).To(HaveValue(Equal(int64(0))))
	g.Expect(sc.RunAsNonRoot).To(BeNil())
	g.Expect(sc.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")), "the same user needs no capability to signal")

	run.PodGuard.RunAsUser = nil
	job, _ = Build(testObject(corev1.RestartPolicyNever), run)
	sc = job.Spec.Template.Spec.InitContainers[0].SecurityContext
	g.Expect(sc.RunAsUser).To(BeNil(), "the image's user")
	g.Expect(sc.RunAsNonRoot).To(HaveValue(BeTrue()))
}

func TestGuardUserIsTheWorkloadsOneUser(t *testing.T) {
	uid := func(n int64) *corev1.SecurityContext { return &corev1.SecurityContext{RunAsUser: ptr.To(n)} }
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want *int64
	}{
		{"the Pod's runAsUser", corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(1000))}, Containers: []corev1.Container{{Name: "a"}}}, ptr.To(int64(1000))},
		{"every container's", corev1.PodSpec{Containers: []corev1.Container{{Name: "a", SecurityContext: uid(7)}, {Name: "b", SecurityContext: uid(7)}}}, ptr.To(int64(7))},
		{"a container overrides the Pod's", corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(1000))}, Containers: []corev1.Container{{Name: "a", SecurityContext: uid(7)}}}, ptr.To(int64(7))},
		{"containers of different users", corev1.PodSpec{Containers: []corev1.Container{{Name: "a", SecurityContext: uid(7)}, {Name: "b", SecurityContext: uid(8)}}}, nil},
		{"an init container of another user", corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i", SecurityContext: uid(0)}}, Containers: []corev1.Container{{Name: "a", SecurityContext: uid(7)}}}, nil},
		{"a container without a user", corev1.PodSpec{Containers: []corev1.Container{{Name: "a", SecurityContext: uid(7)}, {Name: "b"}}}, nil},
		{"nothing said", corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}, nil},
		{"root", corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(0))}, Containers: []corev1.Container{{Name: "a"}}}, ptr.To(int64(0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, ok := GuardUser(&tc.spec)
			if tc.want == nil {
				g.Expect(ok).To(BeFalse())
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(ok).To(BeTrue())
			g.Expect(got).To(HaveValue(Equal(*tc.want)))
		})
	}
}
