package runcore_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// What a run's acquisition does with the store's answer: start, wait for the
// key or the store, start without a lease (FailOpen), or end, and what the
// lease ledger keeps of a token that may hold the key.
func TestAnAcquisitionFollowsTheStoresAnswer(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	deadline := now.Add(time.Minute)
	run := &batchv1alpha1.ActiveRun{JobName: "settle-1", Holder: "cluster-a/team/settle-1", TTL: metav1.Duration{Duration: 30 * time.Second}}
	failOpen := &batchv1alpha1.ActiveRun{JobName: "settle-1", StoreFailurePolicy: batchv1alpha1.FailOpen}
	view := func(r *batchv1alpha1.ActiveRun, a runcore.AcquireAnswer, mod ...func(*runcore.AcquireView)) runcore.AcquireView {
		v := runcore.AcquireView{Run: r, Answer: a, NextStoreTry: now.Add(5 * time.Second), Deadline: deadline, Now: now}
		for _, m := range mod {
			m(&v)
		}
		return v
	}
	waits := func(next time.Time) func(*runcore.AcquireView) {
		return func(v *runcore.AcquireView) { v.OnBusyRetry, v.NextTry = true, next }
	}
	untilDone := func(next time.Time) func(*runcore.AcquireView) {
		return func(v *runcore.AcquireView) { v.RetriesOccurrence, v.NextTry = true, next }
	}
	for _, c := range []struct {
		name string
		view runcore.AcquireView
		want runcore.AcquireVerdict
	}{
		{"the lease: the run starts", view(run, runcore.Acquired), runcore.AcquireVerdict{Act: runcore.StartRun}},
		{"a busy key, onBusy Skip: Busy, and the token that never held the key leaves no ledger entry", view(run, runcore.KeyBusy),
			runcore.AcquireVerdict{Act: runcore.EndUnstarted, Result: batchv1alpha1.RunResultBusy, Lease: runcore.NeverHeld}},
		{"a busy key the run waits for: its next attempt", view(run, runcore.KeyBusy, waits(now.Add(15*time.Second))),
			runcore.AcquireVerdict{Act: runcore.TryAgainAt, At: now.Add(15 * time.Second)}},
		{"a busy key with no attempt left: Busy, given up", view(run, runcore.KeyBusy, waits(time.Time{})),
			runcore.AcquireVerdict{Act: runcore.EndUnstarted, Result: batchv1alpha1.RunResultBusy, Lease: runcore.NeverHeld, GaveUp: true}},
		{"a busy key of an occurrence tried until it is done: its next attempt", view(run, runcore.KeyBusy, untilDone(now.Add(15*time.Second))),
			runcore.AcquireVerdict{Act: runcore.TryAgainAt, At: now.Add(15 * time.Second)}},
		{"a busy key, onBusy Skip, though an attempt would fit: Busy", view(run, runcore.KeyBusy, func(v *runcore.AcquireView) { v.NextTry = now.Add(15 * time.Second) }),
			runcore.AcquireVerdict{Act: runcore.EndUnstarted, Result: batchv1alpha1.RunResultBusy, Lease: runcore.NeverHeld}},
		{"the occurrence done elsewhere: Skipped, the key released if it held the run's token", view(run, runcore.OccurrenceDone),
			runcore.AcquireVerdict{Act: runcore.EndUnstarted, Result: batchv1alpha1.RunResultSkipped, Lease: runcore.Released}},
		{"a refusal: Failed, and a key an earlier attempt may hold is left to expire in the ledger", view(run, runcore.StoreRefused),
			runcore.AcquireVerdict{Act: runcore.EndUnstarted, Result: batchv1alpha1.RunResultFailed, Lease: runcore.LeftToExpire(run, now, 0)}},
		{"a silent store before the deadline: try again", view(run, runcore.StoreSilent),
			runcore.AcquireVerdict{Act: runcore.TryAgainAt, At: now.Add(5 * time.Second)}},
		{"a silent store at the deadline: release what an answer that was lost may have given, StoreUnavailable",
			view(run, runcore.StoreSilent, func(v *runcore.AcquireView) { v.NextStoreTry = deadline }),
			runcore.AcquireVerdict{Act: runcore.ReleaseAndEnd, Result: batchv1alpha1.RunResultStoreUnavailable}},
		{"a silent store, FailOpen: the run starts without a lease", view(failOpen, runcore.StoreSilent),
			runcore.AcquireVerdict{Act: runcore.StartUnguarded}},
	} {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(runcore.AfterAcquire(c.view)).To(Equal(c.want))
		})
	}
}

