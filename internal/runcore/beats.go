package runcore

// The identity heartbeat's judgement of one store (model steps twin_start and
// twin_takeup: a twin's lease is never taken up while another manager claims
// this one's cluster identity, nor before beats have shown that none does).
// Beats are counted in a window, not in a row: two managers' tickers drift, and
// a manager may beat twice between the other's beats.

// IdentityStrikes of the last IdentityWindow beats must find another manager's
// value to take it for a second live manager, and IdentityWindow beats in a row
// its own value to take it for gone.
const (
	IdentityStrikes = 3
	IdentityWindow  = 6
)

// Beat is the outcome of one heartbeat write in a store.
type Beat int

const (
	// BeatNotSent: the write was not sent, because this manager does not know
	// it leads.
	BeatNotSent Beat = iota
	// BeatUnanswered: the store did not answer.
	BeatUnanswered
	// BeatRefused: a tenant store's ACL refused the heartbeat key.
	BeatRefused
	// BeatAnswered: the write replaced the value the beat reports.
	BeatAnswered
)

// Change is what one beat changed in the judgement, for the log.
type Change int

const (
	// Unchanged: nothing to report.
	Unchanged Change = iota
	// TwinFound: another manager claims this identity; no run starts in the
	// store until only one does.
	TwinFound
	// TwinGone: only this manager claims its identity again.
	TwinGone
	// RefusedFirst: the store's ACL refuses the heartbeat, for the first time
	// in a row.
	RefusedFirst
)

// Beats is what the heartbeat found in one store.
type Beats struct {
	recent []bool // the last beats' outcomes, true: another manager's value
	clear  int    // beats in a row that found this manager's own value, while Dup
	// Down is set while the store does not answer the heartbeat.
	Down bool
	// Refused is set while a tenant store's ACL refuses the heartbeat key: no
	// twin can be seen there.
	Refused bool
	// Dup is set while another manager claims this identity; Other is the
	// value it wrote last.
	Dup   bool
	Other string
}

// Record counts one beat: prev is the value it replaced, self this manager's.
func (b *Beats) Record(beat Beat, prev, self string) Change {
	wasRefused := b.Refused
	b.Refused = beat == BeatRefused
	switch beat {
	case BeatNotSent:
		// A twin may have started meanwhile, so the beats before count no
		// more; the store is not down for it, and runs stay held back until
		// beats settle again.
		b.recent = b.recent[:0]
		return Unchanged
	case BeatRefused:
		b.recent, b.Down = b.recent[:0], false
		if !wasRefused {
			return RefusedFirst
		}
		return Unchanged
	case BeatUnanswered:
		// A twin may start unseen while the store does not answer: settled
		// again only after a few answered beats. The outage is reported
		// elsewhere.
		b.Down = true
		b.recent = b.recent[:0]
		return Unchanged
	}
	b.Down = false
	other := prev != "" && prev != self
	b.recent = append(b.recent, other)
	if len(b.recent) > IdentityWindow {
		b.recent = b.recent[1:]
	}
	if !other {
		if b.Dup {
			if b.clear++; b.clear >= IdentityWindow {
				b.Dup, b.clear = false, 0
				return TwinGone
			}
		}
		return Unchanged
	}
	b.clear = 0
	b.Other = prev
	strikes := 0
	for _, o := range b.recent {
		if o {
			strikes++
		}
	}
	if strikes >= IdentityStrikes && !b.Dup {
		b.Dup = true
		return TwinFound
	}
	return Unchanged
}

// Settled says whether the beats have found only this manager's value for
// long enough.
func (b *Beats) Settled() bool {
	if b.Dup || len(b.recent) < IdentityStrikes {
		return false
	}
	for _, o := range b.recent[len(b.recent)-IdentityStrikes:] {
		if o {
			return false
		}
	}
	return true
}

// IdentityHold is whether the identity heartbeat holds back new runs (and with
// them any take-up) of a GuardedJob; runs already recorded go on.
type IdentityHold int

const (
	// NoHold: new runs may start.
	NoHold IdentityHold = iota
	// HoldDuplicate: another manager claims this manager's cluster identity
	// (Ready=False DuplicateClusterName) until only one does.
	HoldDuplicate
	// HoldUnsettled: the heartbeat has not yet beaten a few times with no
	// other manager's value (a manager that has just started or become the
	// leader cannot know whether a twin runs the same occurrences).
	HoldUnsettled
)

// HoldsNewRuns decides the hold from what the heartbeat says of the
// GuardedJob's store (and the manager's own): a duplicate holds; an unsettled
// identity holds unless the store does not answer the heartbeat (a FailOpen
// run must still start unguarded, a FailClosed one waits for the store
// anyway; take-up checks Settled itself).
func HoldsNewRuns(duplicate, settled, storeDown bool) IdentityHold {
	switch {
	case duplicate:
		return HoldDuplicate
	case !settled && !storeDown:
		return HoldUnsettled
	}
	return NoHold
}
