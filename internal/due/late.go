package due

import (
	"fmt"
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// How late a run that holds no lease yet may still start. Two bounds apply: its
// own start deadline (startingDeadlineSeconds from when it was due, or the end
// of its occurrence's tries), and the latest start of its occurrence that any
// cluster running this spec may make. The second one is what keeps a run from
// doing an occurrence twice: the done-marker a run of it writes, in any
// cluster, lives until then and no longer.

// StartsOf reads from the spec how late a run of an occurrence may start.
func StartsOf(spec *batchv1alpha1.GuardedJobSpec) leasetiming.Starts {
	buffered := int(spec.BufferLimitOrDefault())
	if spec.ConcurrencyPolicyOrDefault() == batchv1alpha1.ReplaceConcurrent {
		buffered = 1 // one waits behind a backfill run, which is never replaced
	}
	return leasetiming.Starts{
		StartingDeadline: spec.StartingDeadline(), Jitter: spec.ScheduleJitterOrDefault(), Buffered: buffered,
		RunAhead: spec.Lock.MaxHoldOrDefault() + leasetiming.StopBudget(spec.PodGracePeriod()),
	}
}

// LatestStart is the latest moment any cluster running spec may start a run of
// the occurrence at scheduled (leasetiming.LatestStart). A nil sched (one that
// no longer parses) counts a day to the next occurrence.
func LatestStart(spec *batchv1alpha1.GuardedJobSpec, sched *schedule.Schedule, scheduled, now time.Time) time.Time {
	return leasetiming.LatestStart(StartsOf(spec), scheduled, leasetiming.NextOccurrence(sched, scheduled, now))
}

// StartDeadline is the run's own deadline to start: the one recorded when it
// was due (a run-now's), else startingDeadlineSeconds after its occurrence;
// with spec.retryOccurrence a scheduled run may wait until its occurrence's
// tries stop, never after the next occurrence.
func StartDeadline(spec *batchv1alpha1.GuardedJobSpec, sched *schedule.Schedule, run *batchv1alpha1.ActiveRun) time.Time {
	if Retries(spec, run) {
		until := RetryUntil(spec, sched, run.ScheduledTime.Time, run.ScheduledTime.Time)
		if run.StartDeadline == nil || until.After(run.StartDeadline.Time) {
			return until
		}
	}
	if run.StartDeadline != nil {
		return run.StartDeadline.Time
	}
	return run.ScheduledTime.Add(spec.StartingDeadline())
}

// Late says why a run that is about to acquire may no longer start at now, or
// "" while it may. attempted says whether it has tried already and waits to try
// again (its key was busy, the store was down): such a run ends with that result
// at its own deadline, reported by its caller, not skipped here. A backfill run
// is bounded by its backfill's own window instead (BackfillStartsUntil).
func Late(spec *batchv1alpha1.GuardedJobSpec, sched *schedule.Schedule, run *batchv1alpha1.ActiveRun, attempted bool, now time.Time) string {
	if deadline := StartDeadline(spec, sched, run); !now.Before(deadline) && !attempted {
		// The manager was down (or far behind) when the run was due.
		return MissedDeadline(run, deadline)
	}
	if run.Backfill != "" {
		return ""
	}
	if latest := LatestStart(spec, sched, run.ScheduledTime.Time, now); now.After(latest) {
		// A buffered run that waited longer than the runs ahead of it may hold:
		// the occurrence's done-marker may be gone, so a run now could do it a
		// second time.
		return fmt.Sprintf("the run for %s would start after %s, the latest start of its occurrence the spec allows in any cluster (startingDeadlineSeconds, and for a run waiting behind others lock.maxHold and the buffer): its done-marker may have expired",
			run.ScheduledTime.UTC().Format(time.RFC3339), latest.UTC().Format(time.RFC3339))
	}
	return ""
}

// MissedDeadline says that a run did not start before its starting deadline.
func MissedDeadline(run *batchv1alpha1.ActiveRun, deadline time.Time) string {
	return fmt.Sprintf("the run for %s did not start before its starting deadline %s", run.ScheduledTime.UTC().Format(time.RFC3339), deadline.UTC().Format(time.RFC3339))
}

// BackfillStartsUntil is when a backfill stops starting occurrences: while the
// done-markers of the runs it made, in any cluster, live (BackfillDoneMarkerTTL
// from the time its annotation request named, or from when this manager
// accepted a GuardedJobBackfill). The same annotation backfill started in
// several clusters names the same time, and the done-marker of each occurrence
// it ran anywhere lives at least that long, so no cluster starts an occurrence
// another one's run of it may have completed unseen. ok is false for a request
// time that does not parse.
func BackfillStartsUntil(b *batchv1alpha1.BackfillStatus) (time.Time, bool) {
	at := b.StartedAt.Time
	if !batchv1alpha1.IsRequestObjectValue(b.Request) {
		var err error
		if at, err = ParseRequestTime(b.Request); err != nil {
			return time.Time{}, false
		}
	}
	return at.Add(batchv1alpha1.BackfillDoneMarkerTTL), true
}

// ParseRequestTime reads the time a request annotation names: an RFC 3339
// time, fractional seconds allowed.
func ParseRequestTime(value string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, value)
	if err != nil {
		return time.Time{}, fmt.Errorf("the value must be an RFC 3339 time such as %s", time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).Format(time.RFC3339))
	}
	return t, nil
}

// BackfillAcceptedNow says whether a pass accepted the running backfill (after:
// status.backfill as the pass leaves it; before: as the pass read it). Such a
// pass starts none of its occurrences: the acceptance is written first, so that
// a status write that fails later (a conflict with a person's next request)
// loses a run's record, which its Job brings back, never the backfill's.
func BackfillAcceptedNow(before, after *batchv1alpha1.BackfillStatus) bool {
	return after != nil && after.State == batchv1alpha1.BackfillRunning && (before == nil || before.Request != after.Request)
}
