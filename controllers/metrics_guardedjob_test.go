package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
	t.Run("an object created again under the same name starts from zero", func(t *testing.T) {
		c := &guardedJobCollector{runs: map[types.NamespacedName]*objectRuns{}}
		key := types.NamespacedName{Namespace: "payments", Name: "settle"}
		c.countRun(&batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "settle", UID: "uid-1"}}, busy)
		c.countRun(&batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "settle", UID: "uid-2"}}, busy)
		NewWithT(t).Expect(c.runs[key].counts[busy]).To(Equal(uint64(1)))
		NewWithT(t).Expect(c.runs[key].busyInARow).To(Equal(uint64(1)))
	})
}
