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
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Requests a user makes through the GuardedJob itself, which the manager carries
// out against the lock store: whoever may patch the GuardedJob may ask, and nobody
// needs the store's credentials. The names are a contract, like those in
// conditions.go.
const (
	// InspectNowAnnotation asks the manager to read the lock store now for this
	// GuardedJob's keys and to write what it saw into status.storeView. Its value
	// is an RFC 3339 time (fractional seconds allowed) that identifies the request:
	// status.storeView.request repeats the value it answers.
	//
	//	kubectl annotate gj NAME batch.guardedjob.dev/inspect-now=$(date -u +%FT%TZ) --overwrite
	InspectNowAnnotation = "batch.guardedjob.dev/inspect-now"

	// UnlockAnnotation asks the manager to delete a stale lock of this GuardedJob,
	// or its current occurrence's done-marker, if the key still holds the value of
	// UnlockHolderAnnotation. Its value is an RFC 3339 time no further than
	// UnlockRequestWindow from the manager's clock; status.lastUnlock records the
	// outcome of the last value handled. Set all three unlock annotations in one
	// command.
	UnlockAnnotation = "batch.guardedjob.dev/unlock"

	// UnlockHolderAnnotation is the holder the user saw in status.storeView
	// (lock.holder or doneMarker.holder): the key is deleted only while its value
	// has that holder.
	UnlockHolderAnnotation = "batch.guardedjob.dev/unlock-holder"

	// UnlockKeyAnnotation is the key to delete: a lock key or the done-marker key
	// status.storeView shows. Optional when the GuardedJob has one lock key, which
	// is then the one deleted; a done-marker is deleted only when named here.
	UnlockKeyAnnotation = "batch.guardedjob.dev/unlock-key"
)

// UnlockRequestWindow is how far an unlock request's time may be from the
// manager's clock: an older value (a request committed to Git and applied later)
// is refused.
const UnlockRequestWindow = 10 * time.Minute

// Event reasons of requests.
const (
	// ManualUnlockReason (Warning): the manager deleted a lock or a done-marker on
	// an unlock request; the message names the key and the holder.
	ManualUnlockReason = "ManualUnlock"
	// UnlockRefusedReason (Warning): the manager refused an unlock request; the
	// message says why (the lease of one of this GuardedJob's active runs, a key
	// that is not this GuardedJob's, a stale or malformed request).
	UnlockRefusedReason = "UnlockRefused"
)

// LockWhose says whose a lock key's value is (status.storeView).
// +kubebuilder:validation:Enum=ThisGuardedJob;ThisCluster;OtherCluster;Foreign
type LockWhose string

const (
	// LockWhoseThisGuardedJob: an active run of this GuardedJob holds the key.
	LockWhoseThisGuardedJob LockWhose = "ThisGuardedJob"
	// LockWhoseThisCluster: a GuardedJob run of this cluster (the manager's
	// --cluster-name) that is not an active run of this GuardedJob: a run of
	// another GuardedJob sharing the key, or a run whose lease was left behind.
	LockWhoseThisCluster LockWhose = "ThisCluster"
	// LockWhoseOtherCluster: a GuardedJob run of another cluster.
	LockWhoseOtherCluster LockWhose = "OtherCluster"
	// LockWhoseForeign: a value that is not a GuardedJob token: a process outside
	// GuardedJob sharing the key.
	LockWhoseForeign LockWhose = "Foreign"
)

// UnlockResult is the outcome of an unlock request (status.lastUnlock.result).
// +kubebuilder:validation:Enum=Deleted;Refused;Changed;Absent;StoreUnavailable
type UnlockResult string

const (
	// UnlockDeleted: the key held the holder asked for and was deleted.
	UnlockDeleted UnlockResult = "Deleted"
	// UnlockRefused: the request was not carried out; the message says why.
	UnlockRefused UnlockResult = "Refused"
	// UnlockChanged: the key holds another holder's value (foundHolder) now;
	// nothing was deleted.
	UnlockChanged UnlockResult = "Changed"
	// UnlockAbsent: the key did not exist; nothing to delete.
	UnlockAbsent UnlockResult = "Absent"
	// UnlockStoreUnavailable: the store did not answer; nothing is known to be
	// deleted. Ask again.
	UnlockStoreUnavailable UnlockResult = "StoreUnavailable"
)

