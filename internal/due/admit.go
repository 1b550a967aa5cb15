package due

import (
	"fmt"
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// Whether an occurrence that is due may start now, given the runs and Jobs it
// would start beside. Schedule and trigger decide which occurrence is due; these
// rules decide what becomes of it.

// Act is what becomes of an occurrence that is due.
type Act int

const (
	// Start: nothing stands in the way; the run is recorded and acquires.
	Start Act = iota
	// Wait: nothing is decided now; a later pass looks again.
	Wait
	// Skip: the occurrence is skipped (Why says why), recorded as such.
	Skip
	// AskBuffer: runs are active; the buffer (BufferOne, BufferAll) is asked
	// whether it takes the occurrence, and Contend decides when it does not.
	AskBuffer
	// Replace: the active runs in Victims are stopped; the new run starts once
	// their Pods are gone.
	Replace
)

// Admission is what becomes of an occurrence that is due, and why.
type Admission struct {
	Act Act
	Why string
	// Victims are the indexes in status.active of the runs Replace stops.
	Victims []int
	// RetryAfter, when set, is when a pass looks again (Wait).
	RetryAfter time.Duration
}

// Ahead is what may stand ahead of an occurrence that is due.
type Ahead struct {
	// Occurrence is the scheduled time of the run to start; Triggered is true
	// for a run-now request.
	Occurrence time.Time
	Triggered  bool
	// Active are the runs status records.
	Active []batchv1alpha1.ActiveRun
	// Adopting: a Job created for a run waits at its gate for its adoption,
	// which the store did not answer yet. It may be this very occurrence's.
	Adopting bool
	// Unclaimed names a Job of this GuardedJob that no run claims and that has
	// not finished: its Pods may still run, without a lease.
	Unclaimed string
	Policy    batchv1alpha1.ConcurrencyPolicy
}

// Admit decides what becomes of an occurrence that is due, before any buffer.
func Admit(a Ahead) Admission {
	for _, run := range a.Active {
		if run.ScheduledTime.Time.Equal(a.Occurrence) {
			if a.Triggered {
				return Admission{Act: Skip, Why: "a run of this occurrence (" + run.JobName + ") is active"}
			}
			return Admission{Act: Wait}
		}
	}
	if a.Adopting {
		return Admission{Act: Wait} // the Job waiting for adoption may be this occurrence's
	}
	if a.Unclaimed != "" {
		// A Job no run claims may still have Pods running without a lease: it
		// counts as active, and it is being stopped.
		if a.Policy == batchv1alpha1.ForbidConcurrent {
			return Admission{Act: Skip, Why: fmt.Sprintf("concurrencyPolicy Forbid and Job %s, which no run claims, is still running", a.Unclaimed)}
		}
		return Admission{Act: Wait, RetryAfter: time.Second} // the new run starts once its Pods are gone
	}
	if len(a.Active) > 0 {
		return Admission{Act: AskBuffer}
	}
	return Admission{Act: Start}
}

// AdmitWaiting decides whether a run that waited in status (a retry of an
// occurrence, a buffered occurrence, a backfill's next occurrence) may start
// now. The runs status records hold it back by its own rules; what else holds
// a due occurrence back in Admit holds it back too: a Job waiting for its
// adoption (it may be this very run's), and a Job no run claims whose Pods may
// still work without a lease, until they are gone.
func AdmitWaiting(a Ahead) Admission {
	switch {
	case a.Adopting:
		return Admission{Act: Wait}
	case a.Unclaimed != "":
		return Admission{Act: Wait, RetryAfter: time.Second}
	}
	return Admission{Act: Start}
}

// Contend decides, once no buffer took the occurrence, what becomes of it while
// runs are active: the concurrency policy.
func Contend(a Ahead) Admission {
	switch a.Policy {
	case batchv1alpha1.ForbidConcurrent:
		return Admission{Act: Skip, Why: fmt.Sprintf("concurrencyPolicy Forbid and %s is still active", a.Active[0].JobName)}
	case batchv1alpha1.ReplaceConcurrent:
		var victims []int
		for i, run := range a.Active {
			if run.Phase == batchv1alpha1.RunPhaseRunning && run.Backfill == "" { // a backfill occurrence is never replaced
				victims = append(victims, i)
			}
		}
		return Admission{Act: Replace, Victims: victims, RetryAfter: time.Second}
	}
	return Admission{Act: Start}
}

// BufferedDue is when a buffered run could start, from which its start deadline
// counts: when the run it waited for ended (the last run recorded), not its
// scheduled time; at the earliest when it was buffered.
func BufferedDue(b batchv1alpha1.BufferedRun, last *batchv1alpha1.RunRecord) time.Time {
	if last != nil && last.FinishedAt != nil && last.FinishedAt.After(b.BufferedAt.Time) {
		return last.FinishedAt.Time
	}
	return b.BufferedAt.Time
}

// Buffering decides what becomes of a run due while earlier runs are active,
// once Admit asks the buffer (BufferOne, BufferAll; Replace when only backfill
// runs are active: a backfill occurrence is never replaced, and one run waits
// behind it): ok false when the policy buffers nothing (Contend decides);
// else the run waits in status.buffered, or is skipped (skip says why) when
// its occurrence waits already or the buffer is full. waitFor names the run
// it waits for.
func Buffering(spec *batchv1alpha1.GuardedJobSpec, st *batchv1alpha1.GuardedJobStatus, occurrence time.Time) (ok bool, skip, waitFor string) {
	policy := spec.ConcurrencyPolicyOrDefault()
	limit := spec.BufferLimitOrDefault()
	if policy == batchv1alpha1.ReplaceConcurrent && onlyBackfillActive(st.Active) {
		limit = 1
	}
	if limit == 0 || len(st.Active) == 0 {
		return false, "", ""
	}
	waitFor = st.Active[0].JobName
	for _, b := range st.Buffered {
		if b.ScheduledTime.Time.Equal(occurrence) {
			return true, "the run for " + occurrence.UTC().Format(time.RFC3339) + " is waiting already", waitFor
		}
	}
	if n := int32(len(st.Buffered)); n >= limit { //nolint:gosec // at most 100
		return true, fmt.Sprintf("concurrencyPolicy %s and %d run(s) already wait for %s", policy, n, waitFor), waitFor
	}
	return true, "", waitFor
}

// onlyBackfillActive says whether every active run is a backfill occurrence.
func onlyBackfillActive(active []batchv1alpha1.ActiveRun) bool {
	for _, run := range active {
		if run.Backfill == "" {
			return false
		}
	}
	return len(active) > 0
}
