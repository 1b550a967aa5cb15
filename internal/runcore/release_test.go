package runcore_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// The release of a run, effect by effect, as the adapter sees it: which store
// call ends the lease (none, a completion with its done-marker, or a release),
// and what the run's end records, for every way a run can end. No API server,
// no store: the answers are scripted.
func TestTheReleaseOfARunEffectByEffect(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	run := func(result batchv1alpha1.RunResult, mod ...func(*batchv1alpha1.ActiveRun)) *batchv1alpha1.ActiveRun {
		r := &batchv1alpha1.ActiveRun{JobName: "nightly-1", Key: "team:nightly", Holder: "cluster-a/team/nightly-1-abc",
			TTL: metav1.Duration{Duration: 30 * time.Second}, Phase: batchv1alpha1.RunPhaseReleasing, StopResult: result,
			StopReason: string(result) + ": the Job ended"}
		for _, m := range mod {
			m(r)
		}
		return r
	}
	guarded := func(r *batchv1alpha1.ActiveRun) { r.PodGuard = &batchv1alpha1.RunPodGuard{} }
	unguarded := func(r *batchv1alpha1.ActiveRun) { r.Unguarded = true }
	held := runcore.ReleaseOutcome{HeldNow: true}
	done := runcore.ReleaseOutcome{Released: true}
	completeJob := runcore.ReleaseOutcome{Job: runcore.RunJobView{Read: runcore.ReadLive, Exists: true, Finished: batchv1.JobComplete}}
	failedPod := runcore.ReleaseOutcome{Job: runcore.RunJobView{Read: runcore.ReadLive, Exists: true, Finished: batchv1.JobComplete, PodsFailed: true}}
	for _, c := range []struct {
		name     string
		run      *batchv1alpha1.ActiveRun
		owns     bool
		answers  []runcore.ReleaseOutcome
		effects  []runcore.ReleaseEffect
		lease    batchv1alpha1.LeaseState
		released bool
		occDone  bool
		lostTo   string
		message  string
	}{
		{name: "a run that succeeded completes: the done-marker is written and the key deleted",
			run: run(batchv1alpha1.RunResultSucceeded), owns: true, answers: []runcore.ReleaseOutcome{held, done},
			effects: []runcore.ReleaseEffect{runcore.Quiesce, runcore.CompleteLease, runcore.EndRun},
			lease:   batchv1alpha1.LeaseReleased, released: true, occDone: true, message: "the Job ended"},
		{name: "a run that failed releases: no done-marker",
			run: run(batchv1alpha1.RunResultFailed), owns: true, answers: []runcore.ReleaseOutcome{held, done},
			effects: []runcore.ReleaseEffect{runcore.Quiesce, runcore.ReleaseLease, runcore.EndRun},
			lease:   batchv1alpha1.LeaseReleased, released: true, message: "the Job ended"},
		{name: "a succeeded run whose key another holder took writes no done-marker and says so",
			run: run(batchv1alpha1.RunResultSucceeded), owns: true, answers: []runcore.ReleaseOutcome{held, {NotHeld: true, Holder: "cluster-b/team/nightly-9-def#0011"}},
			effects: []runcore.ReleaseEffect{runcore.Quiesce, runcore.CompleteLease, runcore.EndRun},
			lease:   batchv1alpha1.LeaseReleased, lostTo: "cluster-b/team/nightly-9-def#0011", message: "the Job ended"},
		{name: "a guarded run whose Job completed cleanly completes",
			run: run(batchv1alpha1.RunResultSucceeded, guarded), owns: true, answers: []runcore.ReleaseOutcome{held, completeJob, done},
			effects: []runcore.ReleaseEffect{runcore.Quiesce, runcore.ReadGuardedJob, runcore.CompleteLease, runcore.EndRun},
			lease:   batchv1alpha1.LeaseReleased, released: true, occDone: true, message: "the Job ended"},
		{name: "a guarded run with a failed Pod leaves its lease to expire: its guard stops a Pod the API server may not show",
			run: run(batchv1alpha1.RunResultSucceeded, guarded), owns: true, answers: []runcore.ReleaseOutcome{held, failedPod},
			effects: []runcore.ReleaseEffect{runcore.Quiesce, runcore.ReadGuardedJob, runcore.EndRun},
			lease:   batchv1alpha1.LeaseLeftToExpire,
			message: "the Job ended; lease team:nightly left to expire (within its ttl 30s): a Pod of this run may still run where the API server does not show it, and its pod guard stops it first; the done-marker was not written"},
		{name: "a guarded run whose Job is gone leaves its lease to expire",
			run: run(batchv1alpha1.RunResultFailed, guarded), owns: true, answers: []runcore.ReleaseOutcome{held, {}},
			effects: []runcore.ReleaseEffect{runcore.Quiesce, runcore.ReadGuardedJob, runcore.EndRun},
			lease:   batchv1alpha1.LeaseLeftToExpire,
			message: "the Job ended; lease team:nightly left to expire (within its ttl 30s): a Pod of this run may still run where the API server does not show it, and its pod guard stops it first"},
		{name: "a run another cluster recorded is neither released nor completed here",
			run: run(batchv1alpha1.RunResultSucceeded), owns: false, answers: []runcore.ReleaseOutcome{held},
			effects: []runcore.ReleaseEffect{runcore.Quiesce, runcore.EndRun}, message: "the Job ended"},
		{name: "an unguarded run whose keeper never took the key has nothing to release",
			run: run(batchv1alpha1.RunResultSucceeded, unguarded), owns: true, answers: []runcore.ReleaseOutcome{{}},
			effects: []runcore.ReleaseEffect{runcore.Quiesce, runcore.EndRun}, message: "the Job ended"},
		{name: "an unguarded run whose keeper took the key since completes it",
			run: run(batchv1alpha1.RunResultSucceeded, unguarded), owns: true, answers: []runcore.ReleaseOutcome{held, done},
			effects: []runcore.ReleaseEffect{runcore.Quiesce, runcore.CompleteLease, runcore.EndRun},
			lease:   batchv1alpha1.LeaseReleased, released: true, occDone: true, message: "the Job ended"},
		{name: "a store that does not answer keeps the run Releasing",
			run: run(batchv1alpha1.RunResultFailed), owns: true, answers: []runcore.ReleaseOutcome{held, {StoreDown: true}},
			effects: []runcore.ReleaseEffect{runcore.Quiesce, runcore.ReleaseLease, runcore.WaitForStore}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			m := runcore.NewRelease(c.run, c.owns)
			var got []runcore.ReleaseEffect
			for _, a := range c.answers {
				got = append(got, m.Next())
				m.Deliver(a)
			}
			got = append(got, m.Next())
			g.Expect(got).To(Equal(c.effects))
			if m.Next() != runcore.EndRun {
				return
			}
			end := m.Ended(now, time.Second)
			g.Expect(end.Lease.State).To(Equal(c.lease))
			g.Expect(end.Released).To(Equal(c.released))
			g.Expect(end.OccurrenceDone).To(Equal(c.occDone))
			g.Expect(end.MarkerLostTo).To(Equal(c.lostTo))
			g.Expect(end.Message).To(Equal(c.message))
			g.Expect(end.Result).To(Equal(c.run.StopResult))
			if c.lease == batchv1alpha1.LeaseLeftToExpire {
				g.Expect(end.Lease.ExpiresBy).To(Equal(now.Add(31 * time.Second)))
			}
		})
	}
}
