package runcore

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// The end of a run in status: every path that takes a run out of
// status.active (release, finish, a busy or skipped acquisition, a store that
// cannot be resolved) ends it here, in one status write with what follows from
// it: the lease ledger, lastRun and recentRuns, a backfill's progress, the
// retry of its occurrence, the failure policy, the occurrence done, and the
// request it answers.

// FinishRun moves a run out of status.active into status.lastRun, and records in
// the lease ledger what became of its lease.
func FinishRun(gj *batchv1alpha1.GuardedJob, run batchv1alpha1.ActiveRun, end LeaseEnd, result batchv1alpha1.RunResult, heldBy, msg string, now time.Time) {
	removeRun(gj, run.JobName)
	EndLease(gj, &run, end, now)
	RecordRun(gj, run.JobName, run.ScheduledTime.Time, run.Key, run.Fence, run.Unguarded, result, heldBy, msg, now)
	gj.Status.LastRun.OccurrenceKey, gj.Status.LastRun.FenceKey = run.OccurrenceKey, run.FenceKey
	gj.Status.LastRun.PodGuarded = run.PodGuard != nil
	noteRunEnd(gj, &run, result, heldBy, now)
	// A success, or a skip because another run had done it.
	NoteOccurrenceDone(gj, &run, result, heldBy, now)
	SyncRecent(gj, run.Trigger())
	NoteRequest(gj, cmp.Or(run.RunNow, run.Backfill))
}

// RecordRun sets status.lastRun.
func RecordRun(gj *batchv1alpha1.GuardedJob, jobName string, scheduled time.Time, key string, fence int64, unguarded bool, result batchv1alpha1.RunResult, heldBy, msg string, now time.Time) {
	t := metav1.NewTime(now)
	st := metav1.NewTime(scheduled)
	gj.Status.LastRun = &batchv1alpha1.RunRecord{
		JobName: jobName, ScheduledTime: &st, Key: key, Fence: fence, Unguarded: unguarded,
		Result: result, HeldBy: heldBy, FinishedAt: &t, Message: msg,
	}
	gj.Status.RecentRuns = append([]batchv1alpha1.RecentRun{{}}, gj.Status.RecentRuns...)
	if len(gj.Status.RecentRuns) > maxRecentRuns {
		gj.Status.RecentRuns = gj.Status.RecentRuns[:maxRecentRuns]
	}
	SyncRecent(gj, "")
}

// maxRecentRuns is how many outcomes status.recentRuns keeps, and
// MaxRecentMessage how much of each one's message.
const (
	maxRecentRuns    = 10
	MaxRecentMessage = 256
)

// SyncRecent makes status.recentRuns' newest entry say what status.lastRun
// says (RecordRun added it), with what started the run when trigger says.
func SyncRecent(gj *batchv1alpha1.GuardedJob, trigger string) {
	lr := gj.Status.LastRun
	if lr == nil || len(gj.Status.RecentRuns) == 0 {
		return
	}
	msg := lr.Message
	if len(msg) > MaxRecentMessage {
		msg = msg[:MaxRecentMessage] + "..."
	}
	if trigger == "" {
		trigger = gj.Status.RecentRuns[0].Trigger
	}
	job := lr.JobName
	if lr.Result == batchv1alpha1.RunResultBusy || lr.Result == batchv1alpha1.RunResultSkipped {
		job = "" // the name its Job would have had: it never had one
	}
	gj.Status.RecentRuns[0] = batchv1alpha1.RecentRun{
		ScheduledTime: lr.ScheduledTime.DeepCopy(), Result: lr.Result, JobName: job, Fence: lr.Fence,
		HeldBy: lr.HeldBy, Trigger: trigger, FinishedAt: lr.FinishedAt.DeepCopy(), Message: msg,
	}
}

// MaxRequestValue is the longest request value echoed into status.
const MaxRequestValue = 64

// AnswerRunNow records that a run-now value was handled. An annotation's value
// goes to status.lastRunNow (the annotation stays on the object); a request
// object's is recorded by its run or its outcome instead, so that it never
// hides an annotation's value.
func AnswerRunNow(gj *batchv1alpha1.GuardedJob, value string) {
	if !batchv1alpha1.IsRequestObjectValue(value) {
		gj.Status.LastRunNow = value
	}
}

// IgnoreRunNow records that a run-now annotation whose value is no request
// time was handled: status.lastRunNow takes it whatever it looks like, so that
// it is reported once.
func IgnoreRunNow(gj *batchv1alpha1.GuardedJob, value string) {
	gj.Status.LastRunNow = value
}

// NoteRequest records, in status.recentRuns' newest entry, the request that
// the outcome RecordRun just wrote answers.
func NoteRequest(gj *batchv1alpha1.GuardedJob, value string) {
	if len(gj.Status.RecentRuns) > 0 {
		gj.Status.RecentRuns[0].Request = due.Clip(value, MaxRequestValue)
	}
}

