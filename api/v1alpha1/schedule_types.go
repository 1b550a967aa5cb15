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
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What a schedule does beyond firing at its times: a note on a suspension, a
// pause after repeated failures, buffered overlaps, run parameters and
// backfills. The names below are a contract, like those in conditions.go.

// SuspendNote says who suspended a GuardedJob, why, and until when.
type SuspendNote struct {
	// by is who suspended the GuardedJob: a person, a team or a tool.
	// kubectl guardedjob suspend sets it to the user the API server knows; the
	// failure policy sets "guardedjob-manager". At most 128 characters.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	By string `json:"by,omitempty"`

	// reason is why it is suspended, in words the next person can act on.
	// At most 512 characters.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Reason string `json:"reason,omitempty"`

	// until, when set, is when the suspension ends by itself: from that time
	// runs are scheduled again (condition Suspended=False, reason
	// SuspendExpired, and an event). The manager never writes spec: a
	// spec.suspend: true whose until has passed stays in the object (and in
	// Git) until someone sets it to false. RFC 3339.
	// +optional
	Until *metav1.Time `json:"until,omitempty"`
}

// OccurrenceRetry keeps trying an occurrence until some cluster has done it.
type OccurrenceRetry struct {
	// within is how long after its scheduled time an occurrence is still
	// tried, while no cluster sharing the lock store has written its
	// done-marker: a run that finds the key busy waits for it (as onBusy
	// Retry does until the starting deadline), and a run that ends without
	// success (Failed, MaxHoldExceeded, LockLost, GuardStopped,
	// StoreUnavailable; not a run replaced or a Job deleted by a person) is
	// started again after a backoff (lock.busyRetry's). Tries also stop when
	// the next occurrence is due. When they stop without a done-marker: a
	// Warning event OccurrenceAbandoned and the series
	// guardedjob_occurrences_abandoned_total. From 1m to 168h.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="retryOccurrence.within must be a duration such as 30m or 6h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1m') && duration(self) <= duration('168h'))",message="retryOccurrence.within must be from 1m to 168h"
	Within metav1.Duration `json:"within"`
}

// OccurrenceRetryStatus is the occurrence being tried again.
type OccurrenceRetryStatus struct {
	// scheduledTime is the occurrence's scheduled time.
	// +required
	ScheduledTime metav1.Time `json:"scheduledTime"`

	// attempts is how many retries of it have started.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`

	// notBefore is when the next retry may start (the backoff after the last
	// run ended).
	// +optional
	NotBefore *metav1.Time `json:"notBefore,omitempty"`

	// until is when tries stop: the scheduled time plus
	// spec.retryOccurrence.within, or the next occurrence, whichever is first.
	// +required
	Until metav1.Time `json:"until"`

	// lastResult is how its last run ended.
	// +optional
	LastResult RunResult `json:"lastResult,omitempty"`

	// lastMessage is why its last run ended (at most 256 characters).
	// +optional
	LastMessage string `json:"lastMessage,omitempty"`
}

// Pause is a suspension the manager keeps in status, never in spec: the failure
// policy's, or one a pause request asked for (the batch.guardedjob.dev/pause
// annotation, kubectl guardedjob suspend). spec.suspend stays the user's and
// Git's; a pause ends by a resume request (batch.guardedjob.dev/resume, kubectl
// guardedjob resume) or at its until.
type Pause struct {
	SuspendNote `json:",inline"`

	// since is when the manager paused the GuardedJob.
	// +required
	Since metav1.Time `json:"since"`

	// request is the value of the pause request this pause answers; empty for
	// the failure policy's.
	// +optional
	Request string `json:"request,omitempty"`
}

// PausedAt reports whether the pause is in effect at now (its until not
// reached); false for no pause.
func (p *Pause) PausedAt(now time.Time) bool {
	return p != nil && (p.Until == nil || now.Before(p.Until.Time))
}

