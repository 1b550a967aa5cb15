package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// The plugin's schedule commands against a real API server, a real Redis and
// the real manager: suspend with a note and resume, run with parameters, and a
// backfill followed to its end and one cancelled.
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
	// completeAll plays the Job controller: every Job of gjName that has not
	// ended completes, once its run has recorded it.
	completeAll := func(g Gomega, gjName string) {
		jobs := &batchv1.JobList{}
		g.Expect(w.k8s.List(ctx, jobs, client.InNamespace("default"), client.MatchingLabels{batchv1alpha1.GuardedJobLabel: gjName})).To(Succeed())
		gj := get(gjName)
		for i := range jobs.Items {
			j := &jobs.Items[i]
			if len(j.Status.Conditions) > 0 {
				continue
			}
			for _, r := range gj.Status.Active {
				if r.JobName == j.Name && r.JobUID == j.UID {
					w.complete(g, j)
				}
			}
		}
	}

	t.Run("suspend with a note, shown by status, and resume", func(t *testing.T) {
		g := NewWithT(t)
		create("paused", "@daily", nil)
		code, stdout, stderr := w.plugin("", nil, "suspend", "paused", "-n", "default", "--reason", "ledger migration", "--until", "2h")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(MatchRegexp(`guardedjob default/paused suspended \(by admin, until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\): ledger migration\n`))
		paused := get("paused")
		g.Expect(paused.Spec.Suspended()).To(BeFalse(), "the spec is the manifest's: not written")
		g.Expect(paused.Spec.SuspendNote).To(BeNil())
		note := paused.Status.Pause
		g.Expect(note).To(And(Not(BeNil()), HaveField("By", "admin"), HaveField("Reason", "ledger migration")))
		g.Expect(note.Until.Time).To(BeTemporally("~", time.Now().Add(2*time.Hour), time.Minute))

		var status string
		g.Eventually(func() string {
			_, status, _ = w.plugin("", nil, "status", "paused", "-n", "default")
			return status
		}).Should(And(MatchRegexp(`Paused:\s+since \S+ \(by admin, until [^)]+\): ledger migration \(resume with kubectl guardedjob resume paused\)`),
			MatchRegexp(`Condition Suspended:\s+True PauseRequested suspended: no new runs are scheduled \(by admin`)))
		t.Logf("kubectl guardedjob status paused:\n%s", status)

		code, _, stderr = w.plugin("", nil, "suspend", "paused", "-n", "default", "--until", "yesterday")
		g.Expect(code).To(Equal(2))
		g.Expect(stderr).To(ContainSubstring(`--until "yesterday" is neither an RFC 3339 time`))

		code, stdout, _ = w.plugin("", nil, "resume", "paused", "-n", "default")
		g.Expect(code).To(Equal(0))
		g.Expect(stdout).To(Equal("guardedjob default/paused resumed\n"))
		g.Expect(get("paused").Status).To(And(HaveField("Pause", BeNil()), HaveField("Suspended", BeFalse())))
		code, stdout, _ = w.plugin("", nil, "resume", "paused", "-n", "default")
		g.Expect(code).To(Equal(0))
		g.Expect(stdout).To(Equal("guardedjob default/paused is not suspended\n"))

		// A suspension in the spec is the manifest's: resume says where to end it.
		create("from-git", "@daily", func(s *batchv1alpha1.GuardedJobSpec) { s.Suspend = ptr.To(true) })
		code, _, stderr = w.plugin("", nil, "resume", "from-git", "-n", "default")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("spec.suspend is true in guardedjob default/from-git: it is the manifest's; set it to false there"))
		g.Expect(get("from-git").Spec.Suspended()).To(BeTrue())
		// Paused as well: resume ends the pause and warns that the spec still suspends it.
		code, _, stderr = w.plugin("", nil, "suspend", "from-git", "-n", "default")
		g.Expect(code).To(Equal(0), stderr)
		code, stdout, stderr = w.plugin("", nil, "resume", "from-git", "-n", "default")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(Equal("guardedjob default/from-git resumed\n"))
		g.Expect(stderr).To(ContainSubstring("warning: no runs are scheduled yet: spec.suspend is true in guardedjob default/from-git"))
		g.Expect(get("from-git").Status.Pause).To(BeNil())
		g.Expect(get("from-git").Spec.Suspended()).To(BeTrue())
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
		requests := &batchv1alpha1.GuardedJobRunList{}
		g.Expect(w.k8s.List(ctx, requests, client.InNamespace("default"))).To(Succeed())
		g.Expect(requests.Items).NotTo(ContainElement(HaveField("Spec.GuardedJobName", "params")), "nothing was asked of the manager")

		code, stdout, stderr := w.plugin("", nil, "run", "params", "-n", "default", "--param", "REGION=us-east-1")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(ContainSubstring("parameters: REGION=us-east-1"))
		g.Expect(stdout).To(MatchRegexp(`job.batch/params-\S+ started`))
		t.Logf("kubectl guardedjob run params --param REGION=us-east-1:\n%s", stdout)
		jobs := &batchv1.JobList{}
		g.Expect(w.k8s.List(ctx, jobs, client.InNamespace("default"), client.MatchingLabels{batchv1alpha1.GuardedJobLabel: "params"})).To(Succeed())
		g.Expect(jobs.Items).To(HaveLen(1))
		g.Expect(jobs.Items[0].Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "REGION", Value: "us-east-1"}))
		g.Expect(w.k8s.List(ctx, requests, client.InNamespace("default"))).To(Succeed())
		g.Expect(requests.Items).To(ContainElement(And(HaveField("Spec.GuardedJobName", "params"),
			HaveField("Spec.Parameters", map[string]string{"REGION": "us-east-1"}))), "the request carries the parameters")
		g.Expect(get("params").Annotations).NotTo(HaveKey(batchv1alpha1.RunNowAnnotation), "a request object, not an annotation")
		g.Eventually(func() []batchv1alpha1.ActiveRun { return get("params").Status.Active }).Should(ConsistOf(HaveField("JobUID", Not(BeEmpty()))))
		w.complete(g, &jobs.Items[0])

		// A run without --param removes the values of the one before.
		g.Eventually(func() []batchv1alpha1.ActiveRun { return get("params").Status.Active }).Should(BeEmpty())
		code, _, _ = w.plugin("", nil, "run", "params", "-n", "default")
		g.Expect(code).To(Equal(1), "the occurrence succeeded already: Skipped")
		g.Expect(get("params").Annotations).NotTo(HaveKey(batchv1alpha1.RunNowParametersAnnotation))
	})

	t.Run("backfill checks the range, then follows the manager's backfill to its end", func(t *testing.T) {
		g := NewWithT(t)
		create("history", "0 * * * *", nil)
		now := time.Now().UTC()
		from := now.Add(-2 * time.Hour).Truncate(time.Hour)

		code, _, stderr := w.plugin("", nil, "backfill", "history", "-n", "default", "--from", from.Format(time.RFC3339), "--to", now.Add(time.Hour).Format(time.RFC3339))
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("guardedjob default/history: the range ends in the future"))
		code, _, stderr = w.plugin("", nil, "backfill", "history", "-n", "default", "--from", now.Add(-50*24*time.Hour).Format(time.RFC3339))
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("holds more than 1000 occurrences"))
		code, _, stderr = w.plugin("", nil, "backfill", "history", "-n", "default", "--from", "last week")
		g.Expect(code).To(Equal(2))
		g.Expect(stderr).To(ContainSubstring(`--from "last week" is not a time: give an RFC 3339 time`))
		code, _, stderr = w.plugin("", nil, "backfill", "history", "-n", "default")
		g.Expect(code).To(Equal(2))
		g.Expect(stderr).To(ContainSubstring("backfill needs --from"))
		backfills := func() int {
			list := &batchv1alpha1.GuardedJobBackfillList{}
			g.Expect(w.k8s.List(ctx, list, client.InNamespace("default"))).To(Succeed())
			n := 0
			for _, b := range list.Items {
				if b.Spec.GuardedJobName == "history" {
					n++
				}
			}
			return n
		}
		g.Expect(backfills()).To(Equal(0), "nothing was asked of the manager")

		done := make(chan struct{})
		var stdout string
		go func() {
			defer close(done)
			code, stdout, stderr = w.plugin("", nil, "backfill", "history", "-n", "default", "--from", from.Format(time.RFC3339), "--wait")
		}()
		g.Eventually(func(g Gomega) {
			completeAll(g, "history")
			g.Expect(done).To(BeClosed())
		}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		g.Expect(stdout).To(ContainSubstring(fmt.Sprintf("guardedjob default/history: backfill of 3 occurrence(s) from %s to %s, 1 at a time",
			from.Format(time.RFC3339), from.Add(2*time.Hour).Format(time.RFC3339))))
		g.Expect(stdout).To(ContainSubstring("accepted: 3 occurrence(s)"))
		g.Expect(stdout).To(MatchRegexp(`Running: 0/3 done \(succeeded 0, skipped 0, failed 0\), remaining 3; now: \S+ \(job.batch/history-`))
		g.Expect(stdout).To(HaveSuffix("Complete: 3/3 done (succeeded 3, skipped 0, failed 0), remaining 0\n"))
		t.Logf("kubectl guardedjob backfill history --from %s --wait:\n%s", from.Format(time.RFC3339), stdout)

		// The same range again: every occurrence is done already.
		code, stdout, stderr = w.plugin("", nil, "backfill", "history", "-n", "default", "--from", from.Format(time.RFC3339), "--wait")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(HaveSuffix("Complete: 3/3 done (succeeded 0, skipped 3, failed 0), remaining 0\n"))

		_, stdout, _ = w.plugin("", nil, "status", "history", "-n", "default")
		g.Expect(stdout).To(MatchRegexp(`Backfill:\s+\S+ from ` + from.Format(time.RFC3339) + ` to \S+: Complete: 3/3 done`))

		// A dry run of the same range names the Jobs that did each occurrence here.
		code, stdout, stderr = w.plugin("", nil, "backfill", "history", "-n", "default", "--from", from.Format(time.RFC3339), "--dry-run")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(strings.Count(stdout, "done here: Job history-")).To(Equal(3), stdout)
		g.Expect(backfills()).To(Equal(2), "a dry run writes nothing")
	})

	t.Run("backfill reads a range without an offset in the schedule's zone, and --dry-run lists it", func(t *testing.T) {
		g := NewWithT(t)
		create("taipei", "5 0 * * *", func(s *batchv1alpha1.GuardedJobSpec) { s.TimeZone = "Asia/Taipei" })
		taipei, err := time.LoadLocation("Asia/Taipei")
		g.Expect(err).NotTo(HaveOccurred())
		today := time.Now().In(taipei)
		first, last := today.AddDate(0, 0, -5).Format(time.DateOnly), today.AddDate(0, 0, -1).Format(time.DateOnly)
		code, stdout, stderr := w.plugin("", nil, "backfill", "taipei", "-n", "default", "--from", first, "--to", last, "--dry-run")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(HavePrefix(fmt.Sprintf("guardedjob default/taipei: a backfill from %sT00:00:00+08:00 to %sT23:59:59+08:00 (Asia/Taipei) would run 5 occurrence(s), 1 at a time:\n", first, last)))
		for d := -5; d <= -1; d++ {
			day := today.AddDate(0, 0, d).Format(time.DateOnly)
			g.Expect(stdout).To(MatchRegexp(`\n  `+day+`T00:05:00\+08:00\s+\S+Z\n`), "the occurrence of the local day %s", day)
		}
		g.Expect(stdout).To(ContainSubstring("Nothing was written (--dry-run)."))
		g.Expect(get("taipei").Annotations).NotTo(HaveKey(batchv1alpha1.BackfillAnnotation), "a dry run writes nothing")
	})

	t.Run("history shows a Succeeded, a Skipped and a Busy run after their events are gone", func(t *testing.T) {
		g := NewWithT(t)
		create("nightly", "5 0 * * *", func(s *batchv1alpha1.GuardedJobSpec) { s.TimeZone = "Asia/Taipei" })
		rdb := w.redis.Client(t)
		// nextRequest waits until a run-now value (whole seconds) differs from the
		// one handled last.
		nextRequest := func() {
			last := get("nightly").Status.LastRunNow
			g.Eventually(func() string { return time.Now().UTC().Format(time.RFC3339) }).WithTimeout(3 * time.Second).ShouldNot(Equal(last))
		}
		run := func() (int, string) {
			code, stdout, _ := w.plugin("", nil, "run", "nightly", "-n", "default")
			return code, stdout
		}
		done := make(chan struct{})
		go func() { defer close(done); run() }()
		g.Eventually(func(g Gomega) {
			completeAll(g, "nightly")
			g.Expect(done).To(BeClosed())
		}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		g.Eventually(func() *batchv1alpha1.RunRecord { return get("nightly").Status.LastRun }).Should(HaveField("Result", batchv1alpha1.RunResultSucceeded))
		nextRequest() // a new run-now value
		code, _ := run()
		g.Expect(code).To(Equal(1), "the occurrence succeeded already: Skipped")
		// Another holder has the key, and the done-marker is gone (an operator cleared it).
		marker := get("nightly").Status.LastRun.OccurrenceKey
		g.Expect(rdb.Del(ctx, marker).Err()).To(Succeed())
		g.Expect(rdb.Set(ctx, "default:nightly", "cluster-b/default/nightly-1-abcdef#abcdef00", time.Minute).Err()).To(Succeed())
		nextRequest()
		code, _ = run()
		g.Expect(code).To(Equal(1), "Busy")
		g.Expect(w.k8s.DeleteAllOf(ctx, &eventsv1.Event{}, client.InNamespace("default"))).To(Succeed(), "the events have expired")

		code, stdout, stderr := w.plugin("", nil, "history", "nightly", "-n", "default")
		g.Expect(code).To(Equal(0), stderr)
		t.Logf("kubectl guardedjob history nightly:\n%s", stdout)
		g.Expect(stdout).To(HavePrefix(`GuardedJob default/nightly: schedule "5 0 * * *" (Asia/Taipei)`))
		lines := strings.Split(stdout, "\n")
		g.Expect(lines[2]).To(MatchRegexp(`^SCHEDULED\s+RESULT\s+TRIGGER\s+JOB\s+FENCE\s+ENDED\s+WHY`))
		g.Expect(lines[3]).To(MatchRegexp(`^\S+T00:05:00\+08:00\s+Busy\s+run-now\s+-\s+-\s+\S+ ago\s+lock default:nightly is held by cluster-b/default/nightly-1-abcdef`))
		g.Expect(lines[4]).To(MatchRegexp(`^\S+T00:05:00\+08:00\s+Skipped\s+run-now\s+-\s+-\s+\S+ ago\s+occurrence default:nightly:done:\d+ already done by cluster-a/`))
		g.Expect(lines[5]).To(MatchRegexp(`^\S+T00:05:00\+08:00\s+Succeeded\s+run-now\s+nightly-\S+\s+1\s+`))
		g.Expect(stdout).To(MatchRegexp(`\nJOB\s+STATUS\s+FENCE\s+AGE\s+PODS\nnightly-\S+\s+Complete\s+1\s+`))
		g.Expect(stdout).To(MatchRegexp(`\nNext occurrences \(Asia/Taipei\):\n(  \S+T00:05:00\+08:00\n){5}$`))

		// logs finds the latest run with a Job (the Busy and Skipped runs had
		// none) and its Pods; this API server has no kubelet to serve their logs,
		// so it says which Pod and why.
		job := get("nightly").Status.RecentRuns[2].JobName
		code, _, stderr = w.plugin("", nil, "logs", "nightly", "-n", "default")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("error: job " + job + " has no Pods (Complete)"))
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: job + "-x1", Namespace: "default", Labels: map[string]string{batchv1.JobNameLabel: job}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "w", Image: "busybox"}}}}
		g.Expect(w.k8s.Create(ctx, pod)).To(Succeed())
		code, stdout, stderr = w.plugin("", nil, "logs", "nightly", "-n", "default", "--tail", "10")
		g.Expect(code).To(Equal(0), "stdout: %s\nstderr: %s", stdout, stderr)
		g.Expect(stderr).To(Equal("job.batch/" + job + " (Complete), fence 1: 1 Pod(s)\npod " + job + "-x1 is not on a node yet (Pending): it has no logs\n"))
		code, _, stderr = w.plugin("", nil, "logs", "nightly", "-n", "default", "--job", "not-a-run")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("job not-a-run of guardedjob default/nightly: "))
	})

	t.Run("backfill --cancel stops a running backfill", func(t *testing.T) {
		g := NewWithT(t)
		create("cancelled", "0 * * * *", nil)
		from := time.Now().UTC().Add(-5 * time.Hour).Truncate(time.Hour)
		code, stdout, stderr := w.plugin("", nil, "backfill", "cancelled", "-n", "default", "--from", from.Format(time.RFC3339))
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(MatchRegexp(`follow it with: kubectl get guardedjobbackfill cancelled-\S+ -n default -w`))
		g.Eventually(func() []batchv1alpha1.ActiveRun { return get("cancelled").Status.Active }).Should(HaveLen(1))

		code, _, stderr = w.plugin("", nil, "backfill", "cancelled", "-n", "default", "--from", from.Format(time.RFC3339))
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("is running (6 occurrence(s) remaining): cancel it first with --cancel"))

		code, stdout, stderr = w.plugin("", nil, "backfill", "cancelled", "-n", "default", "--cancel")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(ContainSubstring("cancelled at"))
		g.Expect(strings.Count(stdout, "\n")).To(Equal(1))
		g.Expect(get("cancelled").Status.Backfill.State).To(Equal(batchv1alpha1.BackfillCancelled))
		code, _, stderr = w.plugin("", nil, "backfill", "cancelled", "-n", "default", "--cancel")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("guardedjob default/cancelled has no backfill running"))
	})
}