// noteRunEnd is told of every run that leaves status.active (FinishRun): the
// run's record gets its backfill and parameters, a backfill counts its
// occurrence, and the failure policy counts failures in a row. Backfill runs do
// not count for the failure policy: a backfill records its own failures.
func noteRunEnd(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult, heldBy string, now time.Time) {
	if lr := gj.Status.LastRun; lr != nil {
		lr.Backfill, lr.Parameters = run.Backfill, run.Parameters
	}
	if run.Backfill != "" {
		backfillRunEnded(gj, run, result, heldBy, now)
		return
	}
	if due.Retries(&gj.Spec, run) {
		noteRetry(gj, run, result, now)
	}
	switch {
	case result == batchv1alpha1.RunResultSucceeded:
		gj.Status.ConsecutiveFailures = 0
	case result == batchv1alpha1.RunResultMaxHoldExceeded,
		result == batchv1alpha1.RunResultFailed && gj.Spec.CountsFailure(run.StopCause):
		// The workload failing, not the cluster around it: a Pod that never
		// started, a rejected Job or a replaced run counts only when asked for.
		gj.Status.ConsecutiveFailures++
	}
}

// noteRetry is told of every scheduled run that ends (noteRunEnd): due decides
// whether its occurrence is tried again.
func noteRetry(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult, now time.Time) {
	msg := ""
	if lr := gj.Status.LastRun; lr != nil {
		msg = due.Clip(lr.Message, due.MaxRetryMessage)
	}
	sched, _ := schedule.Parse(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	due.NoteRetry(gj, sched, run, result, msg, now)
}

// backfillRunEnded counts the end of a backfill occurrence's run: Succeeded;
// Skipped with the holder of its done-marker (done already); Busy, or Skipped
// because it could not start before its starting deadline, is tried again
// later; any other result failed (no done-marker: a later backfill runs it
// again).
func backfillRunEnded(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult, heldBy string, now time.Time) {
	b := gj.Status.Backfill
	if b == nil || b.Request != run.Backfill {
		return // a run of an earlier backfill
	}
	i := slices.IndexFunc(b.Current, func(e batchv1alpha1.BackfillOccurrence) bool { return e.ScheduledTime.Equal(&run.ScheduledTime) })
	if i < 0 {
		return
	}
	when := run.ScheduledTime.UTC().Format(time.RFC3339)
	retry := result == batchv1alpha1.RunResultBusy || (result == batchv1alpha1.RunResultSkipped && heldBy == "")
	if retry && b.State == batchv1alpha1.BackfillRunning {
		e := &b.Current[i]
		e.Attempts++
		e.RetryAt = &metav1.Time{Time: now.Add(BackfillRetryWait(gj, e.Attempts, run.Token))}
		b.Message = fmt.Sprintf("%s: %s, tried again at %s", when, result, e.RetryAt.UTC().Format(time.RFC3339))
		return
	}
	switch {
	case result == batchv1alpha1.RunResultSucceeded:
		b.Succeeded++
	case result == batchv1alpha1.RunResultSkipped && heldBy != "":
		b.Skipped++
	case retry: // cancelled meanwhile: it is not tried again
	default:
		b.Failed++
		if len(b.FailedOccurrences) < 20 {
			b.FailedOccurrences = append(b.FailedOccurrences, run.ScheduledTime)
		}
	}
	b.Message = fmt.Sprintf("%s: %s", when, result)
	b.Current = slices.Delete(b.Current, i, i+1)
	if len(b.Current) == 0 {
		b.Current = nil
	}
	if b.Remaining > 0 {
		b.Remaining--
	}
}

// BackfillRetryWait is how long an occurrence whose lock was busy waits before
// its next attempt: lock.busyRetry's waits, doubling from initial to max, each
// stretched by up to half so that clusters running the same backfill do not
// retry in step. The stretch comes from the run's lease token, which is random
// and differs in every cluster, so that the same end gives the same wait.
func BackfillRetryWait(gj *batchv1alpha1.GuardedJob, attempts int32, token string) time.Duration {
	d, limit := gj.Spec.Lock.BusyRetryInitial(), gj.Spec.Lock.BusyRetryMax()
	for i := int32(1); i < attempts && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	h := fnv.New64a()
	_, _ = h.Write([]byte(token + "/" + strconv.Itoa(int(attempts))))
	return d + time.Duration(h.Sum64()%uint64(d/2+1)) //nolint:gosec // d is a positive duration
}

// NoteOccurrenceDone records the occurrence of a run that ended as done: run to
// success here, or Skipped because its done-marker named who had done it.
func NoteOccurrenceDone(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, result batchv1alpha1.RunResult, heldBy string, now time.Time) {
	switch {
	case result == batchv1alpha1.RunResultSucceeded:
		at := now
		if t := gj.Status.LastSuccessfulTime; t != nil {
			at = t.Time // the Job's completion, set by release just before
		}
		SetOccurrenceDone(gj, run.ScheduledTime.Time, run.Holder, at)
	case result == batchv1alpha1.RunResultSkipped && heldBy != "":
		SetOccurrenceDone(gj, run.ScheduledTime.Time, heldBy, now)
	}
}

// SetOccurrenceDone sets status.lastOccurrenceDone unless it already holds a
// later occurrence (a backfilled one is older than the last scheduled one).
func SetOccurrenceDone(gj *batchv1alpha1.GuardedJob, scheduled time.Time, by string, at time.Time) {
	if cur := gj.Status.LastOccurrenceDone; cur != nil && scheduled.Before(cur.ScheduledTime.Time) {
		return
	}
	gj.Status.LastOccurrenceDone = &batchv1alpha1.OccurrenceDone{
		ScheduledTime: metav1.NewTime(scheduled), By: by, At: metav1.NewTime(at),
	}
}
