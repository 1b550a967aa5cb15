package leasetiming

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/schedule"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// at parses an RFC 3339 time; tests use it for readable instants.
func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("bad test time %q: %v", s, err)
	}
	return v
}

func mustSchedule(t *testing.T, spec, zone string) *schedule.Schedule {
	t.Helper()
	s, err := schedule.Parse(spec, zone)
	if err != nil {
		t.Fatalf("schedule.Parse(%q, %q): %v", spec, zone, err)
	}
	return s
}

func TestLeaseTimingCheck(t *testing.T) {
	s := time.Second
	defaults := Timing{TTL: 60 * s, RenewInterval: 20 * s, PodGrace: 30 * s, CallTimeout: 3 * s,
		LeaderElection: true, LeaderLeaseDuration: 15 * s, LeaderRetryPeriod: 2 * s}
	with := func(f func(*Timing)) Timing {
		lt := defaults
		f(&lt)
		return lt
	}
	tests := []struct {
		name   string
		timing Timing
		msg    string // "" means safe
	}{
		{name: "the defaults are safe", timing: defaults},
		{name: "the defaults without leader election are safe", timing: with(func(t *Timing) { t.LeaderElection = false })},
		{name: "ttl just above renewInterval + call timeout + grace + 5s is safe",
			timing: with(func(t *Timing) { t.TTL, t.RenewInterval, t.PodGrace = 49*s, 10*s, 30*s })},
		{name: "ttl exactly renewInterval + call timeout + grace + 5s is unsafe: the deadline would tie with a slow renewal",
			timing: with(func(t *Timing) { t.TTL, t.RenewInterval, t.PodGrace = 48*s, 10*s, 30*s }),
			msg: "lock.ttl 48s is too short for renewInterval 10s, the lock store's call timeout 3s and the Pods' " +
				"terminationGracePeriodSeconds 30s (a run that cannot renew must stop its Pods before the lease expires, " +
				"and a slow renewal must answer before that): " +
				"use lock.ttl >= 49s, or lower terminationGracePeriodSeconds or lock.renewInterval"},
		{name: "ttl too short for the Pods' grace period",
			timing: with(func(t *Timing) { t.TTL, t.RenewInterval, t.PodGrace = 30*s, 10*s, 30*s }),
			msg: "lock.ttl 30s is too short for renewInterval 10s, the lock store's call timeout 3s and the Pods' " +
				"terminationGracePeriodSeconds 30s (a run that cannot renew must stop its Pods before the lease expires, " +
				"and a slow renewal must answer before that): " +
				"use lock.ttl >= 49s, or lower terminationGracePeriodSeconds or lock.renewInterval"},
		{name: "the suggested ttl satisfies the leader rule too",
			timing: with(func(t *Timing) { t.TTL, t.RenewInterval, t.PodGrace = 20*s, 15*s, 5*s }),
			msg: "lock.ttl 20s is too short for renewInterval 15s, the lock store's call timeout 3s and the Pods' " +
				"terminationGracePeriodSeconds 5s (a run that cannot renew must stop its Pods before the lease expires, " +
				"and a slow renewal must answer before that): " +
				"use lock.ttl >= 38s, or lower terminationGracePeriodSeconds or lock.renewInterval"},
		{name: "ttl - renewInterval exactly the leader bound is unsafe",
			timing: with(func(t *Timing) { t.TTL, t.RenewInterval, t.PodGrace = 42*s, 20*s, 10*s }),
			msg: "lock.ttl 42s minus renewInterval 20s leaves 22s, which must exceed the manager's leader election " +
				"lease duration 15s + retry period 2s + 5s (a new leader must renew before the lease expires): " +
				"use lock.ttl >= 43s or lock.renewInterval < 20s"},
		{name: "a long leader lease needs a longer ttl",
			timing: with(func(t *Timing) { t.LeaderLeaseDuration = 60 * s }),
			msg: "lock.ttl 60s minus renewInterval 20s leaves 40s, which must exceed the manager's leader election " +
				"lease duration 60s + retry period 2s + 5s (a new leader must renew before the lease expires): " +
				"use lock.ttl >= 88s"},
		{name: "the leader rule does not apply without leader election",
			timing: with(func(t *Timing) { t.LeaderElection, t.LeaderLeaseDuration = false, 60*s })},
		{name: "fractional durations round the suggestion up",
			timing: with(func(t *Timing) { t.TTL, t.RenewInterval, t.LeaderElection = 50*s, 15500*time.Millisecond, false }),
			msg: "lock.ttl 50s is too short for renewInterval 15.5s, the lock store's call timeout 3s and the Pods' " +
				"terminationGracePeriodSeconds 30s (a run that cannot renew must stop its Pods before the lease expires, " +
				"and a slow renewal must answer before that): " +
				"use lock.ttl >= 54s, or lower terminationGracePeriodSeconds or lock.renewInterval"},
		{name: "a zero renewInterval is unsafe",
			timing: with(func(t *Timing) { t.RenewInterval = 0 }),
			msg:    "lock.ttl 60s and lock.renewInterval 0s must both be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := tt.timing.Check()
			if tt.msg == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			se := specerror.As(err)
			g.Expect(se).NotTo(BeNil(), "want a *specerror.Error, got %v", err)
			g.Expect(se.Reason).To(Equal("UnsafeLeaseTiming"))
			g.Expect(se.Message).To(Equal(tt.msg))
		})
	}
}

