// Package jobbuild builds the Job of a GuardedJob's run: the desired Job as a pure
// function of the object and the run (fence, holder, lease finalizer, deadlines,
// failure policy), and its deterministic name.
package jobbuild

import (
	"fmt"
	"maps"
	"math"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// Build returns the Job of an active run, and warnings for the object's events.
// It is pure: the same object and run always give the same Job, so a Job found
// after a crash can be compared with the one that would be created.
//
// The Job carries the lease finalizer (the lease is released before the Job may
// go), a controller reference to the GuardedJob, podReplacementPolicy Failed (a
// replacement Pod never runs beside the Pod it replaces), activeDeadlineSeconds =
// maxHold on the Job and on its Pods (so the Job controller and the kubelet bound
// the run even without this manager), and the fence in every container's env and
// in the annotation batch.guardedjob.dev/fence of the Job and its Pods, with the
// occurrence the run works on (OccurrenceEnv). Declared parameters
// (spec.parameters) get their values as env vars too (addParameters).
//
// A run with a pod guard (run.PodGuard) gets it as a native sidecar (AddPodGuard).
func Build(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) (*batchv1.Job, []Warning) {
	var warnings []Warning
	tmpl := gj.Spec.JobTemplate.DeepCopy()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:        run.JobName,
			Namespace:   gj.Namespace,
			Labels:      maps.Clone(tmpl.Labels),
			Annotations: maps.Clone(tmpl.Annotations),
			Finalizers:  []string{batchv1alpha1.LeaseFinalizer},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         batchv1alpha1.GroupVersion.String(),
				Kind:               "GuardedJob",
				Name:               gj.Name,
				UID:                gj.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: tmpl.Spec,
	}
	pod := &job.Spec.Template

	fenced := run.FencingPolicy != batchv1alpha1.FencingNone
	fenceValue := strconv.FormatInt(run.Fence, 10)
	if run.Unguarded {
		fenceValue = ""
	}
	annotations := map[string]string{
		batchv1alpha1.ScheduledTimeAnnotation: run.ScheduledTime.UTC().Format(time.RFC3339),
		batchv1alpha1.HolderAnnotation:        run.Holder,
	}
	if fenced || run.Unguarded {
		annotations[batchv1alpha1.FenceAnnotation] = fenceValue
		if run.Unguarded {
			annotations[batchv1alpha1.FenceAnnotation] = batchv1alpha1.UnfencedValue
		}
	}
	labels := map[string]string{batchv1alpha1.GuardedJobLabel: gj.Name}
	job.Labels = mergeMaps(job.Labels, labels)
	job.Annotations = mergeMaps(job.Annotations, annotations)
	pod.Labels = mergeMaps(pod.Labels, labels)
	pod.Annotations = mergeMaps(pod.Annotations, annotations)
	// Before the fence and the occurrence: a parameter never replaces them.
	addParameters(job, gj, run)
	for _, env := range OccurrenceEnv(gj, run) {
		for i := range pod.Spec.InitContainers {
			setEnv(&pod.Spec.InitContainers[i], env.Name, env.Value)
		}
		for i := range pod.Spec.Containers {
			setEnv(&pod.Spec.Containers[i], env.Name, env.Value)
		}
	}

	if fenced || run.Unguarded {
		name := run.EnvName
		if name == "" {
			name = batchv1alpha1.DefaultFenceEnvName
		}
		for i := range pod.Spec.InitContainers {
			setEnv(&pod.Spec.InitContainers[i], name, fenceValue)
		}
		for i := range pod.Spec.Containers {
			setEnv(&pod.Spec.Containers[i], name, fenceValue)
		}
	}

	job.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
	if run.MaxHold.Duration > 0 {
		seconds := int64(math.Ceil(run.MaxHold.Seconds()))
		job.Spec.ActiveDeadlineSeconds = minPtr(job.Spec.ActiveDeadlineSeconds, seconds)
		pod.Spec.ActiveDeadlineSeconds = minPtr(pod.Spec.ActiveDeadlineSeconds, seconds)
	}

	// A disrupted Pod (evicted, preempted, node lost) may still be running when the
	// Job controller replaces it, and the replacement would carry the same fence.
	// Failing the Job instead makes any retry a new run with a new fence.
	if fenced && !run.Unguarded {
		switch pod.Spec.RestartPolicy {
		case corev1.RestartPolicyNever:
			rule := batchv1.PodFailurePolicyRule{
				Action:          batchv1.PodFailurePolicyActionFailJob,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}
			if job.Spec.PodFailurePolicy == nil {
				job.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{}
			}
			job.Spec.PodFailurePolicy.Rules = append([]batchv1.PodFailurePolicyRule{rule}, job.Spec.PodFailurePolicy.Rules...)
		case corev1.RestartPolicyOnFailure:
			warnings = append(warnings, Warning{batchv1alpha1.NoPodFailurePolicyReason, fmt.Sprintf(
				"restartPolicy OnFailure cannot have a podFailurePolicy: if a Pod of %s is disrupted (evicted, node lost) while still running, its replacement runs with the same fence %d; use restartPolicy Never for fenced work",
				run.JobName, run.Fence)})
		}
	}
	if run.PodGuard != nil {
		warnings = append(warnings, AddPodGuard(job, run)...)
	}
	gate(job, run)
	return job, warnings
}

