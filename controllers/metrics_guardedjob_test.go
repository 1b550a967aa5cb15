package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

func TestBusyRunsInARow(t *testing.T) {
	const (
		ok      = batchv1alpha1.RunResultSucceeded
		busy    = batchv1alpha1.RunResultBusy
		skipped = batchv1alpha1.RunResultSkipped
		failed  = batchv1alpha1.RunResultFailed
	)
	tests := []struct {
		name    string
		results []batchv1alpha1.RunResult
		want    uint64
	}{
		{name: "three Busy runs", results: []batchv1alpha1.RunResult{ok, busy, busy, busy}, want: 3},
		{name: "a run that ran starts over", results: []batchv1alpha1.RunResult{busy, busy, ok, busy}, want: 1},
		{name: "a run that failed had the lock: it starts over", results: []batchv1alpha1.RunResult{busy, busy, failed}, want: 0},
		{name: "a skipped run says nothing about the lock", results: []batchv1alpha1.RunResult{busy, skipped, busy, skipped}, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &guardedJobCollector{runs: map[types.NamespacedName]*objectRuns{}}
			gj := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "settle", UID: "uid-1"}}
			for _, r := range tt.results {
				c.countRun(gj, r)
			}
			e := c.runs[types.NamespacedName{Namespace: "payments", Name: "settle"}]
			NewWithT(t).Expect(e.busyInARow).To(Equal(tt.want))
			NewWithT(t).Expect(e.counts[busy]).To(BeNumerically("<=", len(tt.results)))
		})
	}
	t.Run("a Busy run whose occurrence another cluster then completed ends the streak", func(t *testing.T) {
		c := &guardedJobCollector{runs: map[types.NamespacedName]*objectRuns{}}
		gj := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "settle", UID: "uid-1"}}
		for range 3 {
			c.countRun(gj, busy)
			c.busyRunDoneElsewhere(gj)
		}
		c.countRun(gj, busy)
		e := c.runs[types.NamespacedName{Namespace: "payments", Name: "settle"}]
		NewWithT(t).Expect(e.busyInARow).To(Equal(uint64(1)), "only the last, whose occurrence is not known done yet")
		NewWithT(t).Expect(e.counts[busy]).To(Equal(uint64(4)))
		NewWithT(t).Expect(e.busyDoneElsewhere).To(Equal(uint64(3)))
	})
	t.Run("an object created again under the same name starts from zero", func(t *testing.T) {
		c := &guardedJobCollector{runs: map[types.NamespacedName]*objectRuns{}}
		key := types.NamespacedName{Namespace: "payments", Name: "settle"}
		c.countRun(&batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "settle", UID: "uid-1"}}, busy)
		c.countRun(&batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "settle", UID: "uid-2"}}, busy)
		NewWithT(t).Expect(c.runs[key].counts[busy]).To(Equal(uint64(1)))
		NewWithT(t).Expect(c.runs[key].busyInARow).To(Equal(uint64(1)))
	})
}

// listReader lists a fixed set of GuardedJobs, as the cache would.
type listReader struct{ items []batchv1alpha1.GuardedJob }

func (r listReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("not used")
}

func (r listReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*batchv1alpha1.GuardedJobList).Items = r.items
	return nil
}

