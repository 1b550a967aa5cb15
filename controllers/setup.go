package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/guardedjob/guardedjob/internal/keys"
	"github.com/guardedjob/guardedjob/internal/leadership"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// ManagerOptions is what the manager's controllers are made of: its flags and its lock
// store. The manager binary and every test that runs a manager build them with
// Setup, so that what runs in tests is wired as in production.
type ManagerOptions struct {
	// Store is the manager's own lock store.
	Store *lockclient.Client
	// RESTConfig is the manager's connection to the API server; the stop
	// controller gets a client of its own from it.
	RESTConfig *rest.Config

	ClusterName string
	KeyGrants   keys.Grants
	StoreAllow  *lockclient.AllowList
	GuardImage  string
	ClockSkew   time.Duration
	// Namespace and Selector restrict what the manager serves (one namespace;
	// a shard).
	Namespace string
	Selector  labels.Selector

	LeaderElection      bool
	LeaderLeaseDuration time.Duration
	LeaderRetryPeriod   time.Duration

	// LeaderElectionID names this manager's leader election (one per shard); the
	// cluster identity heartbeat is kept per cluster name and election ID, and
	// beats every IdentityBeat (5s when zero).
	LeaderElectionID string
	IdentityBeat     time.Duration

	MaxConcurrentReconciles int
	// StopRate is --stop-rate (runs per second the manager can stop at once).
	StopRate        float64
	HandoverTimeout time.Duration
	// EarlyGate is --early-gate (GuardedJobReconciler.EarlyGate).
	EarlyGate bool

	// Clock is the reconcilers' clock; real time when nil.
	Clock clock.Clock
	// Recorder and StopRecorder record the controllers' events; the manager's
	// recorders when nil.
	Recorder, StopRecorder recorder.EventRecorder
	// KeeperOptions are added to the keeper's (tests inject its clock).
	KeeperOptions []lockclient.KeeperOption

	// Guard says whether this manager is known to lead; every side effect asks
	// it first (internal/leadership). Nil: the manager always leads (no leader
	// election).
	Guard *leadership.Guard
}

// Controllers are the parts Setup made. The caller runs Keeper (on a context
// that outlives the manager's: renewals go on while it shuts down).
type Controllers struct {
	Keeper     *lockclient.Keeper
	Stopper    *StopReconciler
	Reconciler *GuardedJobReconciler
}

// Setup makes the lease keeper, the stop controller (with a client and rate
// budget of its own) and the GuardedJob reconciler, wired to each other, and
// registers both controllers with mgr.
func Setup(mgr ctrl.Manager, o ManagerOptions) (*Controllers, error) {
	clk := o.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	// Every side effect asks the guard first: the API client's writes, the
	// stop controller's deletes, events, and the stores' writes other than
	// renewals (the keeper takes a key back only while the manager leads, and
	// tells the guard of every pause it sees).
	guard := o.Guard
	keeperOpts := []lockclient.KeeperOption{lockclient.WithStopRate(o.StopRate)}
	if guard != nil {
		keeperOpts = append(keeperOpts, lockclient.WithReacquireGate(guard.Leading), lockclient.WithPauseHook(guard.Paused))
		o.Store.SetWriteGate(guard.Err)
	}
	keeper := lockclient.NewKeeper(o.Store, append(keeperOpts, o.KeeperOptions...)...)
	guard.OnPause(keeper.NotePause)
	stopWriter, err := NewStopClient(o.RESTConfig, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("create stop client: %w", err)
	}
	rec, stopRec := o.Recorder, o.StopRecorder
	if rec == nil {
		rec = mgr.GetEventRecorder("guardedjob-controller")
	}
	if stopRec == nil {
		stopRec = mgr.GetEventRecorder("guardedjob-stop")
	}
	rec, stopRec = guard.Recorder(rec), guard.Recorder(stopRec)
	handovers := NewHandovers()
	stopper := &StopReconciler{
		Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Writer: guard.Client(stopWriter), Keeper: keeper, Guard: guard,
		MaxConcurrentReconciles: o.MaxConcurrentReconciles, Recorder: stopRec, Selector: o.Selector, Handovers: handovers,
	}
	if err := stopper.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up stop controller: %w", err)
	}
	r := &GuardedJobReconciler{
		Client: guard.Client(mgr.GetClient()), APIReader: mgr.GetAPIReader(), Recorder: rec, Clock: clk, Guard: guard,
		Store: o.Store, Keeper: keeper, ClusterName: o.ClusterName, KeyGrants: o.KeyGrants, StoreAllow: o.StoreAllow,
		ClockSkew: o.ClockSkew, Namespace: o.Namespace, Selector: o.Selector, GuardImage: o.GuardImage,
		LeaderElection: o.LeaderElection, LeaderLeaseDuration: o.LeaderLeaseDuration, LeaderRetryPeriod: o.LeaderRetryPeriod,
		MaxConcurrentReconciles: o.MaxConcurrentReconciles, Stopper: stopper,
		Handovers: handovers, HandoverTimeout: o.HandoverTimeout, EarlyGate: o.EarlyGate,
		Identity: NewIdentityCheck(o.Store, o.ClusterName, o.LeaderElectionID, o.IdentityBeat).ForShard(selectorString(o.Selector)),
		Grants:   NewGrantsCheck(o.Store, o.KeyGrants, o.IdentityBeat),
	}
	r.Identity.WithTenantStores(r.tenantStoreClients)
	stopper.WaitResumed = r.waitResumed
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up guardedjob controller: %w", err)
	}
	return &Controllers{Keeper: keeper, Stopper: stopper, Reconciler: r}, nil
}

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
