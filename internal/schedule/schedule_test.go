package schedule

import (
	"math/rand/v2"
	"testing"
	"time"

	. "github.com/onsi/gomega"

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

func mustSchedule(t *testing.T, spec, zone string) *Schedule {
	t.Helper()
	s, err := Parse(spec, zone)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", spec, zone, err)
	}
	return s
}

func TestParseSchedule(t *testing.T) {
	tests := []struct {
		name     string
		spec     string
		zone     string
		reason   string // "" means valid
		contains []string
		zoneName string
	}{
		{name: "five fields in UTC by default", spec: "5 0 * * *", zoneName: "UTC"},
		{name: "five fields in an IANA zone", spec: "5 0 * * *", zone: "Asia/Taipei", zoneName: "Asia/Taipei"},
		{name: "explicit UTC", spec: "@daily", zone: "UTC", zoneName: "UTC"},
		{name: "surrounding whitespace is ignored", spec: "  */15 * * * 1-5 ", zoneName: "UTC"},
		{name: "descriptors @hourly and @weekly", spec: "@hourly", zoneName: "UTC"},
		{name: "@every with whole seconds", spec: "@every 5m", zoneName: "UTC"},
		{name: "a day that exists only in leap years", spec: "0 0 29 2 *", zoneName: "UTC"},
		{name: "six fields (seconds) are rejected", spec: "0 5 0 * * *", reason: "InvalidSchedule",
			contains: []string{`"0 5 0 * * *"`, "has 6 fields", "5 fields"}},
		{name: "TZ= inside the schedule is rejected", spec: "TZ=Asia/Taipei 5 0 * * *", reason: "InvalidSchedule",
			contains: []string{"use spec.timeZone"}},
		{name: "CRON_TZ= inside the schedule is rejected", spec: "CRON_TZ=UTC @daily", reason: "InvalidSchedule",
			contains: []string{"use spec.timeZone"}},
		{name: "garbage is rejected with the expected shape", spec: "every day", reason: "InvalidSchedule",
			contains: []string{`"every day"`, "5 fields"}},
		{name: "an out-of-range minute is rejected", spec: "61 * * * *", reason: "InvalidSchedule",
			contains: []string{"above maximum"}},
		{name: "an unknown descriptor is rejected", spec: "@fortnightly", reason: "InvalidSchedule"},
		{name: "an empty schedule is rejected", spec: " ", reason: "InvalidSchedule", contains: []string{"empty"}},
		{name: "a schedule that never fires is rejected", spec: "0 0 30 2 *", reason: "InvalidSchedule",
			contains: []string{"never fires"}},
		{name: "@every 0s is rejected", spec: "@every 0s", reason: "InvalidSchedule", contains: []string{"at least 1s"}},
		{name: "a negative @every is rejected", spec: "@every -5m", reason: "InvalidSchedule"},
		{name: "a fractional @every is rejected", spec: "@every 1500ms", reason: "InvalidSchedule"},
		{name: "an unknown zone is rejected", spec: "@daily", zone: "Mars/Olympus_Mons", reason: "InvalidTimeZone",
			contains: []string{`"Mars/Olympus_Mons"`, "IANA"}},
		{name: "the manager's Local zone is rejected", spec: "@daily", zone: "Local", reason: "InvalidTimeZone"},
		{name: "a path as zone is rejected", spec: "@daily", zone: "../../etc/passwd", reason: "InvalidTimeZone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s, err := Parse(tt.spec, tt.zone)
			if tt.reason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(s.Location().String()).To(Equal(tt.zoneName))
				return
			}
			g.Expect(s).To(BeNil())
			se := specerror.As(err)
			g.Expect(se).NotTo(BeNil(), "want a *specerror.Error, got %v", err)
			g.Expect(se.Reason).To(Equal(tt.reason))
			g.Expect(se.Error()).To(Equal(se.Message))
			for _, c := range tt.contains {
				g.Expect(se.Message).To(ContainSubstring(c))
			}
		})
	}
}

