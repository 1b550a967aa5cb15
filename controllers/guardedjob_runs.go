package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// storeRetry is how soon an acquisition or release the store did not answer is
// tried again.
const storeRetry = 5 * time.Second

// activeResync bounds how long a pass may go without looking at an active run,
// as a safety net under the watches and keeper reports.
const activeResync = time.Minute

// leaseOf rebuilds the lease of a run from its status snapshot.
func leaseOf(run *batchv1alpha1.ActiveRun) lockclient.Lease {
	return lockclient.Lease{
		Keys:  lockclient.Keys{Lock: run.Key, Occurrence: run.OccurrenceKey, Fence: run.FenceKey},
		Token: run.Token, TTL: run.TTL.Duration, Fence: run.Fence,
	}
}

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

// resumed marks a lease this process did not acquire itself (after a restart or
// a leader change, or a FailOpen run started without one): the keeper renews it
// at once and counts its deadline from the run's recorded evidence only.
var resumed time.Time

// ownsRun says whether a run's lease was taken by this manager's cluster for
// this very object. A token minted under another cluster name (a run restored
// from a backup of a cluster that may still be alive), or recorded for an object
// of another UID, is never renewed, released or completed here.
func (r *GuardedJobReconciler) ownsRun(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) bool {
	return run.Cluster == r.ClusterName && run.OwnerUID == gj.UID && strings.HasPrefix(run.Token, r.ClusterName+"/")
}

// track makes sure the keeper renews a run's lease. sentAt is when this process
// sent the acquiring call (by the lock client's clock), or resumed.
func (r *GuardedJobReconciler) track(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, store *lockclient.Client, sentAt time.Time) {
	if _, ok := r.Keeper.Get(run.Token); ok || !r.ownsRun(gj, run) {
		return
	}
	_ = r.Keeper.Track(r.trackRequest(gj, run, store, sentAt)) // the lease was validated when it was acquired
}

// trackRequest is what the keeper needs to renew a run's lease. A resumed lease
// is never assumed younger than it provably is: its evidence is the recorded
// acquisition time (taken before the Acquire was sent, stored rounded down),
// less the clock-skew allowance, since another replica's clock may have written
// it. A FailOpen run that started without a lease has no evidence at all.
func (r *GuardedJobReconciler) trackRequest(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun, store *lockclient.Client, sentAt time.Time) lockclient.TrackRequest {
	lease := leaseOf(run)
	lease.SentAt = sentAt
	podGrace := gj.Spec.PodGracePeriod()
	req := lockclient.TrackRequest{
		Lease: lease, Client: store, Owner: keeperOwner(gj, run), RenewInterval: run.RenewInterval.Duration,
		SelfFence:         run.StoreFailurePolicy != batchv1alpha1.FailOpen,
		StopBudget:        leasetiming.StopBudget(podGrace),
		ReacquireIfAbsent: run.StoreFailurePolicy == batchv1alpha1.FailOpen,
	}
	if sentAt.IsZero() && run.AcquiredAt != nil && !run.Unguarded {
		req.LastRenewed = leasetiming.ResumedEvidence(run.AcquiredAt.Time, r.ClockSkew)
	}
	if run.AcquiredAt != nil && run.MaxHold.Duration > 0 {
		req.MaxHoldUntil = run.AcquiredAt.Add(run.MaxHold.Duration)
		req.MaxPodLife = run.MaxHold.Duration + podGrace + leasetiming.StopMargin
	}
	return req
}

// observeRuns moves every active run along its phases.
func (r *GuardedJobReconciler) observeRuns(ctx context.Context, s *scope) error {
	runs := append([]batchv1alpha1.ActiveRun(nil), s.gj.Status.Active...)
	for i := range runs {
		run := runcore.RunByName(s.gj, runs[i].JobName)
		if run == nil {
			continue
		}
		if err := r.advanceRun(ctx, s, run); err != nil {
			return err
		}
	}
	if len(s.gj.Status.Active) > 0 {
		s.requeueAfter(activeResync)
	}
	return nil
}

