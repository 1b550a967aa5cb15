package runcore_test

import (
	"testing"
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// TestAShardHandsOverMakeBeforeBreak: the shard an object left renews its runs'
// leases until the shard it joined renews every one of them and says so.
func TestAShardHandsOverMakeBeforeBreak(t *testing.T) {
	if !runcore.HandsOver("tier=gold") {
		t.Error("a shard lets go of a departed object's leases at once, before another shard holds them")
	}
	if runcore.HandsOver("") {
		t.Error("a manager serving every GuardedJob hands over to nobody: an object that left its cache is gone")
	}

	gj := &batchv1alpha1.GuardedJob{}
	gj.UID = "uid-1"
	gj.Status.Active = []batchv1alpha1.ActiveRun{
		{JobName: "payout-1", Cluster: "cluster-a", OwnerUID: "uid-1", Token: "cluster-a/payout-1#a", Phase: batchv1alpha1.RunPhaseRunning},
		{JobName: "payout-2", Cluster: "cluster-a", OwnerUID: "uid-1", Token: "cluster-a/payout-2#b", Phase: batchv1alpha1.RunPhaseRunning},
		{JobName: "payout-3", Cluster: "cluster-a", OwnerUID: "uid-1", Token: "cluster-a/payout-3#c", Phase: batchv1alpha1.RunPhaseAcquiring},
		{JobName: "payout-4", Cluster: "cluster-b", OwnerUID: "uid-1", Token: "cluster-b/payout-4#d", Phase: batchv1alpha1.RunPhaseRunning},
	}
	renews := map[string]bool{"cluster-a/payout-1#a": true}
	tracked := func(token string) bool { return renews[token] }
	noJob := func(string) bool { return false }
	if runcore.MayClaimShard("cluster-a", gj, tracked, nil, noJob) {
		t.Error("the shard claims the object while the lease of payout-2 is renewed by nobody here")
	}
	renews["cluster-a/payout-2#b"] = true
	if !runcore.MayClaimShard("cluster-a", gj, tracked, nil, noJob) {
		t.Error("the shard renews every lease of its cluster's runs (an acquiring run and another cluster's run hold none here), yet may not claim")
	}
	// The early gate: payout-5's Job works past its gate and no status records
	// its run yet; the shard the object left renews its lease until this one
	// adopts it.
	adopted := map[string]bool{}
	if runcore.MayClaimShard("cluster-a", gj, tracked, []string{"payout-5"}, func(job string) bool { return adopted[job] }) {
		t.Error("the shard claims the object while the working Job payout-5, its run's only record, has its lease renewed by nobody here")
	}
	adopted["payout-5"] = true
	if !runcore.MayClaimShard("cluster-a", gj, tracked, []string{"payout-5"}, func(job string) bool { return adopted[job] }) {
		t.Error("the shard renews payout-5's lease too, yet may not claim")
	}

	since := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	for name, c := range map[string]struct {
		v    runcore.HandOverView
		at   time.Duration
		want runcore.HandOverAct
	}{
		"the object is gone":                       {v: runcore.HandOverView{Gone: true}, want: runcore.LetGoOfAll},
		"it came back":                             {v: runcore.HandOverView{InShard: true, Shard: "tier=gold", Ours: "tier=gold"}, want: runcore.TakeBack},
		"another shard took it over":               {v: runcore.HandOverView{Shard: "tier=silver", Ours: "tier=gold"}, at: time.Second, want: runcore.LetGoOfAll},
		"status still names this shard":            {v: runcore.HandOverView{Shard: "tier=gold", Ours: "tier=gold"}, at: time.Second, want: runcore.KeepHandingOver},
		"nobody claimed it yet":                    {v: runcore.HandOverView{Ours: "tier=gold"}, at: time.Second, want: runcore.KeepHandingOver},
		"nobody claimed it within the limit":       {v: runcore.HandOverView{Ours: "tier=gold"}, at: time.Minute, want: runcore.GiveUpHandOver},
		"it was given up already":                  {v: runcore.HandOverView{Ours: "tier=gold", TimedOut: true}, at: time.Hour, want: runcore.KeepHandingOver},
		"another shard claimed it after the limit": {v: runcore.HandOverView{Shard: "tier=silver", Ours: "tier=gold", TimedOut: true}, at: time.Hour, want: runcore.LetGoOfAll},
	} {
		c.v.Since, c.v.Timeout = since, time.Minute
		if got := runcore.HandOver(c.v, since.Add(c.at)); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}

	for name, c := range map[string]struct {
		lease    runcore.LeaseView
		timedOut bool
		want     runcore.HandedRunAct
	}{
		"a healthy lease":                {lease: runcore.LeaseView{Tracked: true}, want: runcore.RenewHandedRun},
		"a lost lease":                   {lease: runcore.LeaseView{Tracked: true, Lost: true}, want: runcore.StopHandedRun},
		"the self-fence deadline":        {lease: runcore.LeaseView{Tracked: true, DeadlineReached: true}, want: runcore.StopHandedRun},
		"maxHold":                        {lease: runcore.LeaseView{Tracked: true, MaxHoldReached: true}, want: runcore.StopHandedRun},
		"a hand-over given up":           {lease: runcore.LeaseView{Tracked: true}, timedOut: true, want: runcore.StopHandedRun},
		"a lease no longer renewed here": {lease: runcore.LeaseView{}, want: runcore.ForgetHandedRun},
	} {
		if got := runcore.HandedRun(c.lease, c.timedOut); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}
