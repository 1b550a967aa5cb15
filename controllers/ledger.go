package controllers

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/runcore"
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
// status write, with what became of it (leaseEnd).

// ledgerRetention is how long a lease that ended stays in the ledger after its
// key stopped holding, or could last hold, the run's token.
const ledgerRetention = 10 * time.Minute

// ledgerMax is the most leases the ledger keeps (the schema's bound).
const ledgerMax = 32

// leaseEnd is what became of a run's lease when the run ended.
type leaseEnd struct {
	state batchv1alpha1.LeaseState
	// expiresBy is, for LeftToExpire, the latest time the key can hold the token.
	expiresBy time.Time
}

// neverHeld: the run's token never held its key (the acquisition found it busy,
// or the run was never this manager's to acquire): the entry goes.
var neverHeld = leaseEnd{}

// releasedLease: the key was deleted, or was found gone or another holder's.
var releasedLease = leaseEnd{state: batchv1alpha1.LeaseReleased}

// leftToExpire is the end of a lease that may still hold the run's token, for up
// to the run's own ttl from now (a renewal sent a moment ago extends it that
// far) plus the clock-skew allowance, since other replicas compare expiresBy
// with their clocks.
func (r *GuardedJobReconciler) leftToExpire(run *batchv1alpha1.ActiveRun, now time.Time) leaseEnd {
	by := now.Add(run.TTL.Duration + r.ClockSkew)
	if t := by.Truncate(time.Second); t.Before(by) {
		by = t.Add(time.Second) // status keeps seconds: round up, never down
	}
	return leaseEnd{state: batchv1alpha1.LeaseLeftToExpire, expiresBy: by}
}

// recordLease enters a run's lease into the ledger as Live.
func recordLease(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, now time.Time) {
	if run.Holder == "" {
		return
	}
	rec := batchv1alpha1.LeaseRecord{Holder: run.Holder, Key: run.Key, State: batchv1alpha1.LeaseLive, Since: ptrTime(now)}
	if i := slices.IndexFunc(gj.Status.Leases, func(l batchv1alpha1.LeaseRecord) bool { return l.Holder == run.Holder }); i >= 0 {
		gj.Status.Leases[i] = rec
	} else {
		gj.Status.Leases = append(gj.Status.Leases, rec)
	}
	pruneLeases(gj, now)
}

// endLease records what became of an ended run's lease.
func endLease(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, end leaseEnd, now time.Time) {
	i := slices.IndexFunc(gj.Status.Leases, func(l batchv1alpha1.LeaseRecord) bool { return l.Holder == run.Holder })
	switch {
	case end.state == "":
		if i >= 0 {
			gj.Status.Leases = slices.Delete(gj.Status.Leases, i, i+1)
		}
	case run.Holder == "":
	default:
		rec := batchv1alpha1.LeaseRecord{Holder: run.Holder, Key: run.Key, State: end.state, Since: ptrTime(now)}
		if !end.expiresBy.IsZero() {
			rec.ExpiresBy = &metav1.Time{Time: end.expiresBy}
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
		if l.State == batchv1alpha1.LeaseLive || now.Before(leaseGoneAt(l).Add(ledgerRetention)) {
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

// ledgerRecord returns the ledger's record of a holder, or nil.
func ledgerRecord(gj *batchv1alpha1.GuardedJob, holder string) *batchv1alpha1.LeaseRecord {
	return runcore.LedgerRecord(gj.Status.Leases, holder)
}

// ledgerSays describes what the ledger knows of a holder, for a message, or "".
func ledgerSays(gj *batchv1alpha1.GuardedJob, holder string, now time.Time) string {
	rec := ledgerRecord(gj, holder)
	if rec == nil {
		return ""
	}
	_, _, job, _ := leasetoken.SplitHolder(holder)
	switch rec.State {
	case batchv1alpha1.LeaseLive:
		return fmt.Sprintf("the lease of this GuardedJob's active run %s", job)
	case batchv1alpha1.LeaseLeftToExpire:
		if rec.ExpiresBy != nil && now.Before(rec.ExpiresBy.Time) {
			return fmt.Sprintf("the lease of this GuardedJob's run %s, which ended and left it to expire on purpose (a Pod of it may still run where the API server does not show it, and its pod guard stops it first); it expires by %s",
				job, rec.ExpiresBy.UTC().Format(time.RFC3339))
		}
		return fmt.Sprintf("the lease of this GuardedJob's run %s, left to expire; it should have expired by %s", job, rec.ExpiresBy.UTC().Format(time.RFC3339))
	default:
		return fmt.Sprintf("the lease of this GuardedJob's run %s, released at %s: the key should not hold it any more", job, rec.Since.UTC().Format(time.RFC3339))
	}
}
