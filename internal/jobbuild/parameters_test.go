package jobbuild

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

func TestTheJobOfARunCarriesEveryDeclaredParameter(t *testing.T) {
	g := NewWithT(t)
	gj := testObject(corev1.RestartPolicyNever)
	gj.Spec.Parameters = []batchv1alpha1.RunParameter{
		{Name: "REGION", Default: ptr.To("eu-west-1")},
		{Name: "DRY_RUN", Default: ptr.To("true")},
		{Name: "KEEP"}, // replaces the template's variable of that name
	}
	run := testRun(batchv1alpha1.FencingInject)
	run.Parameters = map[string]string{"DRY_RUN": "false"}
	job, _ := Build(gj, run)

	pod := job.Spec.Template.Spec
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		g.Expect(envValue(c, "REGION")).To(Equal([]string{"eu-west-1"}), "the default, in %s", c.Name)
		g.Expect(envValue(c, "DRY_RUN")).To(Equal([]string{"false"}), "the request's value, in %s", c.Name)
		g.Expect(envValue(c, "KEEP")).To(Equal([]string{""}), "one variable of the name, in %s", c.Name)
		g.Expect(envValue(c, "GUARDEDJOB_FENCE")).To(Equal([]string{"34"}))
	}
	const want = `{"DRY_RUN":"false","KEEP":"","REGION":"eu-west-1"}`
	g.Expect(job.Annotations).To(HaveKeyWithValue(batchv1alpha1.ParametersAnnotation, want))
	g.Expect(job.Spec.Template.Annotations).To(HaveKeyWithValue(batchv1alpha1.ParametersAnnotation, want))
}

func TestAParameterNeverReplacesTheFence(t *testing.T) {
	g := NewWithT(t)
	gj := testObject(corev1.RestartPolicyNever)
	// The schema refuses this; an object built in Go is not checked by it.
	gj.Spec.Parameters = []batchv1alpha1.RunParameter{{Name: "GUARDEDJOB_FENCE", Default: ptr.To("0")}}
	job, _ := Build(gj, testRun(batchv1alpha1.FencingInject))
	g.Expect(envValue(job.Spec.Template.Spec.Containers[0], "GUARDEDJOB_FENCE")).To(Equal([]string{"34"}))
}

func TestAGuardedJobWithoutParametersAddsNoAnnotation(t *testing.T) {
	job, _ := Build(testObject(corev1.RestartPolicyNever), testRun(batchv1alpha1.FencingInject))
	NewWithT(t).Expect(job.Annotations).NotTo(HaveKey(batchv1alpha1.ParametersAnnotation))
}
