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

// The names in this file are a contract: users' manifests, dashboards, alerts and other
// tools depend on them. Add names; never rename or remove one.

// Annotations, labels and finalizers.
const (
	// RunNowAnnotation on a GuardedJob triggers a manual run. Its value is a timestamp
	// (RFC 3339 or Unix seconds): the occurrence due at that time (the latest schedule
	// time at or before it) runs now, through the same lock, done-marker and policies.
	// status.lastRunNow records the last value handled.
	//
	//	kubectl annotate gj NAME batch.guardedjob.dev/run-now=$(date -u +%FT%TZ)
	RunNowAnnotation = "batch.guardedjob.dev/run-now"

	// FenceAnnotation on a run's Job and Pod template carries the run's fence, or
	// UnfencedValue for a FailOpen run started without a lease.
	FenceAnnotation = "batch.guardedjob.dev/fence"

	// UnfencedValue is the FenceAnnotation value of a run started without a lease.
	UnfencedValue = "unfenced"

	// LeaseFinalizer is set on every Job the manager creates: the Job is not removed
	// before the run's lease is released (or completed).
	LeaseFinalizer = "batch.guardedjob.dev/lease"

	// GuardedJobFinalizer is set on every GuardedJob: deletion waits until its active
	// runs are stopped (onDelete Stop) or finished (onDelete Wait) and their leases
	// released.
	GuardedJobFinalizer = "batch.guardedjob.dev/finalizer"

	// GuardedJobLabel on a run's Job (and Pod template) holds the GuardedJob's name, so
	// its Jobs can be listed with a label selector.
	GuardedJobLabel = "batch.guardedjob.dev/guardedjob"

	// ScheduledTimeAnnotation on a run's Job holds the occurrence's scheduled time
	// (RFC 3339, UTC).
	ScheduledTimeAnnotation = "batch.guardedjob.dev/scheduled-time"

	// StartGateAnnotation on a run's Job says the manager created it suspended and
	// lets it start (unsuspends it, removing this annotation) only once it has
	// confirmed, with a store call sent after the Job existed, that the run still
	// holds its lease: a manager paused between its lease check and its create
	// cannot start the Job of a run that ended meanwhile. Its value is
	// StartGateLease.
	StartGateAnnotation = "batch.guardedjob.dev/start-gate"
	// StartGateLease is the StartGateAnnotation value.
	StartGateLease = "lease"

	// LeaseSchedulingGate is the scheduling gate on the Pods of a Job that a
	// queue starts (its template sets suspend: true, as Kueue asks): the manager
	// removes it from a Pod only once it has confirmed, with a store call sent
	// after the Pod existed, that the Pod's run still holds its lease. A queue
	// that starts a Job whose run has ended, or starts one while the manager is
	// cut off, gets Pods that are never scheduled.
	LeaseSchedulingGate = "batch.guardedjob.dev/lease"

	// HolderAnnotation on a run's Job holds the run's holder
	// ("<cluster>/<namespace>/<job>"), never the token.
	HolderAnnotation = "batch.guardedjob.dev/holder"

	// RunAnnotation on a run's Job holds the run as status.active records it
	// (JSON; never the token), written before status records the run: a manager
	// that dies between creating the Job and recording its run leaves a Job the
	// next pass adopts from it, once the lock key shows that the Job's run still
	// holds its lease. Only on the Job, never on its Pods.
	RunAnnotation = "batch.guardedjob.dev/run"
)

