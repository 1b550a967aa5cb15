package runcore_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// TestTheKeeperRenewsOnTheTermsTheRunRecords: a FailClosed run self-fences, a
// FailOpen one writes an absent key back; a lease resumed from status starts
// from its recorded acquisition less the skew allowance, one this process
// acquired from its own send time, an unguarded run from none; maxHold bounds
// the run and its Pods' life.
func TestTheKeeperRenewsOnTheTermsTheRunRecords(t *testing.T) {
	acquired := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
	grace, skew := 30*time.Second, 2*time.Second
	run := func(policy batchv1alpha1.StoreFailurePolicy, maxHold time.Duration, unguarded bool) *batchv1alpha1.ActiveRun {
		return &batchv1alpha1.ActiveRun{StoreFailurePolicy: policy, AcquiredAt: &metav1.Time{Time: acquired},
			MaxHold: metav1.Duration{Duration: maxHold}, Unguarded: unguarded}
	}
	budget := leasetiming.StopBudget(grace)
	for _, c := range []struct {
		name    string
		run     *batchv1alpha1.ActiveRun
		resumed bool
		want    runcore.KeepTerms
	}{
		{"acquired here, FailClosed", run(batchv1alpha1.FailClosed, 0, false), false,
			runcore.KeepTerms{SelfFence: true, StopBudget: budget}},
		{"resumed, FailClosed", run(batchv1alpha1.FailClosed, 0, false), true,
			runcore.KeepTerms{SelfFence: true, StopBudget: budget, LastRenewed: acquired.Add(-skew)}},
		{"resumed, FailOpen", run(batchv1alpha1.FailOpen, 0, false), true,
			runcore.KeepTerms{ReacquireIfAbsent: true, StopBudget: budget, LastRenewed: acquired.Add(-skew)}},
		{"resumed, started without a lease", run(batchv1alpha1.FailOpen, 0, true), true,
			runcore.KeepTerms{ReacquireIfAbsent: true, StopBudget: budget}},
		{"acquired here, maxHold", run(batchv1alpha1.FailClosed, time.Hour, false), false,
			runcore.KeepTerms{SelfFence: true, StopBudget: budget,
				MaxHoldUntil: acquired.Add(time.Hour), MaxPodLife: time.Hour + grace + leasetiming.StopMargin}},
		{"resumed, no acquisition recorded", &batchv1alpha1.ActiveRun{StoreFailurePolicy: batchv1alpha1.FailClosed, MaxHold: metav1.Duration{Duration: time.Hour}}, true,
			runcore.KeepTerms{SelfFence: true, StopBudget: budget}},
		{"resumed, maxHold", run(batchv1alpha1.FailClosed, time.Hour, false), true,
			runcore.KeepTerms{SelfFence: true, StopBudget: budget, LastRenewed: acquired.Add(-skew),
				MaxHoldUntil: acquired.Add(time.Hour), MaxPodLife: time.Hour + grace + leasetiming.StopMargin}},
	} {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(runcore.KeepTermsOf(c.run, grace, c.resumed, skew)).To(Equal(c.want))
		})
	}
}
