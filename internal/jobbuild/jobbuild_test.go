package jobbuild

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

func testObject(restart corev1.RestartPolicy) *batchv1alpha1.GuardedJob {
	return &batchv1alpha1.GuardedJob{
		ObjectMeta: metav1.ObjectMeta{Name: "daily-settlement", Namespace: "payments", UID: "gj-uid"},
		Spec: batchv1alpha1.GuardedJobSpec{JobTemplate: batchv1.JobTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "payments"}, Annotations: map[string]string{"note": "x"}},
			Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To(int32(2)),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy:  restart,
					InitContainers: []corev1.Container{{Name: "migrate"}},
					Containers: []corev1.Container{
						{Name: "settle", Env: []corev1.EnvVar{{Name: "GUARDEDJOB_FENCE", Value: "stale"}, {Name: "KEEP", Value: "1"}}},
						{Name: "sidecar"},
					},
				}},
			},
		}},
	}
}

func testRun(policy batchv1alpha1.FencingPolicy) *batchv1alpha1.ActiveRun {
	return &batchv1alpha1.ActiveRun{
		JobName: "daily-settlement-29123456-5f3a9c", Fence: 34, FencingPolicy: policy, EnvName: "GUARDEDJOB_FENCE",
		Holder: "cluster-a/payments/daily-settlement-29123456-5f3a9c", MaxHold: metav1.Duration{Duration: 90*time.Minute + 500*time.Millisecond},
		ScheduledTime: metav1.NewTime(time.Date(2026, 11, 30, 0, 5, 0, 0, time.UTC)),
	}
}

func envValue(c corev1.Container, name string) []string {
	var out []string
	for _, e := range c.Env {
		if e.Name == name {
			out = append(out, e.Value)
		}
	}
	return out
}

func TestTheJobOfAFencedRunCarriesTheFenceEverywhere(t *testing.T) {
	g := NewWithT(t)
	job, warnings := Build(testObject(corev1.RestartPolicyNever), testRun(batchv1alpha1.FencingInject))
	g.Expect(warnings).To(BeEmpty())
	g.Expect(job.Name).To(Equal("daily-settlement-29123456-5f3a9c"))
	g.Expect(job.Namespace).To(Equal("payments"))
	g.Expect(job.Finalizers).To(Equal([]string{batchv1alpha1.LeaseFinalizer}))
	g.Expect(job.OwnerReferences).To(ConsistOf(And(HaveField("UID", BeEquivalentTo("gj-uid")), HaveField("Controller", HaveValue(BeTrue())))))
	for _, meta := range []metav1.ObjectMeta{job.ObjectMeta, job.Spec.Template.ObjectMeta} {
		g.Expect(meta.Annotations).To(HaveKeyWithValue(batchv1alpha1.FenceAnnotation, "34"))
		g.Expect(meta.Annotations).To(HaveKeyWithValue(batchv1alpha1.ScheduledTimeAnnotation, "2026-11-30T00:05:00Z"))
		g.Expect(meta.Labels).To(HaveKeyWithValue(batchv1alpha1.GuardedJobLabel, "daily-settlement"))
	}
	g.Expect(job.Labels).To(HaveKeyWithValue("team", "payments"), "template labels are kept")
	g.Expect(job.Annotations).To(HaveKeyWithValue("note", "x"))
	pod := job.Spec.Template.Spec
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		g.Expect(envValue(c, "GUARDEDJOB_FENCE")).To(Equal([]string{"34"}), "container %s", c.Name)
	}
	g.Expect(envValue(pod.Containers[0], "KEEP")).To(Equal([]string{"1"}))
	g.Expect(*job.Spec.PodReplacementPolicy).To(Equal(batchv1.Failed))
	g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(5401)), "maxHold rounded up to whole seconds")
	g.Expect(*pod.ActiveDeadlineSeconds).To(Equal(int64(5401)))
	g.Expect(job.Spec.PodFailurePolicy.Rules).To(ConsistOf(And(
		HaveField("Action", batchv1.PodFailurePolicyActionFailJob),
		HaveField("OnPodConditions", ConsistOf(HaveField("Type", corev1.DisruptionTarget)))),
	))
}

