package controllers

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/podguard"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// ownedJobs lists the Jobs controlled by gj.
func (r *GuardedJobReconciler) ownedJobs(ctx context.Context, gj *batchv1alpha1.GuardedJob) ([]batchv1.Job, error) {
	list := &batchv1.JobList{}
	if err := r.List(ctx, list, client.InNamespace(gj.Namespace), client.MatchingFields{jobOwnerKey: gj.Name}); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	out := list.Items[:0]
	for _, j := range list.Items {
		if metav1.IsControlledBy(&j, gj) {
			out = append(out, j)
		}
	}
	return out, nil
}

// podsLeft counts the Pods of a Job that still exist.
func (r *GuardedJobReconciler) podsLeft(ctx context.Context, namespace, jobName string) (int, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{batchv1.JobNameLabel: jobName}); err != nil {
		return 0, fmt.Errorf("list pods of job %s: %w", jobName, err)
	}
	return len(pods.Items), nil
}

// podsLeftUncached counts the Pods of a Job as the API server sees them.
func (r *GuardedJobReconciler) podsLeftUncached(ctx context.Context, namespace, jobName string) (int, error) {
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{batchv1.JobNameLabel: jobName}); err != nil {
		return 0, fmt.Errorf("list pods of job %s: %w", jobName, err)
	}
	return len(pods.Items), nil
}

// getJobConfirmed reads a Job from the cache and, when the cache does not have it,
// from the API server: a Job created moments ago may not have reached the cache,
// and releasing a lease on a cached "not found" would let its Pods run unguarded.
// It returns nil when the Job does not exist.
func (r *GuardedJobReconciler) getJobConfirmed(ctx context.Context, namespace, name string) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	key := client.ObjectKey{Namespace: namespace, Name: name}
	err := r.Get(ctx, key, job)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, job)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get job %s: %w", name, err)
	}
	return job, nil
}

// jobFinished returns Complete or Failed once the Job controller has set it.
// SuccessCriteriaMet and FailureTarget are not enough: Pods may still run.
func jobFinished(job *batchv1.Job) (batchv1.JobConditionType, bool) {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.Type, true
		}
	}
	return "", false
}

// readRunJob reads the Job of a run's name from reader (the cache or the API
// server) into job, and says what it found.
func readRunJob(ctx context.Context, reader client.Reader, namespace, name string, job *batchv1.Job, read runcore.JobRead) (runcore.RunJobView, error) {
	err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, job)
	switch {
	case apierrors.IsNotFound(err):
		return runcore.RunJobView{Read: read}, nil
	case err != nil:
		return runcore.RunJobView{}, fmt.Errorf("get job %s: %w", name, err)
	}
	return jobView(job, read), nil
}

// jobView is what the core is told of a Job read from read (nil: none).
func jobView(job *batchv1.Job, read runcore.JobRead) runcore.RunJobView {
	if job == nil {
		return runcore.RunJobView{Read: read}
	}
	finished, _ := jobFinished(job)
	return runcore.RunJobView{Read: read, Exists: true, UID: job.UID, Finished: finished,
		Deleting: !job.DeletionTimestamp.IsZero(), Gated: jobbuild.Gated(job), PodsFailed: job.Status.Failed > 0}
}

// tracks says whether the keeper renews the lease of token.
func (r *GuardedJobReconciler) tracks(token string) bool {
	_, ok := r.Keeper.Get(token)
	return ok
}

// keptLease is what the keeper reports of a lease, as the core reads it.
func (r *GuardedJobReconciler) keptLease(token string) runcore.LeaseView {
	return leaseViewOf(r.Keeper.Get(token))
}

// leaseViewOf is the core's view of a keeper report (ok: the keeper tracks the
// lease), without the confirmation a gate needs (leaseView adds it).
func leaseViewOf(st lockclient.LeaseStatus, ok bool) runcore.LeaseView {
	if !ok {
		return runcore.LeaseView{}
	}
	return runcore.LeaseView{Tracked: true, Lost: st.State == lockclient.StateLost, DeadlineReached: st.DeadlineReached, MaxHoldReached: st.MaxHoldReached}
}

// leaseView is what the keeper reports of a run's lease, and the keeper's
// status it was read from (the zero status when the keeper does not track it).
func (r *GuardedJobReconciler) leaseView(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) (runcore.LeaseView, lockclient.LeaseStatus) {
	st, ok := r.Keeper.Get(run.Token)
	v := leaseViewOf(st, ok)
	v.Confirmed = ok && runcore.LeaseConfirmed(st.Confirmed, st.State == lockclient.StateHeld, st.ValidFor, gj.Spec.PodGracePeriod())
	return v, st
}

// podsStarted says whether a Pod of the Job started (Running, Succeeded or
// Failed), or the Job shows a result or a ready Pod.
func podsStarted(job *batchv1.Job, pods *corev1.PodList) bool {
	if job.Status.Succeeded > 0 || job.Status.Failed > 0 || job.Status.Ready != nil && *job.Status.Ready > 0 {
		return true
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Status.Phase != corev1.PodPending && p.Status.Phase != "" {
			return true
		}
	}
	return false
}

