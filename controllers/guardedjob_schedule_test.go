package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

var schedNow = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func suspendedObject(note *batchv1alpha1.SuspendNote) *batchv1alpha1.GuardedJob {
	gj := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: "daily-settlement", Namespace: "payments", Generation: 1}}
	gj.Spec.Suspend = ptr.To(true)
	gj.Spec.SuspendNote = note
	return gj
}

func pausedObject(p *batchv1alpha1.Pause) *batchv1alpha1.GuardedJob {
	gj := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: "daily-settlement", Namespace: "payments", Generation: 1}}
	gj.Status.Pause = p
	return gj
}

func TestTheSuspendedConditionSaysWhoSuspendedWhyAndUntilWhen(t *testing.T) {
	until := metav1.NewTime(time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC))
	tests := []struct {
		name   string
		gj     *batchv1alpha1.GuardedJob
		reason string
		msg    string
	}{
		{name: "a suspension without a note", gj: suspendedObject(nil),
			reason: batchv1alpha1.SuspendRequestedReason, msg: "suspended: no new runs are scheduled"},
		{name: "a note with who, until when and why", gj: suspendedObject(&batchv1alpha1.SuspendNote{By: "alice", Reason: "database migration", Until: &until}),
			reason: batchv1alpha1.SuspendRequestedReason, msg: "suspended: no new runs are scheduled (by alice, until 2026-12-01T06:00:00Z): database migration"},
		{name: "a note with a reason only", gj: suspendedObject(&batchv1alpha1.SuspendNote{Reason: "paused from Git"}),
			reason: batchv1alpha1.SuspendRequestedReason, msg: "suspended: no new runs are scheduled: paused from Git"},
		{name: "the failure policy's pause, in status", gj: pausedObject(&batchv1alpha1.Pause{SuspendNote: batchv1alpha1.SuspendNote{By: batchv1alpha1.FailurePolicySuspender, Reason: "3 runs in a row failed"}}),
			reason: batchv1alpha1.TooManyFailuresReason, msg: "suspended: no new runs are scheduled (by guardedjob-manager): 3 runs in a row failed (status.pause; resume with kubectl guardedjob resume daily-settlement)"},
		{name: "a requested pause, in status", gj: pausedObject(&batchv1alpha1.Pause{SuspendNote: batchv1alpha1.SuspendNote{By: "bob", Until: &until}, Request: "2026-11-30T09:00:00Z"}),
			reason: batchv1alpha1.PauseRequestedReason, msg: "suspended: no new runs are scheduled (by bob, until 2026-12-01T06:00:00Z) (status.pause; resume with kubectl guardedjob resume daily-settlement)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			runcore.SetSuspendedCondition(tt.gj, schedNow)
			runcore.SetReady(tt.gj, nil, schedNow)
			c := runcore.FindCondition(tt.gj.Status.Conditions, batchv1alpha1.SuspendedCondition)
			g.Expect(c).To(PointTo(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", tt.reason), HaveField("Message", tt.msg))))
			g.Expect(runcore.FindCondition(tt.gj.Status.Conditions, batchv1alpha1.ReadyCondition)).To(PointTo(And(
				HaveField("Status", metav1.ConditionTrue), HaveField("Reason", batchv1alpha1.SuspendedReason), HaveField("Message", tt.msg))),
				"Ready says the same, for Argo CD's Suspended health")
		})
	}
	t.Run("a suspension that ended says it resumed", func(t *testing.T) {
		g := NewWithT(t)
		gj := suspendedObject(&batchv1alpha1.SuspendNote{By: "alice"})
		runcore.SetSuspendedCondition(gj, schedNow)
		gj.Spec.Suspend, gj.Spec.SuspendNote = ptr.To(false), nil
		runcore.SetSuspendedCondition(gj, schedNow.Add(time.Hour))
		g.Expect(runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.SuspendedCondition)).To(PointTo(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", batchv1alpha1.ResumedReason),
			HaveField("Message", "resumed at 2026-11-30T11:00:00Z: spec.suspend is false and no pause holds"))))
		g.Expect(gj.Status.Suspended).To(BeFalse())
	})
	t.Run("spec.suspend whose until passed schedules runs again, and says the manifest still suspends it", func(t *testing.T) {
		g := NewWithT(t)
		gj := suspendedObject(&batchv1alpha1.SuspendNote{By: "alice", Until: &until})
		runcore.SetSuspendedCondition(gj, schedNow)
		g.Expect(gj.Status.Suspended).To(BeTrue())
		after := until.Add(time.Minute)
		g.Expect(gj.SuspendedAt(after)).To(BeFalse())
		runcore.SetSuspendedCondition(gj, after)
		g.Expect(gj.Status.Suspended).To(BeFalse())
		g.Expect(runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.SuspendedCondition)).To(PointTo(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", batchv1alpha1.SuspendExpiredReason),
			HaveField("Message", ContainSubstring("spec.suspend is still true: set it to false in the manifest")))))
		g.Expect(gj.Spec.Suspended()).To(BeTrue(), "spec is the manifest's: never written")
	})
	t.Run("a pause in status beside spec.suspend: Paused says so, Suspended shows the manifest's note", func(t *testing.T) {
		g := NewWithT(t)
		gj := suspendedObject(&batchv1alpha1.SuspendNote{Reason: "from Git"})
		gj.Status.Pause = &batchv1alpha1.Pause{SuspendNote: batchv1alpha1.SuspendNote{By: batchv1alpha1.FailurePolicySuspender, Reason: "2 runs in a row failed"}}
		runcore.SetSuspendedCondition(gj, schedNow)
		g.Expect(runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.SuspendedCondition)).To(PointTo(And(
			HaveField("Reason", batchv1alpha1.SuspendRequestedReason), HaveField("Message", "suspended: no new runs are scheduled: from Git"))))
		g.Expect(runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.PausedCondition)).To(PointTo(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", batchv1alpha1.TooManyFailuresReason))))
		// The manifest resumes; the pause still holds.
		gj.Spec.Suspend, gj.Spec.SuspendNote = ptr.To(false), nil
		runcore.SetSuspendedCondition(gj, schedNow.Add(time.Minute))
		g.Expect(gj.Status.Suspended).To(BeTrue())
		g.Expect(runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.SuspendedCondition)).To(PointTo(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", batchv1alpha1.TooManyFailuresReason))))
	})
	t.Run("a GuardedJob never suspended has no Suspended condition", func(t *testing.T) {
		gj := suspendedObject(nil)
		gj.Spec.Suspend = nil
		runcore.SetSuspendedCondition(gj, schedNow)
		NewWithT(t).Expect(runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.SuspendedCondition)).To(BeNil())
	})
	t.Run("a note on a GuardedJob that is not suspended is not shown", func(t *testing.T) {
		gj := suspendedObject(&batchv1alpha1.SuspendNote{By: "alice"})
		gj.Spec.Suspend = ptr.To(false)
		NewWithT(t).Expect(runcore.SuspendedMessage(gj, schedNow)).To(Equal("suspended: no new runs are scheduled"))
	})
}

