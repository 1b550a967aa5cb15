package podguard

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// t0 is an arbitrary reading of the monotonic clock.
var t0 = time.Now()

func at(d time.Duration) time.Time { return t0.Add(d) }

const s = time.Second

func testTimeline(restarted bool) *timeline {
	return newTimeline(Settings{Interval: 4 * s, Grace: 30 * s, Margin: 2 * s}, t0, restarted)
}

func TestAGuardStartingWithThePodHasNoDeadlineUntilItConfirms(t *testing.T) {
	g := NewWithT(t)
	tl := testTimeline(false)
	g.Expect(tl.due(at(time.Hour))).To(BeFalse(), "nothing to stop: the startup probe holds the workload")
	g.Expect(tl.nextRead(t0, at(10*time.Millisecond))).To(Equal(at(4 * s)))
}

func TestAConfirmationSetsTheStopDeadlineFromTheSendTime(t *testing.T) {
	g := NewWithT(t)
	tl := testTimeline(false)
	// Sent at 1s, PTTL 60s: the lease cannot expire before 61s.
	tl.confirmed(at(61 * s))
	g.Expect(tl.stopAt).To(Equal(at(29*s)), "61s - 2s margin - 30s grace")
	g.Expect(tl.due(at(29*s - time.Millisecond))).To(BeFalse())
	g.Expect(tl.due(at(29 * s))).To(BeTrue())
	g.Expect(tl.killAt(at(29*s), false)).To(Equal(at(59*s)), "the whole grace, ending margin before the lease could expire")
}

func TestTheDeadlineNeverMovesBack(t *testing.T) {
	g := NewWithT(t)
	tl := testTimeline(false)
	tl.confirmed(at(61 * s))
	tl.confirmed(at(50 * s)) // a later read of a key the manager has not renewed yet reports less
	g.Expect(tl.stopAt).To(Equal(at(29 * s)))
	g.Expect(tl.leaseEnd).To(Equal(at(61 * s)))
	tl.confirmed(at(81 * s))
	g.Expect(tl.stopAt).To(Equal(at(49 * s)))
}

func TestALateStopShortensTheGraceToBeDoneBeforeTheLeaseCouldExpire(t *testing.T) {
	g := NewWithT(t)
	tl := testTimeline(false)
	tl.confirmed(at(61 * s))
	g.Expect(tl.killAt(at(40*s), false)).To(Equal(at(59*s)), "woke 11s late: 19s of grace left")
	g.Expect(tl.killAt(at(59*s), false)).To(Equal(at(59*s)), "no grace left: kill at once")
	g.Expect(tl.killAt(at(90*s), false)).To(Equal(at(90*s)), "past the lease: kill at once, never in the past")
}

func TestALostLeaseGetsTheWholeGrace(t *testing.T) {
	g := NewWithT(t)
	tl := testTimeline(false)
	tl.confirmed(at(61 * s))
	g.Expect(tl.killAt(at(10*s), true)).To(Equal(at(40 * s)))
}

func TestARestartedGuardGivesItsFirstReadOneReadTimeout(t *testing.T) {
	g := NewWithT(t)
	tl := testTimeline(true)
	g.Expect(tl.stopAt).To(Equal(at(3*s)), "min(interval, 3s)")
	g.Expect(tl.due(at(3 * s))).To(BeTrue())
	g.Expect(tl.killAt(at(3*s), false)).To(Equal(at(3*s)), "no known lease end: kill at once")
	tl.confirmed(at(61 * s))
	g.Expect(tl.due(at(3*s))).To(BeFalse(), "a confirmation moves it on")
}

func TestReadsComeSoonerAsTheDeadlineNears(t *testing.T) {
	g := NewWithT(t)
	tl := testTimeline(false)
	tl.confirmed(at(61 * s)) // stop at 29s
	g.Expect(tl.nextRead(at(1*s), at(1*s))).To(Equal(at(5*s)), "far from the deadline: every interval")
	g.Expect(tl.nextRead(at(25*s), at(25*s))).To(Equal(at(27*s)), "4s left: half of it")
	g.Expect(tl.nextRead(at(28900*time.Millisecond), at(28900*time.Millisecond))).To(Equal(at(29*s)), "never closer than 100ms")
}

func TestReadTimeout(t *testing.T) {
	g := NewWithT(t)
	g.Expect(readTimeout(time.Second)).To(Equal(time.Second))
	g.Expect(readTimeout(20 * time.Second)).To(Equal(3 * time.Second))
}
