package crd_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gjv1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// The samples are what users copy: their Pods must run in a namespace that enforces
// the "restricted" Pod Security Standard. Each sample's Pod template is created as a
// Pod with a server-side dry run in such a namespace, so the API server's own
// PodSecurity admission judges it.
func TestSamplePodsPassPodSecurityRestricted(t *testing.T) {
	requireAPIServer(t)
	g := NewWithT(t)
	ctx := testContext(t)

	const ns = "pod-security-restricted"
	g.Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	}}})).To(Succeed())

	podOf := func(name string, tmpl corev1.PodTemplateSpec) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: tmpl.Labels}, Spec: tmpl.Spec}
	}

	// The namespace does enforce: a Pod without a security context is refused.
	plain := podOf("plain", corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}})
	g.Expect(k8sClient.Create(ctx, plain, client.DryRunAll)).To(MatchError(ContainSubstring(`violates PodSecurity "restricted:latest"`)))

	checked := 0
	for file, objs := range readSamples(g) {
		for _, obj := range objs {
			if obj.GetKind() != "GuardedJob" {
				continue
			}
			var gj gjv1.GuardedJob
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &gj)).To(Succeed(), file)
			pod := podOf(gj.Name, gj.Spec.JobTemplate.Spec.Template)
			g.Expect(k8sClient.Create(ctx, pod, client.DryRunAll)).To(Succeed(), "%s: the Pod template of %s", file, gj.Name)
			checked++
		}
	}
	g.Expect(checked).To(Equal(2))
}
