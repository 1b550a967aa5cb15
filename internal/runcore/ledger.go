package runcore

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
)

// The lease ledger (status.leases) is the one record of whose a token in the
// store is. Every actor that must decide it reads the ledger and nothing else:
// take-up (a token minted for this run is adopted only if no status ever
// recorded it), unlock (a lease left to expire is never deleted), the stop
// controller (a Job whose lease ended is stale) and the reconciler itself. It
// lives in status, so it survives restarts, leader changes and shard moves.
//
// A run's lease enters the ledger Live when its intent is recorded (from then on
// the key may hold its token), and leaves Live when the run ends, in the same
// status write, with what became of it (LeaseEnd).

// LedgerRetention is how long a lease that ended stays in the ledger after its
// key stopped holding, or could last hold, the run's token.
const LedgerRetention = 10 * time.Minute

// ledgerMax is the most leases the ledger keeps (the schema's bound).
const ledgerMax = 32

// LeaseEnd is what became of a run's lease when the run ended.
type LeaseEnd struct {
	State batchv1alpha1.LeaseState
	// ExpiresBy is, for LeftToExpire, the latest time the key can hold the token.
	ExpiresBy time.Time
}

// NeverHeld: the run's token never held its key (the acquisition found it busy,
// or the run was never this manager's to acquire): the entry goes.
var NeverHeld = LeaseEnd{}

// Released: the key was deleted, or was found gone or another holder's.
var Released = LeaseEnd{State: batchv1alpha1.LeaseReleased}

// LeftToExpire is the end of a lease that may still hold the run's token, for up
// to the run's own ttl from now (a renewal sent a moment ago extends it that
// far) plus the clock-skew allowance, since other replicas compare ExpiresBy
// with their clocks.
func LeftToExpire(run *batchv1alpha1.ActiveRun, now time.Time, clockSkew time.Duration) LeaseEnd {
	by := now.Add(run.TTL.Duration + clockSkew)
	if t := by.Truncate(time.Second); t.Before(by) {
		by = t.Add(time.Second) // status keeps seconds: round up, never down
	}
	return LeaseEnd{State: batchv1alpha1.LeaseLeftToExpire, ExpiresBy: by}
}

// RecordLease enters a run's lease into the ledger as Live.
func RecordLease(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, now time.Time) {
	if run.Holder == "" {
		return
	}
	rec := batchv1alpha1.LeaseRecord{Holder: run.Holder, Key: run.Key, State: batchv1alpha1.LeaseLive, Since: PtrTime(now)}
	if i := slices.IndexFunc(gj.Status.Leases, func(l batchv1alpha1.LeaseRecord) bool { return l.Holder == run.Holder }); i >= 0 {
		gj.Status.Leases[i] = rec
	} else {
		gj.Status.Leases = append(gj.Status.Leases, rec)
	}
	pruneLeases(gj, now)
}

// EndLease records what became of an ended run's lease.
func EndLease(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, end LeaseEnd, now time.Time) {
	i := slices.IndexFunc(gj.Status.Leases, func(l batchv1alpha1.LeaseRecord) bool { return l.Holder == run.Holder })
	switch {
	case end.State == "":
		if i >= 0 {
			gj.Status.Leases = slices.Delete(gj.Status.Leases, i, i+1)
		}
	case run.Holder == "":
	default:
		rec := batchv1alpha1.LeaseRecord{Holder: run.Holder, Key: run.Key, State: end.State, Since: PtrTime(now)}
		if !end.ExpiresBy.IsZero() {
			rec.ExpiresBy = &metav1.Time{Time: end.ExpiresBy}
		}
		if i >= 0 {
			gj.Status.Leases[i] = rec
		} else {
			gj.Status.Leases = append(gj.Status.Leases, rec)
		}
	}
	pruneLeases(gj, now)
}

// pruneLeases drops ended leases past their retention, then the oldest ended
// ones beyond ledgerMax. Live leases are never dropped: status.active has their
// runs, which are bounded.
func pruneLeases(gj *batchv1alpha1.GuardedJob, now time.Time) {
	kept := gj.Status.Leases[:0]
	for _, l := range gj.Status.Leases {
		if l.State == batchv1alpha1.LeaseLive || now.Before(leaseGoneAt(l).Add(LedgerRetention)) {
			kept = append(kept, l)
		}
	}
	for len(kept) > ledgerMax {
		oldest := -1
		for i, l := range kept {
			if l.State != batchv1alpha1.LeaseLive && (oldest < 0 || leaseGoneAt(l).Before(leaseGoneAt(kept[oldest]))) {
				oldest = i
			}
		}
		if oldest < 0 {
			break
		}
		kept = slices.Delete(kept, oldest, oldest+1)
	}
	if len(kept) == 0 {
		kept = nil
	}
	gj.Status.Leases = kept
}

// leaseGoneAt is when an ended lease's key stopped holding, or could last hold,
// its token.
func leaseGoneAt(l batchv1alpha1.LeaseRecord) time.Time {
	switch {
	case l.ExpiresBy != nil:
		return l.ExpiresBy.Time
	case l.Since != nil:
		return l.Since.Time
	}
	return time.Time{}
}

// LedgerRecord returns the record of a holder in the lease ledger
// (status.leases), or nil.
func LedgerRecord(leases []batchv1alpha1.LeaseRecord, holder string) *batchv1alpha1.LeaseRecord {
	for i := range leases {
		if leases[i].Holder == holder {
			return &leases[i]
		}
	}
	return nil
}

// LedgerSays describes what the ledger knows of a holder, for a message, or "".
func LedgerSays(gj *batchv1alpha1.GuardedJob, holder string, now time.Time) string {
	rec := LedgerRecord(gj.Status.Leases, holder)
	if rec == nil {
		return ""
	}
	_, _, job, _ := leasetoken.SplitHolder(holder)
	switch rec.State {
	case batchv1alpha1.LeaseLive:
		return fmt.Sprintf("the lease of this GuardedJob's active run %s", job)
	case batchv1alpha1.LeaseLeftToExpire:
		if ledgerHolds(rec, now) {
			return fmt.Sprintf("the lease of this GuardedJob's run %s, which ended and left it to expire on purpose (a Pod of it may still run where the API server does not show it, and its pod guard stops it first); it expires by %s",
				job, rec.ExpiresBy.UTC().Format(time.RFC3339))
		}
		return fmt.Sprintf("the lease of this GuardedJob's run %s, left to expire; it should have expired by %s", job, rec.ExpiresBy.UTC().Format(time.RFC3339))
	default:
		return fmt.Sprintf("the lease of this GuardedJob's run %s, released at %s: the key should not hold it any more", job, rec.Since.UTC().Format(time.RFC3339))
	}
}

// ledgerHolds says whether the ledger has rec's lease as one that may still be
// in the key: live, or left to expire and not expired yet.
func ledgerHolds(rec *batchv1alpha1.LeaseRecord, now time.Time) bool {
	return rec.State == batchv1alpha1.LeaseLive ||
		rec.State == batchv1alpha1.LeaseLeftToExpire && rec.ExpiresBy != nil && now.Before(rec.ExpiresBy.Time)
}