func TestScheduleNext(t *testing.T) {
	tests := []struct {
		name string
		spec string
		zone string
		from string
		want []string
	}{
		{name: "a daily time in Asia/Taipei is 16:05 UTC the day before",
			spec: "5 0 * * *", zone: "Asia/Taipei", from: "2026-11-29T12:00:00Z",
			want: []string{"2026-11-29T16:05:00Z", "2026-11-30T16:05:00Z"}},
		{name: "a time that is a schedule time itself is not returned (strictly after)",
			spec: "@hourly", from: "2026-11-30T10:00:00Z",
			want: []string{"2026-11-30T11:00:00Z"}},
		{name: "a fraction of a second before a schedule time returns it",
			spec: "@hourly", from: "2026-11-30T10:59:59.999Z",
			want: []string{"2026-11-30T11:00:00Z"}},
		{name: "@daily is midnight in the schedule's zone",
			spec: "@daily", zone: "Asia/Taipei", from: "2026-11-30T00:00:00+08:00",
			want: []string{"2026-12-01T00:00:00+08:00", "2026-12-02T00:00:00+08:00"}},
		{name: "New York spring-forward skips a time that does not exist that day, as CronJob does",
			spec: "30 2 * * *", zone: "America/New_York", from: "2026-03-07T00:00:00-05:00",
			want: []string{"2026-03-07T02:30:00-05:00", "2026-03-09T02:30:00-04:00"}},
		{name: "New York fall-back runs a repeated wall-clock time twice, as CronJob does",
			spec: "30 1 * * *", zone: "America/New_York", from: "2026-11-01T00:00:00-04:00",
			want: []string{"2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"}},
		{name: "@hourly keeps one hour apart across fall-back",
			spec: "@hourly", zone: "America/New_York", from: "2026-11-01T00:30:00-04:00",
			want: []string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{name: "@every is anchored at the Unix epoch, not at the time asked about",
			spec: "@every 5m", from: "2026-11-30T10:02:30Z",
			want: []string{"2026-11-30T10:05:00Z", "2026-11-30T10:10:00Z"}},
		{name: "@every 7m is anchored at the epoch too",
			spec: "@every 7m", from: "2026-11-29T00:00:00Z",
			want: []string{"2026-11-29T00:06:00Z", "2026-11-29T00:13:00Z"}},
		{name: "@every at exactly a multiple returns the next one",
			spec: "@every 1h", from: "2026-11-30T10:00:00Z",
			want: []string{"2026-11-30T11:00:00Z"}},
		{name: "Feb 29 comes every four years",
			spec: "0 0 29 2 *", from: "2026-11-30T00:00:00Z",
			want: []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := mustSchedule(t, tt.spec, tt.zone)
			cur := at(t, tt.from)
			for _, w := range tt.want {
				cur = s.Next(cur)
				g.Expect(cur).To(BeTemporally("==", at(t, w)))
				g.Expect(cur.Location()).To(Equal(s.Location()))
			}
		})
	}
}

func TestSchedulePrev(t *testing.T) {
	tests := []struct {
		name string
		spec string
		zone string
		at   string
		want string // "" means none
	}{
		{name: "a schedule time is its own Prev", spec: "5 0 * * *", zone: "Asia/Taipei",
			at: "2026-11-30T00:05:00+08:00", want: "2026-11-30T00:05:00+08:00"},
		{name: "one nanosecond earlier gives the day before", spec: "5 0 * * *", zone: "Asia/Taipei",
			at: "2026-11-30T00:04:59.999999999+08:00", want: "2026-11-29T00:05:00+08:00"},
		{name: "every minute gives the current minute", spec: "* * * * *",
			at: "2026-11-30T10:07:42Z", want: "2026-11-30T10:07:00Z"},
		{name: "the first of the month from mid-month", spec: "0 0 1 * *",
			at: "2026-03-15T08:00:00Z", want: "2026-03-01T00:00:00Z"},
		{name: "the 31st skips months without one", spec: "0 12 31 * *",
			at: "2026-03-01T00:00:00Z", want: "2026-01-31T12:00:00Z"},
		{name: "monthly across a year boundary", spec: "@monthly", zone: "Asia/Taipei",
			at: "2027-01-01T00:00:00+08:00", want: "2027-01-01T00:00:00+08:00"},
		{name: "monthly just before a year boundary", spec: "@monthly", zone: "Asia/Taipei",
			at: "2026-12-31T23:59:59+08:00", want: "2026-12-01T00:00:00+08:00"},
		{name: "Feb 29 three years back", spec: "0 0 29 2 *",
			at: "2027-03-01T00:00:00Z", want: "2024-02-29T00:00:00Z"},
		{name: "Feb 29 on the day", spec: "0 0 29 2 *",
			at: "2028-02-29T00:00:00Z", want: "2028-02-29T00:00:00Z"},
		{name: "none within five years: 2100 is not a leap year", spec: "0 0 29 2 *",
			at: "2103-03-01T00:00:00Z", want: ""},
		{name: "second 01:30 of a New York fall-back day", spec: "30 1 * * *", zone: "America/New_York",
			at: "2026-11-01T01:45:00-05:00", want: "2026-11-01T01:30:00-05:00"},
		{name: "first 01:30 of a New York fall-back day", spec: "30 1 * * *", zone: "America/New_York",
			at: "2026-11-01T01:45:00-04:00", want: "2026-11-01T01:30:00-04:00"},
		{name: "a spring-forward day without 02:30 gives the day before", spec: "30 2 * * *", zone: "America/New_York",
			at: "2026-03-08T12:00:00-04:00", want: "2026-03-07T02:30:00-05:00"},
		{name: "@every 5m rounds down to a multiple since the epoch", spec: "@every 5m",
			at: "2026-11-30T10:07:30Z", want: "2026-11-30T10:05:00Z"},
		{name: "@every 24h is midnight UTC whatever the zone", spec: "@every 24h", zone: "Asia/Taipei",
			at: "2026-11-30T07:00:00+08:00", want: "2026-11-29T08:00:00+08:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := mustSchedule(t, tt.spec, tt.zone)
			got, ok := s.Prev(at(t, tt.at))
			if tt.want == "" {
				g.Expect(ok).To(BeFalse())
				g.Expect(got.IsZero()).To(BeTrue())
				return
			}
			g.Expect(ok).To(BeTrue())
			g.Expect(got).To(BeTemporally("==", at(t, tt.want)))
			g.Expect(got.Location()).To(Equal(s.Location()))
		})
	}
}