func TestLeaseTimingSuggestionsAreSafe(t *testing.T) {
	// Whatever lock.ttl a message suggests passes Check.
	g := NewWithT(t)
	s := time.Second
	for _, lt := range []Timing{
		{TTL: 30 * s, RenewInterval: 10 * s, PodGrace: 30 * s, LeaderElection: true, LeaderLeaseDuration: 15 * s, LeaderRetryPeriod: 2 * s},
		{TTL: 20 * s, RenewInterval: 15 * s, LeaderElection: true, LeaderLeaseDuration: 15 * s, LeaderRetryPeriod: 2 * s},
		{TTL: 30 * s, RenewInterval: 20 * s, LeaderElection: true, LeaderLeaseDuration: 137 * time.Second / 10, LeaderRetryPeriod: 2 * s},
		{TTL: 5 * s, RenewInterval: 1500 * time.Millisecond, PodGrace: 90 * s},
	} {
		se := specerror.As(lt.Check())
		g.Expect(se).NotTo(BeNil())
		_, after, found := strings.Cut(se.Message, "use lock.ttl >= ")
		g.Expect(found).To(BeTrue(), se.Message)
		ttl, err := time.ParseDuration(strings.FieldsFunc(after, func(r rune) bool { return r == ' ' || r == ',' })[0])
		g.Expect(err).NotTo(HaveOccurred())
		lt.TTL = ttl
		g.Expect(lt.Check()).To(Succeed(), "suggested lock.ttl %s", ttl)
		lt.TTL = ttl - s
		g.Expect(lt.Check()).NotTo(Succeed(), "a second less than the suggested lock.ttl %s", ttl)
	}
}

func TestStopBudget(t *testing.T) {
	g := NewWithT(t)
	g.Expect(StopBudget(30 * time.Second)).To(Equal(35 * time.Second))
	g.Expect(StopBudget(0)).To(Equal(StopMargin))
}

// A lease resumed from a record another replica wrote counts from the record
// less the skew allowance: with a clock 3 s fast, the record says 12:00:03 for a
// lease taken at 12:00:00, and the lease must count from 12:00:00 at the latest.
func TestResumedEvidenceIsNeverYoungerThanTheLease(t *testing.T) {
	taken := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, skew := range []time.Duration{0, time.Second, 3 * time.Second} {
		recorded := taken.Add(skew) // written by a clock skew ahead
		if got := ResumedEvidence(recorded, skew); got.After(taken) {
			t.Errorf("skew %s: evidence %s is after the lease was taken (%s)", skew, got.Format(time.TimeOnly), taken.Format(time.TimeOnly))
		}
	}
}

func TestDeadlineGrace(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		podGrace   time.Duration
		validUntil time.Duration // after now
		want       time.Duration
	}{
		{name: "at the self-fence deadline the Pods get their full grace period",
			podGrace: 30 * time.Second, validUntil: 35 * time.Second, want: 30 * time.Second},
		{name: "with more time left the grace is still capped at the Pods' own",
			podGrace: 30 * time.Second, validUntil: 50 * time.Second, want: 30 * time.Second},
		{name: "a late deadline gets what still fits before the lease could expire",
			podGrace: 30 * time.Second, validUntil: 20 * time.Second, want: 15 * time.Second},
		{name: "fractions of a second are dropped",
			podGrace: 30 * time.Second, validUntil: 20*time.Second + 900*time.Millisecond, want: 15 * time.Second},
		{name: "when nothing fits the grace is still 1s, never a force delete",
			podGrace: 30 * time.Second, validUntil: 2 * time.Second, want: time.Second},
		{name: "an expired lease still gets 1s",
			podGrace: 30 * time.Second, validUntil: -10 * time.Second, want: time.Second},
		{name: "a Pod grace period of 0 becomes 1s",
			podGrace: 0, validUntil: 35 * time.Second, want: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(DeadlineGrace(tt.podGrace, now.Add(tt.validUntil), now)).To(Equal(tt.want))
		})
	}
}

