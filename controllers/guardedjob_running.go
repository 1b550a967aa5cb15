package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/calibration"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// running creates the run's Job if it does not exist yet, and moves the run on
// when its lease is lost or its Job ends.
func (r *GuardedJobReconciler) running(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client) error {
	gj := s.gj
	r.track(gj, run, store, resumed)
	if run.JobUID == "" {
		if uid, ok := r.memory.uid(client.ObjectKeyFromObject(gj), run.JobName); ok {
			run.JobUID = uid // created by an earlier pass that left the record to this one
		}
	} else {
		r.memory.forget(client.ObjectKeyFromObject(gj), run.JobName)
	}

	job := &batchv1.Job{}
	view, err := readRunJob(ctx, r.Client, gj.Namespace, run.JobName, job, runcore.ReadCached)
	if err != nil {
		return err
	}
	for {
		lease, st := r.leaseView(gj, run)
		v := runcore.Running(runcore.RunningView{
			Run: run, Job: view, Lease: lease,
			PastStartDeadline: !s.now.Before(runStartDeadline(gj, run)),
			StopperBehind:     lease.MustStop() && r.Stopper != nil && r.Stopper.behind(),
		})
		if v.Step != "" {
			logStep(ctx, v.Step, "job", run.JobName)
		}
		switch v.Act {
		case runcore.ReadJobLive:
			if view, err = readRunJob(ctx, r.APIReader, gj.Namespace, run.JobName, job, runcore.ReadLive); err != nil {
				return err
			}
			continue
		case runcore.WaitForCache:
			s.requeueAfter(cacheLagRetry) // a recorded Job: the cache catches up
			return nil
		case runcore.ReleaseFinished:
			return r.releaseFinished(ctx, s, run, job, store)
		case runcore.WaitForDeletes:
			s.requeueAfter(stopFirstRetry)
			return nil
		case runcore.StopRun:
			return r.stopFor(s, run, v.Cause, st)
		case runcore.SkipLateRun:
			return r.skipLate(ctx, s, run, store, due.MissedDeadline(run, runStartDeadline(gj, run)))
		case runcore.WaitConfirm:
			s.requeueAfter(confirmRetry)
			return nil
		case runcore.CreateRunJob:
			return r.createRecordedJob(ctx, s, run, store)
		case runcore.AdoptJob:
			return r.adoptJob(ctx, s, run, job)
		}
		break // GoOn
	}
	pods, err := r.jobPods(ctx, job)
	if err != nil {
		return err
	}
	podGatesTried := false
	for {
		v := runcore.WorkingView{Gated: jobbuild.Gated(job), Queued: queuedNow(job), PodStartDue: podStartFrom(job).Add(gj.Spec.Lock.PodStartTimeoutOrDefault()),
			PodsGated: !podGatesTried && len(gatedPods(job, pods)) > 0, Started: podsStarted(job, pods)}
		if run.PodGuard != nil {
			v.GuardStopped = guardStopped(pods)
		}
		act := runcore.Working(v, s.now)
		if act != runcore.StopGuardStopped && act != runcore.OpenStartGate {
			r.noteQueued(s, run, job)
		}
		switch act {
		case runcore.StopGuardStopped:
			return r.beginStop(s, run, batchv1alpha1.RunResultGuardStopped, v.GuardStopped, batchv1alpha1.GuardStoppedReason, batchv1alpha1.LockStateHeld, run.Holder)
		case runcore.OpenStartGate:
			return r.openGate(ctx, s, run, job, store)
		case runcore.HoldQueued: // podStartTimeout waits
			runcore.SetLockHeld(gj, "", "", s.now)
			return nil
		case runcore.OpenSchedulingGates:
			if err := r.openPodGates(ctx, s, run, gatedPods(job, pods), store); err != nil || run.Phase != batchv1alpha1.RunPhaseRunning {
				return err
			}
			podGatesTried = true
			continue
		case runcore.WaitPodStart:
			s.requeueAt(v.PodStartDue)
		case runcore.StopPodStartTimeout:
			return r.beginStop(s, run, batchv1alpha1.RunResultFailed, r.podStartTimeoutMessage(ctx, s, job, pods), batchv1alpha1.PodStartTimeoutReason,
				batchv1alpha1.LockStateHeld, run.Holder)
		}
		break
	}
	r.watchRunLength(s, run, job)
	runcore.SetLockHeld(gj, "", "", s.now)
	return nil
}

