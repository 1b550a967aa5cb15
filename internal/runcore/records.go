package runcore

import (
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// The Jobs as records of their runs (the early gate). A Job's gate may open
// before status records its run, so until status catches up the Job is the
// only record of two facts the protocol depends on: the fence its run took (the
// Strict floor must count it) and the occurrence it ran (the schedule must not
// start it again). A Job keeps its lease finalizer until status has both
// (CaughtUp), so neither fact is gone while something depends on it.

// JobRecord is what a Job no status records carries of its run: its fence
// (0: none or unfenced) and its occurrence (zero: none that can be trusted).
// A Job that finished while its run was still its only record (its lease
// finalizer on) also carries that run's end: Ended (Succeeded or Failed, as
// the Job ended; empty otherwise), under JobName, with what started it
// (Trigger, and Request: the run-now value or request object). Request is
// read from the Job's annotation, a hint: it may answer a request, so that the
// request never starts a second run, and never starts one.
type JobRecord struct {
	Fence      int64
	Occurrence time.Time

	Ended   batchv1alpha1.RunResult
	JobName string
	Trigger string
	Request string
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
// its fence in lastFence, its occurrence in lastScheduleTime, and the end of
// a run that ended so in the history (FoldEnd). Only then may
// the Job lose its lease finalizer (and the history limit delete it).
func CaughtUp(st *batchv1alpha1.GuardedJobStatus, j JobRecord) bool {
	if j.Fence > st.LastFence {
		return false
	}
	if j.Ended != "" && !InHistory(st, j.JobName) {
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
	if !j.Occurrence.IsZero() && (st.LastScheduleTime == nil || st.LastScheduleTime.Time.Before(j.Occurrence)) {
		st.LastScheduleTime, moved = &metav1.Time{Time: j.Occurrence}, true
	}
	return moved
}

// FoldEnd records in status the end of a run whose Job finished while the Job
// was its only record (Ended), and no pass could adopt it (its lease was
// gone): lastRun and recentRuns say how its Job ended, and the request that
// started it is answered (a run-now value that is still the annotation's,
// and a request object, which its recentRuns entry answers). Without it the
// request would be taken for unanswered and started again, with its key free:
// the work done twice. It returns whether status moved.
func FoldEnd(gj *batchv1alpha1.GuardedJob, j JobRecord, now time.Time) bool {
	if j.Ended == "" || InHistory(&gj.Status, j.JobName) {
		return false
	}
	msg := "Job " + j.JobName + " ended " + string(j.Ended) + " while no status recorded its run (its lease was gone before a manager could record it): recorded from the Job"
	RecordRun(gj, j.JobName, j.Occurrence, "", j.Fence, false, j.Ended, "", msg, now)
	SyncRecent(gj, j.Trigger)
	NoteRequest(gj, j.Request)
	if j.Request != "" && gj.Annotations[batchv1alpha1.RunNowAnnotation] == j.Request {
		gj.Status.LastRunNow = j.Request
	}
	return true
}

// InHistory says whether status.lastRun or status.recentRuns has a run of the
// Job named jobName.
func InHistory(st *batchv1alpha1.GuardedJobStatus, jobName string) bool {
	if st.LastRun != nil && st.LastRun.JobName == jobName {
		return true
	}
	for i := range st.RecentRuns {
		if st.RecentRuns[i].JobName == jobName {
			return true
		}
	}
	return false
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
