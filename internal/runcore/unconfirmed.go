package runcore

import (
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// UnconfirmedEffect is the one effect the release of an unconfirmed lease
// needs now.
type UnconfirmedEffect int

const (
	// QuiesceLease waits until no renewal of the lease is in flight and stops
	// renewing it; deliver whether that worked.
	QuiesceLease UnconfirmedEffect = iota + 1
	// DeleteKey deletes the key if it still holds the run's token; deliver
	// whether the store answered (a key that holds another token, or none,
	// is an answer).
	DeleteKey
	// UnconfirmedDone: the release is over; Ended says how.
	UnconfirmedDone
)

// Unconfirmed is the release of a lease a run without a Job may hold (step
// skip_late, and a run whose store did not answer until its deadline): an
// acquisition whose reply was lost, or one that succeeded too late. Only a
// lease this cluster could hold is touched; once the keeper stopped renewing
// it, the key is deleted if it holds the run's token, and when the store does
// not answer, the key is left to expire: nobody renews it any more.
type Unconfirmed struct {
	run  *batchv1alpha1.ActiveRun
	next UnconfirmedEffect
	end  LeaseEnd
	note string
	left bool
}

// NewUnconfirmed starts the release; owned says the run's lease is this
// cluster's to release (OwnsRun).
func NewUnconfirmed(run *batchv1alpha1.ActiveRun, owned bool) *Unconfirmed {
	u := &Unconfirmed{run: run, next: QuiesceLease}
	if !owned {
		u.next, u.end = UnconfirmedDone, NeverHeld
	}
	return u
}

// Next is the effect the release needs now.
func (u *Unconfirmed) Next() UnconfirmedEffect { return u.next }

// Deliver applies the answer to the effect Next asked for: ok says the
// keeper quiesced the lease, or the store answered the delete.
func (u *Unconfirmed) Deliver(ok bool) {
	switch u.next {
	case QuiesceLease:
		if !ok {
			u.next, u.left, u.note = UnconfirmedDone, true, "; its lease, if taken, expires on its own"
			return
		}
		u.next = DeleteKey
	case DeleteKey:
		u.next, u.end = UnconfirmedDone, Released
		if !ok {
			u.left, u.note = true, "; its lease, if taken, expires on its own (the lock store did not answer the release)"
		}
	}
}

// Ended is the note for the run's message ("" when the key was released) and
// the lease's end for the ledger, at now with the clock-skew allowance.
func (u *Unconfirmed) Ended(now time.Time, skew time.Duration) (string, LeaseEnd) {
	if u.left {
		return u.note, LeftToExpire(u.run, now, skew)
	}
	return u.note, u.end
}