// releaseFinished releases the lease of a run whose Job finished, with the
// Job's result (or the pod guard's, when it ended the workload).
func (r *GuardedJobReconciler) releaseFinished(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, job *batchv1.Job, store *lockclient.Client) error {
	finished, _ := jobFinished(job)
	end := runcore.JobEnd{Completed: finished == batchv1.JobComplete}
	if end.AsksGuard() {
		end.Failure = jobFailureMessage(job)
		why, err := r.guardStoppedIn(ctx, run, job)
		if err != nil {
			return err
		}
		end.GuardStopped = why
	}
	runcore.EndFinished(run, end)
	if end.GuardStopped != "" {
		r.event(s.gj, nil, corev1.EventTypeWarning, batchv1alpha1.GuardStoppedReason, "Job %s: %s", run.JobName, end.GuardStopped)
	}
	if d, ok := calibration.JobDuration(job); ok {
		r.recordRunDuration(s, run, d)
	}
	return s.next(run)
}

// stopFor stops a run for what the pass found; st is the keeper's status the
// pass judged.
func (r *GuardedJobReconciler) stopFor(s *scope, run *batchv1alpha1.ActiveRun, cause runcore.Cause, st lockclient.LeaseStatus) error {
	switch cause {
	case runcore.CauseLost:
		holder := leasetoken.HolderOf(st.Holder)
		msg := "lock " + run.Key + " was lost: " + runcore.HeldByOr(holder, "the key is gone")
		return r.beginStop(s, run, batchv1alpha1.RunResultLockLost, msg, batchv1alpha1.LockLostReason, batchv1alpha1.LockStateLost, holder)
	case runcore.CauseStoreSilent:
		return r.beginStop(s, run, batchv1alpha1.RunResultStoreUnavailable,
			fmt.Sprintf("the lock store did not answer renewals for %s; stopped before the lease could expire", (run.TTL.Duration-st.ValidFor).Round(time.Second)),
			batchv1alpha1.StoreUnavailableReason, batchv1alpha1.LockStateStoreDown, "")
	case runcore.CauseMaxHold:
		// The work would have gone on: it took at least maxHold.
		r.recordRunDuration(s, run, run.MaxHold.Duration)
		return r.beginStop(s, run, batchv1alpha1.RunResultMaxHoldExceeded,
			fmt.Sprintf("the run reached lock.maxHold %s", run.MaxHold.Duration), batchv1alpha1.MaxHoldExceededReason, batchv1alpha1.LockStateHeld, run.Holder)
	case runcore.CauseJobDeleted:
		// The Job is gone although its finalizer should have kept it: the
		// run is over once no Pod of it remains.
		return r.beginStop(s, run, batchv1alpha1.RunResultFailed, "the Job "+run.JobName+" was deleted", batchv1alpha1.JobDeletedReason, batchv1alpha1.LockStateHeld, run.Holder)
	case runcore.CauseJobReplaced:
		return r.beginStop(s, run, batchv1alpha1.RunResultFailed, "the Job "+run.JobName+" was replaced by another object of that name", batchv1alpha1.StaleJobReason, batchv1alpha1.LockStateHeld, run.Holder)
	default: // runcore.CauseJobDeleting
		return r.beginStop(s, run, batchv1alpha1.RunResultFailed, "the Job "+run.JobName+" is being deleted", batchv1alpha1.JobDeletedReason, batchv1alpha1.LockStateHeld, run.Holder)
	}
}

