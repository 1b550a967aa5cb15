package controllers

import (
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// Lease calibration: status.runDurations keeps the durations of the last runs so
// that users size lock.maxHold (and lock.ttl) from data. The rules are in
// docs/operations.md ("Lease calibration"); the decisions are the pure functions
// below, the controller only records samples and emits the events they call for.

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

// withDuration returns rd with d appended (rounded to whole seconds, the Job API's
// resolution), keeping the last RunDurationsKept, and its percentiles recomputed.
func withDuration(rd *batchv1alpha1.RunDurations, d time.Duration) *batchv1alpha1.RunDurations {
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

// maxHoldAtRisk says whether the recent runs come close to lock.maxHold: their p99
// exceeds MaxHoldAtRiskPercent of it. One sample is enough: a single run that took
// 90% of maxHold is already a risk worth knowing about.
func maxHoldAtRisk(rd *batchv1alpha1.RunDurations, maxHold time.Duration) bool {
	if rd == nil || rd.Count == 0 || rd.P99 == nil || maxHold <= 0 {
		return false
	}
	return rd.P99.Duration*100 > maxHold*batchv1alpha1.MaxHoldAtRiskPercent
}

// unusuallyLongAfter returns how long a run may last before it is unusually long
// (UnusuallyLongFactor times the p99), or false while too few durations are
// recorded (MinDurationsForUnusual) to say what is usual.
func unusuallyLongAfter(rd *batchv1alpha1.RunDurations) (time.Duration, bool) {
	if rd == nil || rd.Count < batchv1alpha1.MinDurationsForUnusual || rd.P99 == nil {
		return 0, false
	}
	// A p99 of 0s (runs under half a second) would call every run long.
	return max(rd.P99.Duration, time.Second) * batchv1alpha1.UnusuallyLongFactor, true
}

// jobDuration is how long a finished Job ran: from its status.startTime (or its
// creation) to its completionTime, or to when its Failed condition was set. Both
// ends come from the Job controller's clock, so the manager's clock does not
// matter. ok is false when the Job has no end recorded.
func jobDuration(job *batchv1.Job) (time.Duration, bool) {
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

// recordRunDuration adds a finished run's duration to status.runDurations, says so
// with RunUnusuallyLong if the run was unusually long and not yet warned about,
// and updates MaxHoldAtRisk.
func (r *GuardedJobReconciler) recordRunDuration(s *scope, run *batchv1alpha1.ActiveRun, d time.Duration) {
	gj := s.gj
	r.warnUnusuallyLong(s, run, d)
	gj.Status.RunDurations = withDuration(gj.Status.RunDurations, d)
	r.setMaxHoldAtRisk(s)
}

// watchRunLength warns, once per run, when a run still going has lasted
// unusually long, and otherwise makes sure the pass looks again when it would.
func (r *GuardedJobReconciler) watchRunLength(s *scope, run *batchv1alpha1.ActiveRun, job *batchv1.Job) {
	if run.UnusuallyLong || job.Status.StartTime == nil {
		return
	}
	limit, ok := unusuallyLongAfter(s.gj.Status.RunDurations)
	if !ok {
		return
	}
	elapsed := s.now.Sub(job.Status.StartTime.Time)
	if elapsed <= limit {
		s.requeueAt(job.Status.StartTime.Add(limit + time.Second))
		return
	}
	r.warnUnusuallyLong(s, run, elapsed)
}

// warnUnusuallyLong emits RunUnusuallyLong once per run when elapsed is over the
// limit the recorded durations set.
func (r *GuardedJobReconciler) warnUnusuallyLong(s *scope, run *batchv1alpha1.ActiveRun, elapsed time.Duration) {
	limit, ok := unusuallyLongAfter(s.gj.Status.RunDurations)
	if !ok || run.UnusuallyLong || elapsed <= limit {
		return
	}
	run.UnusuallyLong = true
	rd := s.gj.Status.RunDurations
	r.event(s.gj, nil, corev1.EventTypeWarning, batchv1alpha1.RunUnusuallyLongReason,
		"Job %s has run for %s, over %d times the p99 (%s) of the last %d runs; lock.maxHold is %s",
		run.JobName, elapsed.Round(time.Second), batchv1alpha1.UnusuallyLongFactor, rd.P99.Duration, rd.Count, run.MaxHold.Duration)
}

// setMaxHoldAtRisk sets MaxHoldAtRisk from status.runDurations and the current
// lock.maxHold (so raising maxHold clears it at once), with a Warning event when it
// turns True. Without recorded durations the condition is absent.
func (r *GuardedJobReconciler) setMaxHoldAtRisk(s *scope) {
	gj := s.gj
	rd := gj.Status.RunDurations
	if rd == nil || rd.Count == 0 || rd.P99 == nil {
		return
	}
	maxHold := gj.Spec.Lock.MaxHoldOrDefault()
	// The condition as this pass has it: it may have been set earlier in the pass.
	wasAtRisk := false
	if c := findCondition(gj.Status.Conditions, batchv1alpha1.MaxHoldAtRiskCondition); c != nil {
		wasAtRisk = c.Status == metav1.ConditionTrue
	}
	if !maxHoldAtRisk(rd, maxHold) {
		setCondition(gj, batchv1alpha1.MaxHoldAtRiskCondition, metav1.ConditionFalse, batchv1alpha1.RunDurationWithinMaxHoldReason,
			fmt.Sprintf("the p99 of the last %d run durations is %s, within %d%% of lock.maxHold %s", rd.Count, rd.P99.Duration, batchv1alpha1.MaxHoldAtRiskPercent, maxHold), s.now)
		return
	}
	msg := fmt.Sprintf("the p99 of the last %d run durations is %s, over %d%% of lock.maxHold %s: a slightly longer run will be stopped at maxHold; raise lock.maxHold or make the runs shorter",
		rd.Count, rd.P99.Duration, batchv1alpha1.MaxHoldAtRiskPercent, maxHold)
	setCondition(gj, batchv1alpha1.MaxHoldAtRiskCondition, metav1.ConditionTrue, batchv1alpha1.RunDurationNearMaxHoldReason, msg, s.now)
	if !wasAtRisk {
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.RunDurationNearMaxHoldReason, "%s", msg)
	}
}
