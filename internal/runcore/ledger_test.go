package runcore

import (
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// A lease left to expire is recorded until the latest time its key can hold the
// run's token, as other replicas read it: rounded up to the second status
// keeps, never down, with the clock-skew allowance on top.
func TestALeaseLeftToExpireIsRecordedUntilItsKeyCannotHoldItAnyMore(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 400_000_000, time.UTC)
	run := &batchv1alpha1.ActiveRun{TTL: metav1.Duration{Duration: 30 * time.Second}}
	end := LeftToExpire(run, now, 2*time.Second)
	NewWithT(t).Expect(end).To(Equal(LeaseEnd{State: batchv1alpha1.LeaseLeftToExpire, ExpiresBy: time.Date(2026, 12, 6, 3, 0, 33, 0, time.UTC)}))
}

// The ledger keeps a run's lease Live from its record to its end, then what
// became of it for LedgerRetention after its key stopped holding it, at most
// ledgerMax ended leases (the oldest go first); a lease that never held its key
// leaves no entry. Live leases are never dropped.
func TestTheLedgerKeepsEndedLeasesForTheirRetentionAndLiveOnesAlways(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	gj := &batchv1alpha1.GuardedJob{}
	run := func(i int) *batchv1alpha1.ActiveRun {
		return &batchv1alpha1.ActiveRun{Holder: "cluster-a/team/nightly-" + strconv.Itoa(i), Key: "k", TTL: metav1.Duration{Duration: time.Minute}}
	}

	live := run(0)
	RecordLease(gj, live, t0)
	busy := run(1)
	RecordLease(gj, busy, t0)
	EndLease(gj, busy, NeverHeld, t0)
	g.Expect(LedgerRecord(gj.Status.Leases, busy.Holder)).To(BeNil(), "a lease that never held its key leaves no entry")

	for i := 2; i < 2+ledgerMax+3; i++ {
		r := run(i)
		RecordLease(gj, r, t0)
		EndLease(gj, r, Released, t0.Add(time.Duration(i)*time.Second))
	}
	g.Expect(gj.Status.Leases).To(HaveLen(ledgerMax))
	g.Expect(LedgerRecord(gj.Status.Leases, live.Holder)).To(HaveField("State", batchv1alpha1.LeaseLive))
	g.Expect(LedgerRecord(gj.Status.Leases, run(2).Holder)).To(BeNil(), "the oldest ended leases go first")
	g.Expect(LedgerSays(gj, run(36).Holder, t0)).To(ContainSubstring("released at"))

	left := run(99)
	RecordLease(gj, left, t0)
	EndLease(gj, left, LeftToExpire(left, t0, 0), t0)
	g.Expect(LedgerSays(gj, left.Holder, t0)).To(ContainSubstring("left it to expire on purpose"))

	later := t0.Add(time.Minute + LedgerRetention + time.Second)
	pruneLeases(gj, later)
	g.Expect(gj.Status.Leases).To(HaveLen(1), "past their retention only the live lease stays")
	g.Expect(gj.Status.Leases[0].Holder).To(Equal(live.Holder))
}

// A backfill occurrence that found its key busy waits lock.busyRetry's wait,
// stretched by up to half; the stretch follows the run's token, so the same end
// waits the same, and two clusters' runs do not retry in step.
func TestABackfillRetryWaitIsStretchedByTheRunsOwnToken(t *testing.T) {
	g := NewWithT(t)
	gj := &batchv1alpha1.GuardedJob{}
	seen := map[time.Duration]bool{}
	for i := range 20 {
		tok := "token-" + strconv.Itoa(i)
		w := BackfillRetryWait(gj, 1, tok)
		g.Expect(w).To(And(BeNumerically(">=", 5*time.Second), BeNumerically("<=", 7500*time.Millisecond)))
		g.Expect(BackfillRetryWait(gj, 1, tok)).To(Equal(w))
		seen[w] = true
	}
	g.Expect(len(seen)).To(BeNumerically(">", 10), "different runs wait different times")
}
