package runcore

import (
	"fmt"
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
)

// A person's unlock of a lock key (the unlock request) never deletes the lease
// of a run that may still be working. The store's unlock script refuses every
// GuardedJob lease with time to live on its own; these say why in the user's
// terms first, and cover a lease whose key was made to live forever.

// HolderJob names the Job of this cluster whose state decides whether a lock
// holder may still be working, when nothing in status or the keeper did.
type HolderJob struct {
	Namespace, Name string
}

// LiveHolder says why the lock holder may still be working, or "": an active
// run of the GuardedJob (in any cluster: a run recorded elsewhere may be alive
// there), a lease of it the ledger has as live or left to expire and not yet
// expired, a lease this process renews (renewedFor names its owner, "" when
// none). When none of those says so and the holder is a run of this cluster
// (named cluster), job names the Job to read: LiveHolderJob judges it.
func LiveHolder(gj *batchv1alpha1.GuardedJob, holder, renewedFor, cluster string, now time.Time) (why string, job *HolderJob) {
	for _, run := range gj.Status.Active {
		if run.Holder == holder {
			return fmt.Sprintf("the active run %s of this GuardedJob; delete its Job to stop the run (its lease is released once its Pods are gone)", run.JobName), nil
		}
	}
	if rec := LedgerRecord(gj.Status.Leases, holder); rec != nil && ledgerHolds(rec, now) {
		return LedgerSays(gj, holder, now), nil
	}
	if renewedFor != "" {
		return fmt.Sprintf("a run whose lease this manager renews (%s)", renewedFor), nil
	}
	c, namespace, jobName, ok := leasetoken.SplitHolder(holder)
	if !ok || c != cluster {
		return "", nil
	}
	return "", &HolderJob{Namespace: namespace, Name: jobName}
}

// LiveHolderJob judges the holder's Job as a read from the API server showed
// it: gone (found false) or finished, the holder works no more; a read that
// failed says so, since whether it still runs is not known.
func LiveHolderJob(job HolderJob, found, finished bool, readErr error) string {
	switch {
	case readErr != nil:
		return fmt.Sprintf("a run of this cluster, and whether its Job still runs could not be read: %v", readErr)
	case !found || finished:
		return ""
	}
	return fmt.Sprintf("a run of this cluster whose Job %s/%s has not finished; delete that Job, or wait for it", job.Namespace, job.Name)
}
