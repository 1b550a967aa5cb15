package schedule

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestFirstIsTheFirstScheduleTimeAtOrAfter(t *testing.T) {
	tests := []struct {
		name, spec, zone, at, want string
	}{
		{name: "a schedule time itself is its own first", spec: "@hourly", at: "2026-11-30T10:00:00Z", want: "2026-11-30T10:00:00Z"},
		{name: "a time between two schedule times gives the later", spec: "@hourly", at: "2026-11-30T10:00:01Z", want: "2026-11-30T11:00:00Z"},
		{name: "a fraction of a second after a schedule time gives the next", spec: "@hourly", at: "2026-11-30T10:00:00.5Z", want: "2026-11-30T11:00:00Z"},
		{name: "@every at a multiple is its own first", spec: "@every 5m", at: "2026-11-30T10:05:00Z", want: "2026-11-30T10:05:00Z"},
		{name: "a zone's wall clock applies", spec: "5 0 * * *", zone: "Asia/Taipei", at: "2026-11-29T16:05:00Z", want: "2026-11-29T16:05:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustSchedule(t, tt.spec, tt.zone).First(at(t, tt.at))
			NewWithT(t).Expect(got).To(BeTemporally("==", at(t, tt.want)))
		})
	}
}

func TestBetweenIncludesBothEndsAndStopsPastTheLimit(t *testing.T) {
	g := NewWithT(t)
	s := mustSchedule(t, "@hourly", "")
	got := s.Between(at(t, "2026-11-30T10:00:00Z"), at(t, "2026-11-30T13:00:00Z"), 10)
	g.Expect(got).To(HaveLen(4))
	g.Expect(got[0]).To(BeTemporally("==", at(t, "2026-11-30T10:00:00Z")))
	g.Expect(got[3]).To(BeTemporally("==", at(t, "2026-11-30T13:00:00Z")))
	g.Expect(s.Between(at(t, "2026-11-30T10:00:00Z"), at(t, "2026-12-30T10:00:00Z"), 5)).To(HaveLen(6), "limit+1 tells a range that holds more")
	g.Expect(s.CountBetween(at(t, "2026-11-30T10:30:00Z"), at(t, "2026-11-30T13:30:00Z"), 1000)).To(Equal(3))
}

func TestCheckBackfill(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		spec     string
		from, to string
		count    int
		last     string
		contains []string // "" count means an error
	}{
		{name: "every hour of a morning, both ends included", spec: "@hourly", from: "2026-11-30T06:00:00Z", to: "2026-11-30T11:00:00Z",
			count: 6, last: "2026-11-30T11:00:00Z"},
		{name: "an end a little ahead of the clock is cut at now", spec: "0 * * * *", from: "2026-11-30T10:00:00Z", to: "2026-11-30T12:00:30Z",
			count: 3, last: "2026-11-30T12:00:00Z"},
		{name: "an end in the future is refused", spec: "@hourly", from: "2026-11-30T06:00:00Z", to: "2026-11-30T14:00:00Z",
			contains: []string{"ends in the future", "2026-11-30T14:00:00Z", "the clock says 2026-11-30T12:00:00Z"}},
		{name: "a range that ends before it starts is refused", spec: "@hourly", from: "2026-11-30T06:00:00Z", to: "2026-11-30T05:00:00Z",
			contains: []string{"ends (2026-11-30T05:00:00Z) before it starts (2026-11-30T06:00:00Z)"}},
		{name: "a range with no occurrence is refused", spec: "0 0 1 1 *", from: "2026-11-01T00:00:00Z", to: "2026-11-30T00:00:00Z",
			contains: []string{`schedule "0 0 1 1 *" (UTC) has no occurrence from 2026-11-01T00:00:00Z to 2026-11-30T00:00:00Z`}},
		{name: "a range of more than the maximum is refused", spec: "* * * * *", from: "2026-11-28T00:00:00Z", to: "2026-11-30T00:00:00Z",
			contains: []string{"more than 1000 occurrences", "split it into backfills of at most 1000"}},
		{name: "a range of exactly the maximum is accepted", spec: "* * * * *", from: "2026-11-29T19:21:00Z", to: "2026-11-30T12:00:00Z",
			count: 1000, last: "2026-11-30T12:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rng, err := CheckBackfill(mustSchedule(t, tt.spec, ""), tt.spec, at(t, tt.from), at(t, tt.to), now, 1000)
			if tt.count == 0 {
				g.Expect(err).To(HaveOccurred())
				for _, c := range tt.contains {
					g.Expect(err.Error()).To(ContainSubstring(c))
				}
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rng.Count).To(Equal(tt.count))
			g.Expect(rng.Last).To(BeTemporally("==", at(t, tt.last)))
			g.Expect(rng.To.After(now)).To(BeFalse())
		})
	}
}

func TestParseBackfillTime(t *testing.T) {
	g := NewWithT(t)
	got, err := ParseBackfillTime("backfill-from", "2026-11-30T18:00:00+08:00")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeTemporally("==", at(t, "2026-11-30T10:00:00Z")))
	_, err = ParseBackfillTime("backfill-from", "last tuesday")
	g.Expect(err).To(MatchError(`backfill-from "last tuesday" is not an RFC 3339 time such as 2026-11-01T00:00:00Z`))
}