// Suspensions with notes, by a person or by the failure policy, leave kstatus
// as a suspended GuardedJob has it (Current); a pattern that does not compile
// needs a person (Failed).
func TestKstatusOfSuspensionsAndParameters(t *testing.T) {
	for _, gj := range []*batchv1alpha1.GuardedJob{
		suspendedObject(&batchv1alpha1.SuspendNote{By: "alice", Reason: "db migration"}),
		pausedObject(&batchv1alpha1.Pause{SuspendNote: batchv1alpha1.SuspendNote{By: batchv1alpha1.FailurePolicySuspender, Reason: "3 failed"}}),
	} {
		runcore.SetReady(gj, nil, schedNow)
		runcore.SetSuspendedCondition(gj, schedNow)
		gj.Status.ObservedGeneration = gj.Generation
		runcore.SetKstatus(gj, schedNow)
		NewWithT(t).Expect(kstatusOf(t, gj).Status).To(Equal(status.CurrentStatus), "%+v", gj.Status.Conditions)
	}
	gj := suspendedObject(nil)
	gj.Spec.Suspend = nil
	runcore.SetReady(gj, specerror.Errorf(batchv1alpha1.InvalidParametersReason, "spec.parameters X: pattern \"(\" is not a regular expression"), schedNow)
	gj.Status.ObservedGeneration = gj.Generation
	runcore.SetKstatus(gj, schedNow)
	NewWithT(t).Expect(kstatusOf(t, gj).Status).To(Equal(status.FailedStatus))
}

