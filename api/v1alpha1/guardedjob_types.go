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

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ConcurrencyPolicy says what happens when a run of a GuardedJob is due while an earlier
// run of the same GuardedJob is still active.
// +kubebuilder:validation:Enum=Forbid;Replace;Allow;BufferOne;BufferAll
type ConcurrencyPolicy string

const (
	// ForbidConcurrent skips the new run while an earlier one is active (the default).
	ForbidConcurrent ConcurrencyPolicy = "Forbid"
	// ReplaceConcurrent stops the active run (its Job and Pods), releases its lease once
	// its Pods are gone, and then starts the new run.
	ReplaceConcurrent ConcurrencyPolicy = "Replace"
	// AllowConcurrent starts the new run beside the active one. Both still need the lease,
	// so with a lock key that does not vary per occurrence the new run finds it busy.
	AllowConcurrent ConcurrencyPolicy = "Allow"
	// BufferOneConcurrent keeps one new run waiting while an earlier one is active
	// and starts it as soon as that one ends; a further run due meanwhile is
	// skipped, as with Forbid.
	BufferOneConcurrent ConcurrencyPolicy = "BufferOne"
	// BufferAllConcurrent keeps every new run waiting (up to spec.bufferLimit)
	// while an earlier one is active, and starts them one after the other.
	BufferAllConcurrent ConcurrencyPolicy = "BufferAll"
)

// BusyPolicy says what a run does when its lock key is held by another holder.
// +kubebuilder:validation:Enum=Skip;Retry
type BusyPolicy string

const (
	// OnBusySkip records the run as Busy, naming the holder, and waits for the next
	// occurrence (the default).
	OnBusySkip BusyPolicy = "Skip"
	// OnBusyRetry retries the acquisition with jittered backoff until the run's starting
	// deadline (scheduled time + startingDeadlineSeconds), then records it as Busy.
	OnBusyRetry BusyPolicy = "Retry"
)

// StoreFailurePolicy says what a run does when the lock store (Redis) cannot be reached
// at its start.
// +kubebuilder:validation:Enum=FailClosed;FailOpen
type StoreFailurePolicy string

const (
	// FailClosed does not start the Job without a lease; the acquisition is retried until
	// the starting deadline (the default).
	FailClosed StoreFailurePolicy = "FailClosed"
	// FailOpen starts the Job without a lease ("unguarded"): its Pods get an empty fence
	// and the fence annotation value "unfenced", with a Warning event. When the store
	// comes back the run acquires the lease with its own token.
	FailOpen StoreFailurePolicy = "FailOpen"
)

// FencingPolicy says whether and how a fencing token is issued to a run.
// +kubebuilder:validation:Enum=None;Inject;Strict
type FencingPolicy string

const (
	// FencingNone issues no fence: no counter key, no env var, no annotation value.
	FencingNone FencingPolicy = "None"
	// FencingInject increments the fence counter on every acquisition and hands the number
	// to the Job's Pods (env var and annotation), to events and to status (the default).
	FencingInject FencingPolicy = "Inject"
	// FencingStrict is Inject, plus a fence is never lower than or equal to one handed out
	// before, even after Redis lost its data: the counter is raised to at least
	// status.lastFence + 1 and to a value derived from the Redis clock.
	FencingStrict FencingPolicy = "Strict"
)

// DeletePolicy says what deleting a GuardedJob does to its active runs.
// +kubebuilder:validation:Enum=Stop;Wait
type DeletePolicy string

const (
	// OnDeleteStop stops active runs (deletes their Jobs and Pods with a bounded grace
	// period), releases their leases once the Pods are gone, then lets the GuardedJob go
	// (the default).
	OnDeleteStop DeletePolicy = "Stop"
	// OnDeleteWait keeps the GuardedJob (and the leases) until its active runs finish
	// on their own; no new run starts meanwhile.
	OnDeleteWait DeletePolicy = "Wait"
)

