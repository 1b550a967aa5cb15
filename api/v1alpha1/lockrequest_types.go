package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Lock requests: reading the lock store (GuardedJobInspect) and deleting a stale
// lock or done-marker (GuardedJobUnlock) are requests of their own, as running is:
// a role may grant one without the other, and neither needs `patch guardedjobs` or
// the store's credentials. The manager answers each once, oldest first, after the
// GuardedJob's status recorded it (status.storeView, status.lastUnlock).

// GuardedJobInspectSpec is what a GuardedJobInspect asks for.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a GuardedJobInspect's spec cannot change: create another request"
type GuardedJobInspectSpec struct {
	// guardedJobName names the GuardedJob, in this namespace, whose keys to read:
	// those each active run recorded, or with no active run those of the current
	// occurrence. No other key is ever read.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=45
	GuardedJobName string `json:"guardedJobName"`

	// ttlSecondsAfterFinished is how long the manager keeps the request after it
	// was answered; then it is deleted. Default 86400 (a day).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2592000
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// GuardedJobInspectStatus is the manager's answer to a GuardedJobInspect.
type GuardedJobInspectStatus struct {
	// phase is Pending, Finished or Refused.
	// +optional
	Phase RequestPhase `json:"phase,omitempty"`

	// request is the value the GuardedJob's status.storeView.request repeats:
	// guardedjobinspect:<uid>.
	// +optional
	Request string `json:"request,omitempty"`

	// view is what the manager read in the lock store: holders, never tokens.
	// +optional
	View *StoreView `json:"view,omitempty"`

	// finishedAt is when the request was answered or refused.
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
// +kubebuilder:resource:shortName=gjinspect,categories=guardedjobrequests
// +kubebuilder:printcolumn:name="GuardedJob",type=string,JSONPath=`.spec.guardedJobName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.view.entries[0].lock.holder`
// +kubebuilder:printcolumn:name="Whose",type=string,JSONPath=`.status.view.entries[0].lock.whose`
// +kubebuilder:printcolumn:name="Expires",type=date,JSONPath=`.status.view.entries[0].lock.expiresAt`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// GuardedJobInspect asks the manager to read the lock store now for a
// GuardedJob's keys and answer with what it saw: who holds the lock and until
// when, the fence counter, the done-marker. Creating one needs only `create
// guardedjobinspects`.
type GuardedJobInspect struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the request.
	// +required
	Spec GuardedJobInspectSpec `json:"spec"`

	// status is the manager's answer.
	// +optional
	Status GuardedJobInspectStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// GuardedJobInspectList is a list of GuardedJobInspects.
type GuardedJobInspectList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GuardedJobInspect `json:"items"`
}

// GuardedJobUnlockSpec is what a GuardedJobUnlock asks for.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a GuardedJobUnlock's spec cannot change: create another request"
type GuardedJobUnlockSpec struct {
	// guardedJobName names the GuardedJob, in this namespace, whose key to delete.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=45
	GuardedJobName string `json:"guardedJobName"`

	// holder is the holder seen in an inspect answer (lock.holder or
	// doneMarker.holder): the key is deleted only while its value has that holder,
	// so that a key that changed hands since is never deleted.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Holder string `json:"holder"`

	// key is the key to delete: a lock key or the current done-marker key an
	// inspect answer shows. Optional when the GuardedJob has one lock key, which is
	// then the one deleted; a done-marker is deleted only when named here.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Key string `json:"key,omitempty"`

	// ttlSecondsAfterFinished is how long the manager keeps the request after it
	// was answered; then it is deleted. Default 86400 (a day).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2592000
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// GuardedJobUnlockStatus is the manager's answer to a GuardedJobUnlock.
type GuardedJobUnlockStatus struct {
	// phase is Pending, Finished or Refused.
	// +optional
	Phase RequestPhase `json:"phase,omitempty"`

	// request is the value the GuardedJob's status.lastUnlock.request repeats:
	// guardedjobunlock:<uid>.
	// +optional
	Request string `json:"request,omitempty"`

	// result is Deleted, Refused, Changed, Absent or StoreUnavailable.
	// +optional
	Result UnlockResult `json:"result,omitempty"`

	// key is the key the request was for.
	// +optional
	Key string `json:"key,omitempty"`

	// foundHolder is the holder the key had instead (result Changed).
	// +optional
	FoundHolder string `json:"foundHolder,omitempty"`

	// finishedAt is when the request was answered or refused.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// message says what happened, or why the request was refused.
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
// +kubebuilder:resource:shortName=gjunlock,categories=guardedjobrequests
// +kubebuilder:printcolumn:name="GuardedJob",type=string,JSONPath=`.spec.guardedJobName`
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.spec.holder`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Result",type=string,JSONPath=`.status.result`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// GuardedJobUnlock asks the manager to delete a stale lock of a GuardedJob, or its
// current occurrence's done-marker, while the key still holds the holder named.
// The lease of a run that may still be working, here or in another cluster, is
// never deleted. A request is carried out only within UnlockRequestWindow of its
// creation. Creating one needs only `create guardedjobunlocks`.
type GuardedJobUnlock struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the request.
	// +required
	Spec GuardedJobUnlockSpec `json:"spec"`

	// status is the manager's answer.
	// +optional
	Status GuardedJobUnlockStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// GuardedJobUnlockList is a list of GuardedJobUnlocks.
type GuardedJobUnlockList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GuardedJobUnlock `json:"items"`
}

// Request value prefixes of the lock requests.
const (
	InspectRequestPrefix = "guardedjobinspect:"
	UnlockRequestPrefix  = "guardedjobunlock:"
)

// RequestValue is this request's value: guardedjobinspect:<uid>.
func (r *GuardedJobInspect) RequestValue() string { return InspectRequestPrefix + string(r.UID) }

// RequestValue is this request's value: guardedjobunlock:<uid>.
func (r *GuardedJobUnlock) RequestValue() string { return UnlockRequestPrefix + string(r.UID) }
