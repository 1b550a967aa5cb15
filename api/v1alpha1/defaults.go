/*
Copyright 2026 The GuardedJob Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import "time"

// Defaults. The CRD schema applies the static ones too (its default markers must match
// these; test/crd checks that they do); renewInterval's default depends on ttl and is
// applied only here. Defaults are never written back into spec.
const (
	// DefaultTimeZone is the default of spec.timeZone.
	DefaultTimeZone = "UTC"
	// DefaultStartingDeadlineSeconds is the default of spec.startingDeadlineSeconds.
	DefaultStartingDeadlineSeconds int64 = 300
	// DefaultSuccessfulJobsHistoryLimit is the default of spec.successfulJobsHistoryLimit.
	DefaultSuccessfulJobsHistoryLimit int32 = 3
	// DefaultFailedJobsHistoryLimit is the default of spec.failedJobsHistoryLimit.
	DefaultFailedJobsHistoryLimit int32 = 1
	// DefaultTTL is the default of lock.ttl.
	DefaultTTL = 60 * time.Second
	// MinTTL is the shortest lock.ttl the schema accepts.
	MinTTL = 5 * time.Second
	// MinRenewInterval is the shortest lock.renewInterval the schema accepts.
	MinRenewInterval = time.Second
	// DefaultMaxHold is the default of lock.maxHold.
	DefaultMaxHold = 24 * time.Hour
	// MaxDuration is the longest lock.maxHold and lock.keepAfterSuccess the schema accepts.
	MaxDuration = 8760 * time.Hour
	// DefaultOccurrenceKeyTemplate is the default of lock.occurrenceKey: one done-marker
	// per lock key and scheduled time.
	DefaultOccurrenceKeyTemplate = "{{ .Key }}:done:{{ .ScheduledTime.Unix }}"
	// DefaultFenceKeyTemplate is the default of fencing.key: one counter per lock key.
	DefaultFenceKeyTemplate = "{{ .Key }}:fence"
	// DefaultPodGracePeriod is the Pods' termination grace period when the jobTemplate
	// sets none (the Kubernetes default).
	DefaultPodGracePeriod = 30 * time.Second
)

// The accessors below return a field's value with its default applied, so objects built
// in Go (which never pass through the API server's defaulting) behave like objects read
// from it. A field that is unset (nil, empty or zero) gets its default; so does a number
// or enum value that the schema would reject, so callers always get a usable value.
// An accessor named <Field>OrDefault returns that field in its own type (durations as
// time.Duration); the others derive a value from a field. Fencing accessors are safe on
// a nil *FencingSpec.

// TimeZoneOrDefault returns spec.timeZone, default "UTC".
func (s *GuardedJobSpec) TimeZoneOrDefault() string {
	if s.TimeZone == "" {
		return DefaultTimeZone
	}
	return s.TimeZone
}

// StartingDeadline returns spec.startingDeadlineSeconds as a duration, default 300s.
func (s *GuardedJobSpec) StartingDeadline() time.Duration {
	if s.StartingDeadlineSeconds == nil || *s.StartingDeadlineSeconds < 1 {
		return time.Duration(DefaultStartingDeadlineSeconds) * time.Second
	}
	return time.Duration(*s.StartingDeadlineSeconds) * time.Second
}

// Suspended returns spec.suspend, default false.
func (s *GuardedJobSpec) Suspended() bool {
	return s.Suspend != nil && *s.Suspend
}

// ConcurrencyPolicyOrDefault returns spec.concurrencyPolicy, default Forbid.
func (s *GuardedJobSpec) ConcurrencyPolicyOrDefault() ConcurrencyPolicy {
	switch s.ConcurrencyPolicy {
	case ReplaceConcurrent, AllowConcurrent, BufferOneConcurrent, BufferAllConcurrent:
		return s.ConcurrencyPolicy
	default:
		return ForbidConcurrent
	}
}

// OnDeleteOrDefault returns spec.onDelete, default Stop.
func (s *GuardedJobSpec) OnDeleteOrDefault() DeletePolicy {
	if s.OnDelete == OnDeleteWait {
		return OnDeleteWait
	}
	return OnDeleteStop
}

// SuccessfulHistoryLimit returns spec.successfulJobsHistoryLimit, default 3.
func (s *GuardedJobSpec) SuccessfulHistoryLimit() int32 {
	if s.SuccessfulJobsHistoryLimit == nil || *s.SuccessfulJobsHistoryLimit < 0 {
		return DefaultSuccessfulJobsHistoryLimit
	}
	return *s.SuccessfulJobsHistoryLimit
}

// FailedHistoryLimit returns spec.failedJobsHistoryLimit, default 1.
func (s *GuardedJobSpec) FailedHistoryLimit() int32 {
	if s.FailedJobsHistoryLimit == nil || *s.FailedJobsHistoryLimit < 0 {
		return DefaultFailedJobsHistoryLimit
	}
	return *s.FailedJobsHistoryLimit
}

// PodGracePeriod returns the termination grace period of the jobTemplate's Pods,
// default 30s. A negative value counts as 1s, as the API server treats it.
func (s *GuardedJobSpec) PodGracePeriod() time.Duration {
	seconds := s.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds
	switch {
	case seconds == nil:
		return DefaultPodGracePeriod
	case *seconds < 0:
		return time.Second
	default:
		return time.Duration(*seconds) * time.Second
	}
}

// TTLOrDefault returns lock.ttl, default 60s.
func (l *LockSpec) TTLOrDefault() time.Duration {
	if l.TTL == nil || l.TTL.Duration <= 0 {
		return DefaultTTL
	}
	return l.TTL.Duration
}

// RenewIntervalOrDefault returns lock.renewInterval, default a third of lock.ttl (with
// its default applied).
func (l *LockSpec) RenewIntervalOrDefault() time.Duration {
	if l.RenewInterval == nil || l.RenewInterval.Duration <= 0 {
		return l.TTLOrDefault() / 3
	}
	return l.RenewInterval.Duration
}

// MaxHoldOrDefault returns lock.maxHold, default 24h.
func (l *LockSpec) MaxHoldOrDefault() time.Duration {
	if l.MaxHold == nil || l.MaxHold.Duration <= 0 {
		return DefaultMaxHold
	}
	return l.MaxHold.Duration
}

// DefaultPodStartTimeout is lock.podStartTimeout when unset.
const DefaultPodStartTimeout = 10 * time.Minute

// PodStartTimeoutOrDefault returns lock.podStartTimeout, default 10m.
func (l *LockSpec) PodStartTimeoutOrDefault() time.Duration {
	if l.PodStartTimeout == nil || l.PodStartTimeout.Duration <= 0 {
		return DefaultPodStartTimeout
	}
	return l.PodStartTimeout.Duration
}

// KeepAfterSuccessOrDefault returns lock.keepAfterSuccess, default 0.
func (l *LockSpec) KeepAfterSuccessOrDefault() time.Duration {
	if l.KeepAfterSuccess == nil || l.KeepAfterSuccess.Duration < 0 {
		return 0
	}
	return l.KeepAfterSuccess.Duration
}

// OccurrenceKeyTemplate returns the template of lock.occurrenceKey, default
// '{{ .Key }}:done:{{ .ScheduledTime.Unix }}'.
func (l *LockSpec) OccurrenceKeyTemplate() string {
	if l.OccurrenceKey == "" {
		return DefaultOccurrenceKeyTemplate
	}
	return l.OccurrenceKey
}

// OnBusyOrDefault returns lock.onBusy, default Skip.
func (l *LockSpec) OnBusyOrDefault() BusyPolicy {
	if l.OnBusy == OnBusyRetry {
		return OnBusyRetry
	}
	return OnBusySkip
}

// StoreFailurePolicyOrDefault returns lock.storeFailurePolicy, default FailClosed.
func (l *LockSpec) StoreFailurePolicyOrDefault() StoreFailurePolicy {
	if l.StoreFailurePolicy == FailOpen {
		return FailOpen
	}
	return FailClosed
}

// PolicyOrDefault returns fencing.policy, default Inject (also for a nil FencingSpec).
func (f *FencingSpec) PolicyOrDefault() FencingPolicy {
	if f == nil {
		return FencingInject
	}
	switch f.Policy {
	case FencingNone, FencingStrict:
		return f.Policy
	default:
		return FencingInject
	}
}

// KeyTemplate returns the template of fencing.key, default '{{ .Key }}:fence'.
func (f *FencingSpec) KeyTemplate() string {
	if f == nil || f.Key == "" {
		return DefaultFenceKeyTemplate
	}
	return f.Key
}

// EnvNameOrDefault returns fencing.envName, default GUARDEDJOB_FENCE.
func (f *FencingSpec) EnvNameOrDefault() string {
	if f == nil || f.EnvName == "" {
		return DefaultFenceEnvName
	}
	return f.EnvName
}
