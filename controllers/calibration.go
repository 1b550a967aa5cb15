package controllers

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/calibration"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// Lease calibration: the rules are in internal/calibration; the reconciler records
// each finished run's duration and emits the events they call for.

// recordRunDuration adds a finished run's duration to status.runDurations, says so
// with RunUnusuallyLong if the run was unusually long and not yet warned about,
// and updates MaxHoldAtRisk.
func (r *GuardedJobReconciler) recordRunDuration(s *scope, run *batchv1alpha1.ActiveRun, d time.Duration) {
	gj := s.gj
	r.warnUnusuallyLong(s, run, d)
	gj.Status.RunDurations = calibration.WithDuration(gj.Status.RunDurations, d)
	r.setMaxHoldAtRisk(s)
}

// watchRunLength warns, once per run, when a run still going has lasted
// unusually long, and otherwise makes sure the pass looks again when it would.
func (r *GuardedJobReconciler) watchRunLength(s *scope, run *batchv1alpha1.ActiveRun, job *batchv1.Job) {
	if run.UnusuallyLong || job.Status.StartTime == nil {
		return
	}
	limit, ok := calibration.UnusuallyLongAfter(s.gj.Status.RunDurations)
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
	limit, ok := calibration.UnusuallyLongAfter(s.gj.Status.RunDurations)
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
	if c := runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.MaxHoldAtRiskCondition); c != nil {
		wasAtRisk = c.Status == metav1.ConditionTrue
	}
	if !calibration.MaxHoldAtRisk(rd, maxHold) {
		runcore.SetCondition(gj, batchv1alpha1.MaxHoldAtRiskCondition, metav1.ConditionFalse, batchv1alpha1.RunDurationWithinMaxHoldReason,
			fmt.Sprintf("the p99 of the last %d run durations is %s, within %d%% of lock.maxHold %s", rd.Count, rd.P99.Duration, batchv1alpha1.MaxHoldAtRiskPercent, maxHold), s.now)
		return
	}
	msg := fmt.Sprintf("the p99 of the last %d run durations is %s, over %d%% of lock.maxHold %s: a slightly longer run will be stopped at maxHold; raise lock.maxHold or make the runs shorter",
		rd.Count, rd.P99.Duration, batchv1alpha1.MaxHoldAtRiskPercent, maxHold)
	runcore.SetCondition(gj, batchv1alpha1.MaxHoldAtRiskCondition, metav1.ConditionTrue, batchv1alpha1.RunDurationNearMaxHoldReason, msg, s.now)
	if !wasAtRisk {
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.RunDurationNearMaxHoldReason, "%s", msg)
	}
}