// Suffix writes the note as " (by X, until T): reason", the way the condition
// message, the plugin and its status show it after "suspended"; "" for no note.
func (n *SuspendNote) Suffix() string {
	if n == nil {
		return ""
	}
	var who []string
	if n.By != "" {
		who = append(who, "by "+n.By)
	}
	if n.Until != nil {
		who = append(who, "until "+n.Until.UTC().Format(time.RFC3339))
	}
	out := ""
	if len(who) > 0 {
		out = " (" + strings.Join(who, ", ") + ")"
	}
	if n.Reason != "" {
		out += ": " + n.Reason
	}
	return out
}

// FailurePolicy pauses a GuardedJob whose runs keep failing.
type FailurePolicy struct {
	// suspendAfter is how many runs in a row may fail on their own before the
	// manager pauses the GuardedJob (status.pause, by "guardedjob-manager";
	// spec is not written): runs whose Job failed, and runs that ended
	// MaxHoldExceeded. A run that succeeds starts the count again; runs stopped
	// for anything that is not the workload failing (a Pod that did not start
	// within podStartTimeout, a Job the API server rejected, a run
	// concurrencyPolicy Replace replaced, a deleted Job, LockLost, GuardStopped,
	// StoreUnavailable, Busy, Skipped) neither count nor reset it, unless
	// alsoCount names them, and backfill runs are not counted. From 1 to 100.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	SuspendAfter int32 `json:"suspendAfter"`

	// alsoCount adds causes that suspendAfter counts besides the workload
	// failing: PodStartTimeout (no Pod started within lock.podStartTimeout: an
	// autoscaler that takes longer, an image that cannot be pulled) and
	// JobRejected (the API server refused the Job: admission, quota). A run
	// replaced by concurrencyPolicy Replace never counts.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	AlsoCount []FailureCause `json:"alsoCount,omitempty"`
}

// FailureCause is a cause of a Failed run that spec.failurePolicy may count.
// +kubebuilder:validation:Enum=PodStartTimeout;JobRejected
type FailureCause string

// The causes spec.failurePolicy.alsoCount may name, and the one it always counts.
const (
	FailurePodStartTimeout FailureCause = "PodStartTimeout"
	FailureJobRejected     FailureCause = "JobRejected"
	// FailureJobFailed is stopCause of a run whose Job failed on its own.
	FailureJobFailed FailureCause = "JobFailed"
)

// RunParameter declares one value a manual run may set (as an environment
// variable of the run's containers). Only declared names are accepted, and only
// values the declaration allows.
// +kubebuilder:validation:XValidation:rule="!has(self.pattern) || !has(self.enum)",message="parameters[].pattern and parameters[].enum cannot both be set: use one",fieldPath=".enum"
// +kubebuilder:validation:XValidation:rule=`!has(self.enum) || (has(self.default) ? self.default : "") in self.enum`,message="parameters[].default must be one of parameters[].enum (scheduled runs use the default; without one, the empty string)",fieldPath=".default"
// +kubebuilder:validation:XValidation:rule=`!has(self.pattern) || (has(self.default) ? self.default : "").matches("^(?:" + self.pattern + ")$")`,message="parameters[].default must match parameters[].pattern (scheduled runs use the default; without one, the empty string)",fieldPath=".default"
type RunParameter struct {
	// name is the parameter's name and the environment variable set to its value
	// on every container and init container of the run's Pods (it replaces a
	// variable of that name in the jobTemplate). A C identifier (letters, digits
	// and _, not starting with a digit), 1 to 64 characters, other than
	// fencing.envName and not starting with GUARDEDJOB_ (the variables the
	// manager sets: the fence and the occurrence).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z_][A-Za-z0-9_]*$')",message="parameters[].name must be a C identifier (letters, digits and _, not starting with a digit) such as REGION: it becomes an environment variable"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('GUARDEDJOB_')",message="parameters[].name must not start with GUARDEDJOB_: the manager sets those variables (GUARDEDJOB_FENCE, GUARDEDJOB_SCHEDULED_TIME, ...)"
	Name string `json:"name"`

	// default is the value of scheduled runs, and of manual runs that do not set
	// the parameter. Defaults to the empty string. At most 256 characters.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Default *string `json:"default,omitempty"`

	// pattern, when set, is a regular expression (RE2 syntax) every value must
	// match as a whole, such as "[a-z]{2}-[a-z]+-[0-9]". At most 256 characters.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Pattern string `json:"pattern,omitempty"`

	// enum, when set, lists the only values allowed (at most 32, each at most 256
	// characters).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=256
	Enum []string `json:"enum,omitempty"`

	// description says what the parameter does, for the people who set it.
	// At most 256 characters.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Description string `json:"description,omitempty"`
}