// stopFirstRetry is how soon a run whose status write waits for the stop
// controller's deletes looks again.
const stopFirstRetry = time.Second

// podStartTimeoutMessage says why a run stops when no Pod of its Job reached
// Running or finished within lock.podStartTimeout of the Job's creation, or of
// its last resume if a queue held it suspended (podStartFrom): an
// unschedulable Pod, or Pods rejected by admission or quota would otherwise
// hold the lock until maxHold.
func (r *GuardedJobReconciler) podStartTimeoutMessage(ctx context.Context, s *scope, job *batchv1.Job, pods *corev1.PodList) string {
	why := ""
	for i := range pods.Items {
		p := &pods.Items[i]
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
				why = "Pod " + p.Name + " is not scheduled: " + c.Message
			}
		}
	}
	if why == "" {
		why = r.jobCreateFailure(ctx, job)
	}
	if why == "" {
		why = "no Pod was created"
	}
	from := podStartFrom(job)
	since := ""
	if !from.Equal(job.CreationTimestamp.Time) {
		since = " since it was resumed at " + from.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("no Pod of Job %s started within lock.podStartTimeout %s%s: %s", job.Name, s.gj.Spec.Lock.PodStartTimeoutOrDefault(), since, why)
}

// confirmRetry is how soon a run waiting for its lease to be confirmed looks
// again: the keeper renews a resumed lease at once.
const confirmRetry = 250 * time.Millisecond

// leaseConfirmed says whether a run's Job may be created now: its lease was
// confirmed by an acquisition or renewal this process saw succeed, and enough of
// it is left to stop the Pods before it could expire. A FailOpen run started
// without a lease needs none.
func (r *GuardedJobReconciler) leaseConfirmed(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) bool {
	lease, _ := r.leaseView(gj, run)
	return run.Unguarded || lease.Confirmed
}

// createRecordedJob creates the Job of a run whose fence is recorded.
func (r *GuardedJobReconciler) createRecordedJob(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, store *lockclient.Client) error {
	job, warnings := jobbuild.Build(s.gj, run)
	shardLabelOnJob(s.gj, job)
	err := r.createJob(ctx, job)
	answer := runcore.JobCreated
	switch {
	case apierrors.IsAlreadyExists(err):
		answer = runcore.JobNameTaken
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
		answer = runcore.JobRefused
	case err != nil:
		answer = runcore.CreateFailed
	}
	switch runcore.AfterCreate(answer, len(s.gj.Status.Active)) {
	case runcore.LeaveToNextPass:
		return nil
	case runcore.ReleaseRejectedJob:
		msg := "the API server rejected the Job: " + err.Error()
		r.event(s.gj, nil, corev1.EventTypeWarning, batchv1alpha1.JobRejectedReason, "%s", msg)
		runcore.RejectJob(run, msg)
		return s.next(run)
	case runcore.RetryCreate:
		return fmt.Errorf("create job %s: %w", run.JobName, err)
	case runcore.OpenAndRecordLater:
		r.memory.created(client.ObjectKeyFromObject(s.gj), run.JobName, job.UID, false)
		s.recordLater = true
	default: // runcore.OpenAndRecordNow
		run.JobUID = job.UID
	}
	if err := r.openGate(ctx, s, run, job, store); err != nil {
		return err
	}
	observeScheduleSkew(s.now.Sub(runDueTime(s.gj, run)))
	for _, w := range warnings {
		r.event(s.gj, job, corev1.EventTypeWarning, w.Reason, "%s", w.Message)
	}
	if run.Unguarded {
		r.event(s.gj, job, corev1.EventTypeWarning, batchv1alpha1.UnguardedReason, "Created Job %s without a lease (unfenced)", job.Name)
	} else {
		r.event(s.gj, job, corev1.EventTypeNormal, batchv1alpha1.JobCreatedReason, "Created Job %s%s", job.Name, runcore.FenceSuffix(run.Fence))
	}
	runcore.SetLockHeld(s.gj, "", "", s.now)
	return nil
}

