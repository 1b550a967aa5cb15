package due_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

func retrying(within time.Duration) *batchv1alpha1.GuardedJob {
	gj := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: "settle", Namespace: "payments"}}
	gj.Spec.RetryOccurrence = &batchv1alpha1.OccurrenceRetry{Within: metav1.Duration{Duration: within}}
	return gj
}

// The tries of an occurrence stop at its scheduled time + within, and never
// after the next occurrence is due: the done-marker a run writes lives until
// the latest start of its occurrence any cluster may make, which counts from
// the next occurrence, so a try after it could do the occurrence a second time.
func TestRetryTriesNeverOutliveTheOccurrencesDoneMarker(t *testing.T) {
	g := NewWithT(t)
	occ := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		schedule string
		within   time.Duration
		want     time.Time
	}{
		{"0 * * * *", 30 * time.Minute, occ.Add(30 * time.Minute)},
		{"0 * * * *", 6 * time.Hour, occ.Add(time.Hour)},     // the next occurrence comes first
		{"0 2 * * *", 6 * time.Hour, occ.Add(6 * time.Hour)}, // daily
		{"*/5 * * * *", time.Hour, occ.Add(5 * time.Minute)}, // every five minutes
		{"0 2 * * *", 168 * time.Hour, occ.Add(24 * time.Hour)},
	} {
		sched, err := schedule.Parse(tt.schedule, "UTC")
		g.Expect(err).NotTo(HaveOccurred())
		gj := retrying(tt.within)
		until := due.RetryUntil(&gj.Spec, sched, occ, occ)
		g.Expect(until).To(BeTemporally("==", tt.want), "%s within %s", tt.schedule, tt.within)
		next := leasetiming.NextOccurrence(sched, occ, occ)
		g.Expect(leasetiming.LatestStart(leasetiming.Starts{StartingDeadline: time.Second}, occ, next)).To(BeTemporally(">", until),
			"a retry may start only while the done-marker lives")
	}
}

