package controllers

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
	"github.com/guardedjob/guardedjob/internal/podguard"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/specerror"
	"github.com/guardedjob/guardedjob/internal/storeconfig"
)

// The pod guard (lock.podGuard, docs/pod-guard.md) from the manager's side: it
// checks the spec, snapshots the guard into each run at intent time (the Job
// builder adds the sidecar), notices when a guard has stopped its workload, and
// decides whether a guarded run's lease may be released when the run ends.

// compilePodGuard checks lock.podGuard and returns the guard a run would get now,
// or nil when the object has none. Errors are *specerror.Error.
func (r *GuardedJobReconciler) compilePodGuard(ctx context.Context, gj *batchv1alpha1.GuardedJob) (*batchv1alpha1.RunPodGuard, error) {
	pg := gj.Spec.Lock.PodGuard
	if pg == nil {
		return nil, nil
	}
	if r.GuardImage == "" {
		return nil, specerror.Errorf(batchv1alpha1.PodGuardUnavailableReason,
			"lock.podGuard is set, but this manager does not know the guard's image: run it with --guard-image (or GUARDEDJOB_GUARD_IMAGE), or in a Pod with POD_NAME and POD_NAMESPACE set, where it uses its own image")
	}
	name := pg.SecretRef.Name
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return nil, specerror.Errorf(batchv1alpha1.StoreSecretInvalidReason,
			"lock.podGuard.secretRef.name must name a Secret in namespace %s: %s", gj.Namespace, strings.Join(msgs, "; "))
	}
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: gj.Namespace, Name: name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, specerror.Errorf(batchv1alpha1.StoreSecretNotFoundReason,
				"lock.podGuard.secretRef: Secret %s/%s was not found; create it with the guard's read-only store credentials (key \"url\"; docs/security.md, Pod guard credentials)", gj.Namespace, name)
		}
		return nil, fmt.Errorf("read pod guard Secret %s: %w", name, err)
	}
	if _, err := storeconfig.FromSecret(fmt.Sprintf("lock.podGuard.secretRef: Secret %s/%s", gj.Namespace, name), secret.Data); err != nil {
		return nil, specerror.Errorf(batchv1alpha1.PodGuardUnavailableReason, "%v", err)
	}
	margin := pg.MarginOrDefault()
	interval, err := podguard.ReadInterval(gj.Spec.Lock.TTLOrDefault(), gj.Spec.Lock.RenewIntervalOrDefault(), gj.Spec.PodGracePeriod(), margin)
	if err != nil {
		return nil, specerror.Errorf(batchv1alpha1.UnsafeLeaseTimingReason, "lock.podGuard: %v", err)
	}
	uid := pg.RunAsUser
	if uid == nil {
		uid, _ = jobbuild.GuardUser(&gj.Spec.JobTemplate.Spec.Template.Spec)
	}
	return &batchv1alpha1.RunPodGuard{
		Image: r.GuardImage, SecretName: name,
		Interval: metav1.Duration{Duration: interval}, Margin: metav1.Duration{Duration: margin},
		RunAsUser: uid,
	}, nil
}

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

// guardStopped returns why the run's pod guard stopped the workload of one of its
// Pods, or "" when no guard has.
func (r *GuardedJobReconciler) guardStopped(ctx context.Context, run *batchv1alpha1.ActiveRun, job *batchv1.Job) (string, error) {
	if run.PodGuard == nil {
		return "", nil
	}
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return "", fmt.Errorf("list pods of job %s: %w", job.Name, err)
	}
	for i := range pods.Items {
		if code, msg, ok := guardExit(&pods.Items[i]); ok {
			if msg == "" {
				msg = fmt.Sprintf("exit code %d", code)
			}
			return fmt.Sprintf("the pod guard of Pod %s stopped its workload: %s", pods.Items[i].Name, msg), nil
		}
	}
	return "", nil
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

// guardedEndUnclean says whether a guarded run must leave its lease to expire
// instead of releasing it (runcore.LeaveToExpire), reading the Job of its name
// from the cache and, when the cache does not show it, from the API server.
func (r *GuardedJobReconciler) guardedEndUnclean(ctx context.Context, namespace string, run *batchv1alpha1.ActiveRun) (bool, error) {
	var view runcore.RunJobView
	if run.PodGuard != nil { // nothing to read for a run without a pod guard
		job, err := r.getJobConfirmed(ctx, namespace, run.JobName)
		if err != nil {
			return false, err
		}
		view = jobView(job, runcore.ReadLive) // a miss is the API server's (getJobConfirmed)
	}
	return runcore.LeaveToExpire(run, view), nil
}
