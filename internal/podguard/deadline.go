package podguard

import "time"

// minReadGap is the shortest time between two reads, however near the stop
// deadline is.
const minReadGap = 100 * time.Millisecond

// timeline is what the guard knows about the lease, in readings of the local
// monotonic clock. It is pure arithmetic: every method takes the time it
// should consider as now.
type timeline struct {
	grace, margin, interval time.Duration

	// leaseEnd is the earliest time the lease could expire, from the best
	// confirmation so far; zero before the first.
	leaseEnd time.Time
	// stopAt is when the workload gets SIGTERM; zero while there is no bound
	// (before the first confirmation of a guard that starts with the Pod).
	stopAt time.Time
}

// newTimeline starts a timeline. A guard restarted while its workload may be
// running (restarted) knows nothing of the lease: it gives its first read
// until readTimeout after start, and stops the workload if that read does
// not confirm the lease.
func newTimeline(s Settings, start time.Time, restarted bool) *timeline {
	tl := &timeline{grace: s.Grace, margin: s.Margin, interval: s.Interval}
	if restarted {
		tl.stopAt = start.Add(readTimeout(s.Interval))
	}
	return tl
}

// readTimeout bounds one read: the interval, at most 3 s (a read that takes
// longer is not an answer from a healthy store).
func readTimeout(interval time.Duration) time.Duration { return min(interval, 3*time.Second) }

// confirmed records a confirmation whose lease cannot expire before
// validUntil. The bounds never move backwards.
func (tl *timeline) confirmed(validUntil time.Time) {
	if !validUntil.After(tl.leaseEnd) {
		return
	}
	tl.leaseEnd = validUntil
	stop := validUntil.Add(-tl.margin - tl.grace)
	if stop.After(tl.stopAt) {
		tl.stopAt = stop
	}
}

// due reports whether the workload must be stopped at now.
func (tl *timeline) due(now time.Time) bool {
	return !tl.stopAt.IsZero() && !now.Before(tl.stopAt)
}

// killAt is when a stop that sends SIGTERM at termAt sends SIGKILL: after the
// grace period, but no later than margin before the lease could expire; at
// once when the guard has no lease end (it never confirmed). lost stops
// (another holder, no key) are past any lease end and get the whole grace.
func (tl *timeline) killAt(termAt time.Time, lost bool) time.Time {
	kill := termAt.Add(tl.grace)
	if lost {
		return kill
	}
	if tl.leaseEnd.IsZero() {
		return termAt
	}
	if last := tl.leaseEnd.Add(-tl.margin); last.Before(kill) {
		kill = last
	}
	if kill.Before(termAt) {
		return termAt
	}
	return kill
}

// nextRead is when to read again after a read sent at sent, considered at
// now: an interval after sent, and sooner when the stop deadline comes
// first, at half the time left (never sooner than minReadGap from now), so a
// renewal that lands just before the deadline is still seen.
func (tl *timeline) nextRead(sent, now time.Time) time.Time {
	next := sent.Add(tl.interval)
	if tl.stopAt.IsZero() {
		return next
	}
	half := now.Add(max(tl.stopAt.Sub(now)/2, minReadGap))
	if half.Before(next) {
		return half
	}
	return next
}