// openGate lets the Pods of a run's gated Job start (see jobbuild.Gated): it
// confirms in the store, with a call sent after the Job exists, that the run
// still holds its lease, then unsuspends the Job with a resourceVersion
// precondition. A lease found lost stops the run: its Job is deleted having never
// had a Pod. A store that does not answer keeps the Job gated, and the next pass
// tries again (the self-fence deadline still bounds the run).
func (r *GuardedJobReconciler) openGate(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, job *batchv1.Job, store *lockclient.Client) error {
	if !jobbuild.Gated(job) || !job.DeletionTimestamp.IsZero() {
		return nil
	}
	if m := r.confirmLease(ctx, run, store, runcore.JobGate); m.Next() != runcore.OpenTheGate {
		if m.Next() == runcore.StopLockLost {
			s.recordLater = false
		}
		return r.shut(s, run, m)
	}
	orig := job.DeepCopy()
	job.Spec.Suspend = ptr.To(false)
	delete(job.Annotations, batchv1alpha1.StartGateAnnotation)
	var err error
	if !r.gatesByPatch.Load() {
		err = r.updateJob(ctx, job)
		if apierrors.IsForbidden(err) {
			// A ClusterRole from an earlier version (the image upgraded
			// before the RBAC): it allows the patch.
			r.gatesByPatch.Store(true)
		}
	}
	if r.gatesByPatch.Load() || apierrors.IsInvalid(err) {
		// The patch also when the update was refused as invalid: it names
		// only the gate's fields, where the update sends the whole Job as
		// this version's types know it (a newer API server may know more).
		err = r.patchJob(ctx, job, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	}
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			s.requeueAfter(cacheLagRetry) // the Job changed (or went): look again
			return nil
		}
		return fmt.Errorf("start job %s: %w", job.Name, err)
	}
	return nil
}

// openPodGates lets the Pods of a queue's Job be scheduled (see
// jobbuild.PodGated): it confirms in the store, with a renewal sent after the
// Pods existed, that the run still holds its lease, then removes the lease's
// scheduling gate from each of them (a patch with a resourceVersion
// precondition). A lease found lost stops the run: its Pods were never
// scheduled. A store that does not answer keeps them gated until the next pass.
func (r *GuardedJobReconciler) openPodGates(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, gated []*corev1.Pod, store *lockclient.Client) error {
	if len(gated) == 0 {
		return nil
	}
	if m := r.confirmLease(ctx, run, store, runcore.PodGates); m.Next() != runcore.OpenTheGate {
		return r.shut(s, run, m)
	}
	for _, pod := range gated {
		patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
		pod.Spec.SchedulingGates = slices.DeleteFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
			return g.Name == batchv1alpha1.LeaseSchedulingGate
		})
		if err := r.patchPod(ctx, pod, patch); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				s.requeueAfter(cacheLagRetry)
				continue
			}
			return fmt.Errorf("open the scheduling gate of pod %s: %w", pod.Name, err)
		}
	}
	return nil
}

// adoptJob records the UID of a Job that exists under the run's name but was not
// recorded (a crash between creating it and writing status). A Job whose fence
// differs from the run's is stale: it is stopped, never adopted.
func (r *GuardedJobReconciler) adoptJob(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, job *batchv1.Job) error {
	want, _ := jobbuild.Build(s.gj, run)
	owned := metav1.IsControlledBy(job, s.gj)
	if owned && job.Annotations[batchv1alpha1.FenceAnnotation] == want.Annotations[batchv1alpha1.FenceAnnotation] {
		run.JobUID = job.UID
		return nil
	}
	run.JobUID = job.UID
	msg := fmt.Sprintf("Job %s exists with fence %q, not the run's %q", job.Name, job.Annotations[batchv1alpha1.FenceAnnotation], want.Annotations[batchv1alpha1.FenceAnnotation])
	return r.beginStop(s, run, batchv1alpha1.RunResultFailed, msg, batchv1alpha1.StaleJobReason, batchv1alpha1.LockStateHeld, run.Holder)
}