func TestFailedRunsInARow(t *testing.T) {
	const (
		ok      = batchv1alpha1.RunResultSucceeded
		failed  = batchv1alpha1.RunResultFailed
		maxHold = batchv1alpha1.RunResultMaxHoldExceeded
		lost    = batchv1alpha1.RunResultLockLost
		busy    = batchv1alpha1.RunResultBusy
		skipped = batchv1alpha1.RunResultSkipped
		guard   = batchv1alpha1.RunResultGuardStopped
		store   = batchv1alpha1.RunResultStoreUnavailable
	)
	tests := []struct {
		name     string
		results  []batchv1alpha1.RunResult
		backfill bool
		want     int32
	}{
		{name: "Failed and MaxHoldExceeded count", results: []batchv1alpha1.RunResult{failed, maxHold, failed}, want: 3},
		{name: "a success starts the count again", results: []batchv1alpha1.RunResult{failed, failed, ok, failed}, want: 1},
		{name: "the lock's and the store's troubles neither count nor reset", results: []batchv1alpha1.RunResult{failed, lost, guard, store, busy, skipped, failed}, want: 2},
		{name: "backfill runs are not counted", results: []batchv1alpha1.RunResult{failed, failed}, backfill: true, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gj := &batchv1alpha1.GuardedJob{}
			run := batchv1alpha1.ActiveRun{JobName: "j", ScheduledTime: metav1.NewTime(schedNow)}
			if tt.backfill {
				run.Backfill = "2026-11-30T09:59:00Z"
			}
			for _, res := range tt.results {
				run.StopCause = ""
				if res == failed {
					run.StopCause = string(batchv1alpha1.FailureJobFailed) // the Job failed on its own
				}
				gj.Status.Active = []batchv1alpha1.ActiveRun{run}
				runcore.FinishRun(gj, run, runcore.NeverHeld, res, "", "", schedNow)
			}
			NewWithT(t).Expect(gj.Status.ConsecutiveFailures).To(Equal(tt.want))
		})
	}
}

func TestABackfillCountsHowEachOccurrenceEnded(t *testing.T) {
	const request = "2026-11-30T09:59:00Z"
	t1, t2 := metav1.NewTime(schedNow.Add(-2*time.Hour)), metav1.NewTime(schedNow.Add(-time.Hour))
	object := func() *batchv1alpha1.GuardedJob {
		gj := &batchv1alpha1.GuardedJob{}
		gj.Spec.Lock.BusyRetry = &batchv1alpha1.BusyRetry{Initial: &metav1.Duration{Duration: 10 * time.Second}, Max: &metav1.Duration{Duration: 30 * time.Second}}
		gj.Status.Backfill = &batchv1alpha1.BackfillStatus{Request: request, State: batchv1alpha1.BackfillRunning, Remaining: 2, Parallelism: 2,
			Current: []batchv1alpha1.BackfillOccurrence{{ScheduledTime: t1}, {ScheduledTime: t2}}}
		return gj
	}
	end := func(gj *batchv1alpha1.GuardedJob, at metav1.Time, result batchv1alpha1.RunResult, heldBy string) {
		run := batchv1alpha1.ActiveRun{JobName: "j-" + at.Format("1504"), ScheduledTime: at, Backfill: request}
		gj.Status.Active = append(gj.Status.Active, run)
		runcore.FinishRun(gj, run, runcore.NeverHeld, result, heldBy, "", schedNow)
	}
	tests := []struct {
		name    string
		result  batchv1alpha1.RunResult
		heldBy  string
		counted func(b *batchv1alpha1.BackfillStatus) int32
		retried bool
	}{
		{name: "a success is counted succeeded", result: batchv1alpha1.RunResultSucceeded, counted: func(b *batchv1alpha1.BackfillStatus) int32 { return b.Succeeded }},
		{name: "a done-marker found is counted skipped", result: batchv1alpha1.RunResultSkipped, heldBy: "cluster-b/payments/j-1",
			counted: func(b *batchv1alpha1.BackfillStatus) int32 { return b.Skipped }},
		{name: "a failure is counted failed, with its time", result: batchv1alpha1.RunResultLockLost, counted: func(b *batchv1alpha1.BackfillStatus) int32 { return b.Failed }},
		{name: "a busy lock is tried again later", result: batchv1alpha1.RunResultBusy, retried: true},
		{name: "a missed start deadline is tried again later", result: batchv1alpha1.RunResultSkipped, retried: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			gj := object()
			end(gj, t1, tt.result, tt.heldBy)
			b := gj.Status.Backfill
			g.Expect(gj.Status.LastRun.Backfill).To(Equal(request), "the run's record names its backfill")
			if tt.retried {
				g.Expect(b.Current).To(HaveLen(2))
				g.Expect(b.Current[0].Attempts).To(Equal(int32(1)))
				g.Expect(b.Current[0].RetryAt.Time).To(BeTemporally(">=", schedNow.Add(10*time.Second)))
				g.Expect(b.Current[0].RetryAt.Time).To(BeTemporally("<=", schedNow.Add(15*time.Second)))
				g.Expect(b.Remaining).To(Equal(int32(2)))
				return
			}
			g.Expect(tt.counted(b)).To(Equal(int32(1)))
			g.Expect(b.Current).To(ConsistOf(HaveField("ScheduledTime", t2)))
			g.Expect(b.Remaining).To(Equal(int32(1)))
			if tt.result == batchv1alpha1.RunResultLockLost {
				g.Expect(b.FailedOccurrences).To(ConsistOf(t1))
			}
		})
	}
	t.Run("the waits of an occurrence that stays busy double up to lock.busyRetry.max", func(t *testing.T) {
		gj := object()
		for _, want := range []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second} {
			w := runcore.BackfillRetryWait(gj, int32(want/(10*time.Second)), "a-token")
			NewWithT(t).Expect(w).To(And(BeNumerically(">=", want), BeNumerically("<=", want+want/2)))
		}
	})
	t.Run("a run of an earlier backfill is not counted", func(t *testing.T) {
		gj := object()
		run := batchv1alpha1.ActiveRun{JobName: "old", ScheduledTime: t1, Backfill: "2026-11-29T00:00:00Z"}
		gj.Status.Active = []batchv1alpha1.ActiveRun{run}
		runcore.FinishRun(gj, run, runcore.NeverHeld, batchv1alpha1.RunResultSucceeded, "", "", schedNow)
		NewWithT(t).Expect(gj.Status.Backfill.Succeeded).To(BeZero())
	})
	t.Run("a cancelled backfill counts its runs that end but tries none again", func(t *testing.T) {
		g := NewWithT(t)
		gj := object()
		gj.Status.Backfill.State = batchv1alpha1.BackfillCancelled
		end(gj, t1, batchv1alpha1.RunResultBusy, "")
		end(gj, t2, batchv1alpha1.RunResultSucceeded, "")
		g.Expect(gj.Status.Backfill.Current).To(BeEmpty())
		g.Expect(gj.Status.Backfill.Succeeded).To(Equal(int32(1)))
	})
}

