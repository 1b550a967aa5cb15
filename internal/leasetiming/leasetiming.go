// Package leasetiming holds the lease timing rule: whether a run's lease (lock.ttl,
// lock.renewInterval) can be kept safely given the lock store's call timeout, the
// Pods' grace period and the manager's leader election, and the durations derived
// from it (the stop budget of a run's self-fence deadline, the grace period of
// Pods stopped at that deadline, how long a done-marker lives).
package leasetiming

import (
	"fmt"
	"time"

	"github.com/guardedjob/guardedjob/internal/schedule"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// StopMargin is the time budgeted to issue the deletes of a run's Job and Pods, plus
// a safety margin.
const StopMargin = 5 * time.Second

// leaderHandoverMargin is what a new leader needs, beyond the leader-election lease
// and retry period, to start and renew the leases in status.active.
const leaderHandoverMargin = 5 * time.Second

// Timing is what decides whether a run's lease can be kept safely: the lease
// (TTL, RenewInterval), the lock store's call timeout, the grace period of the
// run's Pods, and the manager's leader election.
type Timing struct {
	TTL, RenewInterval, PodGrace           time.Duration
	CallTimeout                            time.Duration
	LeaderElection                         bool
	LeaderLeaseDuration, LeaderRetryPeriod time.Duration
}

// Check returns a *specerror.Error{Reason: UnsafeLeaseTiming} when the lease could
// expire while the run's Pods may still be running:
//
//   - TTL - PodGrace - StopMargin <= RenewInterval + CallTimeout: the self-fence
//     deadline (last good renewal + TTL - PodGrace - StopMargin) must fall after
//     the next renewal has answered or timed out, or a healthy run whose renewal
//     is merely slow would be stopped; the rule is strict, so the two never tie;
//   - with leader election, TTL - RenewInterval <= LeaderLeaseDuration +
//     LeaderRetryPeriod + 5s: a new leader must renew before the lease runs out.
//
// The message names the rule broken and the smallest whole-second lock.ttl that
// satisfies both.
func (t Timing) Check() error {
	if t.TTL <= 0 || t.RenewInterval <= 0 {
		return specerror.Errorf(specerror.UnsafeLeaseTimingReason,
			"lock.ttl %s and lock.renewInterval %s must both be positive", fmtDuration(t.TTL), fmtDuration(t.RenewInterval))
	}
	stopNeed := t.RenewInterval + t.CallTimeout + t.PodGrace + StopMargin
	leaderNeed := t.LeaderLeaseDuration + t.LeaderRetryPeriod + leaderHandoverMargin
	// Both rules are strict (>), so the smallest safe whole-second ttl is one
	// second above the bound, rounded down.
	safeTTL := stopNeed.Truncate(time.Second) + time.Second
	if t.LeaderElection {
		safeTTL = max(safeTTL, (t.RenewInterval+leaderNeed).Truncate(time.Second)+time.Second)
	}
	if t.TTL <= stopNeed {
		return specerror.Errorf(specerror.UnsafeLeaseTimingReason,
			"lock.ttl %s is too short for renewInterval %s, the lock store's call timeout %s and the Pods' "+
				"terminationGracePeriodSeconds %s (a run that cannot renew must stop its Pods before the lease expires, "+
				"and a slow renewal must answer before that): "+
				"use lock.ttl >= %s, or lower terminationGracePeriodSeconds or lock.renewInterval",
			fmtDuration(t.TTL), fmtDuration(t.RenewInterval), fmtDuration(t.CallTimeout), fmtDuration(t.PodGrace), fmtDuration(safeTTL))
	}
	if t.LeaderElection && t.TTL-t.RenewInterval <= leaderNeed {
		renew := ""
		if r := t.TTL - leaderNeed; r > time.Second {
			renew = " or lock.renewInterval < " + fmtDuration(r)
		}
		return specerror.Errorf(specerror.UnsafeLeaseTimingReason,
			"lock.ttl %s minus renewInterval %s leaves %s, which must exceed the manager's leader election "+
				"lease duration %s + retry period %s + %s (a new leader must renew before the lease expires): "+
				"use lock.ttl >= %s%s",
			fmtDuration(t.TTL), fmtDuration(t.RenewInterval), fmtDuration(t.TTL-t.RenewInterval),
			fmtDuration(t.LeaderLeaseDuration), fmtDuration(t.LeaderRetryPeriod), fmtDuration(leaderHandoverMargin),
			fmtDuration(safeTTL), renew)
	}
	return nil
}

// StopBudget is what the keeper subtracts from the TTL for a run's self-fence
// deadline: the time to stop its Pods, podGrace + StopMargin.
func StopBudget(podGrace time.Duration) time.Duration { return podGrace + StopMargin }

// ResumedEvidence is the last time a resumed lease is known to have been renewed:
// its recorded acquisition time less the clock-skew allowance. The record may have
// been written by another replica whose clock runs up to skew ahead of this one's,
// and a lease is never assumed younger than it provably is.
func ResumedEvidence(acquiredAt time.Time, skew time.Duration) time.Time {
	return acquiredAt.Add(-skew)
}

// DeadlineGrace is the grace period for the Pods of a run stopped at its self-fence
// deadline: what still fits before the lease could expire at validUntil once the
// deletes are issued (validUntil - now - StopMargin), at most podGrace, in whole
// seconds, and never below 1s (grace 0 is a force delete, which removes the Pod from
// the API while its containers may go on running).
func DeadlineGrace(podGrace time.Duration, validUntil, now time.Time) time.Duration {
	g := min(validUntil.Sub(now)-StopMargin, podGrace).Truncate(time.Second)
	return max(g, time.Second)
}

// MarkerMargin is how long a done-marker outlives the last moment its occurrence
// may still be started, and the shortest life of any done-marker.
const MarkerMargin = 5 * time.Minute

// Starts is what the spec says of how late a run of an occurrence may start.
// Every cluster that runs the same spec computes the same bounds from it.
type Starts struct {
	// StartingDeadline is spec.startingDeadlineSeconds.
	StartingDeadline time.Duration
	// Jitter is spec.scheduleJitter.
	Jitter time.Duration
	// Buffered is how many runs an occurrence due while another run is active
	// may wait behind: 1 with BufferOne (and with Replace, which keeps one
	// waiting behind a backfill run), spec.bufferLimit with BufferAll, else 0.
	Buffered int
	// RunAhead is how long a run ahead can keep a waiting one waiting:
	// lock.maxHold plus the stop budget of its Pods.
	RunAhead time.Duration
}

// LatestStart is the latest moment any cluster running the spec may still
// start a run of the occurrence at scheduled, whose next occurrence is next
// (zero when there is none): a run-now trigger names the latest occurrence at
// or before its time, so this one until the next is due, and a run may start
// until startingDeadline after it was due; an occurrence that is due while
// runs are active may wait behind Buffered of them, each of which may run for
// RunAhead and start startingDeadline after the one before it ended. A run
// that would start later refuses to: the occurrence's done-marker, written by
// a run in any cluster, is kept only until then (MarkerTTL).
func LatestStart(st Starts, scheduled, next time.Time) time.Time {
	due := scheduled.Add(st.Jitter)
	if next.After(due) {
		due = next
	}
	return due.Add(st.StartingDeadline + time.Duration(st.Buffered)*(st.RunAhead+st.StartingDeadline))
}

// MarkerTTL is how long, counted from now, the done-marker of the occurrence at
// scheduled lives: until the latest moment any cluster may still start a run of
// it (LatestStart), plus MarkerMargin, plus keepAfterSuccess; at least
// MarkerMargin. A nil schedule (one that no longer parses, changed while the
// run was active) counts a day to the next occurrence.
func MarkerTTL(s *schedule.Schedule, scheduled, now time.Time, st Starts, keepAfterSuccess time.Duration) time.Duration {
	return max(LatestStart(st, scheduled, NextOccurrence(s, scheduled, now)).Add(MarkerMargin+keepAfterSuccess).Sub(now), MarkerMargin)
}

// NextOccurrence is the occurrence of s after scheduled, as LatestStart takes
// it: a day after now for a nil schedule, scheduled itself when there is none
// within five years.
func NextOccurrence(s *schedule.Schedule, scheduled, now time.Time) time.Time {
	if s == nil {
		return now.Add(24 * time.Hour)
	}
	if next := s.Next(scheduled); !next.IsZero() {
		return next
	}
	return scheduled
}

// fmtDuration writes whole seconds as "45s" (how users write lock.ttl), other
// durations as time.Duration does.
func fmtDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