// Bounds of the fields and requests in this file.
const (
	// MaxParameters is how many spec.parameters a GuardedJob may declare.
	MaxParameters = 16
	// MaxParameterValue is the longest value a parameter may have, in bytes.
	MaxParameterValue = 256
	// DefaultBufferLimit is the number of occurrences concurrencyPolicy BufferAll
	// keeps waiting when spec.bufferLimit is unset.
	DefaultBufferLimit int32 = 10
	// MaxBufferLimit is the largest spec.bufferLimit.
	MaxBufferLimit int32 = 100
	// MaxBackfillOccurrences is the most occurrences one backfill may cover.
	MaxBackfillOccurrences = 1000
	// MaxBackfillParallelism is the most occurrences a backfill runs at once.
	MaxBackfillParallelism = 10
	// BackfillRequestWindow is how far a backfill request's time may be from the
	// manager's clock: an older request (one committed to Git and applied later,
	// in another cluster) is refused.
	BackfillRequestWindow = 10 * time.Minute
	// BackfillDoneMarkerTTL is the shortest life of the done-marker of an
	// occurrence a backfill ran (plus lock.keepAfterSuccess): the same backfill
	// started in another cluster within it skips the occurrence.
	BackfillDoneMarkerTTL = 7 * 24 * time.Hour
	// FailurePolicySuspender is status.pause.by when the failure policy paused
	// the GuardedJob (and spec.suspendNote.by where earlier versions wrote
	// their pause into spec; the manager moves such a note to status.pause).
	FailurePolicySuspender = "guardedjob-manager"
)

// Annotations of the requests in this file.
const (
	// PauseAnnotation asks the manager to pause the GuardedJob in status
	// (status.pause): no new runs are scheduled until a resume request or the
	// note's until. Its value identifies the request (kubectl guardedjob
	// suspend sets the time); each value is handled once
	// (status.lastPauseRequest). spec is never written.
	PauseAnnotation = "batch.guardedjob.dev/pause"
	// PauseNoteAnnotation is the pause request's note: a JSON object with by,
	// reason and until (RFC 3339), as spec.suspendNote; optional.
	PauseNoteAnnotation = "batch.guardedjob.dev/pause-note"
	// ResumeAnnotation asks the manager to end status.pause. Its value
	// identifies the request; each value is handled once
	// (status.lastResumeRequest). It does not change spec.suspend, which is
	// the manifest's.
	ResumeAnnotation = "batch.guardedjob.dev/resume"

	// RunNowParametersAnnotation holds the parameter values of manual runs: a
	// JSON object of names and string values, such as {"REGION":"eu-west-1"}.
	// Every run-now trigger handled while it is set uses these values (and the
	// defaults for the others); remove it to run with the defaults.
	// kubectl guardedjob run --param sets or removes it with the trigger.
	RunNowParametersAnnotation = "batch.guardedjob.dev/run-now-parameters"

	// ParametersAnnotation on a run's Job holds the values of every declared
	// parameter the run got, as a JSON object.
	ParametersAnnotation = "batch.guardedjob.dev/parameters"

	// BackfillAnnotation asks the manager to run every occurrence of the schedule
	// between BackfillFromAnnotation and BackfillToAnnotation (both included).
	// Its value is an RFC 3339 time no further than BackfillRequestWindow from
	// the manager's clock; it identifies the request (status.backfill.request and
	// status.lastBackfillRequest.request repeat it). Set the annotations of a
	// request in one command.
	BackfillAnnotation = "batch.guardedjob.dev/backfill"
	// BackfillFromAnnotation is the start of the backfill's range (RFC 3339).
	BackfillFromAnnotation = "batch.guardedjob.dev/backfill-from"
	// BackfillToAnnotation is the end of the backfill's range (RFC 3339); not in
	// the future.
	BackfillToAnnotation = "batch.guardedjob.dev/backfill-to"
	// BackfillParallelismAnnotation is how many occurrences of the backfill run
	// at once, from 1 (the default) to MaxBackfillParallelism.
	BackfillParallelismAnnotation = "batch.guardedjob.dev/backfill-parallelism"
	// BackfillCancelAnnotation cancels the running backfill whose request value
	// it holds: no further occurrence starts; those running go on.
	BackfillCancelAnnotation = "batch.guardedjob.dev/backfill-cancel"
)