func TestRetryFollowsHowEachRunEnded(t *testing.T) {
	occ := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	now := occ.Add(3 * time.Minute)
	sched, err := schedule.Parse("0 * * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	run := func(cause string) *batchv1alpha1.ActiveRun {
		return &batchv1alpha1.ActiveRun{JobName: "settle-1", ScheduledTime: metav1.Time{Time: occ}, StopCause: cause}
	}
	for _, tt := range []struct {
		name   string
		run    *batchv1alpha1.ActiveRun
		result batchv1alpha1.RunResult
		retry  bool
	}{
		{"the Job failed", run(string(batchv1alpha1.FailureJobFailed)), batchv1alpha1.RunResultFailed, true},
		{"no Pod started in time", run(batchv1alpha1.PodStartTimeoutReason), batchv1alpha1.RunResultFailed, true},
		{"maxHold reached", run(""), batchv1alpha1.RunResultMaxHoldExceeded, true},
		{"the lease was lost", run(""), batchv1alpha1.RunResultLockLost, true},
		{"the store did not answer", run(""), batchv1alpha1.RunResultStoreUnavailable, true},
		{"the pod guard stopped it", run(""), batchv1alpha1.RunResultGuardStopped, true},
		{"replaced by concurrencyPolicy Replace", run(batchv1alpha1.JobStoppedReason), batchv1alpha1.RunResultFailed, false},
		{"a Busy run whose wait ended", run(""), batchv1alpha1.RunResultBusy, true},
		{"a person deleted its Job", run(batchv1alpha1.JobDeletedReason), batchv1alpha1.RunResultFailed, false},
		{"it succeeded", run(""), batchv1alpha1.RunResultSucceeded, false},
		{"another cluster did it", run(""), batchv1alpha1.RunResultSkipped, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			gj := retrying(30 * time.Minute)
			due.NoteRetry(gj, sched, tt.run, tt.result, "why it ended", now)
			if !tt.retry {
				g.Expect(gj.Status.Retry).To(BeNil())
				return
			}
			g.Expect(gj.Status.Retry).To(And(Not(BeNil()), HaveField("LastResult", tt.result), HaveField("LastMessage", "why it ended"),
				HaveField("Until.Time", BeTemporally("==", occ.Add(30*time.Minute)))))
			g.Expect(gj.Status.Retry.NotBefore.Time).To(BeTemporally("==", now.Add(batchv1alpha1.DefaultBusyRetryInitial)))
		})
	}
	t.Run("a person deleting the retry's Job ends the retry", func(t *testing.T) {
		g := NewWithT(t)
		gj := retrying(30 * time.Minute)
		gj.Status.Retry = &batchv1alpha1.OccurrenceRetryStatus{ScheduledTime: metav1.Time{Time: occ}, Attempts: 1}
		due.NoteRetry(gj, sched, run(batchv1alpha1.JobDeletedReason), batchv1alpha1.RunResultFailed, "", now)
		g.Expect(gj.Status.Retry).To(BeNil())
	})
	t.Run("a success ends the retry of its occurrence, not of another", func(t *testing.T) {
		g := NewWithT(t)
		gj := retrying(30 * time.Minute)
		gj.Status.Retry = &batchv1alpha1.OccurrenceRetryStatus{ScheduledTime: metav1.Time{Time: occ}, Attempts: 2}
		other := run("")
		other.ScheduledTime = metav1.Time{Time: occ.Add(-time.Hour)}
		due.NoteRetry(gj, sched, other, batchv1alpha1.RunResultSucceeded, "", now)
		g.Expect(gj.Status.Retry).NotTo(BeNil())
		due.NoteRetry(gj, sched, run(""), batchv1alpha1.RunResultSucceeded, "", now)
		g.Expect(gj.Status.Retry).To(BeNil())
	})
	t.Run("a try running that status has not counted is counted once", func(t *testing.T) {
		g := NewWithT(t)
		gj := retrying(30 * time.Minute)
		g.Expect(due.RetryGoesOn(gj)).To(BeFalse(), "no retry")
		gj.Status.Retry = &batchv1alpha1.OccurrenceRetryStatus{ScheduledTime: metav1.Time{Time: occ}, Attempts: 1,
			NotBefore: &metav1.Time{Time: now}}
		g.Expect(due.RetryGoesOn(gj)).To(BeFalse(), "no run of it is active")
		g.Expect(gj.Status.Retry).To(And(HaveField("Attempts", int32(1)), HaveField("NotBefore", Not(BeNil()))))
		other := *run("")
		other.ScheduledTime, other.Retry = metav1.Time{Time: occ.Add(time.Hour)}, 2
		gj.Status.Active = []batchv1alpha1.ActiveRun{other}
		g.Expect(due.RetryGoesOn(gj)).To(BeFalse(), "a run of another occurrence")
		runNow := *run("")
		runNow.RunNow = "2026-12-05T02:03:00Z"
		gj.Status.Active = []batchv1alpha1.ActiveRun{runNow}
		g.Expect(due.RetryGoesOn(gj)).To(BeTrue(), "a run-now of the occurrence goes on")
		g.Expect(gj.Status.Retry).To(And(HaveField("Attempts", int32(1)), HaveField("NotBefore", Not(BeNil()))), "and is no try of it")
		try := *run("")
		try.Retry = 2
		gj.Status.Active = []batchv1alpha1.ActiveRun{other, try}
		g.Expect(due.RetryGoesOn(gj)).To(BeTrue())
		g.Expect(gj.Status.Retry).To(And(HaveField("Attempts", int32(2)), HaveField("NotBefore", BeNil())))
		g.Expect(due.RetryGoesOn(gj)).To(BeTrue())
		g.Expect(gj.Status.Retry.Attempts).To(Equal(int32(2)), "counted once")
	})
	t.Run("a try that ends before any pass counted it is counted", func(t *testing.T) {
		g := NewWithT(t)
		gj := retrying(30 * time.Minute)
		gj.Status.Retry = &batchv1alpha1.OccurrenceRetryStatus{ScheduledTime: metav1.Time{Time: occ}, Attempts: 1,
			NotBefore: &metav1.Time{Time: now.Add(-time.Minute)}}
		try := run(string(batchv1alpha1.FailureJobFailed))
		try.Retry = 2
		due.NoteRetry(gj, sched, try, batchv1alpha1.RunResultFailed, "why it ended", now)
		g.Expect(gj.Status.Retry).To(And(HaveField("Attempts", int32(2)), HaveField("NotBefore", Not(BeNil()))))
		g.Expect(gj.Status.Retry.NotBefore.Time).To(BeTemporally("==", now.Add(due.RetryBackoff(&gj.Spec.Lock, 2))))
	})
	t.Run("the backoff doubles up to lock.busyRetry.max", func(t *testing.T) {
		g := NewWithT(t)
		gj := retrying(30 * time.Minute)
		var got []time.Duration
		for n := range int32(6) {
			got = append(got, due.RetryBackoff(&gj.Spec.Lock, n))
		}
		g.Expect(got).To(Equal([]time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute, time.Minute}))
	})
}

