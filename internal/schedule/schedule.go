// Package schedule holds the schedule rules of a GuardedJob: parsing spec.schedule
// (the CronJob dialect) in spec.timeZone, the schedule math (the next and latest
// schedule times, which occurrence is due), and reading a run-now trigger.
// Every replica and every cluster computes the same occurrences from the same
// spec: an occurrence names the keys its run takes.
package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	// Every replica and cluster must agree on zone rules, whatever the image has.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"

	"github.com/guardedjob/guardedjob/internal/specerror"
)

const (
	// prevHorizon bounds how far back Prev looks. It matches the five years the cron
	// library searches forward, so a schedule that fires at all (Feb 29 included) is found.
	prevHorizon = 5 * 366 * 24 * time.Hour

	// maxMissed caps the missed-occurrence count of Due: the number only feeds a
	// message, and counting must stay cheap when the last run is years ago.
	maxMissed = 1000

	// triggerClockSkew is how far in the future (by the manager's clock) a run-now
	// trigger may be: `date -u` on a laptop whose clock runs a little fast is not an error.
	triggerClockSkew = time.Minute
)

// Schedule is a parsed cron schedule read in a time zone. Its methods return times in
// that zone.
type Schedule struct {
	cron cron.Schedule
	loc  *time.Location
}

// everySchedule is "@every d" anchored at the Unix epoch: its times are the multiples
// of d since 1970-01-01T00:00:00Z. The cron library counts @every from whatever time
// it is asked about, which would give every replica and cluster its own occurrences
// (and occurrence keys); anchoring makes them agree.
type everySchedule struct{ seconds int64 }

func (e everySchedule) Next(t time.Time) time.Time {
	// t.Unix() is t rounded down to the second, so the next multiple above it is
	// strictly after t whether or not t has a fraction of a second.
	u := t.Unix()
	k := u / e.seconds
	if u%e.seconds < 0 {
		k-- // floor division before 1970
	}
	return time.Unix((k+1)*e.seconds, 0)
}

// Parse parses a schedule in the CronJob dialect (five fields minute hour
// day-of-month month day-of-week, or a descriptor: @yearly, @annually, @monthly,
// @weekly, @daily, @midnight, @hourly, @every <duration>) read in the IANA zone
// timeZone ("" means UTC). Seconds fields and TZ=/CRON_TZ= prefixes are rejected, as
// is a schedule that never fires. "@every d" takes whole seconds (at least 1s) and
// fires at the multiples of d since the Unix epoch. Errors are *specerror.Error with reason
// InvalidSchedule or InvalidTimeZone.
func Parse(spec, timeZone string) (*Schedule, error) {
	loc, err := LoadZone(timeZone)
	if err != nil {
		return nil, err
	}
	spec = strings.TrimSpace(spec)
	const fiveFields = "5 fields (minute hour day-of-month month day-of-week) or a descriptor such as @daily, @hourly or @every 5m"
	switch {
	case spec == "":
		return nil, specerror.Errorf(specerror.InvalidScheduleReason, "spec.schedule is empty: a schedule has %s", fiveFields)
	case strings.Contains(spec, "TZ="):
		// CronJob rejects these too: the zone has exactly one place, spec.timeZone.
		return nil, specerror.Errorf(specerror.InvalidScheduleReason,
			"spec.schedule %q sets a time zone with TZ= or CRON_TZ=: remove it and use spec.timeZone", spec)
	case !strings.HasPrefix(spec, "@") && len(strings.Fields(spec)) == 6:
		return nil, specerror.Errorf(specerror.InvalidScheduleReason,
			"spec.schedule %q has 6 fields, but seconds are not supported: a schedule has %s", spec, fiveFields)
	}
	parsed, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, specerror.Errorf(specerror.InvalidScheduleReason,
			"spec.schedule %q is not a valid schedule (%v): a schedule has %s", spec, err, fiveFields)
	}
	s := &Schedule{loc: loc}
	switch p := parsed.(type) {
	case *cron.SpecSchedule:
		p.Location = loc
		s.cron = p
	case cron.ConstantDelaySchedule:
		// Re-read the duration: the library silently turns "@every 0s" or "@every -5m"
		// into one second and drops fractions.
		d, _ := time.ParseDuration(strings.TrimPrefix(spec, "@every "))
		if d < time.Second || d%time.Second != 0 {
			return nil, specerror.Errorf(specerror.InvalidScheduleReason,
				"spec.schedule %q: @every takes a whole number of seconds, at least 1s, such as @every 5m", spec)
		}
		s.cron = everySchedule{seconds: int64(d / time.Second)}
	default:
		return nil, specerror.Errorf(specerror.InvalidScheduleReason, "spec.schedule %q is not supported", spec)
	}
	// Whether a cron expression fires at all does not depend on the year (Feb 29 comes
	// within any five years), so a fixed reference keeps this check independent of now.
	if s.Next(time.Unix(0, 0)).IsZero() {
		return nil, specerror.Errorf(specerror.InvalidScheduleReason,
			"spec.schedule %q never fires (a day that does not exist in its month?)", spec)
	}
	return s, nil
}