// GuardedJobSpec is the desired state of a GuardedJob.
// +kubebuilder:validation:XValidation:rule="!(has(self.lock.storeFailurePolicy) && self.lock.storeFailurePolicy == 'FailOpen' && has(self.fencing) && has(self.fencing.policy) && self.fencing.policy == 'Strict')",message="fencing.policy Strict cannot be combined with lock.storeFailurePolicy FailOpen: a run without a lease has no fence",fieldPath=".fencing.policy"
// +kubebuilder:validation:XValidation:rule="!has(self.scheduleJitter) || !self.scheduleJitter.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self.scheduleJitter).getSeconds() < (has(self.startingDeadlineSeconds) ? self.startingDeadlineSeconds : 300)",message="scheduleJitter must be shorter than startingDeadlineSeconds (default 300): a run must be able to start within its deadline",fieldPath=".scheduleJitter"
// +kubebuilder:validation:XValidation:rule="!has(self.suspendNote) || (has(self.suspend) && self.suspend)",message="suspendNote describes a suspension: set suspend to true with it, and remove it when setting suspend to false",fieldPath=".suspendNote"
// +kubebuilder:validation:XValidation:rule="!has(self.bufferLimit) || (has(self.concurrencyPolicy) && self.concurrencyPolicy == 'BufferAll')",message="bufferLimit applies only to concurrencyPolicy BufferAll (BufferOne keeps one run waiting)",fieldPath=".bufferLimit"
// +kubebuilder:validation:XValidation:rule="!has(self.parameters) || self.parameters.all(p, p.name != (has(self.fencing) && has(self.fencing.envName) ? self.fencing.envName : 'GUARDEDJOB_FENCE'))",message="parameters[].name must differ from fencing.envName (default GUARDEDJOB_FENCE): the fence has that environment variable",fieldPath=".parameters"
type GuardedJobSpec struct {
	// schedule is the cron schedule in the CronJob dialect: five fields
	// (minute hour day-of-month month day-of-week) or a macro such as @hourly, @daily,
	// @weekly, @monthly, @yearly. The zone is timeZone, never part of the schedule.
	// Required; its syntax is checked by the manager (Ready=False, InvalidSchedule).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.contains('TZ=')",message="schedule must not contain TZ= or CRON_TZ=: set spec.timeZone instead"
	Schedule string `json:"schedule"`

	// timeZone is the IANA time zone name the schedule is read in, such as Asia/Taipei.
	// Defaults to "UTC", never to the manager's zone. The manager embeds the zone
	// database, so every replica and cluster uses the same zone rules. An unknown name
	// sets Ready=False with reason InvalidTimeZone.
	// +optional
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self != 'Local'",message="timeZone must be an IANA zone name such as Europe/Berlin: Local (the manager's zone) is not allowed"
	TimeZone string `json:"timeZone,omitempty"`

	// startingDeadlineSeconds is how late, in seconds after its scheduled time, a run may
	// still start. It bounds onBusy Retry and FailClosed retries, decides whether a missed
	// occurrence is still run after a manager outage, and how old a run-now trigger may be.
	// Defaults to 300. Minimum 1: unlike CronJob, 0 is rejected, because no run can start
	// at exactly its scheduled time.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=1
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`

	// suspend stops new runs from being scheduled while true; active runs go on and keep
	// their leases. Defaults to false.
	// +optional
	// +kubebuilder:default=false
	Suspend *bool `json:"suspend,omitempty"`

	// scheduleJitter spreads the starts of this GuardedJob's scheduled runs: each
	// occurrence starts at its scheduled time plus an offset in [0, scheduleJitter),
	// derived from the object's UID and the scheduled time, so every replica computes
	// the same offset and many GuardedJobs due at the same minute do not all start at
	// once. The occurrence is still its scheduled time (.ScheduledTime in key
	// templates, the done-marker); the run's start deadline counts from its offset
	// start. Run-now triggers start at once. Shorter than startingDeadlineSeconds;
	// defaults to 0s (no jitter).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="scheduleJitter must be a duration such as 30s or 5m"
	ScheduleJitter *metav1.Duration `json:"scheduleJitter,omitempty"`

	// concurrencyPolicy says what happens when a run is due while an earlier run of this
	// GuardedJob is still active: Forbid (skip the new run), Replace (stop the active run,
	// then start the new one), Allow (start it beside the active one; it still needs the
	// lease), BufferOne (keep it waiting and start it as soon as the active run ends; a
	// further one due meanwhile is skipped) or BufferAll (keep up to bufferLimit waiting,
	// started one after the other). A waiting run keeps its scheduled time and may start
	// until startingDeadlineSeconds after the run before it ended. Defaults to Forbid.
	// +optional
	// +kubebuilder:default=Forbid
	ConcurrencyPolicy ConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`

	// successfulJobsHistoryLimit is how many finished, successful Jobs are kept.
	// Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	SuccessfulJobsHistoryLimit *int32 `json:"successfulJobsHistoryLimit,omitempty"`

	// failedJobsHistoryLimit is how many finished, failed Jobs are kept. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	FailedJobsHistoryLimit *int32 `json:"failedJobsHistoryLimit,omitempty"`

	// lock configures the Redis lease that guards every run. Required (lock.key is).
	// +required
	Lock LockSpec `json:"lock"`

	// fencing configures the fencing token handed to every run. Defaults to
	// {policy: Inject, key: '{{ .Key }}:fence', envName: GUARDEDJOB_FENCE}.
	// +optional
	// +kubebuilder:default={}
	Fencing *FencingSpec `json:"fencing,omitempty"`

	// onDelete says what deleting this GuardedJob does to its active runs: Stop (stop the
	// Pods, release the lease, then go) or Wait (keep the lease until the runs finish).
	// Defaults to Stop.
	// +optional
	// +kubebuilder:default=Stop
	OnDelete DeletePolicy `json:"onDelete,omitempty"`

	// jobTemplate is the Job created for every run, as in a CronJob. The manager adds the
	// lease finalizer, an owner reference, podReplacementPolicy Failed,
	// activeDeadlineSeconds = lock.maxHold (on the Job and on its Pod template), and the
	// fence env var and annotation. Its Pods' restartPolicy must be Never or OnFailure.
	// +required
	// +kubebuilder:validation:XValidation:rule="has(self.spec) && has(self.spec.template.spec) && has(self.spec.template.spec.restartPolicy) && self.spec.template.spec.restartPolicy in ['Never', 'OnFailure']",message="jobTemplate.spec.template.spec.restartPolicy must be Never or OnFailure"
	JobTemplate batchv1.JobTemplateSpec `json:"jobTemplate"`

	// suspendNote says who suspended this GuardedJob, why, and until when; only
	// with suspend: true (remove it when resuming). With until set, runs are
	// scheduled again from that time; the manager never writes spec, so
	// suspend: true stays until someone sets it to false. kubectl guardedjob
	// status shows it.
	// +optional
	SuspendNote *SuspendNote `json:"suspendNote,omitempty"`

	// failurePolicy, when set, pauses this GuardedJob after
	// failurePolicy.suspendAfter failed runs in a row, in status.pause (conditions
	// Suspended and Paused, reason TooManyFailures, and a Warning event
	// SuspendedAfterFailures); spec is never written. Resume it with kubectl
	// guardedjob resume (the batch.guardedjob.dev/resume annotation).
	// +optional
	FailurePolicy *FailurePolicy `json:"failurePolicy,omitempty"`

	// retryOccurrence keeps trying each scheduled occurrence until a cluster
	// sharing the lock store has done it, for the multi-cluster setup where the
	// occurrence must run once and must not be lost when the cluster that won
	// it fails. Without it, an occurrence is tried once per cluster (onBusy
	// decides what a busy key does) and a run that fails is not tried again.
	// +optional
	RetryOccurrence *OccurrenceRetry `json:"retryOccurrence,omitempty"`

	// bufferLimit is how many runs concurrencyPolicy BufferAll keeps waiting for
	// an active run; a run due while that many wait is skipped. Only with
	// BufferAll. Defaults to 10; from 1 to 100.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	BufferLimit *int32 `json:"bufferLimit,omitempty"`

	// parameters declares the values a manual run may set (run-now with the
	// batch.guardedjob.dev/run-now-parameters annotation, or kubectl guardedjob
	// run --param NAME=VALUE), each an environment variable of the run's
	// containers. Undeclared names and values outside pattern or enum are
	// refused. Scheduled runs get the defaults. At most 16.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Parameters []RunParameter `json:"parameters,omitempty"`
}

// LockSpec configures the Redis lease of a GuardedJob.
//
// Keys are Go text/template templates; see docs/api.md for the data and functions.
// +kubebuilder:validation:XValidation:rule="!has(self.renewInterval) || !self.renewInterval.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (has(self.ttl) && !self.ttl.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')) || duration(self.renewInterval) < duration(has(self.ttl) ? self.ttl : '60s')",message="lock.renewInterval must be shorter than lock.ttl (ttl defaults to 60s)",fieldPath=".renewInterval"
// +kubebuilder:validation:XValidation:rule="!has(self.podGuard) || !has(self.storeFailurePolicy) || self.storeFailurePolicy != 'FailOpen'",message="lock.podGuard cannot be combined with lock.storeFailurePolicy FailOpen: a run started without a lease has nothing for the guard to confirm",fieldPath=".podGuard"
// +kubebuilder:validation:XValidation:rule="(has(self.maxHold) && !self.maxHold.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')) || (has(self.ttl) && !self.ttl.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')) || duration(has(self.maxHold) ? self.maxHold : '24h') > duration(has(self.ttl) ? self.ttl : '60s')",message="lock.maxHold must be longer than lock.ttl (defaults: maxHold 24h, ttl 60s)",fieldPath=".maxHold"
type LockSpec struct {
	// key is the template of the mutual-exclusion key: at most one run, in any cluster or
	// process sharing the store, holds it at a time. Required and non-empty. The rendered
	// key must be non-empty, at most 512 bytes, without whitespace or control characters,
	// and (in the manager's shared store) start with "<namespace>:" or with a prefix
	// granted to the namespace by --key-grants.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Key string `json:"key"`

	// occurrenceKey is the template of the done-marker of one occurrence: written when a
	// run succeeds, and checked before acquiring, so an occurrence that succeeded (in any
	// cluster) is not run again. Defaults to '{{ .Key }}:done:{{ .ScheduledTime.Unix }}'.
	// +optional
	// +kubebuilder:default="{{ .Key }}:done:{{ .ScheduledTime.Unix }}"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	OccurrenceKey string `json:"occurrenceKey,omitempty"`

	// ttl is the length of the lease; it is renewed every renewInterval while any Pod of
	// the run may still run. Defaults to 60s; at least 5s.
	// +optional
	// +kubebuilder:default="60s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="lock.ttl must be a duration such as 60s, 5m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) >= duration('5s')",message="lock.ttl must be at least 5s"
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// renewInterval is how often the lease is renewed. Defaults to ttl/3 (computed by the
	// manager, never written into spec); at least 1s and shorter than ttl.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="lock.renewInterval must be a duration such as 20s or 1m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) >= duration('1s')",message="lock.renewInterval must be at least 1s"
	RenewInterval *metav1.Duration `json:"renewInterval,omitempty"`

	// maxHold is the hard cap on how long one run may hold the lease: the run is stopped
	// and its lease released when it is reached. It is also set (rounded up to whole
	// seconds) as activeDeadlineSeconds on the Job and on its Pod template, so the Job
	// controller and the kubelet enforce it too. Defaults to 24h; longer than ttl and at
	// most 8760h.
	// +optional
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="lock.maxHold must be a duration such as 6h or 90m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) <= duration('8760h')",message="lock.maxHold must be at most 8760h (a year)"
	MaxHold *metav1.Duration `json:"maxHold,omitempty"`

	// podStartTimeout is how long the Pods of a run may take to start (reach
	// Running, or finish) after its Job is created. A run none of whose Pods has
	// started by then (unschedulable, rejected by Pod Security admission, over
	// quota) is stopped, its lease released, and it ends Failed with the reason
	// the Pods did not start. It does not count while the Job is suspended by a
	// queue (jobTemplate.spec.suspend, Kueue): it counts from when the Job was
	// last resumed. Defaults to 10m; at least 10s.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="lock.podStartTimeout must be a duration such as 10m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) >= duration('10s')",message="lock.podStartTimeout must be at least 10s"
	PodStartTimeout *metav1.Duration `json:"podStartTimeout,omitempty"`

	// keepAfterSuccess extends the life of an occurrence's done-marker: it lives until the
	// next occurrence is due + startingDeadlineSeconds + 5m + keepAfterSuccess.
	// Defaults to 0s; at most 8760h.
	// +optional
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="lock.keepAfterSuccess must be a duration such as 0s, 1h or 168h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) <= duration('8760h')",message="lock.keepAfterSuccess must be at most 8760h (a year)"
	KeepAfterSuccess *metav1.Duration `json:"keepAfterSuccess,omitempty"`

	// onBusy says what a run does when the key is held by another holder: Skip (record
	// Busy and wait for the next occurrence) or Retry (retry with capped exponential
	// backoff and jitter, see busyRetry, until the starting deadline). Defaults to Skip.
	// +optional
	// +kubebuilder:default=Skip
	OnBusy BusyPolicy `json:"onBusy,omitempty"`

	// busyRetry shapes the waits of onBusy Retry: capped exponential backoff with
	// jitter. Defaults to {initial: 5s, max: 1m}.
	// +optional
	BusyRetry *BusyRetry `json:"busyRetry,omitempty"`

	// storeFailurePolicy says what a run does when the store cannot be reached at its
	// start: FailClosed (do not start; retry until the starting deadline) or FailOpen
	// (start unguarded, without lease or fence). Defaults to FailClosed.
	// +optional
	// +kubebuilder:default=FailClosed
	StoreFailurePolicy StoreFailurePolicy `json:"storeFailurePolicy,omitempty"`

	// storeRef names a Secret in this namespace holding the connection of a store of
	// this GuardedJob's own (key "url", and optionally "ca.crt"). Keys in such a store are
	// not confined to the namespace prefix. Defaults to the manager's store.
	// +optional
	StoreRef *StoreReference `json:"storeRef,omitempty"`

	// podGuard, when set, adds the pod guard to every run's Pods: a sidecar that
	// confirms the run's lease in Redis from inside the Pod and ends the Pod's workload
	// when it cannot, even when nothing can reach the Pod through the API server (its
	// node cut off from the control plane, the Pod force-deleted). Such a run's Job is
	// never retried within itself (backoffLimit 0), and only a run that completed
	// releases its lease: any other end leaves the key to expire, so that the guard of a
	// Pod the API server no longer shows stops it first. See docs/pod-guard.md.
	// +optional
	PodGuard *PodGuardSpec `json:"podGuard,omitempty"`
}

// StoreReference names the Secret that holds a store's connection.
type StoreReference struct {
	// name is the name of a Secret in the GuardedJob's namespace. The Secret's key "url"
	// holds a redis:// or rediss:// URL (credentials included); the optional key "ca.crt"
	// holds the PEM CA bundle that verifies a rediss:// server.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// FencingSpec configures the fencing token handed to every run.
type FencingSpec struct {
	// policy is None (no fence), Inject (a counter incremented on every acquisition) or
	// Strict (as Inject, and never lower than or equal to a fence handed out before, even
	// after the store lost its data). Strict cannot be combined with
	// lock.storeFailurePolicy FailOpen. Defaults to Inject.
	// +optional
	// +kubebuilder:default=Inject
	Policy FencingPolicy `json:"policy,omitempty"`

	// key is the template of the fence counter key. Defaults to '{{ .Key }}:fence': one
	// counter per lock key, shared by every GuardedJob using that key.
	// +optional
	// +kubebuilder:default="{{ .Key }}:fence"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Key string `json:"key,omitempty"`

	// envName is the environment variable set to the fence on every container and init
	// container of the Job's Pods (empty for an unguarded FailOpen run).
	// Defaults to GUARDEDJOB_FENCE.
	// +optional
	// +kubebuilder:default=GUARDEDJOB_FENCE
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z_][A-Za-z0-9_]*$')",message="fencing.envName must be a C identifier (letters, digits and _, not starting with a digit) such as GUARDEDJOB_FENCE"
	EnvName string `json:"envName,omitempty"`
}

// GuardedJobStatus is the observed state of a GuardedJob.
type GuardedJobStatus struct {
	// observedGeneration is the spec generation the manager last reconciled without error.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Ready, LockHeld, StoreReachable, StoreSafe, MaxHoldAtRisk,
	// Suspended, Queued and the kstatus conditions Reconciling and Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// nextScheduleTime is the next time a run is due (unset while suspended or invalid).
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`

	// lastScheduleTime is the scheduled time of the last run started (or attempted).
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// lastSuccessfulTime is when the last successful run finished.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`

	// lastOccurrenceDone is the latest occurrence (by scheduled time) known to be
	// done in any cluster sharing the lock store: run to success here, or found
	// done by a run of another cluster (its done-marker). Where the same
	// GuardedJob is applied in several clusters, the cluster that loses the race
	// for an occurrence records here that another one did it.
	// +optional
	LastOccurrenceDone *OccurrenceDone `json:"lastOccurrenceDone,omitempty"`

	// lastFence is the highest fence handed out to a run of this GuardedJob; with
	// fencing.policy Strict it is the floor of the next fence.
	// +optional
	LastFence int64 `json:"lastFence,omitempty"`

	// lock is the latest observation of the lock key.
	// +optional
	Lock *LockStatus `json:"lock,omitempty"`

	// lastRunNow is the last value of the batch.guardedjob.dev/run-now annotation that was
	// handled (run, skipped or rejected), so a value is acted on once.
	// +optional
	LastRunNow string `json:"lastRunNow,omitempty"`

	// active lists the runs in flight, one per Job name. A run is recorded here with its
	// fence (one write with a resourceVersion precondition) after its lease is acquired
	// and before its Job is created; a run that cannot start yet is recorded as Acquiring
	// first.
	// +optional
	// +listType=map
	// +listMapKey=jobName
	Active []ActiveRun `json:"active,omitempty"`

	// activeCount is the number of runs in status.active (the ACTIVE column of kubectl
	// get, which cannot count a list).
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	ActiveCount int32 `json:"activeCount,omitempty"`

	// lastRun is the outcome of the last run that finished or did not start.
	// +optional
	LastRun *RunRecord `json:"lastRun,omitempty"`

	// recentRuns are the outcomes of the last runs that finished or did not
	// start (Busy, Skipped included), newest first, at most 10: what happened
	// last night, after its events have expired. kubectl guardedjob history
	// shows them with their Jobs and Pods.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	RecentRuns []RecentRun `json:"recentRuns,omitempty"`

	// storeView is what the lock store held for this GuardedJob's keys when the
	// manager last answered a batch.guardedjob.dev/inspect-now request: holders,
	// expiry, fence and done-marker, never a token.
	// +optional
	StoreView *StoreView `json:"storeView,omitempty"`

	// lastUnlock is the outcome of the last batch.guardedjob.dev/unlock request.
	// +optional
	LastUnlock *UnlockRecord `json:"lastUnlock,omitempty"`

	// runDurations summarises how long the last runs took, so that lock.maxHold and
	// lock.ttl can be sized from data (docs/operations.md, "Lease calibration").
	// +optional
	RunDurations *RunDurations `json:"runDurations,omitempty"`

	// buffered are the occurrences waiting for an active run to end
	// (concurrencyPolicy BufferOne or BufferAll), oldest first. Each runs with
	// its own scheduled time.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Buffered []BufferedRun `json:"buffered,omitempty"`

	// consecutiveFailures counts the runs in a row that ended Failed or
	// MaxHoldExceeded (spec.failurePolicy): a success sets it to 0, and so does
	// the failure policy when it pauses the GuardedJob.
	// +optional
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`

	// suspended is true while no new runs are scheduled: spec.suspend holds
	// (until its note's until) or status.pause does. The SUSPEND column of
	// kubectl get. Defaulted, so the column reads false before any status
	// write names it (a status patch leaves out a field that stays false).
	// +optional
	// +kubebuilder:default=false
	Suspended bool `json:"suspended"`

	// pause is a suspension the manager keeps here and never in spec: the
	// failure policy's, or one a pause request asked for. It ends with a
	// resume request (kubectl guardedjob resume) or at its until.
	// +optional
	Pause *Pause `json:"pause,omitempty"`

	// lastPauseRequest is the last value of the batch.guardedjob.dev/pause
	// annotation handled, so that a value is acted on once.
	// +optional
	LastPauseRequest string `json:"lastPauseRequest,omitempty"`

	// lastResumeRequest is the last value of the batch.guardedjob.dev/resume
	// annotation handled, so that a value is acted on once.
	// +optional
	LastResumeRequest string `json:"lastResumeRequest,omitempty"`

	// retry is the scheduled occurrence being tried again
	// (spec.retryOccurrence): a run of it ended without success and no cluster
	// has done it yet.
	// +optional
	Retry *OccurrenceRetryStatus `json:"retry,omitempty"`

	// backfill is the progress of the running or last backfill
	// (batch.guardedjob.dev/backfill).
	// +optional
	Backfill *BackfillStatus `json:"backfill,omitempty"`

	// lastBackfillRequest is the outcome of the last backfill request handled:
	// accepted, or refused and why.
	// +optional
	LastBackfillRequest *BackfillRequestRecord `json:"lastBackfillRequest,omitempty"`
	// leases is the ledger of the leases this GuardedJob's runs took in the lock
	// store, kept for as long as a key may still hold a run's token and a while
	// after: live (its run is active), left to expire (its run ended without
	// releasing it, so that a Pod the API server no longer shows is stopped by its
	// pod guard first; expiresBy says until when at the latest) or released. Every
	// part of the manager that must tell whose a token in the store is (taking up a
	// lease a crashed manager never recorded, an unlock request, the stop
	// controller, a shard hand-over) reads it here. Holders only, never tokens.
	// +optional
	// +listType=map
	// +listMapKey=holder
	// +kubebuilder:validation:MaxItems=32
	Leases []LeaseRecord `json:"leases,omitempty"`

	// shard is the shard (its manager's --watch-label-selector) whose manager
	// renews this GuardedJob's leases, written when it records or takes over its
	// runs; empty for a manager that serves every GuardedJob. When a relabel moves
	// the object, the shard it left keeps renewing the leases of its runs until
	// this names the new shard (make before break).
	// +optional
	Shard string `json:"shard,omitempty"`
}

// OccurrenceDone is an occurrence known to be done, and by whom.
type OccurrenceDone struct {
	// scheduledTime is the occurrence.
	// +required
	ScheduledTime metav1.Time `json:"scheduledTime"`

	// by is the holder of the run that did it, <cluster>/<namespace>/<job>
	// (a done-marker's value without its random part; a foreign value as found).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	By string `json:"by,omitempty"`

	// at is when it was done: the completion time of this cluster's Job when
	// this cluster ran it, or when this cluster found its done-marker when
	// another did.
	// +required
	At metav1.Time `json:"at"`
}

// LeaseState is what became of a lease a run took.
// +kubebuilder:validation:Enum=Live;LeftToExpire;Released
type LeaseState string

// Lease states of status.leases.
const (
	// LeaseLive: the run is active; the key holds its token, or may.
	LeaseLive LeaseState = "Live"
	// LeaseLeftToExpire: the run ended without releasing the key; it expires by
	// itself by expiresBy at the latest.
	LeaseLeftToExpire LeaseState = "LeftToExpire"
	// LeaseReleased: the key was deleted, or found gone or held by someone else.
	LeaseReleased LeaseState = "Released"
)

// LeaseRecord is one lease of status.leases.
type LeaseRecord struct {
	// holder is the lease's holder, <cluster>/<namespace>/<job>: the run's token
	// without its random part.
	// +kubebuilder:validation:MaxLength=512
	Holder string `json:"holder"`

	// key is the lock key.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Key string `json:"key,omitempty"`

	// state is Live, LeftToExpire or Released.
	State LeaseState `json:"state"`

	// since is when the lease reached its state.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`

	// expiresBy is, for a lease left to expire, the latest time its key can still
	// hold the run's token: counted from the run's own ttl, never from today's spec.
	// +optional
	ExpiresBy *metav1.Time `json:"expiresBy,omitempty"`
}

// RunDurationsKept is how many run durations status.runDurations keeps.
const RunDurationsKept = 20

// RunDurations summarises the durations of the last runs. A run counts when its Job
// ended on its own (Complete or Failed): from the Job's status.startTime to its
// completionTime (or the time of its Failed condition). A run stopped at lock.maxHold
// counts as lasting its maxHold. Runs stopped for other causes (lock lost, replaced,
// deleted) and runs that never got a Job do not count: they say nothing about how
// long the work takes.
type RunDurations struct {
	// count is the number of durations in recent (at most 20).
	Count int32 `json:"count"`

	// p50 is the median of recent (nearest rank).
	// +optional
	P50 *metav1.Duration `json:"p50,omitempty"`

	// p99 is the 99th percentile of recent (nearest rank: with 20 durations or fewer,
	// the longest of them).
	// +optional
	P99 *metav1.Duration `json:"p99,omitempty"`

	// recent are the durations of the last runs, oldest first, in whole seconds; at
	// most 20.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Recent []metav1.Duration `json:"recent,omitempty"`
}

// LockStatus is the latest observation of a GuardedJob's lock key.
type LockStatus struct {
	// state is Held (a run of this GuardedJob holds the key), Free, Busy (another holder
	// has it), Lost (a run found the key gone or taken) or StoreDown (the store could not
	// be reached).
	// +optional
	State LockState `json:"state,omitempty"`

	// key is the rendered lock key observed.
	// +optional
	Key string `json:"key,omitempty"`

	// holder is the holder of the key: "<cluster>/<namespace>/<job>", the lease value
	// without its secret "#<random>" part (or a foreign holder's value as found).
	// +optional
	Holder string `json:"holder,omitempty"`

	// fence is the fence of the holding run, when it is ours.
	// +optional
	Fence int64 `json:"fence,omitempty"`
}

// ActiveRun is a run in flight. Everything needed to renew and release its lease is
// snapshotted here by the run's first status write (right after its Job was created, or
// while it waits for its lease), so a change of spec or of manager flags never changes
// how an in-flight run is renewed or released.
type ActiveRun struct {
	// jobName is the name of the run's Job: <guardedjob>-<scheduled unix minutes>-<first
	// 6 hex of the token's random part>. Fixed when the lease is taken, before the Job
	// exists.
	// +required
	// +kubebuilder:validation:MinLength=1
	JobName string `json:"jobName"`

	// jobUID is the UID of the run's Job, set once it exists; a run never gets a second Job.
	// +optional
	JobUID types.UID `json:"jobUID,omitempty"`

	// phase is Acquiring (the run waits for its lease: the key is busy with onBusy
	// Retry, or the store does not answer; no Job exists), Running (lease held, fence
	// recorded; its Job was created right after the acquisition, before this status,
	// and waits at its start gate until the lease is confirmed, or is about to be
	// created), Stopping (the Job and its Pods are being stopped; the lease is kept
	// until they are gone) or Releasing (the Job ended; the lease is being released or
	// completed).
	// +required
	Phase RunPhase `json:"phase"`

	// scheduledTime is the occurrence this run is for.
	// +required
	ScheduledTime metav1.Time `json:"scheduledTime"`

	// key is the rendered lock key.
	// +optional
	Key string `json:"key,omitempty"`

	// occurrenceKey is the rendered done-marker key.
	// +optional
	OccurrenceKey string `json:"occurrenceKey,omitempty"`

	// fenceKey is the rendered fence counter key (empty with fencing.policy None).
	// +optional
	FenceKey string `json:"fenceKey,omitempty"`

	// store identifies the store the lease lives in (the manager's store or the storeRef
	// Secret), as resolved at intent time.
	// +optional
	Store string `json:"store,omitempty"`

	// holder is "<cluster>/<namespace>/<job>": the token without its "#<random>" part.
	// +optional
	Holder string `json:"holder,omitempty"`

	// token is the lease value "<holder>#<random>". It lets a restarted or newly elected
	// manager resume renewing; it appears nowhere else (not in events, logs or Pods).
	// +optional
	Token string `json:"token,omitempty"`

	// cluster is the --cluster-name of the manager that recorded the intent; only a
	// manager with that cluster name renews or releases this run.
	// +optional
	Cluster string `json:"cluster,omitempty"`

	// ownerUID is the UID of the GuardedJob that recorded the intent; a run restored from
	// a backup into another object is never renewed.
	// +optional
	OwnerUID types.UID `json:"ownerUID,omitempty"`

	// fence is the fence issued to this run (0 while Acquiring, with policy None, or for
	// an unguarded run).
	// +optional
	Fence int64 `json:"fence,omitempty"`

	// acquiredAt is when the lease was acquired.
	// +optional
	AcquiredAt *metav1.Time `json:"acquiredAt,omitempty"`

	// ttl is the lease length snapshotted at intent time.
	// +optional
	TTL metav1.Duration `json:"ttl,omitempty"`

	// renewInterval is the renewal interval snapshotted at intent time.
	// +optional
	RenewInterval metav1.Duration `json:"renewInterval,omitempty"`

	// maxHold is the hold cap snapshotted at intent time.
	// +optional
	MaxHold metav1.Duration `json:"maxHold,omitempty"`

	// envName is the fence env var name snapshotted at intent time.
	// +optional
	EnvName string `json:"envName,omitempty"`

	// fencingPolicy is the fencing policy snapshotted at intent time.
	// +optional
	FencingPolicy FencingPolicy `json:"fencingPolicy,omitempty"`

	// storeFailurePolicy is the store failure policy snapshotted at intent time.
	// +optional
	StoreFailurePolicy StoreFailurePolicy `json:"storeFailurePolicy,omitempty"`

	// unguarded is true for a FailOpen run started without a lease (the store was down):
	// its Pods carry the fence annotation "unfenced" and an empty fence env var.
	// +optional
	Unguarded bool `json:"unguarded,omitempty"`

	// startDeadline is the latest time the run may still start: its scheduled time (for
	// a run-now trigger, the trigger's time) + startingDeadlineSeconds. It bounds
	// onBusy Retry and FailClosed retries.
	// +optional
	StartDeadline *metav1.Time `json:"startDeadline,omitempty"`

	// stopReason says why a Stopping or Releasing run ends, as "<result>: <why>"
	// (lock lost, maxHold reached, replaced, GuardedJob deleted, ...).
	// +optional
	StopReason string `json:"stopReason,omitempty"`

	// stopResult is the result a Stopping or Releasing run ends with (the part of
	// stopReason before its colon).
	// +optional
	StopResult RunResult `json:"stopResult,omitempty"`

	// retry is the attempt number of a run that tries its occurrence again
	// (spec.retryOccurrence): 1 for the first retry. 0 for a first try.
	// +optional
	Retry int32 `json:"retry,omitempty"`

	// stopCause is what ended a Failed run: JobFailed (the Job failed on its
	// own), or the reason of the event that stopped it (PodStartTimeout,
	// JobRejected, JobStopped for a run concurrencyPolicy Replace replaced,
	// JobDeleted, StaleJob, ...). spec.failurePolicy counts JobFailed, and the
	// causes it lists in alsoCount.
	// +optional
	StopCause string `json:"stopCause,omitempty"`

	// queuedSince is when the run's Job was first seen suspended by a queue
	// (jobTemplate.spec.suspend: true, or a queue such as Kueue): the Job waits
	// for the queue to start it, while the run holds its lease. Unset while the
	// Job is not suspended, and while the manager's own start gate holds it.
	// The Normal event JobQueued is emitted when it is set.
	// +optional
	QueuedSince *metav1.Time `json:"queuedSince,omitempty"`

	// unusuallyLong is true once the run has lasted over 3 times
	// status.runDurations.p99; the Warning event RunUnusuallyLong is emitted once, when
	// it is set.
	// +optional
	UnusuallyLong bool `json:"unusuallyLong,omitempty"`

	// podGuard is set when the run's Pods carry the pod guard: how it was configured
	// at intent time (lock.podGuard and the manager's guard image).
	// +optional
	PodGuard *RunPodGuard `json:"podGuard,omitempty"`

	// backfill is the request value of the backfill this run is an occurrence
	// of; empty for other runs.
	// +optional
	Backfill string `json:"backfill,omitempty"`

	// parameters are the values the run-now request set for this run (the
	// others have their defaults).
	// +optional
	Parameters map[string]string `json:"parameters,omitempty"`

	// runNow is the batch.guardedjob.dev/run-now value that requested this run;
	// empty for a scheduled run and a backfill's. Its Pods get it as
	// GUARDEDJOB_REQUEST.
	// +optional
	RunNow string `json:"runNow,omitempty"`
}

// RecentRun is one outcome in status.recentRuns: a slim RunRecord.
type RecentRun struct {
	// scheduledTime is the occurrence the run was for.
	// +optional
	ScheduledTime *metav1.Time `json:"scheduledTime,omitempty"`
	// result is how it ended.
	// +optional
	Result RunResult `json:"result,omitempty"`
	// jobName is its Job's name; empty when it never had one (Busy, Skipped).
	// +optional
	JobName string `json:"jobName,omitempty"`
	// fence is the fence it ran with; 0 without one.
	// +optional
	Fence int64 `json:"fence,omitempty"`
	// heldBy is the holder that had the lock when it was Busy.
	// +optional
	HeldBy string `json:"heldBy,omitempty"`
	// trigger is what started it: schedule, run-now or backfill.
	// +optional
	Trigger string `json:"trigger,omitempty"`
	// request is the request that started it: a run-now annotation's value, or
	// guardedjobrun:<uid> or guardedjobbackfill:<uid> for a request object; empty
	// for a scheduled run.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Request string `json:"request,omitempty"`
	// finishedAt is when it ended, or was found unable to start.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// message says why, as lastRun.message does, cut at 256 characters.
	// +optional
	// +kubebuilder:validation:MaxLength=300
	Message string `json:"message,omitempty"`
}

// RunRecord is the outcome of a run that finished or did not start.
type RunRecord struct {
	// jobName is the name of the run's Job (empty when no Job was created).
	// +optional
	JobName string `json:"jobName,omitempty"`

	// scheduledTime is the occurrence the run was for.
	// +optional
	ScheduledTime *metav1.Time `json:"scheduledTime,omitempty"`

	// key is the rendered lock key.
	// +optional
	Key string `json:"key,omitempty"`

	// occurrenceKey is the run's rendered done-marker key.
	// +optional
	OccurrenceKey string `json:"occurrenceKey,omitempty"`

	// fenceKey is the run's rendered fence counter key.
	// +optional
	FenceKey string `json:"fenceKey,omitempty"`

	// fence is the fence the run had (0 if none).
	// +optional
	Fence int64 `json:"fence,omitempty"`

	// result is Succeeded, Failed, LockLost, Busy, StoreUnavailable, MaxHoldExceeded or
	// Skipped.
	// +optional
	Result RunResult `json:"result,omitempty"`

	// heldBy is the holder that had the key when the run could not get it (Busy), took
	// it over (LockLost), or had completed the occurrence (Skipped, already done).
	// +optional
	HeldBy string `json:"heldBy,omitempty"`

	// unguarded is true when the run was started without a lease (FailOpen).
	// +optional
	Unguarded bool `json:"unguarded,omitempty"`

	// podGuarded is true when the run's Pods carried the pod guard (lock.podGuard).
	// +optional
	PodGuarded bool `json:"podGuarded,omitempty"`

	// finishedAt is when the outcome was recorded.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// message says what happened, in words a person can act on.
	// +optional
	Message string `json:"message,omitempty"`

	// backfill is the request value of the backfill the run was an occurrence
	// of; empty for other runs.
	// +optional
	Backfill string `json:"backfill,omitempty"`

	// parameters are the values the run-now request set for the run.
	// +optional
	Parameters map[string]string `json:"parameters,omitempty"`
}

// GuardedJob runs a Job on a cron schedule while holding a Redis lease: at most one run
// per lock key across clusters and processes, each with a fencing token.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=gj,categories=all
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="TimeZone",type=string,JSONPath=`.spec.timeZone`,priority=1
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.status.suspended`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.activeCount`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Lock",type=string,JSONPath=`.status.lock.state`,priority=1
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.lock.holder`,priority=1
// +kubebuilder:printcolumn:name="Fence",type=integer,JSONPath=`.status.lastFence`,priority=1
// +kubebuilder:printcolumn:name="Last Result",type=string,JSONPath=`.status.lastRun.result`
// +kubebuilder:printcolumn:name="Last Schedule",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Next Schedule",type=string,JSONPath=`.status.nextScheduleTime`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 45",message="metadata.name must be at most 45 characters: Job names append -<minutes>-<6 hex>"
type GuardedJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec GuardedJobSpec `json:"spec"`

	// status is the observed state, written only by the manager.
	// +optional
	Status GuardedJobStatus `json:"status,omitempty"`
}

// GuardedJobList is a list of GuardedJobs.
//
// +kubebuilder:object:root=true
type GuardedJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GuardedJob `json:"items"`
}