func TestAPauseRequestsNoteIsCheckedAsTheSchemaChecksSpecs(t *testing.T) {
	now := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		value, err string
	}{
		{value: ""},
		{value: `{"by":"alice","reason":"db migration","until":"2026-12-05T03:00:00Z"}`},
		{value: `{"by":`, err: "not a JSON object with by, reason and until"},
		{value: `{"by":"guardedjob-manager"}`, err: `by "guardedjob-manager" is the failure policy's name`},
		{value: `{"until":"2026-12-05T01:00:00Z"}`, err: "until 2026-12-05T01:00:00Z is not in the future"},
		{value: `{"reason":"` + strings.Repeat("x", 513) + `"}`, err: "reason is 513 characters, more than 512"},
	} {
		_, err := due.PauseNote(tt.value, now)
		if tt.err == "" {
			NewWithT(t).Expect(err).NotTo(HaveOccurred(), tt.value)
		} else {
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tt.err)), tt.value)
		}
	}
}

// A suspendNote by guardedjob-manager is moved out of spec only while the
// status the old manager wrote confirms its pause: the note is anyone's to
// write, the status only the manager's.
func TestALegacyPauseMovesOnlyWithTheOldManagersStatus(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 12, 4, 0, 6, 0, 0, time.UTC))
	object := func(by string, reason string, paused bool) *batchv1alpha1.GuardedJob {
		gj := &batchv1alpha1.GuardedJob{}
		gj.Spec.Suspend = ptr.To(true)
		gj.Spec.SuspendNote = &batchv1alpha1.SuspendNote{By: by, Reason: "3 runs in a row failed"}
		if reason != "" {
			gj.Status.Conditions = []metav1.Condition{{Type: batchv1alpha1.SuspendedCondition, Status: metav1.ConditionTrue, Reason: reason, LastTransitionTime: since}}
		}
		if paused {
			gj.Status.Pause = &batchv1alpha1.Pause{Since: since}
		}
		return gj
	}
	for _, tt := range []struct {
		name string
		gj   *batchv1alpha1.GuardedJob
		move bool
	}{
		{"the old manager's note and status", object(batchv1alpha1.FailurePolicySuspender, batchv1alpha1.TooManyFailuresReason, false), true},
		{"the note without that status (Git's or a person's copy)", object(batchv1alpha1.FailurePolicySuspender, "", false), false},
		{"the note, once the manifest's own suspension", object(batchv1alpha1.FailurePolicySuspender, batchv1alpha1.SuspendRequestedReason, false), false},
		{"the note, after the move (a pause in status)", object(batchv1alpha1.FailurePolicySuspender, batchv1alpha1.TooManyFailuresReason, true), false},
		{"a person's note", object("alice", batchv1alpha1.TooManyFailuresReason, false), false},
	} {
		got, move := due.LegacyPause(tt.gj)
		NewWithT(t).Expect(move).To(Equal(tt.move), tt.name)
		if move {
			NewWithT(t).Expect(got).To(Equal(since), tt.name)
		}
	}
}

