package runcore

import (
	"fmt"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/runtoken"
)

// KeyView is what the store said of a run's keys: the lock key's value (empty
// when the key is absent) and the fence counter.
type KeyView struct {
	Holder string
	Fence  int64
}

// Adoptable is the judgement of step AdoptUnrecorded: why the Job of run, which
// no status records, may not be adopted, or "". The lock key must hold the token
// minted for this very Job (its holder alone is not enough), the fence counter
// must still be at the Job's fence (nobody acquired the key since), and the
// lease ledger (leases, from status) must not record the run as released or
// left to expire. A run no status records (unrecorded) takes what started it
// from the Job's annotation: the token must attest it (StartOf). readErr is the
// store's error reading the keys, if any.
func Adoptable(leases []batchv1alpha1.LeaseRecord, run *batchv1alpha1.ActiveRun, unrecorded bool, key KeyView, readErr error, identity runtoken.Run) string {
	if readErr != nil {
		return "its lock key cannot be read: " + readErr.Error()
	}
	if key.Holder == "" {
		return "lock " + run.Key + " is free: its lease expired or was released"
	}
	holder := leasetoken.HolderOf(key.Holder)
	if name, ok := runtoken.MintedFor(key.Holder, identity); !ok || name != run.JobName || holder != run.Holder {
		return "lock " + run.Key + " is held by " + holder
	}
	if unrecorded && !runtoken.StartedBy(key.Holder, StartOf(run)) {
		return "its " + batchv1alpha1.RunAnnotation + " annotation does not match the run lock " + run.Key + " was taken for (what started it)"
	}
	if run.Fence > 0 && key.Fence != run.Fence {
		return fmt.Sprintf("the fence counter %s is at %d, not at the Job's fence %d: the key was acquired again since", run.FenceKey, key.Fence, run.Fence)
	}
	if rec := LedgerRecord(leases, holder); rec != nil && rec.State != batchv1alpha1.LeaseLive {
		return "status.leases records its lease as " + string(rec.State)
	}
	return ""
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
