package v1alpha1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Requests are objects of their own, the way `kubectl create job --from=cronjob/x`
// needs only `create jobs`: whoever may create a GuardedJobRun may ask for a run,
// and nothing more (the guardedjob-requester ClusterRole, aggregated into the
// built-in "edit" and "admin" roles, grants exactly that). The manager answers
// each request once, in its status, after the GuardedJob's own status records what
// it did; a finished request is deleted ttlSecondsAfterFinished later.

// RequestPhase is where a request is.
// +kubebuilder:validation:Enum=Pending;Running;Finished;Refused;Cancelled
type RequestPhase string

const (
	// RequestPending: the manager has not acted on it yet (the GuardedJob is busy
	// with an earlier request, or the request was just created).
	RequestPending RequestPhase = "Pending"
	// RequestRunning: its run (or backfill) is in flight.
	RequestRunning RequestPhase = "Running"
	// RequestFinished: its run (or backfill) ended; result says how.
	RequestFinished RequestPhase = "Finished"
	// RequestRefused: the manager did not act on it; message says why.
	RequestRefused RequestPhase = "Refused"
	// RequestCancelled: a backfill cancelled with spec.cancel.
	RequestCancelled RequestPhase = "Cancelled"
)

// Request conditions and their reasons.
const (
	// RequestAcceptedCondition is True once the manager acted on a request, False
	// when it refused it.
	RequestAcceptedCondition = "Accepted"
	// RequestCompleteCondition is True once a request's run or backfill ended (its
	// reason is the result), or the request was refused or cancelled.
	RequestCompleteCondition = "Complete"

	// RequestAcceptedReason: the request started a run or a backfill.
	RequestAcceptedReason = "Accepted"
	// RequestRefusedReason: the request was refused; the message says why.
	RequestRefusedReason = "Refused"
	// RequestWaitingReason: the request waits for an earlier one.
	RequestWaitingReason = "Waiting"
	// RequestInProgressReason: the request's run or backfill is in flight.
	RequestInProgressReason = "InProgress"
	// RequestNoGuardedJobReason: no GuardedJob of that name exists in the namespace.
	RequestNoGuardedJobReason = "GuardedJobNotFound"
)

// DefaultRequestTTL is how long a finished request is kept when its
// ttlSecondsAfterFinished is unset: a day, long enough for the morning after.
const DefaultRequestTTL = 24 * 60 * 60

// RequestWaitForGuardedJob is how long a request naming a GuardedJob that does
// not exist waits for it (a GitOps sync may create the request first) before it
// is refused.
const RequestWaitForGuardedJob = 60