// TestSchedulePrevAgreesWithNext checks Prev against walking Next forward, at many
// times, in zones with and without DST.
func TestSchedulePrevAgreesWithNext(t *testing.T) {
	tests := []struct {
		name   string
		spec   string
		zone   string
		window time.Duration // longer than the longest gap between schedule times
	}{
		{name: "every seven minutes in New York", spec: "*/7 * * * *", zone: "America/New_York", window: time.Hour},
		{name: "daily at 01:30 in New York", spec: "30 1 * * *", zone: "America/New_York", window: 50 * time.Hour},
		{name: "daily at 02:30 in New York", spec: "30 2 * * *", zone: "America/New_York", window: 75 * time.Hour},
		{name: "weekdays at 00:05 in Taipei", spec: "5 0 * * 1-5", zone: "Asia/Taipei", window: 4 * 24 * time.Hour},
		{name: "monthly on the 31st", spec: "0 0 31 * *", zone: "UTC", window: 63 * 24 * time.Hour},
		{name: "@every 7m", spec: "@every 7m", zone: "Europe/Berlin", window: time.Hour},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	start := at(t, "2026-01-01T00:00:00Z")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := mustSchedule(t, tt.spec, tt.zone)
			for range 100 {
				// Instants over two years, on and off whole seconds.
				when := start.Add(time.Duration(rng.Int64N(int64(2 * 365 * 24 * time.Hour))))
				if rng.IntN(2) == 0 {
					when = when.Truncate(time.Minute)
				}
				var want time.Time
				for n := s.Next(when.Add(-tt.window)); !n.After(when); n = s.Next(n) {
					want = n
				}
				g.Expect(want.IsZero()).To(BeFalse(), "window too short at %s", when)
				got, ok := s.Prev(when)
				g.Expect(ok).To(BeTrue())
				g.Expect(got).To(BeTemporally("==", want), "Prev(%s)", when)
			}
		})
	}
}