// LoadZone is the zone spec.timeZone names: UTC when empty; Local is refused.
func LoadZone(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		// The manager's own zone differs between replicas and clusters.
		return nil, specerror.Errorf(specerror.InvalidTimeZoneReason,
			"spec.timeZone Local is not allowed: use an IANA zone name such as Asia/Taipei or UTC")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, specerror.Errorf(specerror.InvalidTimeZoneReason,
			"spec.timeZone %q is not an IANA time zone name such as Asia/Taipei or UTC: %v", name, err)
	}
	return loc, nil
}

// Location returns the zone the schedule is read in.
func (s *Schedule) Location() *time.Location { return s.loc }

// Next returns the first schedule time strictly after t, in the schedule's zone, or
// the zero Time if there is none within five years.
func (s *Schedule) Next(t time.Time) time.Time {
	n := s.cron.Next(t)
	if n.IsZero() {
		return n
	}
	return n.In(s.loc)
}

// Prev returns the latest schedule time at or before t, in the schedule's zone; false
// if there is none within five years before t. The cost is logarithmic in the gap:
// windows that double back from t find one that holds a schedule time, and a binary
// search over whole seconds finds the last one in it.
func (s *Schedule) Prev(t time.Time) (time.Time, bool) {
	// Schedule times fall on whole seconds, so with end = floor(t) the predicate
	// "the first schedule time after second x is at or before t" holds exactly for
	// x < Prev(t): it is false at end, and monotone.
	end := t.Unix()
	ok := func(x int64) bool {
		n := s.cron.Next(time.Unix(x, 0))
		return !n.IsZero() && !n.After(t)
	}
	horizon := int64(prevHorizon / time.Second)
	lo, hi := int64(0), end
	for w := int64(60); ; w *= 2 {
		if w > horizon {
			w = horizon
		}
		if ok(end - w) {
			lo = end - w
			break
		}
		if w == horizon {
			return time.Time{}, false
		}
		hi = end - w
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return s.Next(time.Unix(lo, 0)), true
}

// Due decides which occurrence should start at now. t is the latest schedule time in
// (after, now]; ok is false if there is none, or if t is older than now-deadline (too
// late to start). missed counts the schedule times in (after, now-deadline), which were
// too late to start, up to 1000. A deadline <= 0 means no start deadline. The work is
// bounded however old after is.
func (s *Schedule) Due(after, now time.Time, deadline time.Duration) (t time.Time, ok bool, missed int) {
	latest, found := s.Prev(now)
	if !found || !latest.After(after) {
		return time.Time{}, false, 0
	}
	if deadline <= 0 {
		return latest, true, 0
	}
	cutoff := now.Add(-deadline)
	for n := s.Next(after); missed < maxMissed && !n.IsZero() && n.Before(cutoff); n = s.Next(n) {
		missed++
	}
	if latest.Before(cutoff) {
		return time.Time{}, false, missed
	}
	return latest, true, missed
}

// ParseTrigger parses the value of the batch.guardedjob.dev/run-now annotation: an RFC
// 3339 timestamp with any offset (2026-11-30T10:00:00Z, 2026-11-30T18:00:00+08:00) or
// Unix seconds (1796032800). Unix seconds come back in UTC. Errors say which formats
// are accepted.
func ParseTrigger(v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		// Ten digits last until the year 2286; more is almost surely `date +%s%3N`.
		if n < 0 || n > 9_999_999_999 {
			return time.Time{}, fmt.Errorf("run-now value %q is not Unix seconds (milliseconds?): use RFC 3339 such as 2026-11-30T10:00:00Z, or Unix seconds such as 1796032800", v)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("run-now value %q is neither RFC 3339 (such as 2026-11-30T10:00:00Z or 2026-11-30T18:00:00+08:00) nor Unix seconds (such as 1796032800); set it with $(date -u +%%FT%%TZ)", v)
}

// TriggerOccurrence maps a run-now trigger time at to the occurrence it runs: the
// latest schedule time at or before it. The trigger is stale (occurrence zero, msg
// saying why) when it is before created (a value from an older object, say one
// committed to Git), before now-deadline (deadline > 0), more than a minute in the
// future, or when no schedule time within five years is at or before it. A trigger
// slightly ahead of now (clock skew) runs the occurrence due at now.
func TriggerOccurrence(s *Schedule, at, created, now time.Time, deadline time.Duration) (occurrence time.Time, stale bool, msg string) {
	ts := at.Format(time.RFC3339)
	switch {
	case at.Before(created):
		return time.Time{}, true, fmt.Sprintf("trigger %s is older than the object (created %s)", ts, created.UTC().Format(time.RFC3339))
	case deadline > 0 && at.Before(now.Add(-deadline)):
		return time.Time{}, true, fmt.Sprintf("trigger %s is older than startingDeadlineSeconds (%ds)", ts, int64(deadline/time.Second))
	case at.After(now.Add(triggerClockSkew)):
		return time.Time{}, true, fmt.Sprintf("trigger %s is in the future (the manager's clock says %s)", ts, now.UTC().Format(time.RFC3339))
	}
	if at.After(now) {
		at = now
	}
	o, ok := s.Prev(at)
	if !ok {
		return time.Time{}, true, fmt.Sprintf("trigger %s: no schedule time at or before it", ts)
	}
	return o, false, ""
}
