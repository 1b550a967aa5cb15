package schedule

import (
	"fmt"
	"time"
)

// BackfillClockSkew is how far in the future a backfill's end may be by the
// clock that checks it: a `--to now` taken on a laptop whose clock runs a little
// fast is not an error. The range is cut at now.
const BackfillClockSkew = time.Minute

// First returns the first schedule time at or after t, or the zero Time if there
// is none within five years.
func (s *Schedule) First(t time.Time) time.Time {
	// Schedule times fall on whole seconds: the first one at or after t is the
	// first strictly after the nanosecond before t, or, for a t with a fraction
	// of a second, the first strictly after its whole second.
	if t.Nanosecond() != 0 {
		return s.Next(t.Truncate(time.Second))
	}
	return s.Next(t.Add(-time.Nanosecond))
}

// Between returns the schedule times in [from, to], oldest first, but at most
// limit+1 of them, so that a caller can tell a range that holds more than limit.
func (s *Schedule) Between(from, to time.Time, limit int) []time.Time {
	var out []time.Time
	for t := s.First(from); !t.IsZero() && !t.After(to) && len(out) <= limit; t = s.Next(t) {
		out = append(out, t)
	}
	return out
}

// CountBetween counts the schedule times in [from, to], up to limit+1.
func (s *Schedule) CountBetween(from, to time.Time, limit int) int {
	n := 0
	for t := s.First(from); !t.IsZero() && !t.After(to) && n <= limit; t = s.Next(t) {
		n++
	}
	return n
}

// Backfill is a checked backfill range: the occurrences from First to Last,
// Count of them.
type Backfill struct {
	From, To    time.Time
	First, Last time.Time
	Count       int
}

// CheckBackfill checks a backfill of s over [from, to] at now, with at most max
// occurrences. to may be up to BackfillClockSkew after now and is then cut at
// now. The errors say what to change; spec names the schedule in them.
func CheckBackfill(s *Schedule, spec string, from, to, now time.Time, max int) (Backfill, error) {
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch {
	case to.Before(from):
		return Backfill{}, fmt.Errorf("the range ends (%s) before it starts (%s)", ts(to), ts(from))
	case to.After(now.Add(BackfillClockSkew)):
		return Backfill{}, fmt.Errorf("the range ends in the future (%s; the clock says %s): a backfill runs occurrences that were due already, the schedule runs the others", ts(to), ts(now))
	}
	if to.After(now) {
		to = now
	}
	times := s.Between(from, to, max)
	switch {
	case len(times) == 0:
		return Backfill{}, fmt.Errorf("schedule %q (%s) has no occurrence from %s to %s", spec, s.Location(), ts(from), ts(to))
	case len(times) > max:
		return Backfill{}, fmt.Errorf("the range from %s to %s holds more than %d occurrences of schedule %q (%s): split it into backfills of at most %d",
			ts(from), ts(to), max, spec, s.Location(), max)
	}
	return Backfill{From: from, To: to, First: times[0], Last: times[len(times)-1], Count: len(times)}, nil
}

// ParseBackfillTime reads a backfill range end: an RFC 3339 time. name says
// which end, for the error.
func ParseBackfillTime(name, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q is not an RFC 3339 time such as 2026-11-01T00:00:00Z", name, clipValue(v))
	}
	return t, nil
}

// clipValue shortens user input echoed in an error.
func clipValue(v string) string {
	if len(v) > 64 {
		return v[:64] + "..."
	}
	return v
}

// ParseRangeTime reads a backfill range end as a person types it: an RFC 3339
// time (its offset says the zone), or a time without an offset read in loc, the
// schedule's zone: 2026-11-01T00:05:00, 2026-11-01T00:05, or a date, 2026-11-01.
// A date alone is the start of that day for the range's start, and the last
// second of that day for its end (end true), so that --from 2026-11-01 --to
// 2026-11-05 holds every occurrence of those five local days. name says which
// end, for the error.
func ParseRangeTime(name, v string, loc *time.Location, end bool) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, v, loc); err == nil {
			return t, nil
		}
	}
	if day, err := time.ParseInLocation(time.DateOnly, v, loc); err == nil {
		if end {
			return day.AddDate(0, 0, 1).Add(-time.Second), nil
		}
		return day, nil
	}
	return time.Time{}, fmt.Errorf("%s %q is not a time: give an RFC 3339 time (2026-11-01T00:00:00Z), a time in the schedule's zone %s (2026-11-01T00:05), or a date (2026-11-01)",
		name, clipValue(v), loc)
}
