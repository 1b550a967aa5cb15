package schedule

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestJitterOffset(t *testing.T) {
	g := NewWithT(t)
	at := time.Date(2026, 11, 30, 0, 5, 0, 0, time.UTC)
	g.Expect(JitterOffset("uid-1", at, 0)).To(BeZero(), "no jitter")
	g.Expect(JitterOffset("uid-1", at, -time.Minute)).To(BeZero())
	g.Expect(JitterOffset("uid-1", at, time.Minute)).To(Equal(JitterOffset("uid-1", at, time.Minute)), "the same for every replica and restart")

	// Spread: 1,000 objects due at the same minute fall all over the window.
	const window = 5 * time.Minute
	buckets := make([]int, 10)
	for i := range 1000 {
		off := JitterOffset("uid-"+string(rune('a'+i%26))+time.Duration(i).String(), at, window)
		g.Expect(off).To(And(BeNumerically(">=", 0), BeNumerically("<", window)))
		g.Expect(off % time.Millisecond).To(BeZero())
		buckets[int(off*10/window)]++
	}
	for i, n := range buckets {
		g.Expect(n).To(BeNumerically("~", 100, 40), "tenth %d of the window", i)
	}
	// One object's occurrences get different offsets.
	g.Expect(JitterOffset("uid-1", at, window)).NotTo(Equal(JitterOffset("uid-1", at.Add(24*time.Hour), window)))
}

func TestBusyRetryNextAttempt(t *testing.T) {
	due := time.Date(2026, 11, 30, 0, 5, 0, 0, time.UTC)
	b := BusyRetry{Initial: 5 * time.Second, Max: time.Minute, Factor: 2}
	at := func(d time.Duration) time.Time { return due.Add(d) }
	for _, tc := range []struct {
		name     string
		now      time.Duration
		deadline time.Duration
		want     time.Duration
		giveUp   bool
	}{
		{name: "the first retry comes the initial wait after the due time", now: 0, deadline: 5 * time.Minute, want: 5 * time.Second},
		{name: "a first attempt made late still keeps to the grid", now: 3 * time.Second, deadline: 5 * time.Minute, want: 5 * time.Second},
		{name: "the second wait is twice the first", now: 5 * time.Second, deadline: 5 * time.Minute, want: 15 * time.Second},
		{name: "then four times", now: 15 * time.Second, deadline: 5 * time.Minute, want: 35 * time.Second},
		{name: "waits grow up to the cap", now: 75 * time.Second, deadline: 10 * time.Minute, want: 135 * time.Second},
		{name: "and stay at the cap", now: 135 * time.Second, deadline: 10 * time.Minute, want: 195 * time.Second},
		{name: "a manager back after long keeps to the capped grid", now: 9*time.Minute + 10*time.Second, deadline: time.Hour, want: 9*time.Minute + 15*time.Second},
		{name: "an attempt that would pass the deadline is made just before it", now: 270 * time.Second, deadline: 5 * time.Minute, want: 299 * time.Second},
		{name: "at the last attempt it gives up", now: 299 * time.Second, deadline: 5 * time.Minute, giveUp: true},
		{name: "past the deadline it gives up", now: 6 * time.Minute, deadline: 5 * time.Minute, giveUp: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			next, ok := b.NextAttempt(due, at(tc.now), at(tc.deadline))
			if tc.giveUp {
				g.Expect(ok).To(BeFalse())
				return
			}
			g.Expect(ok).To(BeTrue())
			g.Expect(next).To(Equal(at(tc.want)))
		})
	}

	t.Run("jitter stretches a wait by up to its share, never shortens it", func(t *testing.T) {
		g := NewWithT(t)
		j := b
		j.Jitter = 0.5
		seen := map[bool]bool{}
		for range 200 {
			next, ok := j.NextAttempt(due, at(15*time.Second), at(time.Hour))
			g.Expect(ok).To(BeTrue())
			g.Expect(next).To(And(BeTemporally(">=", at(35*time.Second)), BeTemporally("<", at(45*time.Second))))
			seen[next.After(at(40*time.Second))] = true
		}
		g.Expect(seen).To(HaveLen(2), "spread over the whole stretch")
	})
}
