package controllers

import (
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// Queued Jobs. A run's lease is taken before its Job exists, so a Job that a
// queue keeps suspended (a template with suspend: true, Kueue) holds the lease,
// renewed, while no Pod runs; lock.maxHold counts from the acquisition as
// always. What changes is lock.podStartTimeout: no Pod can start before the
// queue starts the Job, so it counts from when the Job was last resumed. A Job
// suspended at the manager's own start gate (jobbuild.Gated) waits for the
// manager, not for a queue, and is never reported queued.

// kueueQueueLabel names a Job's Kueue LocalQueue; shown in the JobQueued event.
const kueueQueueLabel = "kueue.x-k8s.io/queue-name"

// queuedJob says whether a Job waits for a queue to start it: suspended, and
// not at the manager's start gate.
func queuedJob(job *batchv1.Job) bool {
	return ptr.Deref(job.Spec.Suspend, false) && !jobbuild.Gated(job)
}

// jobCondition returns a Job's condition of type typ, or nil.
func jobCondition(job *batchv1.Job, typ batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		if job.Status.Conditions[i].Type == typ {
			return &job.Status.Conditions[i]
		}
	}
	return nil
}

// podStartFrom is when lock.podStartTimeout starts counting for a Job: its
// creation or, for a Job that was suspended and resumed since, when the Job
// controller resumed it (its Suspended condition turned False, and it set
// status.startTime anew), whichever is later.
func podStartFrom(job *batchv1.Job) time.Time {
	from := job.CreationTimestamp.Time
	if c := jobCondition(job, batchv1.JobSuspended); c != nil && c.Status == corev1.ConditionFalse {
		if c.LastTransitionTime.After(from) {
			from = c.LastTransitionTime.Time
		}
		if st := job.Status.StartTime; st != nil && st.After(from) {
			from = st.Time
		}
	}
	return from
}

// noteQueued records whether a running run's Job waits in a queue
// (status.active[].queuedSince, and the Normal event JobQueued when it starts
// to), and says whether lock.podStartTimeout must not count now: while the Job
// is queued, and after its queue resumed it until the Job controller has seen
// that (its Suspended condition is still True; it then sets the time the
// timeout counts from).
func (r *GuardedJobReconciler) noteQueued(s *scope, run *batchv1alpha1.ActiveRun, job *batchv1.Job) bool {
	if !queuedJob(job) {
		run.QueuedSince = nil
		c := jobCondition(job, batchv1.JobSuspended)
		return c != nil && c.Status == corev1.ConditionTrue
	}
	if run.QueuedSince == nil {
		run.QueuedSince = runcore.PtrTime(s.now)
		queue := ""
		if q := job.Labels[kueueQueueLabel]; q != "" {
			queue = " " + q
		}
		r.event(s.gj, job, corev1.EventTypeNormal, batchv1alpha1.JobQueuedReason,
			"Job %s is suspended, waiting for its queue%s to start it: the run holds its lease %s meanwhile; lock.maxHold %s counts from the lease's acquisition, lock.podStartTimeout from when the queue starts the Job",
			job.Name, queue, run.Key, run.MaxHold.Duration)
	}
	return true
}

// setQueued derives the Queued condition from the active runs: True while the
// Job of a running run waits in a queue, False once none does (absent on a
// GuardedJob whose Jobs were never queued).
func setQueued(gj *batchv1alpha1.GuardedJob, now time.Time) {
	var jobs []string
	var since *metav1.Time
	for i := range gj.Status.Active {
		run := &gj.Status.Active[i]
		if run.Phase != batchv1alpha1.RunPhaseRunning || run.QueuedSince == nil {
			continue
		}
		jobs = append(jobs, run.JobName)
		if since == nil || run.QueuedSince.Before(since) {
			since = run.QueuedSince
		}
	}
	if len(jobs) == 0 {
		if c := runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.QueuedCondition); c != nil && c.Status == metav1.ConditionTrue {
			runcore.SetCondition(gj, batchv1alpha1.QueuedCondition, metav1.ConditionFalse, batchv1alpha1.NotQueuedReason, "no run's Job waits in a queue", now)
		}
		return
	}
	msg := fmt.Sprintf("Job %s is suspended, waiting for its queue to start it (since %s); its run holds the lease meanwhile, and lock.maxHold counts",
		strings.Join(jobs, ", "), since.UTC().Format(time.RFC3339))
	runcore.SetCondition(gj, batchv1alpha1.QueuedCondition, metav1.ConditionTrue, batchv1alpha1.JobQueuedReason, msg, now)
}