func TestJobBuilderPolicies(t *testing.T) {
	cases := []struct {
		name   string
		obj    func() *batchv1alpha1.GuardedJob
		run    func() *batchv1alpha1.ActiveRun
		verify func(g Gomega, job *batchv1.Job, warnings []Warning)
	}{
		{
			name: "OnFailure cannot have a podFailurePolicy, so the user is warned",
			obj:  func() *batchv1alpha1.GuardedJob { return testObject(corev1.RestartPolicyOnFailure) },
			run:  func() *batchv1alpha1.ActiveRun { return testRun(batchv1alpha1.FencingStrict) },
			verify: func(g Gomega, job *batchv1.Job, warnings []Warning) {
				g.Expect(job.Spec.PodFailurePolicy).To(BeNil())
				g.Expect(warnings).To(ConsistOf(HaveField("Message", ContainSubstring("replacement runs with the same fence 34"))))
			},
		},
		{
			name: "fencing None sets no env var, no fence annotation and no podFailurePolicy",
			obj:  func() *batchv1alpha1.GuardedJob { return testObject(corev1.RestartPolicyNever) },
			run:  func() *batchv1alpha1.ActiveRun { return testRun(batchv1alpha1.FencingNone) },
			verify: func(g Gomega, job *batchv1.Job, warnings []Warning) {
				g.Expect(job.Annotations).NotTo(HaveKey(batchv1alpha1.FenceAnnotation))
				g.Expect(envValue(job.Spec.Template.Spec.Containers[1], "GUARDEDJOB_FENCE")).To(BeEmpty())
				g.Expect(job.Spec.PodFailurePolicy).To(BeNil())
				g.Expect(warnings).To(BeEmpty())
			},
		},
		{
			name: "an unguarded FailOpen run is annotated unfenced with an empty fence",
			obj:  func() *batchv1alpha1.GuardedJob { return testObject(corev1.RestartPolicyNever) },
			run: func() *batchv1alpha1.ActiveRun {
				r := testRun(batchv1alpha1.FencingInject)
				r.Unguarded, r.Fence = true, 0
				return r
			},
			verify: func(g Gomega, job *batchv1.Job, _ []Warning) {
				g.Expect(job.Annotations).To(HaveKeyWithValue(batchv1alpha1.FenceAnnotation, batchv1alpha1.UnfencedValue))
				g.Expect(envValue(job.Spec.Template.Spec.Containers[1], "GUARDEDJOB_FENCE")).To(Equal([]string{""}))
			},
		},
		{
			name: "a shorter activeDeadlineSeconds in the template is kept",
			obj: func() *batchv1alpha1.GuardedJob {
				o := testObject(corev1.RestartPolicyNever)
				o.Spec.JobTemplate.Spec.ActiveDeadlineSeconds = ptr.To(int64(60))
				return o
			},
			run: func() *batchv1alpha1.ActiveRun { return testRun(batchv1alpha1.FencingInject) },
			verify: func(g Gomega, job *batchv1.Job, _ []Warning) {
				g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(60)))
				g.Expect(*job.Spec.Template.Spec.ActiveDeadlineSeconds).To(Equal(int64(5401)))
			},
		},
		{
			name: "a custom env name is used",
			obj:  func() *batchv1alpha1.GuardedJob { return testObject(corev1.RestartPolicyNever) },
			run: func() *batchv1alpha1.ActiveRun {
				r := testRun(batchv1alpha1.FencingInject)
				r.EnvName = "FENCE"
				return r
			},
			verify: func(g Gomega, job *batchv1.Job, _ []Warning) {
				g.Expect(envValue(job.Spec.Template.Spec.Containers[1], "FENCE")).To(Equal([]string{"34"}))
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := tc.obj()
			before := obj.DeepCopy()
			job, warnings := Build(obj, tc.run())
			tc.verify(NewWithT(t), job, warnings)
			NewWithT(t).Expect(obj).To(Equal(before), "the GuardedJob is not modified")
		})
	}
}

// Every container of a run's Pods is told which occurrence it works on, in UTC
// and in the schedule's zone, its key, and what started the run: a backfill of
// many days processes each day once, not today many times.
func TestEveryContainerIsToldItsOccurrence(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		zone                    string
		run                     func(*batchv1alpha1.ActiveRun)
		local, trigger, request string
		wantZone                string
	}{
		{name: "a scheduled run in Asia/Taipei", zone: "Asia/Taipei", run: func(*batchv1alpha1.ActiveRun) {},
			local: "2026-11-30T08:05:00+08:00", trigger: "schedule", wantZone: "Asia/Taipei"},
		{name: "a run-now without a time zone", run: func(r *batchv1alpha1.ActiveRun) { r.RunNow = "2026-11-30T00:07:12Z" },
			local: "2026-11-30T00:05:00Z", trigger: "run-now", request: "2026-11-30T00:07:12Z", wantZone: "UTC"},
		{name: "a backfill's occurrence in America/New_York", zone: "America/New_York", run: func(r *batchv1alpha1.ActiveRun) { r.Backfill = "2026-12-01T10:00:00Z" },
			local: "2026-11-29T19:05:00-05:00", trigger: "backfill", request: "2026-12-01T10:00:00Z", wantZone: "America/New_York"},
		{name: "a zone the spec no longer names validly falls back to UTC", zone: "Mars/Olympus", run: func(*batchv1alpha1.ActiveRun) {},
			local: "2026-11-30T00:05:00Z", trigger: "schedule", wantZone: "UTC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			gj := testObject(corev1.RestartPolicyNever)
			gj.Spec.TimeZone = tc.zone
			gj.Spec.Parameters = []batchv1alpha1.RunParameter{{Name: batchv1alpha1.TriggerEnv}}
			run := testRun(batchv1alpha1.FencingNone)
			run.OccurrenceKey = "payments:settlement:done:1764461100"
			run.Parameters = map[string]string{batchv1alpha1.TriggerEnv: "forged"}
			tc.run(run)
			job, _ := Build(gj, run)
			pod := job.Spec.Template.Spec
			for _, c := range append(pod.InitContainers, pod.Containers...) {
				g.Expect(envValue(c, "GUARDEDJOB_SCHEDULED_TIME")).To(Equal([]string{"2026-11-30T00:05:00Z"}), c.Name)
				g.Expect(envValue(c, "GUARDEDJOB_SCHEDULED_TIME_LOCAL")).To(Equal([]string{tc.local}), c.Name)
				g.Expect(envValue(c, "GUARDEDJOB_TIME_ZONE")).To(Equal([]string{tc.wantZone}), c.Name)
				g.Expect(envValue(c, "GUARDEDJOB_OCCURRENCE")).To(Equal([]string{"payments:settlement:done:1764461100"}), c.Name)
				g.Expect(envValue(c, "GUARDEDJOB_TRIGGER")).To(Equal([]string{tc.trigger}), "%s: a parameter never replaces it", c.Name)
				g.Expect(envValue(c, "GUARDEDJOB_REQUEST")).To(Equal([]string{tc.request}), c.Name)
			}
			again, _ := Build(gj, run)
			g.Expect(again.Spec.Template.Spec.Containers).To(Equal(pod.Containers), "the same object and run give the same Job")
		})
	}
}