func TestMarkerTTL(t *testing.T) {
	tests := []struct {
		name      string
		spec      string
		zone      string
		scheduled string
		now       string
		deadline  time.Duration
		keep      time.Duration
		buffered  int
		runAhead  time.Duration
		want      time.Duration
	}{
		{name: "a daily marker lives until the next occurrence can no longer start, plus 5 minutes",
			spec: "5 0 * * *", zone: "Asia/Taipei", scheduled: "2026-11-30T00:05:00+08:00", now: "2026-11-30T00:35:00+08:00",
			deadline: 300 * time.Second, want: 24*time.Hour - 30*time.Minute + 10*time.Minute},
		{name: "keepAfterSuccess extends it",
			spec: "5 0 * * *", zone: "Asia/Taipei", scheduled: "2026-11-30T00:05:00+08:00", now: "2026-11-30T00:35:00+08:00",
			deadline: 300 * time.Second, keep: 7 * 24 * time.Hour, want: 8*24*time.Hour - 20*time.Minute},
		{name: "a 23-hour day in New York is counted as 23 hours",
			spec: "0 0 * * *", zone: "America/New_York", scheduled: "2026-03-08T00:00:00-05:00", now: "2026-03-08T00:00:00-05:00",
			deadline: 60 * time.Second, want: 23*time.Hour + 6*time.Minute},
		{name: "a run that finished long after the next occurrence keeps the marker at least 5 minutes",
			spec: "@every 1m", scheduled: "2026-11-30T10:00:00Z", now: "2026-11-30T12:00:00Z",
			deadline: 30 * time.Second, want: 5 * time.Minute},
		{name: "with BufferOne it lives until a run waiting behind one that holds for maxHold may still start",
			spec: "0 * * * *", scheduled: "2026-11-30T10:00:00Z", now: "2026-11-30T10:20:00Z",
			deadline: 300 * time.Second, buffered: 1, runAhead: 6*time.Hour + 35*time.Second,
			want: 40*time.Minute + 5*time.Minute + (6*time.Hour + 35*time.Second + 5*time.Minute) + 5*time.Minute},
		{name: "with BufferAll, behind as many runs as may wait",
			spec: "0 * * * *", scheduled: "2026-11-30T10:00:00Z", now: "2026-11-30T10:20:00Z",
			deadline: 300 * time.Second, buffered: 3, runAhead: time.Hour,
			want: 40*time.Minute + 5*time.Minute + 3*(time.Hour+5*time.Minute) + 5*time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := mustSchedule(t, tt.spec, tt.zone)
			st := Starts{StartingDeadline: tt.deadline, Buffered: tt.buffered, RunAhead: tt.runAhead}
			g.Expect(MarkerTTL(s, at(t, tt.scheduled), at(t, tt.now), st, tt.keep)).To(Equal(tt.want))
		})
	}
}

// TestLatestStartCoversEveryStartOfTheOccurrence: the latest start of an
// occurrence bounds its scheduled start (with jitter), a run-now trigger that
// still names it (until the next occurrence is due), and a buffered start behind
// the runs that may wait ahead of it.
func TestLatestStartCoversEveryStartOfTheOccurrence(t *testing.T) {
	g := NewWithT(t)
	scheduled := at(t, "2026-11-30T10:00:00Z")
	next := at(t, "2026-11-30T11:00:00Z")
	st := Starts{StartingDeadline: 5 * time.Minute, Jitter: 2 * time.Minute}
	g.Expect(LatestStart(st, scheduled, next)).To(Equal(next.Add(5*time.Minute)), "a trigger at 10:59 names it and may start until 11:04")
	g.Expect(LatestStart(st, scheduled, scheduled)).To(Equal(scheduled.Add(7*time.Minute)), "with no next occurrence: its jittered start and the deadline")
	st.Buffered, st.RunAhead = 2, 30*time.Minute
	g.Expect(LatestStart(st, scheduled, next)).To(Equal(next.Add(5*time.Minute+2*35*time.Minute)),
		"a trigger at 10:59 waits behind two runs that hold for 30 minutes each, each started within the deadline")
}
