package runcore_test

import (
	"testing"

	"github.com/guardedjob/guardedjob/internal/runcore"
)

// TestBeatsSettleOnlyOnAnsweredBeatsThatFindNoTwin: the identity heartbeat's
// judgement of one store, without a store. A twin (another manager under this
// cluster name) is taken for live after IdentityStrikes of the last
// IdentityWindow beats found its value, and for gone after IdentityWindow beats
// in a row found only this manager's; take-up waits until the last
// IdentityStrikes answered beats found no twin, and an outage, a beat not sent
// (not known to lead) or an ACL refusal counts the beats before it no more.
func TestBeatsSettleOnlyOnAnsweredBeatsThatFindNoTwin(t *testing.T) {
	const self, twin = "host=a pid=1 id=a", "host=b pid=1 id=b"
	own := func(b *runcore.Beats, n int) {
		for range n {
			b.Record(runcore.BeatAnswered, self, self)
		}
	}

	t.Run("a new manager is settled only after a few beats", func(t *testing.T) {
		var b runcore.Beats
		if b.Settled() {
			t.Fatal("settled before any beat")
		}
		b.Record(runcore.BeatAnswered, "", self) // the first beat finds no value
		own(&b, runcore.IdentityStrikes-2)
		if b.Settled() {
			t.Fatalf("settled after %d beats", runcore.IdentityStrikes-1)
		}
		own(&b, 1)
		if !b.Settled() {
			t.Fatalf("not settled after %d beats with only its own value", runcore.IdentityStrikes)
		}
	})

	t.Run("a twin is found in a window, not only in a row", func(t *testing.T) {
		var b runcore.Beats
		own(&b, runcore.IdentityStrikes)
		changes := []runcore.Change{}
		for i := range runcore.IdentityStrikes {
			changes = append(changes, b.Record(runcore.BeatAnswered, twin, self))
			if i < runcore.IdentityStrikes-1 {
				own(&b, 1) // the two tickers drift: this manager beats between the twin's
			}
		}
		if !b.Dup || b.Other != twin || changes[len(changes)-1] != runcore.TwinFound {
			t.Fatalf("dup %v other %q changes %v: the twin is not seen", b.Dup, b.Other, changes)
		}
		if b.Settled() {
			t.Fatal("settled while a twin is seen")
		}
		own(&b, runcore.IdentityWindow-1)
		if !b.Dup {
			t.Fatal("the twin is taken for gone before a window of beats without it")
		}
		if ch := b.Record(runcore.BeatAnswered, self, self); ch != runcore.TwinGone || b.Dup {
			t.Fatalf("change %v, dup %v: the twin should be gone after a window of own beats", ch, b.Dup)
		}
		if !b.Settled() {
			t.Fatal("not settled once the twin is gone")
		}
	})

	for _, c := range []struct {
		name string
		beat runcore.Beat
		down bool
	}{
		{"an outage", runcore.BeatUnanswered, true},
		{"a beat not sent", runcore.BeatNotSent, false},
		{"an ACL refusal", runcore.BeatRefused, false},
	} {
		t.Run(c.name+" counts the beats before it no more", func(t *testing.T) {
			var b runcore.Beats
			own(&b, runcore.IdentityWindow)
			b.Record(c.beat, "", self)
			if b.Settled() || b.Down != c.down {
				t.Fatalf("settled %v, down %v", b.Settled(), b.Down)
			}
			// A twin beat meanwhile; the first answered beat finds it.
			b.Record(runcore.BeatAnswered, twin, self)
			own(&b, runcore.IdentityStrikes-1)
			if b.Settled() || b.Down {
				t.Fatalf("settled %v, down %v: the beat that found the twin is among the last %d", b.Settled(), b.Down, runcore.IdentityStrikes)
			}
			own(&b, 1)
			if !b.Settled() {
				t.Fatal("not settled after answered beats with only its own value")
			}
		})
	}

	t.Run("an ACL refusal is reported once in a row", func(t *testing.T) {
		var b runcore.Beats
		if ch := b.Record(runcore.BeatRefused, "", self); ch != runcore.RefusedFirst || !b.Refused {
			t.Fatalf("change %v refused %v", ch, b.Refused)
		}
		if ch := b.Record(runcore.BeatRefused, "", self); ch != runcore.Unchanged {
			t.Fatalf("reported again: %v", ch)
		}
		b.Record(runcore.BeatAnswered, self, self)
		if b.Refused {
			t.Fatal("still refused after an answered beat")
		}
	})
}

// TestTheIdentityHoldsNewRunsWhileATwinMayRun: a duplicate holds new runs
// back; an unsettled identity holds them back unless the store does not answer
// the heartbeat; otherwise nothing holds.
func TestTheIdentityHoldsNewRunsWhileATwinMayRun(t *testing.T) {
	for _, c := range []struct {
		duplicate, settled, storeDown bool
		want                          runcore.IdentityHold
	}{
		{duplicate: true, settled: true, want: runcore.HoldDuplicate},
		{duplicate: true, storeDown: true, want: runcore.HoldDuplicate},
		{want: runcore.HoldUnsettled},
		{storeDown: true, want: runcore.NoHold},
		{settled: true, want: runcore.NoHold},
	} {
		if got := runcore.HoldsNewRuns(c.duplicate, c.settled, c.storeDown); got != c.want {
			t.Errorf("duplicate %v, settled %v, store down %v: %d, want %d", c.duplicate, c.settled, c.storeDown, got, c.want)
		}
	}
}
