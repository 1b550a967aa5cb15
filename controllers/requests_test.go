package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// A request's answer is derived from the GuardedJob's status as written, so a
// manager that stopped between the two writes gives the same answer in its
// next pass, and a request the status shows acted on is never acted on again.
func TestARequestsAnswerFollowsTheGuardedJobsRecord(t *testing.T) {
	now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	occ := metav1.NewTime(now.Truncate(time.Hour))
	req := &batchv1alpha1.GuardedJobRun{ObjectMeta: metav1.ObjectMeta{Name: "settle-x7k2p", UID: "5d1c", Generation: 1}}
	value := req.RequestValue()
	gj := func(mutate func(*batchv1alpha1.GuardedJobStatus)) *batchv1alpha1.GuardedJob {
		o := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: "settle"}}
		mutate(&o.Status)
		return o
	}

	t.Run("not in the record: pending, and next to be acted on", func(t *testing.T) {
		g := NewWithT(t)
		o := gj(func(*batchv1alpha1.GuardedJobStatus) {})
		g.Expect(runRequestStatus(o, req, "", "", now)).To(And(HaveField("Phase", batchv1alpha1.RequestPending), HaveField("Request", value)))
		g.Expect((&requestSet{runs: []*batchv1alpha1.GuardedJobRun{req}}).nextRunRequest(o)).To(Equal(req))
	})
	t.Run("a run in flight: Running once its Job exists, and not acted on again", func(t *testing.T) {
		g := NewWithT(t)
		o := gj(func(st *batchv1alpha1.GuardedJobStatus) {
			st.Active = []batchv1alpha1.ActiveRun{{JobName: "settle-1-abc", RunNow: value, Fence: 7, ScheduledTime: occ, Phase: batchv1alpha1.RunPhaseAcquiring}}
		})
		st := runRequestStatus(o, req, "", "", now)
		g.Expect(st).To(And(HaveField("Phase", batchv1alpha1.RequestRunning), HaveField("JobName", ""), HaveField("Fence", int64(7))))
		o.Status.Active[0].JobUID, o.Status.Active[0].Phase = "uid-1", batchv1alpha1.RunPhaseRunning
		g.Expect(runRequestStatus(o, req, "", "", now)).To(HaveField("JobName", "settle-1-abc"))
		g.Expect((&requestSet{runs: []*batchv1alpha1.GuardedJobRun{req}}).nextRunRequest(o)).To(BeNil())
	})
	t.Run("an outcome in recentRuns: Finished with its result", func(t *testing.T) {
		g := NewWithT(t)
		finished := metav1.NewTime(now.Add(-time.Minute))
		o := gj(func(st *batchv1alpha1.GuardedJobStatus) {
			st.RecentRuns = []batchv1alpha1.RecentRun{{Request: value, Result: batchv1alpha1.RunResultBusy, HeldBy: "cluster-b/x", ScheduledTime: &occ, FinishedAt: &finished, Message: "held"}}
		})
		st := runRequestStatus(o, req, "", "", now)
		g.Expect(st).To(And(HaveField("Phase", batchv1alpha1.RequestFinished), HaveField("Result", batchv1alpha1.RunResultBusy),
			HaveField("HeldBy", "cluster-b/x"), HaveField("FinishedAt", &finished)))
		g.Expect(st.Conditions).To(ContainElement(And(HaveField("Type", batchv1alpha1.RequestCompleteCondition), HaveField("Reason", "Busy"))))
		g.Expect((&requestSet{runs: []*batchv1alpha1.GuardedJobRun{req}}).nextRunRequest(o)).To(BeNil())
	})
	t.Run("refused in this pass; a finished answer never changes", func(t *testing.T) {
		g := NewWithT(t)
		o := gj(func(*batchv1alpha1.GuardedJobStatus) {})
		st := runRequestStatus(o, req, "bad parameters", "", now)
		g.Expect(st).To(And(HaveField("Phase", batchv1alpha1.RequestRefused), HaveField("Message", "bad parameters")))
		answered := req.DeepCopy()
		answered.Status = *st
		g.Expect(runRequestStatus(o, answered, "", "", now.Add(time.Hour))).To(Equal(st))
	})
	t.Run("accepted, then gone from the record: Finished, saying so", func(t *testing.T) {
		g := NewWithT(t)
		running := req.DeepCopy()
		running.Status = batchv1alpha1.GuardedJobRunStatus{Phase: batchv1alpha1.RequestRunning, AcceptedAt: &metav1.Time{Time: now}}
		st := runRequestStatus(gj(func(*batchv1alpha1.GuardedJobStatus) {}), running, "", "", now)
		g.Expect(st).To(And(HaveField("Phase", batchv1alpha1.RequestFinished), HaveField("Message", ContainSubstring("kubectl guardedjob history settle"))))
		g.Expect((&requestSet{runs: []*batchv1alpha1.GuardedJobRun{running}}).nextRunRequest(gj(func(*batchv1alpha1.GuardedJobStatus) {}))).To(BeNil(),
			"accepted once is never acted on again")
	})
	t.Run("a backfill follows status.backfill, and waits for the one ahead", func(t *testing.T) {
		g := NewWithT(t)
		bf := &batchv1alpha1.GuardedJobBackfill{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "9f"}}
		other := &batchv1alpha1.BackfillStatus{Request: "guardedjobbackfill:0b7e", State: batchv1alpha1.BackfillRunning}
		g.Expect(backfillRequestStatus(gj(func(st *batchv1alpha1.GuardedJobStatus) { st.Backfill = other }), bf, "", "", now)).To(And(
			HaveField("Phase", batchv1alpha1.RequestPending), HaveField("Message", ContainSubstring("waits for backfill guardedjobbackfill:0b7e"))))
		mine := &batchv1alpha1.BackfillStatus{Request: bf.RequestValue(), State: batchv1alpha1.BackfillComplete, Total: 3, Succeeded: 2, Skipped: 1,
			StartedAt: metav1.NewTime(now.Add(-time.Hour)), FinishedAt: &metav1.Time{Time: now}}
		g.Expect(backfillRequestStatus(gj(func(st *batchv1alpha1.GuardedJobStatus) { st.Backfill = mine }), bf, "", "", now)).To(And(
			HaveField("Phase", batchv1alpha1.RequestFinished), HaveField("Total", int32(3)), HaveField("Succeeded", int32(2)), HaveField("Skipped", int32(1))))
	})
}