func TestADueRunWaitsOrIsSkippedByTheConcurrencyPolicy(t *testing.T) {
	occurrence := schedNow
	object := func(policy batchv1alpha1.ConcurrencyPolicy, limit *int32, buffered int, backfillOnly bool) *batchv1alpha1.GuardedJob {
		gj := &batchv1alpha1.GuardedJob{}
		gj.Spec.ConcurrencyPolicy, gj.Spec.BufferLimit = policy, limit
		run := batchv1alpha1.ActiveRun{JobName: "settle-1-aaaaaa", ScheduledTime: metav1.NewTime(schedNow.Add(-time.Hour))}
		if backfillOnly {
			run.Backfill = "2026-11-30T09:00:00Z"
		}
		gj.Status.Active = []batchv1alpha1.ActiveRun{run}
		for i := range buffered {
			gj.Status.Buffered = append(gj.Status.Buffered, batchv1alpha1.BufferedRun{ScheduledTime: metav1.NewTime(schedNow.Add(-time.Duration(i+1) * time.Minute))})
		}
		return gj
	}
	tests := []struct {
		name     string
		gj       *batchv1alpha1.GuardedJob
		handled  bool
		buffered int
		skipped  string
	}{
		{name: "Forbid leaves it to the schedule (skipped there)", gj: object(batchv1alpha1.ForbidConcurrent, nil, 0, false)},
		{name: "Allow leaves it to the schedule (started beside)", gj: object(batchv1alpha1.AllowConcurrent, nil, 0, false)},
		{name: "Replace leaves it to the schedule when a run of the schedule is active", gj: object(batchv1alpha1.ReplaceConcurrent, nil, 0, false)},
		{name: "Replace buffers it when only a backfill occurrence runs, which is never replaced", gj: object(batchv1alpha1.ReplaceConcurrent, nil, 0, true),
			handled: true, buffered: 1},
		{name: "BufferOne keeps one waiting", gj: object(batchv1alpha1.BufferOneConcurrent, nil, 0, false), handled: true, buffered: 1},
		{name: "BufferOne skips a second", gj: object(batchv1alpha1.BufferOneConcurrent, nil, 1, false), handled: true, buffered: 1,
			skipped: "concurrencyPolicy BufferOne and 1 run(s) already wait for settle-1-aaaaaa"},
		{name: "BufferAll keeps up to bufferLimit waiting", gj: object(batchv1alpha1.BufferAllConcurrent, ptr.To(int32(3)), 2, false), handled: true, buffered: 3},
		{name: "BufferAll skips past bufferLimit", gj: object(batchv1alpha1.BufferAllConcurrent, ptr.To(int32(3)), 3, false), handled: true, buffered: 3,
			skipped: "concurrencyPolicy BufferAll and 3 run(s) already wait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := &scope{gj: tt.gj, now: schedNow}
			skipped := ""
			handled := (&GuardedJobReconciler{}).bufferDue(s, occurrence, false, "", func(msg string) { skipped = msg })
			g.Expect(handled).To(Equal(tt.handled))
			g.Expect(tt.gj.Status.Buffered).To(HaveLen(tt.buffered))
			if tt.skipped != "" {
				g.Expect(skipped).To(HavePrefix(tt.skipped))
				return
			}
			g.Expect(skipped).To(BeEmpty())
			if tt.handled {
				last := tt.gj.Status.Buffered[len(tt.gj.Status.Buffered)-1]
				g.Expect(last.ScheduledTime.Time).To(BeTemporally("==", occurrence), "it keeps its own scheduled time")
				g.Expect(tt.gj.Status.LastScheduleTime.Time).To(BeTemporally("==", occurrence), "the schedule does not run it again")
			}
		})
	}
	t.Run("a run-now keeps its value and parameters, and is handled", func(t *testing.T) {
		g := NewWithT(t)
		gj := object(batchv1alpha1.BufferOneConcurrent, nil, 0, false)
		s := &scope{gj: gj, now: schedNow, triggerParams: map[string]string{"REGION": "eu"}} // as pendingTrigger read them
		g.Expect((&GuardedJobReconciler{}).bufferDue(s, occurrence, true, "2026-11-30T10:00:00Z", func(string) {})).To(BeTrue())
		g.Expect(gj.Status.Buffered).To(ConsistOf(And(HaveField("RunNow", "2026-11-30T10:00:00Z"), HaveField("Parameters", map[string]string{"REGION": "eu"}))))
		g.Expect(gj.Status.LastRunNow).To(Equal("2026-11-30T10:00:00Z"))
	})
}