// jobCreateFailure returns the message of the Job controller's latest
// FailedCreate event for the Job (admission or quota refused its Pods), or "".
func (r *GuardedJobReconciler) jobCreateFailure(ctx context.Context, job *batchv1.Job) string {
	events := &corev1.EventList{}
	if err := r.APIReader.List(ctx, events, client.InNamespace(job.Namespace),
		client.MatchingFields{"involvedObject.name": job.Name, "reason": "FailedCreate"}); err != nil {
		return ""
	}
	var latest *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if latest == nil || e.LastTimestamp.After(latest.LastTimestamp.Time) {
			latest = e
		}
	}
	if latest == nil {
		return ""
	}
	return "the Job controller could not create its Pods: " + latest.Message
}

// gatedPods returns the Pods of a Job that wait at the lease's scheduling gate.
func gatedPods(job *batchv1.Job, pods *corev1.PodList) []*corev1.Pod {
	var gated []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; jobbuild.PodGated(p) && p.DeletionTimestamp.IsZero() && metav1.IsControlledBy(p, job) {
			gated = append(gated, p)
		}
	}
	return gated
}

// guardExit says whether a Pod's guard has stopped its workload: the exit code
// and termination message of its guard container, now or before a restart.
func guardExit(pod *corev1.Pod) (code int32, msg string, ok bool) {
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.Name != podguard.ContainerName {
			continue
		}
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t != nil && (t.ExitCode == podguard.ExitLost || t.ExitCode == podguard.ExitDeadline || t.ExitCode == podguard.ExitStopFailed) {
				return t.ExitCode, strings.TrimSpace(t.Message), true
			}
		}
	}
	return 0, "", false
}

// guardStopped returns why the run's pod guard stopped the workload of one of
// its Pods, or "" when no guard has.
func guardStopped(pods *corev1.PodList) string {
	for i := range pods.Items {
		if code, msg, ok := guardExit(&pods.Items[i]); ok {
			if msg == "" {
				msg = fmt.Sprintf("exit code %d", code)
			}
			return fmt.Sprintf("the pod guard of Pod %s stopped its workload: %s", pods.Items[i].Name, msg)
		}
	}
	return ""
}

// guardStoppedIn lists the Pods of a run's Job and returns why its pod guard
// stopped the workload of one of them, or "".
func (r *GuardedJobReconciler) guardStoppedIn(ctx context.Context, run *batchv1alpha1.ActiveRun, job *batchv1.Job) (string, error) {
	if run.PodGuard == nil {
		return "", nil
	}
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return "", fmt.Errorf("list pods of job %s: %w", job.Name, err)
	}
	return guardStopped(pods), nil
}

// getGuardedJob reads a GuardedJob from the cache.
func (r *GuardedJobReconciler) getGuardedJob(ctx context.Context, key client.ObjectKey, gj *batchv1alpha1.GuardedJob) error {
	return r.Get(ctx, key, gj)
}

// getJobLive reads a Job from the API server.
func (r *GuardedJobReconciler) getJobLive(ctx context.Context, key client.ObjectKey, job *batchv1.Job) error {
	return r.APIReader.Get(ctx, key, job)
}

// getSecretLive reads a Secret from the API server (the manager does not cache
// Secrets).
func (r *GuardedJobReconciler) getSecretLive(ctx context.Context, key client.ObjectKey, secret *corev1.Secret) error {
	return r.APIReader.Get(ctx, key, secret)
}

// jobPods lists the Pods of a Job from the cache.
func (r *GuardedJobReconciler) jobPods(ctx context.Context, job *batchv1.Job) (*corev1.PodList, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return nil, fmt.Errorf("list pods of job %s: %w", job.Name, err)
	}
	return pods, nil
}

// inspectKeys reads a run's keys in its store: who holds the lock key, the
// fence counter, a done-marker.
func (r *GuardedJobReconciler) inspectKeys(ctx context.Context, store *lockclient.Client, keys lockclient.Keys) (lockclient.KeyState, error) {
	return store.Inspect(ctx, keys)
}

// heldNow says whether the keeper holds a run's lease confirmed now.
func (r *GuardedJobReconciler) heldNow(token string) bool {
	st, tracked := r.Keeper.Get(token)
	return tracked && st.Confirmed && st.State == lockclient.StateHeld
}

// keptLeases is every lease the keeper renews, as it reports them.
func (r *GuardedJobReconciler) keptLeases() []lockclient.LeaseStatus {
	return r.Keeper.Snapshot()
}

// getJob reads a Job from the cache.
func (r *GuardedJobReconciler) getJob(ctx context.Context, key client.ObjectKey, job *batchv1.Job) error {
	return r.Get(ctx, key, job)
}

// workingUnrecorded says whether a Job of gj works past its gate carrying a run
// no status records and has not finished: with the early gate, its run's only
// record.
func workingUnrecorded(gj *batchv1alpha1.GuardedJob, job *batchv1.Job) bool {
	return waitingOf(gj, job, true).WorksUnrecorded()
}

// waitingOf is what a Job of this GuardedJob shows of whether it waits for
// adoption (runcore.Waiting); early: gates open before the status write.
func waitingOf(gj *batchv1alpha1.GuardedJob, job *batchv1.Job, early bool) runcore.Waiting {
	_, finished := jobFinished(job)
	return runcore.Waiting{
		Controlled: metav1.IsControlledBy(job, gj), Deleting: !job.DeletionTimestamp.IsZero(), Gated: jobbuild.Gated(job),
		Finished: finished, CarriesRun: job.Annotations[batchv1alpha1.RunAnnotation] != "", Recorded: runcore.RunByName(gj, job.Name) != nil,
		Early: early, Finalized: controllerutil.ContainsFinalizer(job, batchv1alpha1.LeaseFinalizer),
	}
}
