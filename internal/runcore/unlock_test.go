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