// Fixed values that are not fields.
const (
	// DefaultFenceEnvName is the default of fencing.envName: the env var set to the fence
	// on every container and init container of a run's Pods.
	DefaultFenceEnvName = "GUARDEDJOB_FENCE"

	// The occurrence a run's Pods work on, set on every container and init
	// container next to the fence (docs/api.md#what-a-runs-pods-are-told).
	// ScheduledTimeEnv is the occurrence's scheduled time, RFC 3339 in UTC.
	ScheduledTimeEnv = "GUARDEDJOB_SCHEDULED_TIME"
	// ScheduledTimeLocalEnv is the same time in spec.timeZone (UTC without one),
	// RFC 3339 with the zone's offset.
	ScheduledTimeLocalEnv = "GUARDEDJOB_SCHEDULED_TIME_LOCAL"
	// TimeZoneEnv is the zone ScheduledTimeLocalEnv is in (spec.timeZone, or UTC).
	TimeZoneEnv = "GUARDEDJOB_TIME_ZONE"
	// OccurrenceEnv is the occurrence's key: its done-marker in the store, the same
	// for this occurrence in every cluster sharing the store.
	OccurrenceEnv = "GUARDEDJOB_OCCURRENCE"
	// TriggerEnv says what started the run: TriggerSchedule, TriggerRunNow,
	// TriggerBackfill or TriggerRetry.
	TriggerEnv = "GUARDEDJOB_TRIGGER"
	// RequestEnv names the request that started the run: the run-now value, the
	// backfill's request value, or a retry's attempt number; empty for a
	// scheduled run.
	RequestEnv = "GUARDEDJOB_REQUEST"

	// TriggerEnv's values.
	TriggerSchedule = "schedule"
	TriggerRunNow   = "run-now"
	TriggerBackfill = "backfill"
	// TriggerRetry: a retry of a scheduled occurrence no cluster has done yet
	// (spec.retryOccurrence); GUARDEDJOB_REQUEST is its attempt number.
	TriggerRetry = "retry"
)

// Trigger says what started a run (TriggerEnv's value): a backfill, a run-now,
// a retry of its occurrence, or the schedule.
func (r *ActiveRun) Trigger() string {
	switch {
	case r.Backfill != "":
		return TriggerBackfill
	case r.RunNow != "":
		return TriggerRunNow
	case r.Retry > 0:
		return TriggerRetry
	}
	return TriggerSchedule
}

// Condition types.
const (
	// ReadyCondition is True when the spec is valid and the GuardedJob schedules runs
	// (reason Scheduled or Suspended). False names what to fix: InvalidSchedule,
	// InvalidTimeZone, InvalidTemplate, InvalidKey, KeyNotAllowed, StoreSecretNotFound,
	// StoreSecretInvalid, StoreNotAllowed, UnsafeLeaseTiming, StoreKeyWrongType,
	// DuplicateClusterName (reserved), PodGuardUnavailable, InvalidParameters.
	ReadyCondition = "Ready"

	// LockHeldCondition is True while a run of this GuardedJob holds the lease
	// (reason LockAcquired). False reasons: Idle (no run holds it, including a
	// FailOpen run started without a lease), LockBusy, and while a run is stopped,
	// the reason it is stopped: LockLost, StoreUnavailable, MaxHoldExceeded,
	// JobDeleted, JobStopped, StaleJob, PodStartTimeout.
	LockHeldCondition = "LockHeld"

	// StoreReachableCondition is True when the last call to the store succeeded
	// (reason StoreAvailable), False when it failed (reason StoreUnavailable).
	StoreReachableCondition = "StoreReachable"

	// StoreSafeCondition is True when the store is configured so that it cannot lose a
	// lease silently (reason SafeConfiguration). False reasons: EvictionEnabled,
	// PersistenceDisabled. Unknown with reason ConfigUnknown when the configuration
	// cannot be read (managed Redis or ACLs often forbid CONFIG GET).
	StoreSafeCondition = "StoreSafe"

	// ReconcilingCondition (kstatus) is True only while metadata.generation differs
	// from status.observedGeneration: the manager has not yet finished a pass over the
	// latest spec (reason GenerationNotObserved). A run in progress is normal
	// operation, not reconciling. The condition is absent otherwise.
	ReconcilingCondition = "Reconciling"

	// StalledCondition (kstatus) is True when Ready is False for a reason that
	// retrying cannot fix: someone must change the spec, the store's keys or the
	// manager's flags. Its reason is Ready's reason (see IsStalledReason). The condition
	// is absent otherwise.
	StalledCondition = "Stalled"

	// MaxHoldAtRiskCondition is True when the p99 of the recent run durations
	// (status.runDurations) exceeds 80% of lock.maxHold (reason RunDurationNearMaxHold):
	// a slightly slower run would be stopped at maxHold. False (reason
	// RunDurationWithinMaxHold) otherwise; absent until a run duration is recorded. It
	// does not affect Ready: the GuardedJob works, but should be recalibrated.
	MaxHoldAtRiskCondition = "MaxHoldAtRisk"

	// QueuedCondition is True while the Job of a running run is suspended by a
	// queue (jobTemplate.spec.suspend: true, or a queue such as Kueue), never by
	// the manager's own start gate: the run holds and renews its lease while no
	// Pod runs, and lock.maxHold counts, but lock.podStartTimeout does not (reason
	// JobQueued). False (reason NotQueued) once no run's Job waits; absent on a
	// GuardedJob whose Jobs were never queued. It does not affect Ready or
	// kstatus.
	QueuedCondition = "Queued"
)