// advanceRun moves one active run along its phases, as far as it can go in this
// pass. A write that must be durable before its side effect (the intent, the
// fence) is made with a resourceVersion precondition; the run goes on with the
// object that write returned.
func (r *GuardedJobReconciler) advanceRun(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun) error {
	if !r.ownsRun(s.gj, run) {
		// Restored from a backup, or recorded under another cluster name: its
		// lease is never renewed, released or completed here (that cluster may
		// still be alive), but any of its Pods here are stopped, never silently
		// dropped. The phases below leave a foreign lease alone.
		msg := fmt.Sprintf("run %s was recorded by cluster %q for object %s; it is not resumed here and its lease is left alone", run.JobName, run.Cluster, run.OwnerUID)
		switch run.Phase {
		case batchv1alpha1.RunPhaseAcquiring:
			runcore.FinishRun(s.gj, *run, runcore.NeverHeld, batchv1alpha1.RunResultFailed, "", msg, s.now)
			return nil
		case batchv1alpha1.RunPhaseRunning:
			if err := r.beginStop(s, run, batchv1alpha1.RunResultFailed, msg, batchv1alpha1.StaleJobReason, batchv1alpha1.LockStateLost, ""); err != nil {
				return err
			}
		}
	}
	store, err := r.runStore(ctx, s.gj, run)
	if err != nil {
		// The run's store cannot be resolved (its Secret changed or is gone
		// since the run started): its lease can be neither renewed nor
		// released, so its Pods are stopped and the lease is left to expire.
		runcore.SetStoreReachable(s.gj, err, s.now)
		return r.orphanedStore(ctx, s, run, err)
	}
	switch run.Phase {
	case batchv1alpha1.RunPhaseAcquiring:
		return r.acquire(ctx, s, run, store)
	case batchv1alpha1.RunPhaseRunning:
		return r.running(ctx, s, run, store)
	case batchv1alpha1.RunPhaseStopping:
		return r.stopping(ctx, s, run, store)
	case batchv1alpha1.RunPhaseReleasing:
		return r.release(ctx, s, run, store)
	}
	return nil
}

// orphanedStore handles a run whose store cannot be resolved.
func (r *GuardedJobReconciler) orphanedStore(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, cause error) error {
	msg := "the run's store cannot be resolved: " + cause.Error()
	switch run.Phase {
	case batchv1alpha1.RunPhaseAcquiring:
		runcore.FinishRun(s.gj, *run, runcore.LeftToExpire(run, s.now, r.ClockSkew), batchv1alpha1.RunResultStoreUnavailable, "", msg, s.now)
		return nil
	case batchv1alpha1.RunPhaseRunning:
		return r.beginStop(s, run, batchv1alpha1.RunResultStoreUnavailable, msg, batchv1alpha1.StoreUnavailableReason, batchv1alpha1.LockStateStoreDown, "")
	default:
		left, err := r.podsLeft(ctx, s.gj.Namespace, run.JobName)
		if err != nil || left > 0 {
			s.requeueAfter(storeRetry)
			return err
		}
		if err := r.dropLeaseFinalizer(ctx, s.gj.Namespace, run.JobName); err != nil {
			return err
		}
		r.Keeper.Untrack(run.Token)
		runcore.FinishRun(s.gj, *run, runcore.LeftToExpire(run, s.now, r.ClockSkew), batchv1alpha1.RunResultStoreUnavailable, "", msg+"; the lease was left to expire", s.now)
		return nil
	}
}

// markerTTLFor is the done-marker lifetime of an occurrence: until the latest
// start of it any cluster running this spec may make (a schedule that no longer
// parses counts a day to the next occurrence).
func markerTTLFor(gj *batchv1alpha1.GuardedJob, scheduled, now time.Time) time.Duration {
	sched, _ := schedule.Parse(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	return leasetiming.MarkerTTL(sched, scheduled, now, due.StartsOf(&gj.Spec), gj.Spec.Lock.KeepAfterSuccessOrDefault())
}

// runStartDeadline is the run's own deadline to start (due.StartDeadline).
func runStartDeadline(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) time.Time {
	sched, _ := schedule.Parse(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	return due.StartDeadline(&gj.Spec, sched, run)
}