func TestScheduleDue(t *testing.T) {
	const deadline = 300 * time.Second
	tests := []struct {
		name     string
		spec     string
		zone     string
		after    string
		now      string
		deadline time.Duration
		want     string // "" means not due
		missed   int
	}{
		{name: "a run at its scheduled time is due", spec: "5 0 * * *", zone: "Asia/Taipei",
			after: "2026-11-29T00:05:00+08:00", now: "2026-11-30T00:05:00+08:00", deadline: deadline,
			want: "2026-11-30T00:05:00+08:00"},
		{name: "a run within the start deadline is due", spec: "5 0 * * *", zone: "Asia/Taipei",
			after: "2026-11-29T00:05:00+08:00", now: "2026-11-30T00:09:59+08:00", deadline: deadline,
			want: "2026-11-30T00:05:00+08:00"},
		{name: "a run exactly at the start deadline is due", spec: "5 0 * * *", zone: "Asia/Taipei",
			after: "2026-11-29T00:05:00+08:00", now: "2026-11-30T00:10:00+08:00", deadline: deadline,
			want: "2026-11-30T00:05:00+08:00"},
		{name: "a run past the start deadline is missed", spec: "5 0 * * *", zone: "Asia/Taipei",
			after: "2026-11-29T00:05:00+08:00", now: "2026-11-30T00:10:01+08:00", deadline: deadline,
			want: "", missed: 1},
		{name: "nothing is due when the latest schedule time was already handled", spec: "5 0 * * *", zone: "Asia/Taipei",
			after: "2026-11-30T00:05:00+08:00", now: "2026-11-30T00:06:00+08:00", deadline: deadline,
			want: ""},
		{name: "nothing is due before the first schedule time", spec: "@hourly",
			after: "2026-11-30T10:00:01Z", now: "2026-11-30T10:59:59Z", deadline: deadline,
			want: ""},
		{name: "the latest of several is due and the older ones are counted as missed", spec: "@hourly",
			after: "2026-11-30T07:03:00Z", now: "2026-11-30T12:03:00Z", deadline: 10 * time.Minute,
			want: "2026-11-30T12:00:00Z", missed: 4},
		{name: "schedule times within the deadline are not missed, only superseded", spec: "*/2 * * * *",
			after: "2026-11-30T11:59:00Z", now: "2026-11-30T12:04:30Z", deadline: deadline,
			want: "2026-11-30T12:04:00Z", missed: 0},
		{name: "three years of missed minutes are counted up to 1000", spec: "* * * * *",
			after: "2023-11-30T12:00:00Z", now: "2026-11-30T12:00:30Z", deadline: deadline,
			want: "2026-11-30T12:00:00Z", missed: 1000},
		{name: "three years of missed minutes, the latest too late too", spec: "0 * * * *",
			after: "2023-11-30T12:00:00Z", now: "2026-11-30T12:30:00Z", deadline: deadline,
			want: "", missed: 1000},
		{name: "without a deadline the latest is due however late", spec: "5 0 * * *",
			after: "2026-11-01T00:05:00Z", now: "2026-11-30T23:00:00Z", deadline: 0,
			want: "2026-11-30T00:05:00Z"},
		{name: "the spring-forward gap in New York is not a missed run", spec: "30 2 * * *", zone: "America/New_York",
			after: "2026-03-07T02:30:00-05:00", now: "2026-03-08T12:00:00-04:00", deadline: deadline,
			want: ""},
		{name: "the second 01:30 of fall-back is due after the first ran", spec: "30 1 * * *", zone: "America/New_York",
			after: "2026-11-01T01:30:00-04:00", now: "2026-11-01T01:31:00-05:00", deadline: deadline,
			want: "2026-11-01T01:30:00-05:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := mustSchedule(t, tt.spec, tt.zone)
			got, ok, missed := s.Due(at(t, tt.after), at(t, tt.now), tt.deadline)
			g.Expect(missed).To(Equal(tt.missed))
			if tt.want == "" {
				g.Expect(ok).To(BeFalse())
				g.Expect(got.IsZero()).To(BeTrue())
				return
			}
			g.Expect(ok).To(BeTrue())
			g.Expect(got).To(BeTemporally("==", at(t, tt.want)))
			g.Expect(got.Location()).To(Equal(s.Location()))
		})
	}
}

func TestParseTrigger(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    string // "" means an error
		wantLoc string
	}{
		{name: "RFC 3339 in UTC", value: "2026-11-30T10:00:00Z", want: "2026-11-30T10:00:00Z", wantLoc: "UTC"},
		{name: "RFC 3339 with a positive offset keeps it", value: "2026-11-30T18:00:00+08:00", want: "2026-11-30T10:00:00Z"},
		{name: "RFC 3339 with a negative offset", value: "2026-11-30T05:00:00-05:00", want: "2026-11-30T10:00:00Z"},
		{name: "RFC 3339 with fractional seconds", value: "2026-11-30T10:00:00.5Z", want: "2026-11-30T10:00:00.5Z"},
		{name: "Unix seconds, in UTC", value: "1796032800", want: "2026-11-30T10:00:00Z", wantLoc: "UTC"},
		{name: "whitespace around the value is ignored", value: " 1796032800\n", want: "2026-11-30T10:00:00Z"},
		{name: "garbage", value: "now"},
		{name: "empty", value: ""},
		{name: "a date without a time", value: "2026-11-30"},
		{name: "a time without an offset", value: "2026-11-30T10:00:00"},
		{name: "Unix milliseconds", value: "1796032800000"},
		{name: "negative Unix seconds", value: "-1"},
		{name: "fractional Unix seconds", value: "1796032800.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := ParseTrigger(tt.value)
			if tt.want == "" {
				g.Expect(err).To(HaveOccurred())
				g.Expect(err.Error()).To(ContainSubstring("RFC 3339"))
				g.Expect(err.Error()).To(ContainSubstring("Unix seconds"))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(BeTemporally("==", at(t, tt.want)))
			if tt.wantLoc != "" {
				g.Expect(got.Location().String()).To(Equal(tt.wantLoc))
			}
		})
	}
}

