package runcore

import (
	"fmt"
	"slices"
	"strings"
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

// UnlockAsk is an unlock request as the manager read it: the key and holder it
// names (clipped to their bounds), when it was made, whether it parsed, and
// where its key and holder are given (for the messages).
type UnlockAsk struct {
	Key, Holder           string
	At                    time.Time
	Bad                   error
	KeyField, HolderField string
}

// UnlockKeys are the keys of one run of the GuardedJob (its occurrence's) that
// an unlock may name: its lock key and its current done-marker.
type UnlockKeys struct {
	Lock, Occurrence string
}

// UnlockChoice is the key an unlock deletes: the Index of its run's keys in the
// targets, the Key, and What it is ("lock" or "done-marker").
type UnlockChoice struct {
	Index     int
	Key, What string
}

// ChecksHolder says whether the holder's liveness is asked (LiveHolder) before
// the store is: a lock's holder may be a run still working; a done-marker's
// holder is a run that completed.
func (c UnlockChoice) ChecksHolder() bool { return c.What == "lock" }

// UnlockTarget judges an unlock request before the store is asked: the key it
// deletes, or why it is refused. A request is carried out only while fresh
// (within batchv1alpha1.UnlockRequestWindow of now), only with the holder the
// user saw named (so that a key that changed hands is never deleted), and only
// for this GuardedJob's lock keys and current done-markers (targets; targetErr
// says why they are not known). With no key named, the GuardedJob must have one
// lock key.
func UnlockTarget(ask UnlockAsk, targets []UnlockKeys, targetErr error, now time.Time) (c UnlockChoice, refused string) {
	if ask.Bad != nil {
		return c, ask.Bad.Error()
	}
	if d := now.Sub(ask.At); d > batchv1alpha1.UnlockRequestWindow || d < -batchv1alpha1.UnlockRequestWindow {
		return c, fmt.Sprintf("the request's time %s is more than %s from the manager's clock (%s): a request is carried out only when it is fresh; ask again",
			ask.At.UTC().Format(time.RFC3339), batchv1alpha1.UnlockRequestWindow, now.UTC().Format(time.RFC3339))
	}
	if ask.Holder == "" {
		return c, ask.HolderField + " is not set: name the holder status.storeView shows, so that a key that changed hands is never deleted"
	}
	if targetErr != nil {
		return c, targetErr.Error()
	}
	c.Key = ask.Key
	if c.Key == "" {
		var locks []string
		for _, t := range targets {
			if !slices.Contains(locks, t.Lock) {
				locks = append(locks, t.Lock)
			}
		}
		if len(locks) != 1 {
			return c, fmt.Sprintf("%s is not set and this GuardedJob has %d lock keys (%s): name one", ask.KeyField, len(locks), strings.Join(locks, ", "))
		}
		c.Key = locks[0]
	}
	for i, t := range targets {
		switch c.Key {
		case t.Lock:
			c.Index, c.What = i, "lock"
			return c, ""
		case t.Occurrence:
			c.Index, c.What = i, "done-marker"
			return c, ""
		}
	}
	return c, fmt.Sprintf("%q is neither a lock key nor the current done-marker of this GuardedJob (status.storeView lists them); no other key is ever deleted", c.Key)
}

// HolderRefusal is the refusal of an unlock whose lock's holder may still be
// working (why, from LiveHolder).
func (c UnlockChoice) HolderRefusal(holder, why string) string {
	return fmt.Sprintf("lock %s is held by %s: %s", c.Key, holder, why)
}

// UnlockAnswer is what the store's unlock script answered.
type UnlockAnswer struct {
	// Deleted: the key held the holder named, and is gone.
	Deleted bool
	// LiveLease: the key holds a GuardedJob lease with time to live of its
	// own (LiveFor left), which is never unlocked.
	LiveLease bool
	LiveFor   time.Duration
	// NotHeld: the key does not hold the holder named; Found is the value it
	// holds, "" when it does not exist.
	NotHeld bool
	Found   string
	// StoreDown: the store did not answer (Err says how); Err alone is any
	// other failure.
	StoreDown bool
	Err       error
}

// Unlocked is the record of an unlock from the store's answer: its result, the
// message status.lastUnlock shows, and the holder found instead of the one
// named; refused is set instead when the unlock is refused.
func (c UnlockChoice) Unlocked(holder string, a UnlockAnswer) (result batchv1alpha1.UnlockResult, message, found, refused string) {
	switch {
	case a.LiveLease:
		return "", "", "", fmt.Sprintf("lock %s is held by %s, a GuardedJob lease that expires by itself in %s: its run may still be working, here or in another cluster sharing the store, and is never unlocked; stop its Job in the cluster that runs it, or wait",
			c.Key, holder, a.LiveFor.Round(time.Second))
	case a.Deleted:
		return batchv1alpha1.UnlockDeleted, fmt.Sprintf("deleted %s %s held by %s", c.What, c.Key, holder), "", ""
	case a.NotHeld && a.Found == "":
		return batchv1alpha1.UnlockAbsent, fmt.Sprintf("%s %s does not exist: nothing to delete", c.What, c.Key), "", ""
	case a.NotHeld:
		found = leasetoken.HolderOf(a.Found)
		return batchv1alpha1.UnlockChanged, fmt.Sprintf("%s %s is held by %s now, not by %s: nothing deleted", c.What, c.Key, found, holder), found, ""
	case a.StoreDown:
		return batchv1alpha1.UnlockStoreUnavailable, fmt.Sprintf("the store did not answer: %v; nothing is known to be deleted, ask again", a.Err), "", ""
	}
	return "", "", "", fmt.Sprint(a.Err)
}