// TestARetryStartsOnlyWhenNothingHoldsItBackAndStopsWithItsTries: what a pass
// does about status.retry, in the order the reasons weigh.
func TestARetryStartsOnlyWhenNothingHoldsItBackAndStopsWithItsTries(t *testing.T) {
	occ := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	now := occ.Add(5 * time.Minute)
	until := occ.Add(30 * time.Minute)
	base := func(mut func(gj *batchv1alpha1.GuardedJob)) *batchv1alpha1.GuardedJob {
		gj := retrying(30 * time.Minute)
		gj.Status.Retry = &batchv1alpha1.OccurrenceRetryStatus{ScheduledTime: metav1.Time{Time: occ}, Attempts: 1,
			Until: metav1.Time{Time: until}, NotBefore: &metav1.Time{Time: now.Add(-time.Second)}}
		if mut != nil {
			mut(gj)
		}
		return gj
	}
	other := batchv1alpha1.ActiveRun{JobName: "settle-2", ScheduledTime: metav1.Time{Time: occ.Add(-time.Hour)}}
	try := batchv1alpha1.ActiveRun{JobName: "settle-1", ScheduledTime: metav1.Time{Time: occ}, Retry: 2}
	for _, c := range []struct {
		name string
		gj   *batchv1alpha1.GuardedJob
		want due.RetryStep
	}{
		{"no retry", retrying(30 * time.Minute), due.RetryStep{Act: due.NoRetry}},
		{"its backoff passed", base(nil), due.RetryStep{Act: due.RetryStart}},
		{"spec.retryOccurrence removed", base(func(gj *batchv1alpha1.GuardedJob) { gj.Spec.RetryOccurrence = nil }),
			due.RetryStep{Act: due.RetryAbandon, Why: "spec.retryOccurrence was removed"}},
		{"a newer occurrence scheduled", base(func(gj *batchv1alpha1.GuardedJob) {
			gj.Status.LastScheduleTime = &metav1.Time{Time: occ.Add(time.Hour)}
		}), due.RetryStep{Act: due.RetryAbandon, Why: "the occurrence at 2026-12-05T03:00:00Z is due"}},
		{"a try of it runs", base(func(gj *batchv1alpha1.GuardedJob) { gj.Status.Active = []batchv1alpha1.ActiveRun{try} }),
			due.RetryStep{Act: due.RetryRunning}},
		{"a try of it runs past its until: its end decides", base(func(gj *batchv1alpha1.GuardedJob) {
			gj.Status.Active = []batchv1alpha1.ActiveRun{try}
			gj.Status.Retry.Until = metav1.Time{Time: now}
		}), due.RetryStep{Act: due.RetryRunning}},
		{"another run is active during the backoff", base(func(gj *batchv1alpha1.GuardedJob) {
			gj.Status.Active = []batchv1alpha1.ActiveRun{other}
			gj.Status.Retry.NotBefore = &metav1.Time{Time: now.Add(time.Second)}
		}), due.RetryStep{Act: due.RetryWaits, At: until}},
		{"its tries stopped", base(func(gj *batchv1alpha1.GuardedJob) { gj.Status.Retry.Until = metav1.Time{Time: now} }),
			due.RetryStep{Act: due.RetryAbandon, Why: "its tries stopped at 2026-12-05T02:05:00Z (spec.retryOccurrence.within, or the next occurrence)"}},
		{"another run is active", base(func(gj *batchv1alpha1.GuardedJob) { gj.Status.Active = []batchv1alpha1.ActiveRun{other} }),
			due.RetryStep{Act: due.RetryWaits, At: until}},
		{"suspended", base(func(gj *batchv1alpha1.GuardedJob) { gj.Spec.Suspend = ptr.To(true) }),
			due.RetryStep{Act: due.RetryWaits, At: until}},
		{"its backoff runs", base(func(gj *batchv1alpha1.GuardedJob) {
			gj.Status.Retry.NotBefore = &metav1.Time{Time: now.Add(time.Second)}
		}),
			due.RetryStep{Act: due.RetryWaits, At: now.Add(time.Second)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(due.NextRetry(c.gj, now)).To(Equal(c.want))
			if c.want.Act == due.RetryRunning {
				g.Expect(c.gj.Status.Retry).To(And(HaveField("Attempts", int32(2)), HaveField("NotBefore", BeNil())), "the running try is counted")
			}
		})
	}
}
