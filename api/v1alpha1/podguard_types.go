package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultPodGuardMargin is the default of lock.podGuard.margin.
const DefaultPodGuardMargin = 2 * time.Second

// PodGuardSpec configures the pod guard of a GuardedJob's runs (docs/pod-guard.md).
type PodGuardSpec struct {
	// secretRef names a Secret in the GuardedJob's namespace with the guard's own
	// credentials for the lock store: key "url" (the same store the run's lease lives
	// in) and optionally "username", "password", "ca.crt", "tls.crt", "tls.key",
	// "insecureSkipVerify". Give it a Redis user that may only read the namespace's
	// keys (docs/security.md, "Pod guard credentials"), never the manager's store
	// credentials: the Secret is mounted into every guarded Pod.
	// +required
	SecretRef StoreReference `json:"secretRef"`

	// margin is how long before the lease could expire the guard has the workload
	// gone: it covers a Redis clock that runs a little fast and the time killed
	// processes take to go. Defaults to 2s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="lock.podGuard.margin must be a duration such as 2s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) <= duration('1h')",message="lock.podGuard.margin must be at most 1h"
	Margin *metav1.Duration `json:"margin,omitempty"`

	// runAsUser is the user the guard runs as. It must be allowed to signal the
	// workload's processes, which means the workload's own user (or root). Defaults to
	// the Pod template's securityContext.runAsUser, or the one runAsUser all its
	// containers set; without either, the guard runs as the image's user (65532) and
	// the manager warns (PodGuardUser) that it may not be able to stop the workload.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RunAsUser *int64 `json:"runAsUser,omitempty"`
}

// MarginOrDefault returns margin, or the default 2s.
func (p *PodGuardSpec) MarginOrDefault() time.Duration {
	if p == nil || p.Margin == nil {
		return DefaultPodGuardMargin
	}
	return p.Margin.Duration
}

// RunPodGuard is the pod guard of one run, as configured at intent time, so that a
// Job built again after a crash is the same Job.
type RunPodGuard struct {
	// image is the guard's image: the manager's (--guard-image).
	// +required
	Image string `json:"image"`

	// secretName is the Secret mounted into the guard (lock.podGuard.secretRef).
	// +required
	SecretName string `json:"secretName"`

	// interval is how often the guard reads the lease.
	// +required
	Interval metav1.Duration `json:"interval"`

	// margin is lock.podGuard.margin.
	// +required
	Margin metav1.Duration `json:"margin"`

	// runAsUser is the user the guard runs as; unset: the image's.
	// +optional
	RunAsUser *int64 `json:"runAsUser,omitempty"`
}