// MaxHoldAtRisk condition reasons.
const (
	// RunDurationWithinMaxHoldReason (MaxHoldAtRisk=False): the p99 of the recent run
	// durations is at most 80% of lock.maxHold.
	RunDurationWithinMaxHoldReason = "RunDurationWithinMaxHold"
)

// QueuedCondition reasons.
const (
	// JobQueuedReason (Queued=True; also a Normal event, once per run and
	// suspension): a run's Job is suspended, waiting for its queue to start it.
	JobQueuedReason = "JobQueued"
	// NotQueuedReason (Queued=False): no run's Job waits in a queue.
	NotQueuedReason = "NotQueued"
)

// ReconcilingCondition reason.
const (
	// GenerationNotObservedReason (Reconciling=True): the latest spec generation has
	// not been reconciled without error yet.
	GenerationNotObservedReason = "GenerationNotObserved"
)

// IsStalledReason says whether a Ready=False reason also sets Stalled=True:
// waiting does not clear it, someone must change the spec, the store's keys or the
// manager's flags. StoreSecretNotFound and StoreSecretInvalid are not stalled: the
// Secret is read again every 30s, so applying or fixing it clears them.
func IsStalledReason(reason string) bool {
	switch reason {
	case InvalidScheduleReason, InvalidTimeZoneReason, InvalidTemplateReason, InvalidKeyReason,
		KeyNotAllowedReason, UnsafeLeaseTimingReason, StoreKeyWrongTypeReason, StoreNotAllowedReason,
		DuplicateClusterNameReason, InvalidParametersReason:
		return true
	}
	return false
}

// Ready condition reasons.
const (
	// ScheduledReason (Ready=True): the spec is valid and runs are scheduled.
	ScheduledReason = "Scheduled"
	// SuspendedReason (Ready=True): the spec is valid and spec.suspend is true.
	SuspendedReason = "Suspended"

	// InvalidScheduleReason (Ready=False): spec.schedule does not parse.
	InvalidScheduleReason = "InvalidSchedule"
	// InvalidTimeZoneReason (Ready=False): spec.timeZone is not a known IANA zone.
	InvalidTimeZoneReason = "InvalidTimeZone"
	// InvalidTemplateReason (Ready=False): a key template does not parse or fails to
	// render, or the jobTemplate cannot be turned into a Job.
	InvalidTemplateReason = "InvalidTemplate"
	// InvalidKeyReason (Ready=False): a rendered key is empty, longer than 512 bytes, or
	// contains whitespace or control characters.
	InvalidKeyReason = "InvalidKey"
	// KeyNotAllowedReason (Ready=False): a rendered key in the manager's shared store
	// neither starts with "<namespace>:" nor with a prefix granted by --key-grants.
	KeyNotAllowedReason = "KeyNotAllowed"
	// StoreSecretNotFoundReason (Ready=False): lock.storeRef names a Secret that does not
	// exist.
	StoreSecretNotFoundReason = "StoreSecretNotFound"
	// StoreSecretInvalidReason (Ready=False): the storeRef Secret has no usable "url" key,
	// or its "ca.crt" is not PEM.
	StoreSecretInvalidReason = "StoreSecretInvalid"
	// StoreNotAllowedReason (Ready=False): a host of the storeRef Secret's URL is
	// outside the manager's --store-allow; no connection was made.
	StoreNotAllowedReason = "StoreNotAllowed"
	// UnsafeLeaseTimingReason (Ready=False): ttl < renewInterval + Pod grace period + 5s,
	// or (with leader election) ttl - renewInterval does not exceed the leader-election
	// lease duration + retry period + 5s.
	UnsafeLeaseTimingReason = "UnsafeLeaseTiming"
	// StoreKeyWrongTypeReason (Ready=False): a rendered lock, done-marker or fence key
	// holds a value of another type in the store (or a fence that is not an integer);
	// the acquisition wrote nothing. It stays until the key is fixed (the next
	// acquisition succeeds) or the spec changes.
	StoreKeyWrongTypeReason = "StoreKeyWrongType"
	// DuplicateClusterNameReason (Ready=False): another manager announces the same
	// --cluster-name to this store.
	DuplicateClusterNameReason = "DuplicateClusterName"
	// PodGuardUnavailableReason (Ready=False): lock.podGuard is set but the manager
	// has no guard image (--guard-image), or the guard's Secret lacks a url.
	PodGuardUnavailableReason = "PodGuardUnavailable"
)

