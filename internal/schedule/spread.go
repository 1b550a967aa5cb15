package schedule

import (
	"hash/fnv"
	"math"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// JitterOffset is how long after its scheduled time an occurrence of the object
// with the given UID starts when its schedule has a jitter of up to maxJitter: a
// value in [0, maxJitter), in whole milliseconds, spread evenly over objects and
// occurrences. It depends only on its arguments, so every replica, restart and
// cluster computes the same start for an occurrence. maxJitter <= 0 is no jitter.
func JitterOffset(uid string, scheduled time.Time, maxJitter time.Duration) time.Duration {
	ms := maxJitter.Milliseconds()
	if ms <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	_, _ = h.Write([]byte{'/'})
	_, _ = h.Write(strconv.AppendInt(nil, scheduled.Unix(), 10))
	return time.Duration(h.Sum64()%uint64(ms)) * time.Millisecond
}

// BusyRetry is the shape of onBusy Retry's waits: capped exponential backoff with
// jitter, counted from when the run was due.
type BusyRetry struct {
	// Initial is the first wait, Max caps the waits, Factor is how much each grows
	// over the one before, Jitter the share by which each is stretched at random.
	Initial, Max   time.Duration
	Factor, Jitter float64
}

// NextAttempt returns when a run that was due at due and found its lock busy at now
// tries again, or false when it must give up: the attempts lie on the backoff's
// grid (due + Initial, then waits growing by Factor up to Max), each stretched by up
// to Jitter of its wait, and a last attempt is made 1s before the deadline. The
// grid does not depend on when earlier attempts were made, so a restarted manager
// keeps to it.
func (b BusyRetry) NextAttempt(due, now, deadline time.Time) (time.Time, bool) {
	lastTry := deadline.Add(-time.Second)
	if !now.Before(lastTry) {
		return time.Time{}, false
	}
	if b.Initial <= 0 {
		b.Initial = time.Second
	}
	backoff := wait.Backoff{Duration: b.Initial, Factor: b.Factor, Cap: max(b.Max, b.Initial), Steps: math.MaxInt32}
	t, step := due, time.Duration(0)
	for !t.After(now) {
		step = backoff.Step()
		if step >= backoff.Cap {
			// From here on every wait is the cap: jump to the first grid point
			// after now.
			if behind := now.Sub(t); behind >= step {
				t = t.Add(behind / step * step)
			}
		}
		t = t.Add(step)
	}
	if b.Jitter > 0 {
		t = t.Add(wait.Jitter(step, b.Jitter) - step)
	}
	if t.After(lastTry) {
		t = lastTry
	}
	return t, true
}