func jobFailureMessage(job *batchv1.Job) string {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			if c.Message != "" {
				return c.Reason + ": " + c.Message
			}
			return c.Reason
		}
	}
	return ""
}

// confirmLease asks the store whether run still holds its lease, with a renewal
// sent now that what the gate holds back exists (runcore.Opening).
func (r *GuardedJobReconciler) confirmLease(ctx context.Context, run *batchv1alpha1.ActiveRun, store *lockclient.Client, gate runcore.Gate) *runcore.Opening {
	m := runcore.NewOpening(run, gate)
	if m.Next() == runcore.ConfirmLease {
		err := r.renewLease(ctx, store, run)
		var nh *lockclient.NotHeldError
		if errors.As(err, &nh) {
			m.Deliver(runcore.Confirmation{NotHeld: true, Holder: leasetoken.HolderOf(nh.Holder)})
		} else {
			m.Deliver(runcore.Confirmation{Err: err})
		}
	}
	return m
}

// shut keeps a gate shut: the run stops when its lease was lost, and the next
// pass confirms again when the store did not answer.
func (r *GuardedJobReconciler) shut(s *scope, run *batchv1alpha1.ActiveRun, m *runcore.Opening) error {
	if m.Next() == runcore.StopLockLost {
		return r.beginStop(s, run, batchv1alpha1.RunResultLockLost, m.LostMessage(), batchv1alpha1.LockLostReason, batchv1alpha1.LockStateLost, m.Holder())
	}
	s.requeueAfter(confirmRetry)
	return nil
}

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
// to).
func (r *GuardedJobReconciler) noteQueued(s *scope, run *batchv1alpha1.ActiveRun, job *batchv1.Job) {
	if !queuedJob(job) {
		run.QueuedSince = nil
		return
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
}

// queuedNow says whether lock.podStartTimeout must not count now: while a
// queue keeps the Job suspended, and after its queue resumed it until the Job
// controller has seen that (its Suspended condition is still True; it then
// sets the time the timeout counts from).
func queuedNow(job *batchv1.Job) bool {
	if queuedJob(job) {
		return true
	}
	c := jobCondition(job, batchv1.JobSuspended)
	return c != nil && c.Status == corev1.ConditionTrue
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

// The pod guard (lock.podGuard, docs/pod-guard.md) from the manager's side: it
// checks the spec, snapshots the guard into each run at intent time (the Job
// builder adds the sidecar), notices when a guard has stopped its workload, and
// decides whether a guarded run's lease may be released when the run ends.

// warnGuardUser warns, once per spec generation, when the guard's user cannot be
// told from the spec: the guard then runs as its image's user and may not be
// allowed to signal the workload.
func (r *GuardedJobReconciler) warnGuardUser(gj *batchv1alpha1.GuardedJob) {
	pg := gj.Spec.Lock.PodGuard
	if pg == nil || pg.RunAsUser != nil {
		return
	}
	if _, ok := jobbuild.GuardUser(&gj.Spec.JobTemplate.Spec.Template.Spec); ok {
		return
	}
	r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.PodGuardSettingsReason,
		"lock.podGuard: the Pod template does not say which user its containers run as, so the guard runs as its image's user (65532) and can only stop processes of that user; set securityContext.runAsUser in the Pod template, or lock.podGuard.runAsUser")
}

// guardExitChanged is the Pod watch's filter for updates: a guard that has just
// stopped its workload moves its run on.
func guardExitChanged(e event.UpdateEvent) bool {
	oldPod, ok1 := e.ObjectOld.(*corev1.Pod)
	newPod, ok2 := e.ObjectNew.(*corev1.Pod)
	if !ok1 || !ok2 {
		return false
	}
	_, _, was := guardExit(oldPod)
	_, _, is := guardExit(newPod)
	return is && !was
}
