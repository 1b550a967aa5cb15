package runcore_test

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// TestAnUnlockNeverDeletesTheLeaseOfARunThatMayStillWork: what says a lock
// holder may still be working, in the order it is asked: status's active runs,
// the lease ledger (a lease left to expire until it has), the keeper, and last
// the holder's own Job in this cluster.
func TestAnUnlockNeverDeletesTheLeaseOfARunThatMayStillWork(t *testing.T) {
	now := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	holder := "cluster-a/payments/settle-29942040-abcdef"
	gj := func(mut func(st *batchv1alpha1.GuardedJobStatus)) *batchv1alpha1.GuardedJob {
		g := &batchv1alpha1.GuardedJob{}
		if mut != nil {
			mut(&g.Status)
		}
		return g
	}
	left := func(by time.Time) func(st *batchv1alpha1.GuardedJobStatus) {
		return func(st *batchv1alpha1.GuardedJobStatus) {
			st.Leases = []batchv1alpha1.LeaseRecord{{Holder: holder, State: batchv1alpha1.LeaseLeftToExpire, ExpiresBy: &metav1.Time{Time: by}}}
		}
	}
	job := &runcore.HolderJob{Namespace: "payments", Name: "settle-29942040-abcdef"}
	for _, c := range []struct {
		name       string
		gj         *batchv1alpha1.GuardedJob
		holder     string
		renewedFor string
		why        string
		job        *runcore.HolderJob
	}{
		{"an active run", gj(func(st *batchv1alpha1.GuardedJobStatus) {
			st.Active = []batchv1alpha1.ActiveRun{{JobName: "settle-29942040-abcdef", Holder: holder}}
		}), holder, "", "the active run settle-29942040-abcdef of this GuardedJob; delete its Job to stop the run (its lease is released once its Pods are gone)", nil},
		{"an active run, renewed here: the run says it", gj(func(st *batchv1alpha1.GuardedJobStatus) {
			st.Active = []batchv1alpha1.ActiveRun{{JobName: "settle-29942040-abcdef", Holder: holder}}
		}), holder, "payments/settle/settle-29942040-abcdef", "the active run settle-29942040-abcdef of this GuardedJob; delete its Job to stop the run (its lease is released once its Pods are gone)", nil},
		{"live in the ledger", gj(func(st *batchv1alpha1.GuardedJobStatus) {
			st.Leases = []batchv1alpha1.LeaseRecord{{Holder: holder, State: batchv1alpha1.LeaseLive}}
		}), holder, "", "the lease of this GuardedJob's active run settle-29942040-abcdef", nil},
		{"released in the ledger: its Job decides", gj(func(st *batchv1alpha1.GuardedJobStatus) {
			st.Leases = []batchv1alpha1.LeaseRecord{{Holder: holder, State: batchv1alpha1.LeaseReleased}}
		}), holder, "", "", job},
		{"left to expire, not yet expired", gj(left(now.Add(time.Minute))), holder, "",
			"the lease of this GuardedJob's run settle-29942040-abcdef, which ended and left it to expire on purpose (a Pod of it may still run where the API server does not show it, and its pod guard stops it first); it expires by 2026-12-07T03:01:00Z", nil},
		{"left to expire, expired: its Job decides", gj(left(now.Add(-time.Minute))), holder, "", "", job},
		{"renewed here", gj(nil), holder, "payments/settle/settle-29942040-abcdef", "a run whose lease this manager renews (payments/settle/settle-29942040-abcdef)", nil},
		{"a run of this cluster: its Job decides", gj(nil), holder, "", "", job},
		{"a run of another cluster", gj(nil), "cluster-b/payments/settle-29942040-abcdef", "", "", nil},
		{"a foreign holder", gj(nil), "billing-service", "", "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			why, job := runcore.LiveHolder(c.gj, c.holder, c.renewedFor, "cluster-a", now)
			g.Expect(why).To(Equal(c.why))
			g.Expect(job).To(Equal(c.job))
		})
	}
	t.Run("the holder's Job", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(runcore.LiveHolderJob(*job, true, false, nil)).To(Equal("a run of this cluster whose Job payments/settle-29942040-abcdef has not finished; delete that Job, or wait for it"))
		g.Expect(runcore.LiveHolderJob(*job, true, true, nil)).To(BeEmpty(), "finished")
		g.Expect(runcore.LiveHolderJob(*job, false, false, nil)).To(BeEmpty(), "gone")
		g.Expect(runcore.LiveHolderJob(*job, false, false, errors.New("timeout"))).To(Equal("a run of this cluster, and whether its Job still runs could not be read: timeout"))
	})
}