// GuardedJobRunSpec is what a GuardedJobRun asks for.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a GuardedJobRun's spec cannot change: create another request"
type GuardedJobRunSpec struct {
	// guardedJobName names the GuardedJob, in this namespace, to run now. The run
	// goes through its lock like any other: it is Busy while another holder has the
	// key, and Skipped when its occurrence is already done.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=45
	GuardedJobName string `json:"guardedJobName"`

	// parameters are values for the GuardedJob's declared spec.parameters; the
	// others keep their defaults. A name the GuardedJob does not declare, or a value
	// its pattern refuses, refuses the request.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Parameters map[string]string `json:"parameters,omitempty"`

	// ttlSecondsAfterFinished is how long the manager keeps the request after it
	// finished or was refused; then it is deleted. Default 86400 (a day).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2592000
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// GuardedJobRunStatus is what became of a GuardedJobRun.
type GuardedJobRunStatus struct {
	// phase is Pending, Running, Finished or Refused.
	// +optional
	Phase RequestPhase `json:"phase,omitempty"`

	// result is how the run ended (Succeeded, Failed, Busy, Skipped, ...), once
	// phase is Finished.
	// +optional
	Result RunResult `json:"result,omitempty"`

	// scheduledTime is the occurrence the run is for (the GUARDEDJOB_SCHEDULED_TIME
	// of its Pods).
	// +optional
	ScheduledTime *metav1.Time `json:"scheduledTime,omitempty"`

	// jobName is the run's Job; empty when it never had one (Busy, Skipped,
	// Refused).
	// +optional
	JobName string `json:"jobName,omitempty"`

	// fence is the fence the run got; 0 without one.
	// +optional
	Fence int64 `json:"fence,omitempty"`

	// heldBy is the holder that had the lock when the run was Busy.
	// +optional
	HeldBy string `json:"heldBy,omitempty"`

	// request is the value the run carries as GUARDEDJOB_REQUEST, and the
	// GuardedJob's status.recentRuns[].request: guardedjobrun:<uid>.
	// +optional
	Request string `json:"request,omitempty"`

	// acceptedAt is when the manager acted on the request.
	// +optional
	AcceptedAt *metav1.Time `json:"acceptedAt,omitempty"`

	// finishedAt is when the run ended, or the request was refused.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// message says what happened, in words a person can act on.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// conditions are Accepted and Complete.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=gjrun,categories=guardedjobrequests
// +kubebuilder:printcolumn:name="GuardedJob",type=string,JSONPath=`.spec.guardedJobName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Result",type=string,JSONPath=`.status.result`
// +kubebuilder:printcolumn:name="Job",type=string,JSONPath=`.status.jobName`
// +kubebuilder:printcolumn:name="Fence",type=integer,JSONPath=`.status.fence`,priority=1
// +kubebuilder:printcolumn:name="Scheduled",type=date,JSONPath=`.status.scheduledTime`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// GuardedJobRun asks the manager to run a GuardedJob once, now, through its lock,
// optionally with parameters. Creating one needs only `create guardedjobruns`, not
// `patch guardedjobs`.
type GuardedJobRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the request.
	// +required
	Spec GuardedJobRunSpec `json:"spec"`

	// status is the manager's answer.
	// +optional
	Status GuardedJobRunStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// GuardedJobRunList is a list of GuardedJobRuns.
type GuardedJobRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GuardedJobRun `json:"items"`
}

// GuardedJobBackfillSpec is what a GuardedJobBackfill asks for.
// +kubebuilder:validation:XValidation:rule="self.guardedJobName == oldSelf.guardedJobName && self.from == oldSelf.from && self.to == oldSelf.to && (has(self.parallelism) == has(oldSelf.parallelism)) && (!has(self.parallelism) || self.parallelism == oldSelf.parallelism)",message="only spec.cancel of a GuardedJobBackfill can change: create another request"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",message="a cancelled backfill stays cancelled"
type GuardedJobBackfillSpec struct {
	// guardedJobName names the GuardedJob, in this namespace, whose occurrences to
	// run.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=45
	GuardedJobName string `json:"guardedJobName"`

	// from is the start of the range: an RFC 3339 time (its offset says the zone),
	// or a local time or date read in the GuardedJob's spec.timeZone:
	// 2026-11-01T00:05:00, 2026-11-01T00:05 or 2026-11-01 (the start of that day).
	// +required
	// +kubebuilder:validation:MinLength=10
	// +kubebuilder:validation:MaxLength=40
	From string `json:"from"`

	// to is the end of the range, included, read as from is; a date alone is the
	// end of that day. A range reaching into the future is cut at the time the
	// request is accepted.
	// +required
	// +kubebuilder:validation:MinLength=10
	// +kubebuilder:validation:MaxLength=40
	To string `json:"to"`

	// parallelism is how many occurrences run at once. Default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Parallelism *int32 `json:"parallelism,omitempty"`

	// cancel, set to true, stops the backfill: occurrences not started yet never
	// start; those running go on and are counted when they end.
	// +optional
	Cancel bool `json:"cancel,omitempty"`

	// ttlSecondsAfterFinished is how long the manager keeps the request after it
	// completed, was cancelled or was refused; then it is deleted. Default 86400.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2592000
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// GuardedJobBackfillStatus is the progress of a GuardedJobBackfill.
type GuardedJobBackfillStatus struct {
	// phase is Pending, Running, Finished, Cancelled or Refused.
	// +optional
	Phase RequestPhase `json:"phase,omitempty"`

	// request is the value the backfill's runs carry (the GuardedJob's
	// status.backfill.request): guardedjobbackfill:<uid>.
	// +optional
	Request string `json:"request,omitempty"`

	// rangeStart and rangeEnd are the range as the manager read it, in UTC.
	// +optional
	RangeStart *metav1.Time `json:"rangeStart,omitempty"`
	// +optional
	RangeEnd *metav1.Time `json:"rangeEnd,omitempty"`

	// total is the number of occurrences in the range.
	// +optional
	Total int32 `json:"total,omitempty"`
	// succeeded counts occurrences this backfill ran that succeeded.
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// skipped counts occurrences already done (in any cluster sharing the store).
	// +optional
	Skipped int32 `json:"skipped,omitempty"`
	// failed counts occurrences whose run ended other than Succeeded.
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// remaining counts occurrences not finished yet.
	// +optional
	Remaining int32 `json:"remaining,omitempty"`

	// failedOccurrences are the scheduled times of the first 20 failed occurrences.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	FailedOccurrences []metav1.Time `json:"failedOccurrences,omitempty"`

	// acceptedAt is when the backfill started.
	// +optional
	AcceptedAt *metav1.Time `json:"acceptedAt,omitempty"`

	// finishedAt is when it completed, was cancelled, or was refused.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// message says what happened last, in words a person can act on.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// conditions are Accepted and Complete.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=gjbackfill,categories=guardedjobrequests
// +kubebuilder:printcolumn:name="GuardedJob",type=string,JSONPath=`.spec.guardedJobName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.total`
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.succeeded`
// +kubebuilder:printcolumn:name="Skipped",type=integer,JSONPath=`.status.skipped`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failed`
// +kubebuilder:printcolumn:name="Remaining",type=integer,JSONPath=`.status.remaining`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// GuardedJobBackfill asks the manager to run every occurrence of a GuardedJob's
// schedule in a range, each through the lock; occurrences already done anywhere
// sharing the store are skipped. A GuardedJob runs one backfill at a time: a later
// request waits (Pending) for the one ahead.
type GuardedJobBackfill struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the request.
	// +required
	Spec GuardedJobBackfillSpec `json:"spec"`

	// status is the manager's answer and the backfill's progress.
	// +optional
	Status GuardedJobBackfillStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// GuardedJobBackfillList is a list of GuardedJobBackfills.
type GuardedJobBackfillList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GuardedJobBackfill `json:"items"`
}

// Request value prefixes: a request object's value, as runs and the GuardedJob's
// status carry it, is the prefix and the object's UID (unique even when a request
// is created again under the same name).
const (
	RunRequestPrefix      = "guardedjobrun:"
	BackfillRequestPrefix = "guardedjobbackfill:"
)

// RequestValue is the value this request's run carries: guardedjobrun:<uid>.
func (r *GuardedJobRun) RequestValue() string { return RunRequestPrefix + string(r.UID) }

// RequestValue is the value this backfill's runs carry: guardedjobbackfill:<uid>.
func (r *GuardedJobBackfill) RequestValue() string { return BackfillRequestPrefix + string(r.UID) }

// IsRequestObjectValue says whether a request value (a run's runNow, a
// backfill's request, a store view's or an unlock's request) names a request
// object rather than an annotation's value.
func IsRequestObjectValue(v string) bool {
	for _, prefix := range []string{RunRequestPrefix, BackfillRequestPrefix, InspectRequestPrefix, UnlockRequestPrefix} {
		if strings.HasPrefix(v, prefix) {
			return true
		}
	}
	return false
}

// Final says whether a request in this phase is answered for good.
func (p RequestPhase) Final() bool {
	return p == RequestFinished || p == RequestRefused || p == RequestCancelled
}