// LockHeld, StoreReachable and StoreSafe condition reasons.
const (
	// IdleReason (LockHeld=False): no run is active.
	IdleReason = "Idle"
	// StoreAvailableReason (StoreReachable=True): the last store call succeeded.
	StoreAvailableReason = "StoreAvailable"
	// SafeConfigurationReason (StoreSafe=True): maxmemory-policy is noeviction and, where
	// needed, persistence is on.
	SafeConfigurationReason = "SafeConfiguration"
	// EvictionEnabledReason (StoreSafe=False): maxmemory-policy is not noeviction, so
	// Redis may evict a lease under memory pressure.
	EvictionEnabledReason = "EvictionEnabled"
	// PersistenceDisabledReason (StoreSafe=False): persistence is off while fencing is
	// Strict or done-markers are used, so a restart forgets them.
	PersistenceDisabledReason = "PersistenceDisabled"
	// ConfigUnknownReason (StoreSafe=Unknown): the store's configuration could not be read.
	ConfigUnknownReason = "ConfigUnknown"
)

// Event reasons. Events are emitted on transitions only, never per renewal. Several
// double as condition reasons (LockAcquired, LockBusy, LockLost, StoreUnavailable,
// MaxHoldExceeded, JobDeleted, JobStopped, StaleJob, PodStartTimeout), and every
// Ready=False reason is also the reason of the Warning event that accompanies it.
// docs/events.md lists every reason with its type and message.
const (
	// LockAcquiredReason (Normal): a run acquired the lease; the message names key,
	// holder and fence. Also LockHeld=True's reason.
	LockAcquiredReason = "LockAcquired"
	// JobCreatedReason (Normal): a run's Job was created.
	JobCreatedReason = "JobCreated"
	// RunAdoptedReason (Normal): a Job created before its run was recorded (the
	// manager stopped, or its status write failed, in between) was adopted: its
	// lock key still holds its run's token.
	RunAdoptedReason = "RunAdopted"
	// LockBusyReason (Normal): the key is held by another holder; the message names it,
	// its fence if known and when it expires. Also a LockHeld=False reason.
	LockBusyReason = "LockBusy"
	// LockLostReason (Warning): a renewal found the key gone or owned by another token;
	// the run is stopped now. The message names the new holder. Also a LockHeld=False
	// reason.
	LockLostReason = "LockLost"
	// JobDeletedReason (Normal): a run's Job was deleted by someone else (the run ends
	// once its Pods are gone; also a LockHeld=False reason), or the manager deleted a
	// finished Job beyond successfulJobsHistoryLimit or failedJobsHistoryLimit.
	JobDeletedReason = "JobDeleted"
	// LockReleasedReason (Normal): a run's lease was released.
	LockReleasedReason = "LockReleased"
	// StoreUnavailableReason (Warning): the store could not be reached: a run did not
	// start, or its Pods are stopped before its lease could expire. Also the
	// StoreReachable=False and LockHeld=False reason.
	StoreUnavailableReason = "StoreUnavailable"
	// FenceRaisedReason (Warning): with fencing Strict, the counter was below the floor
	// (status.lastFence + 1 or the store clock) and was raised: the store probably lost
	// data.
	FenceRaisedReason = "FenceRaised"
	// MaxHoldExceededReason (Warning): a run held the lease for lock.maxHold and is
	// stopped. Also a LockHeld=False reason.
	MaxHoldExceededReason = "MaxHoldExceeded"
	// OccurrenceDoneReason (Normal): a run succeeded and its occurrence's done-marker
	// was written; the message names the done-marker key. (A run skipped because the
	// marker already exists gets TriggerSkipped.)
	OccurrenceDoneReason = "OccurrenceDone"
	// OccurrenceDoneElsewhereReason (Normal): a run that found its lock held by a
	// run of the GuardedJob of the same name in another cluster (Busy) learned
	// that that run completed the occurrence: its done-marker was written.
	// status.lastOccurrenceDone records it.
	OccurrenceDoneElsewhereReason = "OccurrenceDoneElsewhere"
	// JobStoppedReason (Warning): a run's Job and Pods are being stopped because a newer
	// run replaced it (concurrencyPolicy Replace) or the GuardedJob is deleted with
	// onDelete Stop. Stops for other causes carry their own reason (LockLost,
	// StoreUnavailable, MaxHoldExceeded, StaleJob, PodStartTimeout). Also a
	// LockHeld=False reason.
	JobStoppedReason = "JobStopped"
	// StartingDeadlineExceededReason (Warning): an occurrence could not start before its
	// starting deadline (busy lock with Retry, store down with FailClosed, manager down).
	StartingDeadlineExceededReason = "StartingDeadlineExceeded"
	// TriggerSkippedReason (Normal): a run was recorded as Skipped: a run-now value
	// older than the object or than startingDeadlineSeconds, an occurrence already done
	// (the message names who completed it), or concurrencyPolicy Forbid with a run
	// active.
	TriggerSkippedReason = "TriggerSkipped"
	// InvalidTriggerReason (Warning): a run-now value does not parse.
	InvalidTriggerReason = "InvalidTrigger"
	// DeprecatedAnnotationReason (Warning): a request annotation (run-now,
	// backfill) was handled; request objects (GuardedJobRun, GuardedJobBackfill)
	// replace them.
	DeprecatedAnnotationReason = "DeprecatedAnnotation"
	// UnguardedReason (Warning): a FailOpen run started without a lease because the store
	// was unreachable. Also a LockHeld=False reason.
	UnguardedReason = "Unguarded"
	// PodStartTimeoutReason (Warning; also LockHeld=False while the run stops): no
	// Pod of the run reached Running or finished within lock.podStartTimeout; the
	// message says why (the scheduler's or the Job controller's last word).
	PodStartTimeoutReason = "PodStartTimeout"
	// StaleJobReason (Warning): a Job is stopped that no run of this cluster may keep:
	// one with the run's name but another fence or UID, one no active run claims (also
	// emitted on the Job when its GuardedJob is gone), or a run recorded under another
	// --cluster-name. Also a LockHeld=False reason.
	StaleJobReason = "StaleJob"
	// UnrecordedRunCountedReason (Warning; --early-gate): status took the fence or
	// the occurrence of a Job that carries a run no status recorded (its lease was
	// lost before a pass recorded it, or the Job was made by someone else with the
	// run's name): Strict's floor stays above that fence and the schedule does not
	// start that occurrence again.
	UnrecordedRunCountedReason = "UnrecordedRunCounted"
	// NoPodFailurePolicyReason (Warning): a fenced run's Pods use restartPolicy
	// OnFailure, which forbids the podFailurePolicy that fails the Job on disruption, so a
	// replacement Pod may run with the fence of a Pod that is maybe still alive.
	NoPodFailurePolicyReason = "NoPodFailurePolicy"
	// InsecureStoreReason (Warning): a run acquired its lease in a store whose Secret
	// turns TLS server verification off (insecureSkipVerify: "true").
	InsecureStoreReason = "InsecureStore"
	// JobRejectedReason (Warning): the API server rejected a run's Job (invalid or
	// forbidden); the run's lease is released and the run ends Failed.
	JobRejectedReason = "JobRejected"
	// FixedKeyWithAllowReason (Warning): concurrencyPolicy Allow with a lock.key that is
	// the same for every occurrence, so overlapping runs wait for each other's lease.
	// Emitted once per spec generation.
	FixedKeyWithAllowReason = "FixedKeyWithAllow"
	// RunDurationNearMaxHoldReason (Warning): the p99 of the recent run durations
	// exceeds 80% of lock.maxHold; emitted when MaxHoldAtRisk turns True (also its
	// reason).
	RunDurationNearMaxHoldReason = "RunDurationNearMaxHold"
	// RunUnusuallyLongReason (Warning): a run has lasted over 3 times the p99 of the
	// recent run durations (with at least MinDurationsForUnusual of them); emitted
	// once per run, while it runs.
	RunUnusuallyLongReason = "RunUnusuallyLong"
	// GuardStoppedReason (Warning; also LockHeld=False while the run stops): the pod
	// guard of one of the run's Pods ended its workload, because it found the lease
	// lost or could not confirm it before it could expire; the message is the guard's
	// (docs/pod-guard.md). The run is stopped and ends GuardStopped.
	GuardStoppedReason = "GuardStopped"
	// PodGuardSettingsReason (Warning): lock.podGuard changed the run's Job in a way
	// the template did not ask for (backoffLimit set to 0), or the guard's user could
	// not be told from the Pod template, so it may not be able to signal the workload.
	PodGuardSettingsReason = "PodGuardSettings"
)

