// Package calibration holds the run-duration rules of lease calibration:
// status.runDurations keeps the durations of the last runs so that users size
// lock.maxHold (and lock.ttl) from data. The rules are in docs/operations.md
// ("Lease calibration"); the decisions are the pure functions here, the
// controller only records samples and emits the events they call for.
package calibration

import (
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// nearestRank returns the p-th percentile (1..100) of sorted, by the nearest-rank
// method: the smallest sample with at least p% of the samples at or below it. It
// never interpolates, so the answer is always a duration some run really took.
func nearestRank(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p*n/100)
	return sorted[max(rank, 1)-1]
}

// WithDuration returns rd with d appended (rounded to whole seconds, the Job API's
// resolution), keeping the last RunDurationsKept, and its percentiles recomputed.
func WithDuration(rd *batchv1alpha1.RunDurations, d time.Duration) *batchv1alpha1.RunDurations {
	var recent []metav1.Duration
	if rd != nil {
		recent = append(recent, rd.Recent...)
	}
	recent = append(recent, metav1.Duration{Duration: max(d, 0).Round(time.Second)})
	if len(recent) > batchv1alpha1.RunDurationsKept {
		recent = recent[len(recent)-batchv1alpha1.RunDurationsKept:]
	}
	sorted := make([]time.Duration, len(recent))
	for i, r := range recent {
		sorted[i] = r.Duration
	}
	slices.Sort(sorted)
	return &batchv1alpha1.RunDurations{
		Count:  int32(len(recent)), // at most RunDurationsKept
		P50:    &metav1.Duration{Duration: nearestRank(sorted, 50)},
		P99:    &metav1.Duration{Duration: nearestRank(sorted, 99)},
		Recent: recent,
	}
}

// MaxHoldAtRisk says whether the recent runs come close to lock.maxHold: their p99
// exceeds MaxHoldAtRiskPercent of it. One sample is enough: a single run that took
// 90% of maxHold is already a risk worth knowing about.
func MaxHoldAtRisk(rd *batchv1alpha1.RunDurations, maxHold time.Duration) bool {
	if rd == nil || rd.Count == 0 || rd.P99 == nil || maxHold <= 0 {
		return false
	}
	return rd.P99.Duration*100 > maxHold*batchv1alpha1.MaxHoldAtRiskPercent
}

// UnusuallyLongAfter returns how long a run may last before it is unusually long
// (UnusuallyLongFactor times the p99), or false while too few durations are
// recorded (MinDurationsForUnusual) to say what is usual.
func UnusuallyLongAfter(rd *batchv1alpha1.RunDurations) (time.Duration, bool) {
	if rd == nil || rd.Count < batchv1alpha1.MinDurationsForUnusual || rd.P99 == nil {
		return 0, false
	}
	// A p99 of 0s (runs under half a second) would call every run long.
	return max(rd.P99.Duration, time.Second) * batchv1alpha1.UnusuallyLongFactor, true
}

// JobDuration is how long a finished Job ran: from its status.startTime (or its
// creation) to its completionTime, or to when its Failed condition was set. Both
// ends come from the Job controller's clock, so the manager's clock does not
// matter. ok is false when the Job has no end recorded.
func JobDuration(job *batchv1.Job) (time.Duration, bool) {
	start := job.CreationTimestamp.Time
	if job.Status.StartTime != nil {
		start = job.Status.StartTime.Time
	}
	var end time.Time
	if job.Status.CompletionTime != nil {
		end = job.Status.CompletionTime.Time
	}
	for _, c := range job.Status.Conditions {
		if end.IsZero() && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			end = c.LastTransitionTime.Time
		}
	}
	if end.IsZero() || start.IsZero() {
		return 0, false
	}
	return max(end.Sub(start), 0), true
}
