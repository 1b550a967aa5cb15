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
