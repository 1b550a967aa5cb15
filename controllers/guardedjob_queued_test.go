package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

func TestQueuedJob(t *testing.T) {
	job := func(suspend bool, gate bool) *batchv1.Job {
		j := &batchv1.Job{Spec: batchv1.JobSpec{Suspend: ptr.To(suspend)}}
		if gate {
			j.Annotations = map[string]string{batchv1alpha1.StartGateAnnotation: batchv1alpha1.StartGateLease}
		}
		return j
	}
	tests := []struct {
		name string
		job  *batchv1.Job
		want bool
	}{
		{name: "suspended by its template (the queue starts it)", job: job(true, false), want: true},
		{name: "suspended at the manager's start gate: waiting for the manager, not a queue", job: job(true, true)},
		{name: "running", job: job(false, false)},
		{name: "no suspend field", job: &batchv1.Job{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(queuedJob(tt.job)).To(Equal(tt.want))
		})
	}
}

func TestPodStartFrom(t *testing.T) {
	created := time.Date(2026, 11, 30, 0, 5, 0, 0, time.UTC)
	resumed := created.Add(3 * time.Hour)
	suspended := func(status corev1.ConditionStatus, at time.Time) batchv1.JobCondition {
		return batchv1.JobCondition{Type: batchv1.JobSuspended, Status: status, LastTransitionTime: metav1.NewTime(at)}
	}
	tests := []struct {
		name  string
		conds []batchv1.JobCondition
		start *metav1.Time
		want  time.Time
	}{
		{name: "never suspended: from its creation", start: ptr.To(metav1.NewTime(created.Add(time.Second))), want: created},
		{name: "resumed by its queue: from the resume", conds: []batchv1.JobCondition{suspended(corev1.ConditionFalse, resumed)},
			start: ptr.To(metav1.NewTime(resumed)), want: resumed},
		{name: "resumed, the start time written a second after the condition", conds: []batchv1.JobCondition{suspended(corev1.ConditionFalse, resumed)},
			start: ptr.To(metav1.NewTime(resumed.Add(time.Second))), want: resumed.Add(time.Second)},
		{name: "still suspended: from its creation (queuedNow keeps the timeout from counting)", conds: []batchv1.JobCondition{suspended(corev1.ConditionTrue, created)},
			want: created},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
				Status: batchv1.JobStatus{Conditions: tt.conds, StartTime: tt.start}}
			NewWithT(t).Expect(podStartFrom(job)).To(BeTemporally("==", tt.want))
		})
	}
}

func TestSetQueued(t *testing.T) {
	now := time.Date(2026, 11, 30, 0, 5, 0, 0, time.UTC)
	queued := batchv1alpha1.ActiveRun{JobName: "settle-1-abc", Phase: batchv1alpha1.RunPhaseRunning, QueuedSince: runcore.PtrTime(now.Add(-time.Minute))}
	running := batchv1alpha1.ActiveRun{JobName: "settle-2-def", Phase: batchv1alpha1.RunPhaseRunning}
	stopping := queued
	stopping.Phase = batchv1alpha1.RunPhaseStopping
	tests := []struct {
		name   string
		before metav1.ConditionStatus // "" for no condition
		active []batchv1alpha1.ActiveRun
		want   *metav1.Condition
	}{
		{name: "never queued: no condition", active: []batchv1alpha1.ActiveRun{running}},
		{name: "a run's Job waits in its queue", active: []batchv1alpha1.ActiveRun{running, queued},
			want: &metav1.Condition{Status: metav1.ConditionTrue, Reason: batchv1alpha1.JobQueuedReason}},
		{name: "the queue started it", before: metav1.ConditionTrue, active: []batchv1alpha1.ActiveRun{running},
			want: &metav1.Condition{Status: metav1.ConditionFalse, Reason: batchv1alpha1.NotQueuedReason}},
		{name: "the queued run is being stopped (maxHold)", before: metav1.ConditionTrue, active: []batchv1alpha1.ActiveRun{stopping},
			want: &metav1.Condition{Status: metav1.ConditionFalse, Reason: batchv1alpha1.NotQueuedReason}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			gj := &batchv1alpha1.GuardedJob{}
			if tt.before != "" {
				runcore.SetCondition(gj, batchv1alpha1.QueuedCondition, tt.before, batchv1alpha1.JobQueuedReason, "before", now.Add(-time.Hour))
			}
			gj.Status.Active = tt.active
			setQueued(gj, now)
			c := runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.QueuedCondition)
			if tt.want == nil {
				g.Expect(c).To(BeNil())
				return
			}
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(tt.want.Status))
			g.Expect(c.Reason).To(Equal(tt.want.Reason))
			if c.Status == metav1.ConditionTrue {
				g.Expect(c.Message).To(ContainSubstring("Job settle-1-abc is suspended"))
				g.Expect(c.Message).NotTo(ContainSubstring("settle-2-def"))
			}
		})
	}
}