// Condition types, reasons and event reasons of this file.
const (
	// SuspendedCondition is True while no new runs are scheduled, because
	// spec.suspend is true (reason SuspendRequested; the message carries
	// spec.suspendNote) or because of a pause in status (reason TooManyFailures
	// when the failure policy paused it, PauseRequested when a request did).
	// False after a suspension ended: reason Resumed, or SuspendExpired when
	// spec.suspendNote.until passed. Absent on a GuardedJob never suspended.
	// It does not change kstatus or the Argo CD health (Ready says Suspended).
	SuspendedCondition = "Suspended"
	// PausedCondition is True while status.pause holds (reason TooManyFailures
	// or PauseRequested), False after it ended (reason Resumed, or
	// PauseExpired at its until). Absent on a GuardedJob never paused.
	PausedCondition = "Paused"

	// SuspendRequestedReason (Suspended=True): spec.suspend is true, set by a
	// person or a tool.
	SuspendRequestedReason = "SuspendRequested"
	// PauseRequestedReason (Suspended=True, Paused=True; also a Normal event): a
	// pause request paused the GuardedJob in status.
	PauseRequestedReason = "PauseRequested"
	// TooManyFailuresReason (Suspended=True, Paused=True): the failure policy
	// paused the GuardedJob after spec.failurePolicy.suspendAfter failed runs in
	// a row.
	TooManyFailuresReason = "TooManyFailures"
	// ResumedReason (Suspended=False, Paused=False; also a Normal event when a
	// resume request ended a pause): spec.suspend was set back to false, or a
	// resume request ended status.pause.
	ResumedReason = "Resumed"
	// SuspendExpiredReason (Suspended=False; also a Normal event):
	// spec.suspendNote.until passed and runs are scheduled again; spec.suspend
	// stays as the manifest has it.
	SuspendExpiredReason = "SuspendExpired"
	// PauseExpiredReason (Paused=False; also a Normal event): status.pause.until
	// passed and the manager ended the pause.
	PauseExpiredReason = "PauseExpired"
	// InvalidPauseRequestReason (Warning event): a pause request's note is not
	// a valid note (JSON with by, reason and until in the future); the
	// GuardedJob is not paused.
	InvalidPauseRequestReason = "InvalidPauseRequest"
	// OccurrenceRetryingReason (Normal event): a run of an occurrence ended
	// without success and no cluster has done it: it is tried again after a
	// backoff (spec.retryOccurrence).
	OccurrenceRetryingReason = "OccurrenceRetrying"
	// OccurrenceAbandonedReason (Warning event): spec.retryOccurrence.within
	// passed (or the next occurrence came) and no cluster sharing the lock
	// store has done the occurrence: it is not tried again.
	OccurrenceAbandonedReason = "OccurrenceAbandoned"

	// PauseMovedToStatusReason (Normal event): a pause that an earlier manager
	// version wrote into spec (spec.suspendNote.by guardedjob-manager) was moved to
	// status.pause, and spec.suspend and spec.suspendNote were removed.
	PauseMovedToStatusReason = "PauseMovedToStatus"

	// SuspendedAfterFailuresReason (Warning event): the failure policy suspended
	// the GuardedJob; the message names the failed runs and how to resume.
	SuspendedAfterFailuresReason = "SuspendedAfterFailures"

	// RunBufferedReason (Normal event): a run due while an earlier one is active
	// waits for it (concurrencyPolicy BufferOne or BufferAll).
	RunBufferedReason = "RunBuffered"

	// InvalidParametersReason (Ready=False, stalled; also a Warning event): a
	// spec.parameters[].pattern does not compile. As a Warning event alone: a
	// run-now request set parameters that are not declared or not allowed; the
	// run did not start (status.lastRun says why).
	InvalidParametersReason = "InvalidParameters"

	// RunParametersReason (Normal event): a run-now request set parameters; the
	// message names them and their values.
	RunParametersReason = "RunParameters"

	// BackfillStartedReason (Normal event): a backfill request was accepted.
	BackfillStartedReason = "BackfillStarted"
	// BackfillRefusedReason (Warning event): a backfill request was refused;
	// status.lastBackfillRequest says why.
	BackfillRefusedReason = "BackfillRefused"
	// BackfillFinishedReason (Normal event): every occurrence of a backfill ran,
	// was skipped or failed; the message counts them.
	BackfillFinishedReason = "BackfillFinished"
	// BackfillCancelledReason (Normal event): a backfill was cancelled.
	BackfillCancelledReason = "BackfillCancelled"
)