// Lease calibration thresholds (docs/operations.md, "Lease calibration").
const (
	// MaxHoldAtRiskPercent: MaxHoldAtRisk is True when the p99 of the recent run
	// durations exceeds this percentage of lock.maxHold.
	MaxHoldAtRiskPercent = 80
	// UnusuallyLongFactor: a run is unusually long past this multiple of the p99.
	UnusuallyLongFactor = 3
	// MinDurationsForUnusual is how many run durations must be recorded before a run
	// can be called unusually long: with fewer, the p99 is one or two runs' luck.
	MinDurationsForUnusual = 5
)

// LockState is the observed state of a GuardedJob's lock key (status.lock.state).
// +kubebuilder:validation:Enum=Held;Free;Busy;Lost;StoreDown
type LockState string

const (
	// LockStateHeld: a run of this GuardedJob holds the key.
	LockStateHeld LockState = "Held"
	// LockStateFree: nobody holds the key.
	LockStateFree LockState = "Free"
	// LockStateBusy: another holder has the key.
	LockStateBusy LockState = "Busy"
	// LockStateLost: a run of this GuardedJob found the key gone or taken.
	LockStateLost LockState = "Lost"
	// LockStateStoreDown: the store could not be reached.
	LockStateStoreDown LockState = "StoreDown"
)

