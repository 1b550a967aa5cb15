package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of the fields that spread retries and runs out in time.
const (
	// DefaultBusyRetryInitial is the default of lock.busyRetry.initial.
	DefaultBusyRetryInitial = 5 * time.Second
	// DefaultBusyRetryMax is the default of lock.busyRetry.max.
	DefaultBusyRetryMax = time.Minute
	// BusyRetryFactor is how much each onBusy Retry wait grows over the one before.
	BusyRetryFactor = 2.0
	// BusyRetryJitter is the share by which each onBusy Retry wait is stretched at
	// random (up to +50%).
	BusyRetryJitter = 0.5
)

// BusyRetry shapes the waits of onBusy Retry: capped exponential backoff with
// jitter. The first retry comes initial after the run was due, each later wait is
// twice the one before, up to max, and each is stretched by up to half at random,
// so that runs of many clusters waiting for one key do not retry in step. A last
// attempt is made just before the starting deadline.
// +kubebuilder:validation:XValidation:rule="!has(self.initial) || !has(self.max) || !self.initial.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || !self.max.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self.max) >= duration(self.initial)",message="lock.busyRetry.max must be at least lock.busyRetry.initial",fieldPath=".max"
type BusyRetry struct {
	// initial is the wait before the first retry. Defaults to 5s; at least 1s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="lock.busyRetry.initial must be a duration such as 5s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) >= duration('1s')",message="lock.busyRetry.initial must be at least 1s"
	Initial *metav1.Duration `json:"initial,omitempty"`

	// max caps each wait (before its jitter). Defaults to 1m; at least initial and at
	// most 1h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="lock.busyRetry.max must be a duration such as 1m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('1h'))",message="lock.busyRetry.max must be between 1s and 1h"
	Max *metav1.Duration `json:"max,omitempty"`
}

// BusyRetryInitial returns lock.busyRetry.initial, default 5s (also below 1s).
func (l *LockSpec) BusyRetryInitial() time.Duration {
	if l.BusyRetry == nil || l.BusyRetry.Initial == nil || l.BusyRetry.Initial.Duration < time.Second {
		return DefaultBusyRetryInitial
	}
	return l.BusyRetry.Initial.Duration
}

// BusyRetryMax returns lock.busyRetry.max, default 1m, never below the initial wait
// nor above 1h.
func (l *LockSpec) BusyRetryMax() time.Duration {
	m := DefaultBusyRetryMax
	if l.BusyRetry != nil && l.BusyRetry.Max != nil && l.BusyRetry.Max.Duration > 0 {
		m = min(l.BusyRetry.Max.Duration, time.Hour)
	}
	return max(m, l.BusyRetryInitial())
}

// ScheduleJitterOrDefault returns spec.scheduleJitter, default 0 (no jitter); a
// value the schema would reject (negative, or not shorter than the starting
// deadline) is 0 as well.
func (s *GuardedJobSpec) ScheduleJitterOrDefault() time.Duration {
	if s.ScheduleJitter == nil || s.ScheduleJitter.Duration <= 0 || s.ScheduleJitter.Duration >= s.StartingDeadline() {
		return 0
	}
	return s.ScheduleJitter.Duration
}