// gate creates the Job of a run that holds a lease suspended, with the start-gate
// annotation: the manager lets it start only after it has confirmed, after the
// create, that the run still holds its lease (a create has no precondition, and
// a manager may be paused between its lease check and its create for as long as
// it takes another to complete the run). A run with a pod guard is gated too:
// the guard's own start gate in the Pod would accept a lease its run, ended,
// left to expire. A FailOpen run started without a lease has nothing to
// confirm; a template that asks for suspend itself (a queue such as Kueue
// starts it) gets a scheduling gate on its Pods instead (QueueGate).
func gate(job *batchv1.Job, run *batchv1alpha1.ActiveRun) {
	if run.Unguarded {
		return
	}
	if ptr.Deref(job.Spec.Suspend, false) {
		queueGate(job)
		return
	}
	job.Spec.Suspend = ptr.To(true)
	job.Annotations[batchv1alpha1.StartGateAnnotation] = batchv1alpha1.StartGateLease
}

// queueGate gives the Pods of a Job a queue starts (its template asks for
// suspend: the queue unsuspends it when it admits it) a scheduling gate: no Pod
// of it is scheduled until the manager has confirmed, after the Pod exists,
// that its run still holds its lease, and removed the gate from that Pod. A
// queue may start such a Job at any time, also after the manager lost sight of
// it: a late create by a paused manager, or a queue that admits a Job while the
// manager is cut off from the API server.
func queueGate(job *batchv1.Job) {
	spec := &job.Spec.Template.Spec
	for _, g := range spec.SchedulingGates {
		if g.Name == batchv1alpha1.LeaseSchedulingGate {
			return
		}
	}
	spec.SchedulingGates = append(spec.SchedulingGates, corev1.PodSchedulingGate{Name: batchv1alpha1.LeaseSchedulingGate})
}

// PodGated says whether a Pod waits at the lease's scheduling gate (QueueGate).
func PodGated(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == batchv1alpha1.LeaseSchedulingGate {
			return true
		}
	}
	return false
}

// Gated says whether a Job waits at the start gate for its lease to be confirmed.
func Gated(job *batchv1.Job) bool {
	return job.Annotations[batchv1alpha1.StartGateAnnotation] == batchv1alpha1.StartGateLease && ptr.Deref(job.Spec.Suspend, false)
}

// Warning is something about a run's Job that the GuardedJob's events should say:
// the event's reason and message.
type Warning struct {
	Reason  string
	Message string
}

// OccurrenceEnv is what a run's Pods are told about the occurrence they work on:
// its scheduled time (in UTC and in the schedule's zone), its key, and what
// started the run. A backfill over 30 days thus processes 30 different days,
// not today 30 times.
func OccurrenceEnv(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) []corev1.EnvVar {
	zone := gj.Spec.TimeZone
	loc, err := schedule.LoadZone(zone)
	if err != nil || zone == "" {
		// A zone the spec no longer names validly: the run still gets UTC.
		loc, zone = time.UTC, "UTC"
	}
	trigger, request := run.Trigger(), ""
	switch trigger {
	case batchv1alpha1.TriggerBackfill:
		request = run.Backfill
	case batchv1alpha1.TriggerRunNow:
		request = run.RunNow
	case batchv1alpha1.TriggerRetry:
		request = strconv.Itoa(int(run.Retry))
	}
	at := run.ScheduledTime.Time
	return []corev1.EnvVar{
		{Name: batchv1alpha1.ScheduledTimeEnv, Value: at.UTC().Format(time.RFC3339)},
		{Name: batchv1alpha1.ScheduledTimeLocalEnv, Value: at.In(loc).Format(time.RFC3339)},
		{Name: batchv1alpha1.TimeZoneEnv, Value: zone},
		{Name: batchv1alpha1.OccurrenceEnv, Value: run.OccurrenceKey},
		{Name: batchv1alpha1.TriggerEnv, Value: trigger},
		{Name: batchv1alpha1.RequestEnv, Value: request},
	}
}

// setEnv sets name=value on c, replacing a variable of that name.
func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i] = corev1.EnvVar{Name: name, Value: value}
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
}

func minPtr(p *int64, v int64) *int64 {
	if p != nil && *p < v {
		return ptr.To(*p)
	}
	return ptr.To(v)
}

// mergeMaps returns dst with every entry of src set (src wins).
func mergeMaps(dst, src map[string]string) map[string]string {
	if dst == nil {
		dst = make(map[string]string, len(src))
	}
	maps.Copy(dst, src)
	return dst
}
