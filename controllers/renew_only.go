package controllers

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"

	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// ErrLeaderElectionLost ends a manager that lost its leadership.
var ErrLeaderElectionLost = errors.New("leader election lost")

// RenewOnly runs after leadership was lost. If the API server answers, another
// replica has taken over: stop renewing at once so that it resumes the leases.
// If it does not answer, this process is cut off, but the Pods it started are
// still running: letting their leases lapse would let another cluster start
// beside them. So the keeper keeps renewing (and nothing else happens) until the
// API server answers again, then the process exits and the leader resumes.
//
// Renewing alone, it never takes a key back: a new leader may already have
// released a lease (its run completed), and a FailOpen run's re-acquiring
// renewal would write it back as a ghost lock for as long as this goes on. A key
// found absent is a lost lease here. Leases lost, or past the moment their last
// Pod must have stopped (last contact + maxHold + Pod grace + stop margin), are
// dropped; the kubelet ends those Pods through activeDeadlineSeconds.
func RenewOnly(ctx context.Context, keeper *lockclient.Keeper, apiReachable func() bool, period time.Duration, log logr.Logger) error {
	if apiReachable() {
		log.Info("Leadership moved to another replica; stopping renewals so it resumes the leases")
		return ErrLeaderElectionLost
	}
	if err := keeper.StopReacquiring(ctx); err != nil {
		return nil // shutting down
	}
	// The manager cannot see Pods the Job controller started since its last
	// contact with the API server (no later than now), and the kubelet lets each
	// of them run for maxHold from its own start: keep renewing until the last of
	// them could still be running, not merely until acquisition + maxHold.
	keeper.ExtendMaxHold(time.Now())
	log.Info("Leadership lost while the API server is unreachable: renewing the leases held until it answers again", "leases", len(keeper.Snapshot()))
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case rep := <-keeper.Reports():
			if rep.Kind == lockclient.ReportLost || rep.Kind == lockclient.ReportMaxHoldReached {
				keeper.Untrack(rep.Token)
				log.Info("Stopped renewing a lease", "owner", rep.Owner, "reason", rep.Kind)
			}
		case <-ticker.C:
			if apiReachable() {
				log.Info("The API server answers again; exiting so that the leader resumes the leases")
				return errors.New("leader election lost; exiting after the API server came back")
			}
		}
	}
}
