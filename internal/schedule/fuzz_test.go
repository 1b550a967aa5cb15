package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/guardedjob/guardedjob/internal/specerror"
)

// fuzzTime maps any int64 to a time between 1970 and about 2200.
func fuzzTime(n int64) time.Time {
	const span = 230 * 365 * 24 * 3600
	n %= span
	if n < 0 {
		n += span
	}
	return time.Unix(n, 0)
}

// FuzzSchedule: any schedule and zone the CRD admits parse or give a spec error; a schedule
// that parses moves forward, and Prev finds the time Next returned.
func FuzzSchedule(f *testing.F) {
	for _, s := range [][2]string{
		{"5 0 * * *", "Asia/Taipei"}, {"@daily", "UTC"}, {"@every 90s", ""}, {"*/15 9-17 * * 1-5", "America/New_York"},
		{"0 0 30 2 *", "UTC"}, {"CRON_TZ=UTC 0 0 * * *", "UTC"}, {"0 0 0 * * *", "UTC"}, {"@every 0s", "UTC"},
		{"30 2 * * *", "Europe/Berlin"}, {"0 0 1 1 *", "Local"}, {"@hourly", "Mars/Olympus"},
	} {
		f.Add(s[0], s[1], int64(1795968300))
	}
	f.Fuzz(func(t *testing.T, spec, zone string, at int64) {
		if len(spec) > 256 || len(zone) > 64 {
			t.Skip("the CRD admits at most 256 and 64 characters")
		}
		s, err := Parse(spec, zone)
		if err != nil {
			checkSpecError(t, err)
			return
		}
		from := fuzzTime(at)
		next := s.Next(from)
		if next.IsZero() {
			return
		}
		if !next.After(from) {
			t.Fatalf("Next(%s) = %s, not after it", from, next)
		}
		prev, ok := s.Prev(next)
		if !ok || !prev.Equal(next) {
			t.Fatalf("Prev(%s) = %s, %v; want the same time", next, prev, ok)
		}
	})
}

// FuzzTrigger: any run-now value parses or gives an error naming the accepted
// formats; a value that parses reads the same when written back as RFC 3339.
func FuzzTrigger(f *testing.F) {
	for _, s := range []string{
		"2026-11-30T10:00:00Z", "2026-11-30T18:00:00+08:00", "1796032800", " 1796032800 ", "1796032800123",
		"-1", "2026-11-30", "now", "", "9999-12-31T23:59:59-23:59",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		at, err := ParseTrigger(v)
		if err != nil {
			if !strings.Contains(err.Error(), "RFC 3339") {
				t.Fatalf("error does not say what is accepted: %v", err)
			}
			return
		}
		again, err := ParseTrigger(at.Format(time.RFC3339))
		if err != nil || !again.Equal(at.Truncate(time.Second)) {
			t.Fatalf("%q read as %s, written back reads %s (%v)", v, at, again, err)
		}
	})
}

func checkSpecError(t *testing.T, err error) {
	t.Helper()
	var se *specerror.Error
	if !errors.As(err, &se) || se.Reason == "" {
		t.Fatalf("not a spec error with a reason: %v", err)
	}
	if len(se.Message) > 4096 {
		t.Fatalf("message of %d bytes", len(se.Message))
	}
}
