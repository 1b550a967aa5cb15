package runcore

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// Shards. A manager started with a watch label selector serves one shard of the
// GuardedJobs. When an object leaves its shard, the leases of its runs are
// handed over, make before break: the shard it left renews them until the
// shard it joined renews them too and says so in status.shard, and only then
// lets go. A manager that serves every GuardedJob has nobody to hand over to:
// an object that left its cache is gone, and it lets go at once.

// HandsOver says whether a manager serving shard (its selector, "" for every
// GuardedJob) hands the leases of an object that left its cache over, rather
// than letting go of them at once.
func HandsOver(shard string) bool { return shard != "" }

// OwnsRun says whether a run's lease is this cluster's to renew: the run is
// this cluster's, of this very object, with a token this cluster minted.
func OwnsRun(cluster string, owner types.UID, run *batchv1alpha1.ActiveRun) bool {
	return run.Cluster == cluster && run.OwnerUID == owner && strings.HasPrefix(run.Token, cluster+"/")
}

// RenewsHere says whether this cluster renews a run's lease: the run is its own
// (OwnsRun) and has taken its lease (it is past Acquiring).
func RenewsHere(cluster string, owner types.UID, run *batchv1alpha1.ActiveRun) bool {
	return OwnsRun(cluster, owner, run) && run.Phase != batchv1alpha1.RunPhaseAcquiring
}

// MayClaimShard says whether status.shard may name this shard: only once it
// renews (tracked) the lease of every run of this cluster that holds one, and
// (the early gate) of every working Job no status records yet, each its run's
// only record (unrecorded, by Job name; renews says whether this shard renews
// that Job's lease). Until then the shard the object came from renews on, up to
// the hand-over's time limit.
func MayClaimShard(cluster string, gj *batchv1alpha1.GuardedJob, tracked func(token string) bool, unrecorded []string, renews func(jobName string) bool) bool {
	for i := range gj.Status.Active {
		run := &gj.Status.Active[i]
		if RenewsHere(cluster, gj.UID, run) && !tracked(run.Token) {
			return false
		}
	}
	for _, job := range unrecorded {
		if !renews(job) {
			return false
		}
	}
	return true
}

// HandOverAct is what the shard an object left does with its runs' leases at
// one look at the object.
type HandOverAct int

const (
	// KeepHandingOver renews on: nobody took the runs over yet.
	KeepHandingOver HandOverAct = iota
	// LetGoOfAll stops renewing every run's lease: the object is gone, or
	// another shard took its runs over.
	LetGoOfAll
	// TakeBack ends the hand-over: the object is back in this shard, and its
	// passes go on with its runs.
	TakeBack
	// GiveUpHandOver stops the runs (the stop controller does) before their
	// leases could expire: no shard took them over within the time limit.
	// Each run's lease goes once no Pod of it is left.
	GiveUpHandOver
)

// HandOverView is what a shard read of an object it is handing over.
type HandOverView struct {
	// Gone says the API server has no such object; InShard that it is in this
	// shard again; Shard is its status.shard, and Ours this shard's name.
	Gone, InShard bool
	Shard, Ours   string
	// Since is when the hand-over began, Timeout its limit, TimedOut whether
	// it was already given up.
	Since    time.Time
	Timeout  time.Duration
	TimedOut bool
}

// HandOver is the verdict of one look at an object being handed over, at now.
func HandOver(v HandOverView, now time.Time) HandOverAct {
	switch {
	case v.Gone:
		return LetGoOfAll
	case v.InShard:
		return TakeBack
	case v.Shard != "" && v.Shard != v.Ours:
		return LetGoOfAll
	case !v.TimedOut && now.Sub(v.Since) >= v.Timeout:
		return GiveUpHandOver
	}
	return KeepHandingOver
}

// HandedRunAct is what the shard an object left does with one run's lease.
type HandedRunAct int

const (
	// RenewHandedRun renews on.
	RenewHandedRun HandedRunAct = iota
	// ForgetHandedRun drops the run from the hand-over: this process no
	// longer renews its lease.
	ForgetHandedRun
	// StopHandedRun has the stop controller stop the run's Job, and lets go
	// of its lease once no Pod of it is left.
	StopHandedRun
)

// HandedRun is the verdict for one run being handed over: its lease as the
// keeper reports it (lease), and whether the hand-over was given up.
func HandedRun(lease LeaseView, timedOut bool) HandedRunAct {
	switch {
	case !lease.Tracked:
		return ForgetHandedRun
	case timedOut || lease.MustStop():
		return StopHandedRun
	}
	return RenewHandedRun
}