// TestOnlyAStrictRunRaisesTheFenceCounterAboveStatus: the floor of an
// acquisition.
func TestOnlyAStrictRunRaisesTheFenceCounterAboveStatus(t *testing.T) {
	strict := &batchv1alpha1.ActiveRun{FencingPolicy: batchv1alpha1.FencingStrict}
	if got := runcore.FenceFloor(strict, 41); got != 41 {
		t.Errorf("a Strict run's floor is %d, want status.lastFence 41", got)
	}
	for _, policy := range []batchv1alpha1.FencingPolicy{"", batchv1alpha1.FencingInject} {
		if got := runcore.FenceFloor(&batchv1alpha1.ActiveRun{FencingPolicy: policy}, 41); got != 0 {
			t.Errorf("fencing %q: floor %d, want none", policy, got)
		}
	}
}

// TestAnAcquisitionThatWentThroughIsRecordedUnderItsNewFence: what an
// acquisition writes into status, and what a FailOpen run without a lease is.
func TestAnAcquisitionThatWentThroughIsRecordedUnderItsNewFence(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	for _, last := range []int64{3, 9} {
		gj := &batchv1alpha1.GuardedJob{}
		gj.Status.LastFence = last
		// An earlier acquisition found the key unusable: this one clears it.
		runcore.SetNotReady(gj, batchv1alpha1.InvalidKeyReason, "the key cannot be used", now.Add(-time.Minute))
		gj.Status.Active = []batchv1alpha1.ActiveRun{{JobName: "settle-1", Key: "team:settle", Holder: "cluster-a/team/settle-1", Phase: batchv1alpha1.RunPhaseAcquiring}}
		run := &gj.Status.Active[0]
		runcore.RecordAcquired(gj, run, 7, now)
		g.Expect(run.Phase).To(Equal(batchv1alpha1.RunPhaseRunning))
		g.Expect(run.Fence).To(Equal(int64(7)))
		g.Expect(run.AcquiredAt.Time).To(Equal(now))
		g.Expect(gj.Status.LastFence).To(Equal(max(last, 7)), "status.lastFence only rises")
		g.Expect(*gj.Status.Lock).To(Equal(batchv1alpha1.LockStatus{State: batchv1alpha1.LockStateHeld, Key: "team:settle", Holder: "cluster-a/team/settle-1", Fence: 7}))
		for _, cond := range []string{batchv1alpha1.StoreReachableCondition, batchv1alpha1.ReadyCondition, batchv1alpha1.LockHeldCondition} {
			c := runcore.FindCondition(gj.Status.Conditions, cond)
			g.Expect(c).NotTo(BeNil(), cond)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), cond)
		}
	}
	run := &batchv1alpha1.ActiveRun{JobName: "settle-1", Fence: 4, Phase: batchv1alpha1.RunPhaseAcquiring}
	runcore.GoUnguarded(run, now)
	g.Expect(run.Phase).To(Equal(batchv1alpha1.RunPhaseRunning))
	g.Expect(run.Unguarded).To(BeTrue())
	g.Expect(run.Fence).To(BeZero(), "no lease, no fence")
	g.Expect(run.AcquiredAt.Time).To(Equal(now))
}
