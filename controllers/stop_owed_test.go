package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
)

// The GuardedJob reconciler holds back status writes while the stop controller
// owes deletes, but a stop path that cannot delete must not hide why runs stop
// for longer than owedLimit.
func TestOwedStopsHoldBackStatusWritesForAtMostOwedLimit(t *testing.T) {
	g := NewWithT(t)
	r := &StopReconciler{}
	g.Expect(r.behind()).To(BeFalse(), "nothing owed")

	r.owe("ns", "job-a")
	g.Expect(r.behind()).To(BeTrue(), "a stop just asked for")
	r.settle(types.NamespacedName{Namespace: "ns", Name: "job-a"})
	g.Expect(r.behind()).To(BeFalse(), "its deletes were issued")

	r.owe("ns", "job-b")
	r.owedMu.Lock()
	r.owed[types.NamespacedName{Namespace: "ns", Name: "job-b"}] = time.Now().Add(-owedLimit - time.Second)
	r.owedMu.Unlock()
	g.Expect(r.behind()).To(BeFalse(), "a stop owed longer than owedLimit no longer holds anything back")
	g.Expect(r.owed).To(BeEmpty(), "and is forgotten")
}