// StoreView is what the manager read in the lock store for this GuardedJob's keys,
// in answer to the batch.guardedjob.dev/inspect-now annotation. It never holds a
// lease token: holders only.
type StoreView struct {
	// request is the inspect-now value this view answers.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Request string `json:"request"`

	// observedAt is when the manager read the store (or found it could not).
	// +required
	ObservedAt metav1.Time `json:"observedAt"`

	// store names the store read, without credentials.
	// +optional
	Store string `json:"store,omitempty"`

	// entries are the keys read: those each active run recorded, or with no active
	// run those of the current occurrence (status.lastScheduleTime, or before the
	// first run the latest schedule time), rendered from the spec. No other key is
	// ever read.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Entries []StoreViewEntry `json:"entries,omitempty"`

	// error says why the store was not read (an invalid spec, a key outside the
	// namespace's grants, a store Secret missing) or did not answer; entries are
	// then absent or incomplete.
	// +optional
	Error string `json:"error,omitempty"`
}

// StoreViewEntry is the state of one set of keys: a lock, its fence counter and an
// occurrence's done-marker.
type StoreViewEntry struct {
	// jobName is the active run that recorded these keys; empty for the current
	// occurrence's keys when no run is active.
	// +optional
	JobName string `json:"jobName,omitempty"`

	// scheduledTime is the occurrence these keys are for.
	// +optional
	ScheduledTime *metav1.Time `json:"scheduledTime,omitempty"`

	// lock is the lock key's state.
	// +required
	Lock StoreLockView `json:"lock"`

	// fence is the fence counter (absent with fencing.policy None).
	// +optional
	Fence *StoreFenceView `json:"fence,omitempty"`

	// doneMarker is the occurrence's done-marker.
	// +optional
	DoneMarker *StoreDoneMarkerView `json:"doneMarker,omitempty"`
}

// StoreLockView is a lock key as read.
type StoreLockView struct {
	// key is the lock key.
	// +required
	Key string `json:"key"`

	// holder is the holder of the key's value ("<cluster>/<namespace>/<job>", or a
	// foreign value as found); empty when the key is free.
	// +optional
	Holder string `json:"holder,omitempty"`

	// whose says whose the value is: ThisGuardedJob (an active run of this
	// GuardedJob), ThisCluster, OtherCluster or Foreign. Empty when free.
	// +optional
	Whose LockWhose `json:"whose,omitempty"`

	// expiresAt is when the key expires unless renewed (rounded up to the second);
	// absent when the key is free, or held without an expiry (noExpiry).
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`

	// noExpiry is true when the key is held without an expiry: it never frees
	// itself (a foreign process that set it without PX).
	// +optional
	NoExpiry bool `json:"noExpiry,omitempty"`
}

// StoreFenceView is a fence counter as read.
type StoreFenceView struct {
	// key is the fence counter key.
	// +required
	Key string `json:"key"`

	// value is the counter's value: the last fence handed out on it (0 when absent).
	// +optional
	Value int64 `json:"value,omitempty"`
}

// StoreDoneMarkerView is an occurrence's done-marker as read.
type StoreDoneMarkerView struct {
	// key is the done-marker key.
	// +required
	Key string `json:"key"`

	// holder is the holder of the run that completed the occurrence; empty when
	// the marker is absent (the occurrence has not succeeded).
	// +optional
	Holder string `json:"holder,omitempty"`
}

// UnlockRecord is the outcome of the last batch.guardedjob.dev/unlock request
// handled.
type UnlockRecord struct {
	// request is the unlock value handled.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Request string `json:"request"`

	// key is the key the request was for.
	// +optional
	Key string `json:"key,omitempty"`

	// holder is the holder the request named.
	// +optional
	Holder string `json:"holder,omitempty"`

	// result is Deleted, Refused, Changed, Absent or StoreUnavailable.
	// +required
	Result UnlockResult `json:"result"`

	// foundHolder is the holder the key had instead (result Changed).
	// +optional
	FoundHolder string `json:"foundHolder,omitempty"`

	// message says what happened, or why the request was refused.
	// +optional
	Message string `json:"message,omitempty"`

	// finishedAt is when the request was handled.
	// +required
	FinishedAt metav1.Time `json:"finishedAt"`
}
