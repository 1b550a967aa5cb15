package schedule

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// A Taipei schedule backfilled "Nov 1 to 5" runs the occurrences of those five
// local days, not Nov 2 to 6 local (UTC days); an offset given says its own zone.
func TestParseRangeTimeReadsTimesWithoutAnOffsetInTheSchedulesZone(t *testing.T) {
	g := NewWithT(t)
	taipei, err := time.LoadLocation("Asia/Taipei")
	g.Expect(err).NotTo(HaveOccurred())
	at := func(v string, end bool) string {
		t, err := ParseRangeTime("--from", v, taipei, end)
		g.Expect(err).NotTo(HaveOccurred(), v)
		return t.UTC().Format(time.RFC3339)
	}
	g.Expect(at("2026-11-01", false)).To(Equal("2026-10-31T16:00:00Z"))
	g.Expect(at("2026-11-05", true)).To(Equal("2026-11-05T15:59:59Z"), "a date as the end: its last second")
	g.Expect(at("2026-11-01T00:05", false)).To(Equal("2026-10-31T16:05:00Z"))
	g.Expect(at("2026-11-01T00:05:30", true)).To(Equal("2026-10-31T16:05:30Z"))
	g.Expect(at("2026-11-01T00:00:00Z", false)).To(Equal("2026-11-01T00:00:00Z"), "an offset says its own zone")
	g.Expect(at("2026-11-01T00:00:00-05:00", false)).To(Equal("2026-11-01T05:00:00Z"))

	s, err := Parse("5 0 * * *", "Asia/Taipei")
	g.Expect(err).NotTo(HaveOccurred())
	from, _ := ParseRangeTime("--from", "2026-11-01", taipei, false)
	to, _ := ParseRangeTime("--to", "2026-11-05", taipei, true)
	var days []string
	for _, o := range s.Between(from, to, 10) {
		days = append(days, o.In(taipei).Format(time.DateOnly))
	}
	g.Expect(days).To(Equal([]string{"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05"}))

	_, err = ParseRangeTime("--from", "last week", taipei, false)
	g.Expect(err).To(MatchError(ContainSubstring(`--from "last week" is not a time: give an RFC 3339 time (2026-11-01T00:00:00Z), a time in the schedule's zone Asia/Taipei (2026-11-01T00:05), or a date (2026-11-01)`)))
}
