package jobbuild

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/podguard"
)

// guardProbeSeconds is how long the workload may wait for the guard's first
// confirmation of the lease (the startup probe's period times its failure
// threshold) before the kubelet restarts the guard, which then tries again.
const guardProbeSeconds = 120

// AddPodGuard adds the pod guard of run.PodGuard to job (docs/pod-guard.md): a
// native sidecar, first among the init containers so that nothing of the workload
// starts before it has confirmed the lease, reading the run's lease with the
// credentials of its own Secret and ending every other process of the Pod (the
// Pod shares one process namespace) when the lease is lost or cannot be confirmed
// before it could expire. The Pod never gets the run's token, only its SHA-256.
//
// The Job gets backoffLimit 0: a Pod that failed, or vanished from the API while
// its node may still run it, is never replaced within the run, because the
// replacement would run under the same lease beside it. A retry is a new run.
func AddPodGuard(job *batchv1.Job, run *batchv1alpha1.ActiveRun) []Warning {
	g := run.PodGuard
	var warnings []Warning
	if b := job.Spec.BackoffLimit; b != nil && *b > 0 {
		warnings = append(warnings, Warning{batchv1alpha1.PodGuardSettingsReason, fmt.Sprintf(
			"Job %s: backoffLimit %d replaced by 0: a guarded run's Pods are never replaced within the run (a vanished Pod may still run where its guard alone can stop it); a retry is the next run",
			job.Name, *b)})
	}
	job.Spec.BackoffLimit = ptr.To(int32(0))

	pod := &job.Spec.Template.Spec
	pod.ShareProcessNamespace = ptr.To(true)
	grace := batchv1alpha1.DefaultPodGracePeriod
	if s := pod.TerminationGracePeriodSeconds; s != nil {
		grace = max(time.Duration(*s)*time.Second, 0)
	}
	settings := podguard.Settings{
		Key: run.Key, Holder: run.Holder, TokenSHA256: podguard.TokenSHA256(run.Token),
		Interval: g.Interval.Duration, Grace: grace, Margin: g.Margin.Duration,
	}
	var env []corev1.EnvVar
	for _, v := range settings.Environment() {
		env = append(env, corev1.EnvVar{Name: v.Name, Value: v.Value})
	}
	sc := &corev1.SecurityContext{
		RunAsUser:                g.RunAsUser,
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if g.RunAsUser == nil || *g.RunAsUser != 0 {
		sc.RunAsNonRoot = ptr.To(true)
	}
	guard := corev1.Container{
		Name:          podguard.ContainerName,
		Image:         g.Image,
		Command:       []string{podguard.BinaryPath},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Env:           env,
		StartupProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{podguard.BinaryPath, podguard.ProbeArg}}},
			PeriodSeconds:    1,
			TimeoutSeconds:   1,
			FailureThreshold: guardProbeSeconds,
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: podguard.StoreVolumeName, MountPath: podguard.DefaultStoreDir, ReadOnly: true},
			{Name: podguard.StateVolumeName, MountPath: podguard.DefaultStateDir},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		SecurityContext:          sc,
		TerminationMessagePath:   podguard.DefaultTerminationMessagePath,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		ImagePullPolicy:          corev1.PullIfNotPresent,
	}
	pod.InitContainers = append([]corev1.Container{guard}, pod.InitContainers...)
	pod.Volumes = append(pod.Volumes,
		corev1.Volume{Name: podguard.StoreVolumeName, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: g.SecretName}}},
		corev1.Volume{Name: podguard.StateVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Mi"))}}},
	)
	return warnings
}

// GuardUser returns the user a pod guard runs as by default: the Pod template's
// runAsUser, or the one runAsUser every container (and init container) sets; ok
// is false when the template does not say, and the guard keeps its image's user.
func GuardUser(spec *corev1.PodSpec) (uid *int64, ok bool) {
	if sc := spec.SecurityContext; sc != nil && sc.RunAsUser != nil {
		uid = sc.RunAsUser
	}
	var containerUID *int64
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			var u *int64
			if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
				u = c.SecurityContext.RunAsUser
			} else {
				u = uid
			}
			switch {
			case u == nil:
				return nil, false
			case containerUID != nil && *containerUID != *u:
				return nil, false
			}
			containerUID = u
		}
	}
	if containerUID == nil {
		return nil, false
	}
	return ptr.To(*containerUID), true
}