// RunPhase is the phase of an active run (status.active[].phase).
// +kubebuilder:validation:Enum=Acquiring;Running;Stopping;Releasing
type RunPhase string

const (
	// RunPhaseAcquiring: the run waits for its lease (a busy key with onBusy Retry, a
	// store that does not answer). No Job exists yet.
	RunPhaseAcquiring RunPhase = "Acquiring"
	// RunPhaseRunning: the lease is held and the fence recorded; the Job was created
	// right after the acquisition (waiting at its start gate until the lease is
	// confirmed), or is about to be, and the lease is renewed.
	RunPhaseRunning RunPhase = "Running"
	// RunPhaseStopping: the Job and its Pods are being stopped (see stopReason); the
	// lease is kept, where still ours, until the Pods are gone.
	RunPhaseStopping RunPhase = "Stopping"
	// RunPhaseReleasing: the Job has ended (Complete or Failed) or its Pods are gone; the
	// lease is being completed or released.
	RunPhaseReleasing RunPhase = "Releasing"
)

// RunResult is the outcome of a run (status.lastRun.result).
// +kubebuilder:validation:Enum=Succeeded;Failed;LockLost;Busy;StoreUnavailable;MaxHoldExceeded;Skipped;GuardStopped
type RunResult string

const (
	// RunResultSucceeded: the Job completed; the occurrence's done-marker was written.
	RunResultSucceeded RunResult = "Succeeded"
	// RunResultFailed: the Job failed (or was stopped by Replace).
	RunResultFailed RunResult = "Failed"
	// RunResultLockLost: the lease was lost while the Job ran; the Job was stopped.
	RunResultLockLost RunResult = "LockLost"
	// RunResultBusy: the key was held by another holder (heldBy) until the run gave up.
	RunResultBusy RunResult = "Busy"
	// RunResultStoreUnavailable: the store could not be reached (FailClosed: the Job was
	// not started, or was stopped at the self-fence deadline).
	RunResultStoreUnavailable RunResult = "StoreUnavailable"
	// RunResultMaxHoldExceeded: the run reached lock.maxHold and was stopped.
	RunResultMaxHoldExceeded RunResult = "MaxHoldExceeded"
	// RunResultSkipped: the run did not start; the message says why (already done, stale
	// trigger, concurrencyPolicy Forbid, missed starting deadline, ...).
	RunResultSkipped RunResult = "Skipped"
	// RunResultGuardStopped: the pod guard of one of the run's Pods ended its workload
	// (lease lost, or not confirmable before it could expire); the run was stopped.
	RunResultGuardStopped RunResult = "GuardStopped"
)