// TestAnUnlockDeletesOnlyAKeyItNamesFreshWithTheHolderSeen: which key an unlock
// deletes, or why it is refused before the store is asked, in the order the
// checks run; then what the store's answer records.
func TestAnUnlockDeletesOnlyAKeyItNamesFreshWithTheHolderSeen(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	one := []runcore.UnlockKeys{{Lock: "team:settle", Occurrence: "team:settle:done:1"}}
	two := append([]runcore.UnlockKeys{{Lock: "team:payout", Occurrence: "team:payout:done:1"}}, one...)
	ask := func(key, holder string, at time.Time) runcore.UnlockAsk {
		return runcore.UnlockAsk{Key: key, Holder: holder, At: at, KeyField: "spec.key", HolderField: "spec.holder"}
	}
	for _, c := range []struct {
		name      string
		ask       runcore.UnlockAsk
		targets   []runcore.UnlockKeys
		targetErr error
		want      runcore.UnlockChoice
		refused   string // a part of the refusal
	}{
		{name: "a request that does not parse", ask: runcore.UnlockAsk{Bad: errors.New("not a time"), Holder: "h", At: now}, targets: one, refused: "not a time"},
		{name: "a stale request, before the holder is asked for", ask: ask("team:settle", "", now.Add(-batchv1alpha1.UnlockRequestWindow-time.Second)), targets: one, refused: "only when it is fresh"},
		{name: "a request from the future", ask: ask("team:settle", "h", now.Add(batchv1alpha1.UnlockRequestWindow+time.Second)), targets: one, refused: "only when it is fresh"},
		{name: "no holder named", ask: ask("team:settle", "", now), targets: one, refused: "spec.holder is not set"},
		{name: "the keys are not known", ask: ask("team:settle", "h", now), targetErr: errors.New("the spec is invalid"), refused: "the spec is invalid"},
		{name: "no key named, one lock key", ask: ask("", "h", now), targets: one, want: runcore.UnlockChoice{Key: "team:settle", What: "lock"}},
		{name: "no key named, two lock keys", ask: ask("", "h", now), targets: two, refused: "spec.key is not set and this GuardedJob has 2 lock keys (team:payout, team:settle)"},
		{name: "a lock key", ask: ask("team:settle", "h", now.Add(-time.Minute)), targets: two, want: runcore.UnlockChoice{Index: 1, Key: "team:settle", What: "lock"}},
		{name: "a current done-marker", ask: ask("team:settle:done:1", "h", now), targets: two, want: runcore.UnlockChoice{Index: 1, Key: "team:settle:done:1", What: "done-marker"}},
		{name: "any other key", ask: ask("team:other", "h", now), targets: two, refused: `"team:other" is neither a lock key nor the current done-marker`},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			got, refused := runcore.UnlockTarget(c.ask, c.targets, c.targetErr, now)
			if c.refused != "" {
				g.Expect(refused).To(ContainSubstring(c.refused))
				return
			}
			g.Expect(refused).To(BeEmpty())
			g.Expect(got).To(Equal(c.want))
		})
	}

	lock := runcore.UnlockChoice{Key: "team:settle", What: "lock"}
	marker := runcore.UnlockChoice{Key: "team:settle:done:1", What: "done-marker"}
	g.Expect(lock.ChecksHolder()).To(BeTrue(), "a lock's holder may still be working")
	g.Expect(marker.ChecksHolder()).To(BeFalse(), "a done-marker's holder completed")
	g.Expect(lock.HolderRefusal("h", "the active run j")).To(Equal("lock team:settle is held by h: the active run j"))

	holder := "cluster-a/payments/settle-29942040-abcdef"
	for _, c := range []struct {
		name    string
		choice  runcore.UnlockChoice
		answer  runcore.UnlockAnswer
		result  batchv1alpha1.UnlockResult
		message string
		found   string
		refused string
	}{
		{name: "deleted", choice: marker, answer: runcore.UnlockAnswer{Deleted: true}, result: batchv1alpha1.UnlockDeleted, message: "deleted done-marker team:settle:done:1 held by " + holder},
		{name: "a lease with time to live of its own", choice: lock, answer: runcore.UnlockAnswer{LiveLease: true, LiveFor: 1499 * time.Millisecond, Err: errors.New("live")}, refused: "expires by itself in 1s"},
		{name: "the key is gone", choice: lock, answer: runcore.UnlockAnswer{NotHeld: true}, result: batchv1alpha1.UnlockAbsent, message: "lock team:settle does not exist: nothing to delete"},
		{name: "the key changed hands", choice: lock, answer: runcore.UnlockAnswer{NotHeld: true, Found: "cluster-b/payments/settle-29942041-fedcba#0123"}, result: batchv1alpha1.UnlockChanged,
			message: "lock team:settle is held by cluster-b/payments/settle-29942041-fedcba now, not by " + holder + ": nothing deleted", found: "cluster-b/payments/settle-29942041-fedcba"},
		{name: "the store did not answer", choice: lock, answer: runcore.UnlockAnswer{StoreDown: true, Err: errors.New("dial tcp: refused")}, result: batchv1alpha1.UnlockStoreUnavailable,
			message: "the store did not answer: dial tcp: refused; nothing is known to be deleted, ask again"},
		{name: "any other failure", choice: lock, answer: runcore.UnlockAnswer{Err: errors.New("NOSCRIPT")}, refused: "NOSCRIPT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			result, message, found, refused := c.choice.Unlocked(holder, c.answer)
			if c.refused != "" {
				g.Expect(refused).To(ContainSubstring(c.refused))
				g.Expect(result).To(BeEmpty())
				return
			}
			g.Expect(refused).To(BeEmpty())
			g.Expect([]string{string(result), message, found}).To(Equal([]string{string(c.result), c.message, c.found}))
		})
	}
}
