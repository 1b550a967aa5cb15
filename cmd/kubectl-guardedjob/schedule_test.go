package main

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// The plugin's schedule commands against a real API server, a real Redis and
// the real manager: suspend with a note and resume, and run with parameters.
func TestPluginSchedules(t *testing.T) {
	w := startWorld(t)
	g := NewWithT(t)
	ctx := context.Background()
	get := func(name string) *batchv1alpha1.GuardedJob {
		gj := &batchv1alpha1.GuardedJob{}
		g.Expect(w.k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, gj)).To(Succeed())
		return gj
	}
	create := func(name, schedule string, mutate func(*batchv1alpha1.GuardedJobSpec)) {
		gj := &batchv1alpha1.GuardedJob{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: batchv1alpha1.GuardedJobSpec{Schedule: schedule, Lock: batchv1alpha1.LockSpec{Key: "default:" + name},
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "w", Image: "busybox"}}}}}}},
		}
		if mutate != nil {
			mutate(&gj.Spec)
		}
		g.Expect(w.k8s.Create(ctx, gj)).To(Succeed())
	}
	t.Run("suspend with a note, shown by status, and resume", func(t *testing.T) {
		g := NewWithT(t)
		create("paused", "@daily", nil)
		code, stdout, stderr := w.plugin("", nil, "suspend", "paused", "-n", "default", "--reason", "ledger migration", "--until", "2h")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(MatchRegexp(`guardedjob default/paused suspended \(by admin, until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\): ledger migration\n`))
		note := get("paused").Spec.SuspendNoteOf()
		g.Expect(note).To(And(Not(BeNil()), HaveField("By", "admin"), HaveField("Reason", "ledger migration")))
		g.Expect(note.Until.Time).To(BeTemporally("~", time.Now().Add(2*time.Hour), time.Minute))

		g.Eventually(func() string {
			_, stdout, _ := w.plugin("", nil, "status", "paused", "-n", "default")
			return stdout
		}).Should(And(MatchRegexp(`Suspend:\s+true \(by admin, until [^)]+\): ledger migration`),
			MatchRegexp(`Condition Suspended:\s+True SuspendRequested suspended: no new runs are scheduled \(by admin`)))

		code, _, stderr = w.plugin("", nil, "suspend", "paused", "-n", "default", "--until", "yesterday")
		g.Expect(code).To(Equal(2))
		g.Expect(stderr).To(ContainSubstring(`--until "yesterday" is neither an RFC 3339 time`))

		code, stdout, _ = w.plugin("", nil, "resume", "paused", "-n", "default")
		g.Expect(code).To(Equal(0))
		g.Expect(stdout).To(Equal("guardedjob default/paused resumed\n"))
		g.Expect(get("paused").Spec).To(And(HaveField("Suspend", Equal(ptr.To(false))), HaveField("SuspendNote", BeNil())))
	})
	t.Run("run --param sets declared values; others are refused before anything is set", func(t *testing.T) {
		g := NewWithT(t)
		create("params", "@daily", func(s *batchv1alpha1.GuardedJobSpec) {
			s.Parameters = []batchv1alpha1.RunParameter{{Name: "REGION", Enum: []string{"eu-west-1", "us-east-1"}, Default: ptr.To("eu-west-1")}}
		})
		code, _, stderr := w.plugin("", nil, "run", "params", "-n", "default", "--param", "REGION=mars-1")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring(`guardedjob default/params refuses these parameters: parameter REGION="mars-1" is not one of "eu-west-1", "us-east-1"`))
		code, _, stderr = w.plugin("", nil, "run", "params", "-n", "default", "--param", "PATH=/tmp")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring(`parameter "PATH" is not declared in spec.parameters (declared: REGION)`))
		code, _, stderr = w.plugin("", nil, "run", "params", "-n", "default", "--param", "REGION")
		g.Expect(code).To(Equal(2))
		g.Expect(stderr).To(ContainSubstring(`--param "REGION": want NAME=VALUE`))
		g.Expect(get("params").Annotations).NotTo(HaveKey(batchv1alpha1.RunNowAnnotation), "nothing was asked of the manager")

		code, stdout, stderr := w.plugin("", nil, "run", "params", "-n", "default", "--param", "REGION=us-east-1")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(ContainSubstring("parameters: REGION=us-east-1"))
		g.Expect(stdout).To(MatchRegexp(`job.batch/params-\S+ started`))
		jobs := &batchv1.JobList{}
		g.Expect(w.k8s.List(ctx, jobs, client.InNamespace("default"), client.MatchingLabels{batchv1alpha1.GuardedJobLabel: "params"})).To(Succeed())
		g.Expect(jobs.Items).To(HaveLen(1))
		g.Expect(jobs.Items[0].Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "REGION", Value: "us-east-1"}))
		g.Expect(get("params").Annotations).To(HaveKeyWithValue(batchv1alpha1.RunNowParametersAnnotation, `{"REGION":"us-east-1"}`))
		g.Eventually(func() []batchv1alpha1.ActiveRun { return get("params").Status.Active }).Should(ConsistOf(HaveField("JobUID", Not(BeEmpty()))))
		w.complete(g, &jobs.Items[0])

		// A run without --param removes the values of the one before.
		g.Eventually(func() []batchv1alpha1.ActiveRun { return get("params").Status.Active }).Should(BeEmpty())
		code, _, _ = w.plugin("", nil, "run", "params", "-n", "default")
		g.Expect(code).To(Equal(1), "the occurrence succeeded already: Skipped")
		g.Expect(get("params").Annotations).NotTo(HaveKey(batchv1alpha1.RunNowParametersAnnotation))
	})
}
