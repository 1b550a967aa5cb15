package runcore

import (
	"strconv"
	"strings"
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
)

// The Jobs as records of their runs (the early gate). A Job's gate may open
// before status records its run, so until status catches up the Job is the
// only record of two facts the protocol depends on: the fence its run took (the
// Strict floor must count it) and the occurrence it ran (the schedule must not
// start it again). A Job keeps its lease finalizer until status has both
// (CaughtUp), so neither fact is gone while something depends on it.

// JobRecord is what a Job no status records carries of its run: its fence
// (0: none or unfenced) and its occurrence (zero: none that can be trusted).
type JobRecord struct {
	Fence      int64
	Occurrence time.Time
}

// FloorWithJobs is the Strict floor counting the Jobs' fences: the highest of
// status.lastFence and the fence of every Job of the object. A fence a Job
// shows can only raise the floor: a forged one makes fences jump, never repeat.
func FloorWithJobs(lastFence int64, jobs []JobRecord) int64 {
	floor := lastFence
	for _, j := range jobs {
		floor = max(floor, j.Fence)
	}
	return floor
}

// CaughtUp says whether status holds what a Job no status records carries:
// its fence in lastFence and its occurrence in lastScheduleTime. Only then may
// the Job lose its lease finalizer (and the history limit delete it).
func CaughtUp(st *batchv1alpha1.GuardedJobStatus, j JobRecord) bool {
	if j.Fence > st.LastFence {
		return false
	}
	return j.Occurrence.IsZero() || st.LastScheduleTime != nil && !st.LastScheduleTime.Time.Before(j.Occurrence)
}

// FoldJob raises status to what a Job carries (CaughtUp afterwards): the
// schedule's last time moves past the occurrence the Job ran (step
// schedule_past_job), the floor to its fence. It returns whether status moved.
func FoldJob(st *batchv1alpha1.GuardedJobStatus, j JobRecord) bool {
	moved := false
	if j.Fence > st.LastFence {
		st.LastFence, moved = j.Fence, true
	}
	if !j.Occurrence.IsZero() && due.NoteScheduled(st, j.Occurrence) {
		moved = true
	}
	return moved
}

// occurrenceLead is how long before its occurrence a run's Job may be created
// by a clock that is ahead of the API server's.
const occurrenceLead = time.Minute

// TrustedOccurrence says whether a Job of gjName named jobName, created at
// created, may carry a run of the occurrence at occurrence (read from its
// annotation, which is anyone's to write): its name is the one runs of that
// occurrence get (runtoken.JobName), and it was not created before the
// occurrence was due. Counting it can only hold the schedule back from
// starting that occurrence again.
func TrustedOccurrence(gjName, jobName string, occurrence, created time.Time) bool {
	prefix := gjName + "-" + strconv.FormatInt(occurrence.Unix()/60, 10) + "-"
	return strings.HasPrefix(jobName, prefix) && !created.Add(occurrenceLead).Before(occurrence)
}

// MaxJobFence is the highest fence a Job's annotation may carry and still be
// counted. A fence counter taking a thousand fences a second needs some
// 285,000 years to reach it, and JSON readers (kubectl's tooling, dashboards)
// read integers exactly only up to it. Anyone who may create Jobs can write the
// annotation: a forged fence near the counter's limit would make every later
// acquisition overflow it, so a larger one is not a record of any run.
const MaxJobFence = 1 << 53

// TrustedFence says whether a fence read from a Job's annotation may count as
// the fence its run took: positive and at most MaxJobFence.
func TrustedFence(fence int64) bool {
	return fence > 0 && fence <= MaxJobFence
}