// BufferedRun is an occurrence waiting for the run before it to end
// (concurrencyPolicy BufferOne or BufferAll).
type BufferedRun struct {
	// scheduledTime is the occurrence: its run has this scheduled time (key
	// templates, done-marker, the Job's scheduled-time annotation).
	// +required
	ScheduledTime metav1.Time `json:"scheduledTime"`

	// bufferedAt is when it was due and found an earlier run active.
	// +required
	BufferedAt metav1.Time `json:"bufferedAt"`

	// runNow is the run-now value of a manual run; empty for a scheduled one.
	// +optional
	RunNow string `json:"runNow,omitempty"`

	// parameters are the values the run-now request set.
	// +optional
	Parameters map[string]string `json:"parameters,omitempty"`
}

// BackfillState is the state of a backfill (status.backfill.state).
// +kubebuilder:validation:Enum=Running;Complete;Cancelled
type BackfillState string

const (
	// BackfillRunning: occurrences are still to run or running.
	BackfillRunning BackfillState = "Running"
	// BackfillComplete: every occurrence succeeded, was skipped or failed.
	BackfillComplete BackfillState = "Complete"
	// BackfillCancelled: cancelled; occurrences not started then never start.
	BackfillCancelled BackfillState = "Cancelled"
)

// BackfillRequestResult is what the manager did with a backfill request.
// +kubebuilder:validation:Enum=Accepted;Refused
type BackfillRequestResult string

const (
	// BackfillAccepted: the request became status.backfill.
	BackfillAccepted BackfillRequestResult = "Accepted"
	// BackfillRefused: the request was refused; the message says why.
	BackfillRefused BackfillRequestResult = "Refused"
)

// BackfillStatus is the progress of a backfill. It is the backfill's whole
// state: a restarted manager goes on from it.
type BackfillStatus struct {
	// request is the batch.guardedjob.dev/backfill value of this backfill.
	// +required
	Request string `json:"request"`

	// from is the start of the range; every occurrence of the schedule from
	// from to to (both included) runs once.
	// +required
	From metav1.Time `json:"from"`

	// to is the end of the range (cut at the time the request was accepted).
	// +required
	To metav1.Time `json:"to"`

	// parallelism is how many occurrences run at once.
	// +required
	Parallelism int32 `json:"parallelism"`

	// state is Running, Complete or Cancelled.
	// +required
	State BackfillState `json:"state"`

	// total is the number of occurrences in the range when it was accepted.
	// +optional
	Total int32 `json:"total,omitempty"`

	// succeeded counts occurrences that this backfill ran and that succeeded.
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`

	// skipped counts occurrences whose done-marker said they had already run,
	// in this cluster or another sharing the store.
	// +optional
	Skipped int32 `json:"skipped,omitempty"`

	// failed counts occurrences whose run ended other than Succeeded (Failed,
	// LockLost, MaxHoldExceeded, GuardStopped, StoreUnavailable). Their
	// done-marker is not written: a later backfill runs them again.
	// +optional
	Failed int32 `json:"failed,omitempty"`

	// remaining counts occurrences not finished yet, those in current included.
	// +optional
	Remaining int32 `json:"remaining,omitempty"`

	// current are the occurrences in flight: running, or waiting to try again
	// (their lock was held by another holder).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Current []BackfillOccurrence `json:"current,omitempty"`

	// next is the next occurrence to start after those in current; unset when
	// every occurrence has started.
	// +optional
	Next *metav1.Time `json:"next,omitempty"`

	// failedOccurrences are the scheduled times of the first 20 failed
	// occurrences.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	FailedOccurrences []metav1.Time `json:"failedOccurrences,omitempty"`

	// startedAt is when the request was accepted.
	// +required
	StartedAt metav1.Time `json:"startedAt"`

	// finishedAt is when the backfill completed or was cancelled.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// message says what happened last, in words a person can act on.
	// +optional
	Message string `json:"message,omitempty"`
}

// BackfillOccurrence is an occurrence of a backfill in flight.
type BackfillOccurrence struct {
	// scheduledTime is the occurrence.
	// +required
	ScheduledTime metav1.Time `json:"scheduledTime"`

	// attempts counts the attempts that found the lock held by another holder
	// (or could not start before their starting deadline) and are tried again.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`

	// retryAt is when it is tried again; unset while it runs.
	// +optional
	RetryAt *metav1.Time `json:"retryAt,omitempty"`
}