func TestTriggerOccurrence(t *testing.T) {
	const deadline = 300 * time.Second
	tests := []struct {
		name    string
		spec    string
		zone    string
		at      string
		created string
		now     string
		want    string // "" means stale
		msg     string
	}{
		{name: "a trigger runs the occurrence due at its time", spec: "5 0 * * *", zone: "Asia/Taipei",
			at: "2026-11-30T10:00:00+08:00", created: "2026-01-01T00:00:00Z", now: "2026-11-30T10:01:00+08:00",
			want: "2026-11-30T00:05:00+08:00"},
		{name: "a trigger with another offset maps to the same occurrence", spec: "5 0 * * *", zone: "Asia/Taipei",
			at: "2026-11-30T02:00:00Z", created: "2026-01-01T00:00:00Z", now: "2026-11-30T02:01:00Z",
			want: "2026-11-30T00:05:00+08:00"},
		{name: "a trigger at exactly a schedule time runs that occurrence", spec: "@hourly",
			at: "2026-11-30T10:00:00Z", created: "2026-01-01T00:00:00Z", now: "2026-11-30T10:00:05Z",
			want: "2026-11-30T10:00:00Z"},
		{name: "the occurrence may be older than the object", spec: "5 0 * * *",
			at: "2026-11-30T10:00:00Z", created: "2026-11-30T09:00:00Z", now: "2026-11-30T10:00:10Z",
			want: "2026-11-30T00:05:00Z"},
		{name: "a trigger older than the object is stale", spec: "@hourly",
			at: "2026-01-01T00:00:00Z", created: "2026-11-30T09:00:00Z", now: "2026-11-30T10:00:00Z",
			msg: "trigger 2026-01-01T00:00:00Z is older than the object (created 2026-11-30T09:00:00Z)"},
		{name: "a trigger older than the start deadline is stale", spec: "@hourly",
			at: "2026-11-30T09:54:59Z", created: "2026-01-01T00:00:00Z", now: "2026-11-30T10:00:00Z",
			msg: "trigger 2026-11-30T09:54:59Z is older than startingDeadlineSeconds (300s)"},
		{name: "a trigger exactly at the start deadline still runs", spec: "@hourly",
			at: "2026-11-30T09:55:00Z", created: "2026-01-01T00:00:00Z", now: "2026-11-30T10:00:00Z",
			want: "2026-11-30T09:00:00Z"},
		{name: "a trigger slightly ahead of the manager's clock runs the occurrence due now", spec: "@hourly",
			at: "2026-11-30T10:00:30Z", created: "2026-01-01T00:00:00Z", now: "2026-11-30T09:59:50Z",
			want: "2026-11-30T09:00:00Z"},
		{name: "a trigger far in the future is refused", spec: "@hourly",
			at: "2030-01-01T00:00:00Z", created: "2026-01-01T00:00:00Z", now: "2026-11-30T10:00:00Z",
			msg: "trigger 2030-01-01T00:00:00Z is in the future (the manager's clock says 2026-11-30T10:00:00Z)"},
		{name: "a trigger with no schedule time before it within five years is stale", spec: "0 0 29 2 *",
			at: "2103-03-01T00:00:00Z", created: "2100-01-01T00:00:00Z", now: "2103-03-01T00:01:00Z",
			msg: "trigger 2103-03-01T00:00:00Z: no schedule time at or before it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := mustSchedule(t, tt.spec, tt.zone)
			got, stale, msg := TriggerOccurrence(s, at(t, tt.at), at(t, tt.created), at(t, tt.now), deadline)
			if tt.want == "" {
				g.Expect(stale).To(BeTrue())
				g.Expect(got.IsZero()).To(BeTrue())
				g.Expect(msg).To(Equal(tt.msg))
				return
			}
			g.Expect(stale).To(BeFalse())
			g.Expect(msg).To(BeEmpty())
			g.Expect(got).To(BeTemporally("==", at(t, tt.want)))
			g.Expect(got.Location()).To(Equal(s.Location()))
		})
	}
}
