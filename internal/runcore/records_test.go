package runcore_test

import (
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// The Jobs as records: the Strict floor counts their fences, and a Job no
// status records keeps its lease finalizer until status holds its fence and
// occurrence.
func TestAJobIsItsRunsRecordUntilStatusCatchesUp(t *testing.T) {
	occ := time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)
	jobs := []runcore.JobRecord{{Fence: 9, Occurrence: occ}, {Fence: 4}}
	if got := runcore.FloorWithJobs(7, jobs); got != 9 {
		t.Errorf("floor %d, want the Job's fence 9 over lastFence 7", got)
	}
	if got := runcore.FloorWithJobs(12, jobs); got != 12 {
		t.Errorf("floor %d, want lastFence 12", got)
	}
	for name, st := range map[string]*batchv1alpha1.GuardedJobStatus{
		"without its fence":      {LastFence: 7, LastScheduleTime: &metav1.Time{Time: occ}},
		"without its occurrence": {LastFence: 9, LastScheduleTime: &metav1.Time{Time: occ.Add(-time.Hour)}},
		"with no schedule time":  {LastFence: 9},
	} {
		if runcore.CaughtUp(st, jobs[0]) {
			t.Errorf("status %s is taken as caught up with the Job", name)
		}
	}
	st := &batchv1alpha1.GuardedJobStatus{LastFence: 7, LastScheduleTime: &metav1.Time{Time: occ.Add(-time.Hour)}}
	if !runcore.FoldJob(st, jobs[0]) || !runcore.CaughtUp(st, jobs[0]) {
		t.Fatalf("folding the Job leaves status behind it: %+v", st)
	}
	if st.LastFence != 9 || !st.LastScheduleTime.Time.Equal(occ) {
		t.Errorf("status after the fold: lastFence %d, lastScheduleTime %v", st.LastFence, st.LastScheduleTime)
	}
	if runcore.FoldJob(st, runcore.JobRecord{Fence: 3, Occurrence: occ.Add(-2 * time.Hour)}) {
		t.Error("an older Job moved status back")
	}
}

func TestAForgedFenceCannotExhaustTheFenceCounter(t *testing.T) {
	for _, c := range []struct {
		fence int64
		want  bool
	}{
		{0, false}, {-3, false}, {1, true}, {41, true},
		{runcore.MaxJobFence, true}, {runcore.MaxJobFence + 1, false}, {math.MaxInt64, false},
	} {
		if got := runcore.TrustedFence(c.fence); got != c.want {
			t.Errorf("fence %d: trusted %v, want %v", c.fence, got, c.want)
		}
	}
}

func TestAJobsOccurrenceCountsOnlyUnderItsOwnName(t *testing.T) {
	occ := time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)
	name := "payout-" + "29942040" + "-abcdef"
	if occ.Unix()/60 != 29942040 {
		t.Fatalf("test occurrence is at minute %d", occ.Unix()/60)
	}
	for _, c := range []struct {
		name    string
		job     string
		created time.Time
		want    bool
	}{
		{"its run's Job, created when due", name, occ.Add(time.Second), true},
		{"a clock a little ahead", name, occ.Add(-30 * time.Second), true},
		{"created long before the occurrence", name, occ.Add(-time.Hour), false},
		{"another occurrence's name", "payout-29942100-abcdef", occ.Add(time.Second), false},
		{"another object's name", "payouts-29942040-abcdef", occ.Add(time.Second), false},
	} {
		if got := runcore.TrustedOccurrence("payout", c.job, occ, c.created); got != c.want {
			t.Errorf("%s: trusted %v, want %v", c.name, got, c.want)
		}
	}
}

// TestARunThatEndedWithOnlyItsJobAsRecordIsRecordedAndAnswersItsRequest: a
// Job that finished while no status recorded its run, and that no pass could
// adopt, gives status its end once: the history shows it as its Job ended, and
// the run-now that started it is answered while it is still the annotation's
// (an older value never takes the place of a newer one). The Job keeps its
// lease finalizer until that is in status.
func TestARunThatEndedWithOnlyItsJobAsRecordIsRecordedAndAnswersItsRequest(t *testing.T) {
	occ := time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)
	now := occ.Add(time.Hour)
	rec := runcore.JobRecord{Fence: 3, Occurrence: occ, Ended: batchv1alpha1.RunResultSucceeded, JobName: "pay-29453760-abc123",
		Trigger: batchv1alpha1.TriggerRunNow, Request: "2026-12-06T02:00:05Z"}
	gj := &batchv1alpha1.GuardedJob{}
	gj.Annotations = map[string]string{batchv1alpha1.RunNowAnnotation: rec.Request}
	if runcore.CaughtUp(&gj.Status, rec) {
		t.Fatal("caught up before status has the run's end")
	}
	if !runcore.FoldJob(&gj.Status, rec) || !runcore.FoldEnd(gj, rec, now) {
		t.Fatal("status did not take the Job's run")
	}
	lr := gj.Status.LastRun
	if lr == nil || lr.JobName != rec.JobName || lr.Result != batchv1alpha1.RunResultSucceeded || lr.Fence != 3 || !lr.ScheduledTime.Time.Equal(occ) {
		t.Fatalf("lastRun %+v, want the Job's run, Succeeded, fence 3, its occurrence", lr)
	}
	if got := gj.Status.RecentRuns[0]; got.Request != rec.Request || got.Trigger != batchv1alpha1.TriggerRunNow || got.JobName != rec.JobName {
		t.Errorf("recentRuns[0] %+v, want the run with its request and trigger", got)
	}
	if gj.Status.LastRunNow != rec.Request {
		t.Errorf("lastRunNow %q, want the run-now answered", gj.Status.LastRunNow)
	}
	if !runcore.CaughtUp(&gj.Status, rec) {
		t.Error("not caught up with the run's end in status")
	}
	if runcore.FoldEnd(gj, rec, now.Add(time.Minute)) || len(gj.Status.RecentRuns) != 1 {
		t.Errorf("the same end recorded twice: %+v", gj.Status.RecentRuns)
	}

	// A newer run-now value was answered meanwhile: the old one does not
	// take its place.
	newer := &batchv1alpha1.GuardedJob{}
	newer.Annotations = map[string]string{batchv1alpha1.RunNowAnnotation: "2026-12-06T03:00:00Z"}
	newer.Status.LastRunNow = "2026-12-06T03:00:00Z"
	runcore.FoldEnd(newer, rec, now)
	if newer.Status.LastRunNow != "2026-12-06T03:00:00Z" {
		t.Errorf("lastRunNow %q: an older value took the place of the newer one", newer.Status.LastRunNow)
	}
	// A Job that has not finished has no end to record.
	running := rec
	running.Ended = ""
	if runcore.FoldEnd(&batchv1alpha1.GuardedJob{}, running, now) {
		t.Error("a run whose Job has not finished was recorded as ended")
	}
}