// BackfillRequestRecord is the outcome of the last backfill request handled.
type BackfillRequestRecord struct {
	// request is the batch.guardedjob.dev/backfill value handled.
	// +required
	Request string `json:"request"`

	// result is Accepted or Refused.
	// +required
	Result BackfillRequestResult `json:"result"`

	// message says why a request was refused, or what was accepted.
	// +optional
	Message string `json:"message,omitempty"`

	// handledAt is when the manager handled the request.
	// +required
	HandledAt metav1.Time `json:"handledAt"`
}

// SuspendedAt reports whether spec.suspend holds at now: true, and its note's
// until (if any) not reached.
func (s *GuardedJobSpec) SuspendedAt(now time.Time) bool {
	if !s.Suspended() {
		return false
	}
	return s.SuspendNote == nil || s.SuspendNote.Until == nil || now.Before(s.SuspendNote.Until.Time)
}

// SuspendedAt reports whether the GuardedJob schedules no new runs at now:
// spec.suspend holds, or a pause in status does.
func (gj *GuardedJob) SuspendedAt(now time.Time) bool {
	return gj.Spec.SuspendedAt(now) || gj.Status.Pause.PausedAt(now)
}

// SuspendNoteOf returns spec.suspendNote while the GuardedJob is suspended, or nil.
func (s *GuardedJobSpec) SuspendNoteOf() *SuspendNote {
	if !s.Suspended() {
		return nil
	}
	return s.SuspendNote
}

// SuspendAfter returns spec.failurePolicy.suspendAfter, or 0 when there is no
// failure policy.
func (s *GuardedJobSpec) SuspendAfter() int32 {
	if s.FailurePolicy == nil || s.FailurePolicy.SuspendAfter < 1 {
		return 0
	}
	return s.FailurePolicy.SuspendAfter
}

// CountsFailure says whether spec.failurePolicy counts a Failed run that ended
// for cause (its stopCause): a Job that failed on its own always, the causes
// alsoCount names too, nothing else.
func (s *GuardedJobSpec) CountsFailure(cause string) bool {
	if cause == string(FailureJobFailed) {
		return true
	}
	if s.FailurePolicy == nil {
		return false
	}
	for _, c := range s.FailurePolicy.AlsoCount {
		if string(c) == cause {
			return true
		}
	}
	return false
}

// BufferLimitOrDefault returns how many occurrences may wait for an active run:
// 1 with concurrencyPolicy BufferOne; spec.bufferLimit (default 10, at most 100)
// with BufferAll; 0 with the other policies.
func (s *GuardedJobSpec) BufferLimitOrDefault() int32 {
	switch s.ConcurrencyPolicyOrDefault() {
	case BufferOneConcurrent:
		return 1
	case BufferAllConcurrent:
		if s.BufferLimit == nil || *s.BufferLimit < 1 {
			return DefaultBufferLimit
		}
		return min(*s.BufferLimit, MaxBufferLimit)
	default:
		return 0
	}
}

// ParameterDefault returns the default of a declared parameter ("" if unset).
func (p *RunParameter) ParameterDefault() string {
	if p.Default == nil {
		return ""
	}
	return *p.Default
}
