package runcore_test

import (
	"testing"

	"github.com/guardedjob/guardedjob/internal/runcore"
)

// world answers the reads of step stop_unclaimed, one answer per read, in order.
type world struct {
	owners []runcore.OwnerView
	jobs   []runcore.JobView
}

// judge runs the judgement of a Job the cache shows as cached, against the
// answers of w, and returns the decision, its reason and the reads it made.
func judge(t *testing.T, cached runcore.JobView, w world) (runcore.UnclaimedAction, string, []string) {
	t.Helper()
	u := runcore.NewUnclaimed("payout", cached)
	var reads []string
	for range 10 {
		action, why := u.Next()
		switch action {
		case runcore.ReadOwner:
			reads = append(reads, "owner")
			u.DeliverOwner(answer(t, &w.owners, reads))
		case runcore.ReadJob:
			reads = append(reads, "job")
			u.DeliverJob(answer(t, &w.jobs, reads))
		default:
			return action, why, reads
		}
	}
	t.Fatalf("no decision after %v", reads)
	return 0, "", nil
}

// answer takes the next of the scripted answers to a read.
func answer[T any](t *testing.T, answers *[]T, reads []string) T {
	t.Helper()
	if len(*answers) == 0 {
		t.Fatalf("an unexpected read: %v", reads)
	}
	a := (*answers)[0]
	*answers = (*answers)[1:]
	return a
}

func TestUnclaimedStopsOnlyAJobNoReadShowsClaimedOrFinished(t *testing.T) {
	const uid = "uid-1"
	running := runcore.JobView{Found: true, OwnerUID: uid}
	finished := runcore.JobView{Found: true, OwnerUID: uid, Finished: true}
	noRun := runcore.OwnerView{Found: true, UID: uid, InShard: true}
	claims := runcore.OwnerView{Found: true, UID: uid, InShard: true, Claims: true}
	for name, c := range map[string]struct {
		cached runcore.JobView
		w      world
		want   runcore.UnclaimedAction
		reads  int
	}{
		"a Job waiting for adoption is the reconciler's": {
			cached: runcore.JobView{Found: true, OwnerUID: uid, WaitsForAdoption: true}, want: runcore.Leave},
		"status lost: every read shows no run and a working Job": {
			cached: running, w: world{owners: []runcore.OwnerView{noRun, noRun}, jobs: []runcore.JobView{running, running}},
			want: runcore.Stop, reads: 4},
		"the cache was behind: the live GuardedJob claims it": {
			cached: running, w: world{owners: []runcore.OwnerView{claims}}, want: runcore.Leave, reads: 1},
		"the Job completed between the cache's read and the GuardedJob's": {
			cached: running, w: world{owners: []runcore.OwnerView{noRun}, jobs: []runcore.JobView{finished}},
			want: runcore.Leave, reads: 2},
		"the gate opened after the GuardedJob was read: the second read claims it": {
			cached: running, w: world{owners: []runcore.OwnerView{noRun, claims}, jobs: []runcore.JobView{running}},
			want: runcore.Leave, reads: 3},
		"the run ended between the second reads: the Job finished": {
			cached: running, w: world{owners: []runcore.OwnerView{noRun, noRun}, jobs: []runcore.JobView{running, finished}},
			want: runcore.Leave, reads: 4},
		"the Job is gone by the first live read": {
			cached: running, w: world{owners: []runcore.OwnerView{noRun}, jobs: []runcore.JobView{{}}}, want: runcore.Leave, reads: 2},
		"a finished Job in the cache is the reconciler's": {
			cached: finished, w: world{owners: []runcore.OwnerView{noRun}}, want: runcore.Leave, reads: 1},
		"the GuardedJob is gone": {
			cached: running, w: world{owners: []runcore.OwnerView{{}}}, want: runcore.StopOrphan, reads: 1},
		"the GuardedJob was deleted and created again": {
			cached: running, w: world{owners: []runcore.OwnerView{{Found: true, UID: "uid-2", InShard: true}}}, want: runcore.StopOrphan, reads: 1},
		"the GuardedJob moved to another shard": {
			cached: running, w: world{owners: []runcore.OwnerView{{Found: true, UID: uid}}}, want: runcore.Leave, reads: 1},
		"the early gate: a started Job whose lease is renewed here is the reconciler's to adopt": {
			cached: runcore.JobView{Found: true, OwnerUID: uid, Started: true, RenewedHere: true}, want: runcore.Leave},
		"the early gate: a started Job whose lease nobody here renews is stopped": {
			cached: runcore.JobView{Found: true, OwnerUID: uid, Started: true},
			w:      world{owners: []runcore.OwnerView{noRun, noRun}, jobs: []runcore.JobView{running, running}}, want: runcore.Stop, reads: 4},
		"the GuardedJob is gone by the second read: left to the next look": {
			cached: running, w: world{owners: []runcore.OwnerView{noRun, {}}, jobs: []runcore.JobView{running}}, want: runcore.Leave, reads: 3},
	} {
		t.Run(name, func(t *testing.T) {
			got, why, reads := judge(t, c.cached, c.w)
			if got != c.want || len(reads) != c.reads {
				t.Errorf("decision %s (%s) after reads %v; want %s after %d reads", got, why, reads, c.want, c.reads)
			}
			if got != runcore.ReadOwner && got != runcore.ReadJob && why == "" {
				t.Errorf("a decision without a reason")
			}
		})
	}
}
