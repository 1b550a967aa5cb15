package controllers

import (
	"context"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// The keeper's custody of leases, as the reconciler sees it: which runs it
// renews (track, untrackOwner), under which owner, and how its reports of a
// lease lost or at its deadline come back as passes and stops (routeReports).

func fencePolicy(p batchv1alpha1.FencingPolicy) lockclient.FencePolicy {
	switch p {
	case batchv1alpha1.FencingNone:
		return lockclient.FenceNone
	case batchv1alpha1.FencingStrict:
		return lockclient.FenceStrict
	default:
		return lockclient.FenceInject
	}
}

// keeperOwner is the keeper's opaque owner of a run, "<namespace>/<name>/<job>":
// enough to find the GuardedJob and the Job again from a report.
func keeperOwner(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) string {
	return ownerPrefix(gj.Namespace, gj.Name) + run.JobName
}

// ownerPrefix is what the keeper owners of a GuardedJob's runs start with.
func ownerPrefix(namespace, name string) string { return namespace + "/" + name + "/" }

// parseOwner splits a keeperOwner value.
func parseOwner(owner string) (gj types.NamespacedName, job string, ok bool) {
	parts := strings.SplitN(owner, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return types.NamespacedName{}, "", false
	}
	return types.NamespacedName{Namespace: parts[0], Name: parts[1]}, parts[2], true
}

// ownsRun says whether a run's lease was taken by this manager's cluster for
// this very object. A token minted under another cluster name (a run restored
// from a backup of a cluster that may still be alive), or recorded for an object
// of another UID, is never renewed, released or completed here.
func (r *GuardedJobReconciler) ownsRun(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) bool {
	return runcore.OwnsRun(r.ClusterName, gj.UID, run)
}

// track makes sure the keeper renews a run's lease. sentAt is when this process
// sent the acquiring call (by the lock client's clock), or resumed.
func (r *GuardedJobReconciler) track(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, store *lockclient.Client, sentAt time.Time) {
	if r.tracks(run.Token) || !r.ownsRun(gj, run) {
		return
	}
	_ = r.keep(r.trackRequest(gj, run, store, sentAt)) // the lease was validated when it was acquired
}

// trackRequest is what the keeper needs to renew a run's lease, on the terms
// runcore.KeepTermsOf sets. sentAt is when this process sent the acquiring
// call; zero for a lease resumed from status.
func (r *GuardedJobReconciler) trackRequest(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, store *lockclient.Client, sentAt time.Time) lockclient.TrackRequest {
	lease := leaseOf(run)
	lease.SentAt = sentAt
	terms := runcore.KeepTermsOf(run, gj.Spec.PodGracePeriod(), sentAt.IsZero(), r.ClockSkew)
	return lockclient.TrackRequest{
		Lease: lease, Client: store, Owner: keeperOwner(gj, run), RenewInterval: run.RenewInterval.Duration,
		SelfFence: terms.SelfFence, StopBudget: terms.StopBudget, ReacquireIfAbsent: terms.ReacquireIfAbsent,
		LastRenewed: terms.LastRenewed, MaxHoldUntil: terms.MaxHoldUntil, MaxPodLife: terms.MaxPodLife,
	}
}

// untrackOwner stops renewing every lease of the runs of one GuardedJob.
func (r *GuardedJobReconciler) untrackOwner(namespace, name string) {
	prefix := ownerPrefix(namespace, name)
	for _, st := range r.keptLeases() {
		if strings.HasPrefix(st.Owner, prefix) {
			r.untrack(st.Token)
		}
	}
}

// routeReports turns keeper reports into work for both controllers: the stop
// controller acts on the Job at once, the GuardedJob reconciler records what
// happened. A report carries only keys; the details stay in the keeper.
func (r *GuardedJobReconciler) routeReports(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case rep := <-r.Keeper.Reports():
			obj, jobName, ok := parseOwner(rep.Owner)
			if !ok {
				continue
			}
			namespace, name := obj.Namespace, obj.Name
			switch rep.Kind {
			case lockclient.ReportLost, lockclient.ReportDeadlineReached, lockclient.ReportMaxHoldReached:
				if r.Stopper != nil {
					r.Stopper.owe(namespace, jobName)
				}
			default:
				r.pokeStopper(namespace, jobName)
			}
			gj := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
			select {
			case r.events <- event.GenericEvent{Object: gj}:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// pokeStopper asks the stop controller to look at a Job now.
func (r *GuardedJobReconciler) pokeStopper(namespace, jobName string) {
	if r.Stopper != nil {
		r.Stopper.poke(namespace, jobName)
	}
}

// shardName is this manager's shard as status.shard names it: its
// --watch-label-selector, or "" when it serves every GuardedJob.
func (r *GuardedJobReconciler) shardName() string {
	return selectorString(r.Selector)
}

// claimShard records in status.shard that this shard renews the leases of the
// object's runs; the shard it came from lets go when it reads it. It claims
// only while the keeper tracks every lease-holding run of this cluster (a run
// whose store this shard cannot resolve yet is not tracked) and, with the early
// gate, the lease of every working Job no status records yet: until then the
// shard it came from renews on, up to the hand-over's time limit.
func (r *GuardedJobReconciler) claimShard(ctx context.Context, gj *batchv1alpha1.GuardedJob) {
	name := r.shardName()
	if name == "" || len(gj.Status.Active) == 0 || gj.Status.Shard == name {
		return
	}
	unrecorded, err := r.workingUnrecordedJobs(ctx, gj)
	if err != nil {
		return // a later pass claims
	}
	renews := func(job string) bool { return renewsJob(r.Keeper, gj, job) }
	if runcore.MayClaimShard(r.ClusterName, gj, r.tracks, unrecorded, renews) {
		gj.Status.Shard = name
	}
}

// renewsJob says whether keeper renews the lease of gj's Job named job (one no
// status records): tracked, not lost, before its self-fence deadline and
// maxHold. A renewal that failed (Failing) counts, as it does for a recorded
// run's lease: the self-fence deadline bounds it.
func renewsJob(keeper *lockclient.Keeper, gj *batchv1alpha1.GuardedJob, job string) bool {
	st, ok := keeper.Owned(ownerPrefix(gj.Namespace, gj.Name) + job)
	return ok && st.State != lockclient.StateLost && !st.DeadlineReached && !st.MaxHoldReached
}

// workingUnrecordedJobs names the GuardedJob's working Jobs no status records
// (workingUnrecorded). Without the early gate no such Job works.
func (r *GuardedJobReconciler) workingUnrecordedJobs(ctx context.Context, gj *batchv1alpha1.GuardedJob) ([]string, error) {
	if !r.EarlyGate {
		return nil, nil
	}
	jobs, err := r.ownedJobs(ctx, gj)
	if err != nil {
		return nil, err
	}
	var names []string
	for i := range jobs {
		if workingUnrecorded(gj, &jobs[i]) {
			names = append(names, jobs[i].Name)
		}
	}
	return names, nil
}

// selectorString is a shard's --watch-label-selector, "" for a manager serving
// every GuardedJob.
func selectorString(sel labels.Selector) string {
	if sel == nil || sel.Empty() {
		return ""
	}
	return sel.String()
}