func TestPerObjectSeriesAreConsistentAndCountersAppearWithTheirFirstRun(t *testing.T) {
	g := NewWithT(t)
	created := metav1.NewTime(time.Unix(1_700_000_000, 0))
	idle := batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "idle", UID: "u1", CreationTimestamp: created}}
	ran := batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "settle", UID: "u2", CreationTimestamp: created}}
	ran.Status.LastFence = 7
	ran.Status.Lock = &batchv1alpha1.LockStatus{State: batchv1alpha1.LockStateBusy}
	ran.Status.LastOccurrenceDone = &batchv1alpha1.OccurrenceDone{ScheduledTime: created, By: "cluster-b/payments/settle-1-abc", At: metav1.NewTime(time.Unix(1_700_000_090, 0))}
	ran.Status.Buffered = []batchv1alpha1.BufferedRun{{ScheduledTime: created, BufferedAt: created}, {ScheduledTime: created, BufferedAt: created}}
	ran.Status.Backfill = &batchv1alpha1.BackfillStatus{Request: "r", State: batchv1alpha1.BackfillRunning, Remaining: 12}
	c := &guardedJobCollector{runs: map[types.NamespacedName]*objectRuns{}}
	c.use(listReader{items: []batchv1alpha1.GuardedJob{idle, ran}}, nil)
	c.countRun(&ran, batchv1alpha1.RunResultSucceeded)
	c.countRun(&ran, batchv1alpha1.RunResultBusy)
	c.busyRunDoneElsewhere(&ran)
	c.countRun(&ran, batchv1alpha1.RunResultBusy)
	// An object that is gone: its counters go at the next scrape.
	c.countRun(&batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "gone", UID: "u3"}}, batchv1alpha1.RunResultFailed)

	// A pedantic registry checks every series against its description.
	reg := prometheus.NewPedanticRegistry()
	g.Expect(reg.Register(c)).To(Succeed())
	families, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	series := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			series[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	g.Expect(series).To(Equal(map[string]float64{
		"guardedjob_created_time_seconds{name=idle,namespace=payments}":                 1_700_000_000,
		"guardedjob_fence{name=idle,namespace=payments}":                                0,
		"guardedjob_lock_state{name=idle,namespace=payments,state=Held}":                0,
		"guardedjob_lock_state{name=idle,namespace=payments,state=Free}":                0,
		"guardedjob_lock_state{name=idle,namespace=payments,state=Busy}":                0,
		"guardedjob_lock_state{name=idle,namespace=payments,state=Lost}":                0,
		"guardedjob_lock_state{name=idle,namespace=payments,state=StoreDown}":           0,
		"guardedjob_created_time_seconds{name=settle,namespace=payments}":               1_700_000_000,
		"guardedjob_fence{name=settle,namespace=payments}":                              7,
		"guardedjob_lock_state{name=settle,namespace=payments,state=Held}":              0,
		"guardedjob_lock_state{name=settle,namespace=payments,state=Free}":              0,
		"guardedjob_lock_state{name=settle,namespace=payments,state=Busy}":              1,
		"guardedjob_lock_state{name=settle,namespace=payments,state=Lost}":              0,
		"guardedjob_lock_state{name=settle,namespace=payments,state=StoreDown}":         0,
		"guardedjob_object_runs_total{name=settle,namespace=payments,result=Succeeded}": 1,
		"guardedjob_object_runs_total{name=settle,namespace=payments,result=Busy}":      2,
		"guardedjob_busy_runs_in_a_row{name=settle,namespace=payments}":                 1,
		"guardedjob_busy_runs_done_elsewhere_total{name=settle,namespace=payments}":     1,
		"guardedjob_last_occurrence_done_time_seconds{name=settle,namespace=payments}":  1_700_000_090,
		// kube-state-metrics-style: info, suspend and active runs of every object.
		"guardedjob_info{concurrency_policy=Forbid,name=idle,namespace=payments,schedule=,store_ref=,timezone=UTC}":   1,
		"guardedjob_info{concurrency_policy=Forbid,name=settle,namespace=payments,schedule=,store_ref=,timezone=UTC}": 1,
		"guardedjob_spec_suspend{name=idle,namespace=payments}":                                                       0,
		"guardedjob_spec_suspend{name=settle,namespace=payments}":                                                     0,
		"guardedjob_suspended{name=idle,namespace=payments}":                                                          0,
		"guardedjob_suspended{name=settle,namespace=payments}":                                                        0,
		"guardedjob_status_active{name=idle,namespace=payments}":                                                      0,
		"guardedjob_status_active{name=settle,namespace=payments}":                                                    0,
		// Runs waiting behind an active one, and what a running backfill has left.
		"guardedjob_buffered_runs{name=idle,namespace=payments}":        0,
		"guardedjob_buffered_runs{name=settle,namespace=payments}":      2,
		"guardedjob_backfill_remaining{name=settle,namespace=payments}": 12,
	}))
	g.Expect(c.runs).NotTo(HaveKey(types.NamespacedName{Namespace: "payments", Name: "gone"}))
}
