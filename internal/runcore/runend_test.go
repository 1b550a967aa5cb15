package runcore

import (
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// status.recentRuns keeps the last ten outcomes, newest first, each as
// status.lastRun says it (with what started the run), its message cut short:
// a Busy and a Skipped run are there after their events have expired.
func TestRecentRunsKeepTheLastTenOutcomesNewestFirst(t *testing.T) {
	g := NewWithT(t)
	gj := &batchv1alpha1.GuardedJob{}
	t0 := time.Date(2026, 12, 4, 23, 5, 0, 0, time.UTC)
	for i := range 12 {
		at := t0.Add(time.Duration(i) * time.Hour)
		run := batchv1alpha1.ActiveRun{JobName: "nightly-" + strconv.Itoa(i), ScheduledTime: metav1.NewTime(at), Key: "team-a:nightly", Fence: int64(i + 1)}
		if i%2 == 1 {
			run.RunNow = at.Format(time.RFC3339)
		}
		gj.Status.Active = append(gj.Status.Active, run)
		FinishRun(gj, run, NeverHeld, batchv1alpha1.RunResultSucceeded, "", "the Job completed", at.Add(time.Minute))
	}
	RecordRun(gj, "", t0.Add(12*time.Hour), "team-a:nightly", 0, false, batchv1alpha1.RunResultBusy, "cluster-b/team-a/nightly-1-abc", strings.Repeat("m", 1000), t0.Add(12*time.Hour))
	SyncRecent(gj, batchv1alpha1.TriggerSchedule)

	recent := gj.Status.RecentRuns
	g.Expect(recent).To(HaveLen(10))
	g.Expect(recent[0]).To(And(HaveField("Result", batchv1alpha1.RunResultBusy), HaveField("HeldBy", "cluster-b/team-a/nightly-1-abc"),
		HaveField("Trigger", "schedule"), HaveField("Message", HaveLen(MaxRecentMessage+3))))
	g.Expect(recent[1]).To(And(HaveField("JobName", "nightly-11"), HaveField("Fence", int64(12)), HaveField("Trigger", "run-now"),
		HaveField("Result", batchv1alpha1.RunResultSucceeded), HaveField("Message", "the Job completed")))
	g.Expect(recent[2]).To(And(HaveField("JobName", "nightly-10"), HaveField("Trigger", "schedule")))
	g.Expect(recent[9].JobName).To(Equal("nightly-3"), "the oldest two are gone")
	g.Expect(gj.Status.LastRun.Result).To(Equal(batchv1alpha1.RunResultBusy))
}

// The failure policy counts the workload failing (its Job failed, or it ran over
// maxHold), and a Pod that never started or a rejected Job only when alsoCount
// names them; a replaced run or a deleted Job never.
func TestTheFailurePolicyCountsOnlyTheWorkloadFailingUnlessAskedForMore(t *testing.T) {
	for _, tc := range []struct {
		cause  string
		result batchv1alpha1.RunResult
		also   []batchv1alpha1.FailureCause
		counts bool
	}{
		{"JobFailed", batchv1alpha1.RunResultFailed, nil, true},
		{"", batchv1alpha1.RunResultMaxHoldExceeded, nil, true},
		{batchv1alpha1.PodStartTimeoutReason, batchv1alpha1.RunResultFailed, nil, false},
		{batchv1alpha1.PodStartTimeoutReason, batchv1alpha1.RunResultFailed, []batchv1alpha1.FailureCause{batchv1alpha1.FailurePodStartTimeout}, true},
		{batchv1alpha1.JobRejectedReason, batchv1alpha1.RunResultFailed, nil, false},
		{batchv1alpha1.JobRejectedReason, batchv1alpha1.RunResultFailed, []batchv1alpha1.FailureCause{batchv1alpha1.FailureJobRejected}, true},
		{batchv1alpha1.JobStoppedReason, batchv1alpha1.RunResultFailed, []batchv1alpha1.FailureCause{batchv1alpha1.FailurePodStartTimeout, batchv1alpha1.FailureJobRejected}, false},
		{batchv1alpha1.JobDeletedReason, batchv1alpha1.RunResultFailed, nil, false},
		{"", batchv1alpha1.RunResultLockLost, nil, false},
	} {
		gj := &batchv1alpha1.GuardedJob{Spec: batchv1alpha1.GuardedJobSpec{FailurePolicy: &batchv1alpha1.FailurePolicy{SuspendAfter: 5, AlsoCount: tc.also}}}
		gj.Status.ConsecutiveFailures = 1
		run := batchv1alpha1.ActiveRun{JobName: "j", StopCause: tc.cause}
		noteRunEnd(gj, &run, tc.result, "", time.Now())
		want := int32(1)
		if tc.counts {
			want = 2
		}
		NewWithT(t).Expect(gj.Status.ConsecutiveFailures).To(Equal(want), "%s %s alsoCount %v", tc.result, tc.cause, tc.also)
	}
}

// TestARunNowIsAnsweredInStatusOnlyForAnAnnotation: an annotation's run-now
// value goes to status.lastRunNow; a request object's never does (its run or
// outcome records it), and an annotation that is no request time is reported
// once whatever it looks like.
func TestARunNowIsAnsweredInStatusOnlyForAnAnnotation(t *testing.T) {
	g := NewWithT(t)
	gj := &batchv1alpha1.GuardedJob{}
	AnswerRunNow(gj, "2026-12-07T03:00:00Z")
	g.Expect(gj.Status.LastRunNow).To(Equal("2026-12-07T03:00:00Z"))
	AnswerRunNow(gj, batchv1alpha1.RunRequestPrefix+"uid-1")
	g.Expect(gj.Status.LastRunNow).To(Equal("2026-12-07T03:00:00Z"), "a request object's value never hides the annotation's")
	IgnoreRunNow(gj, batchv1alpha1.RunRequestPrefix+"garbled")
	g.Expect(gj.Status.LastRunNow).To(Equal(batchv1alpha1.RunRequestPrefix + "garbled"))
}