// The failure policy's series come from status: failures in a row while there
// are any, and a 1 while the policy's pause holds (not a person's suspension,
// nor a pause a request asked for).
func TestFailurePolicySeries(t *testing.T) {
	g := NewWithT(t)
	failing := batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "failing", UID: "u1"}}
	failing.Status.ConsecutiveFailures = 2
	paused := *pausedObject(&batchv1alpha1.Pause{SuspendNote: batchv1alpha1.SuspendNote{By: batchv1alpha1.FailurePolicySuspender, Reason: "3 failed"}})
	paused.UID = "u2"
	byPerson := *suspendedObject(&batchv1alpha1.SuspendNote{By: "alice"})
	byPerson.Name, byPerson.UID = "by-person", "u3"
	byRequest := *pausedObject(&batchv1alpha1.Pause{SuspendNote: batchv1alpha1.SuspendNote{By: "bob"}, Request: "2026-12-05T02:00:00Z"})
	byRequest.Name, byRequest.UID = "by-request", "u4"
	c := &guardedJobCollector{}
	c.use(listReader{items: []batchv1alpha1.GuardedJob{failing, paused, byPerson, byRequest}}, nil)
	reg := prometheus.NewPedanticRegistry()
	g.Expect(reg.Register(c)).To(Succeed())
	families, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	series := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "guardedjob_failed_runs_in_a_row" && f.GetName() != "guardedjob_suspended_after_failures" {
			continue
		}
		for _, m := range f.GetMetric() {
			series[f.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	g.Expect(series).To(Equal(map[string]float64{
		"guardedjob_failed_runs_in_a_row/failing":              2,
		"guardedjob_suspended_after_failures/daily-settlement": 1,
	}))
}
