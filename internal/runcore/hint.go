package runcore

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// RunDiffers is the hint rule of step AdoptUnrecorded: it names the first field
// the manager acts on in which a run found in a Job's annotation (hint) differs
// from the trusted one (want: from status, or from the spec for the occurrence
// the annotation names), or "". It names fields, never values: the annotation
// is anyone's to write.
func RunDiffers(want, hint *batchv1alpha1.ActiveRun) string {
	for _, f := range []struct {
		name string
		same bool
	}{
		{"scheduledTime", want.ScheduledTime.Equal(&hint.ScheduledTime)},
		{"key", want.Key == hint.Key},
		{"occurrenceKey", want.OccurrenceKey == hint.OccurrenceKey},
		{"fenceKey", want.FenceKey == hint.FenceKey},
		{"store", want.Store == hint.Store},
		{"ttl", want.TTL == hint.TTL},
		{"renewInterval", want.RenewInterval == hint.RenewInterval},
		{"maxHold", want.MaxHold == hint.MaxHold},
		{"envName", want.EnvName == hint.EnvName},
		{"fencingPolicy", want.FencingPolicy == hint.FencingPolicy},
		{"storeFailurePolicy", want.StoreFailurePolicy == hint.StoreFailurePolicy},
		{"podGuard", equality.Semantic.DeepEqual(want.PodGuard, hint.PodGuard)},
	} {
		if !f.same {
			return f.name
		}
	}
	return ""
}

// StartOf is what started a run, in the canonical form its token attests
// (runtoken.Run.Start): its trigger or request, parameters, backfill, retry and
// start deadline. A run no status records takes these from its Job's annotation,
// which anyone who may edit Jobs can change, so they count only when the token
// in the lock key, which only the manager writes, attests them.
func StartOf(run *batchv1alpha1.ActiveRun) string {
	var deadline int64
	if run.StartDeadline != nil {
		deadline = run.StartDeadline.Unix()
	}
	parts := []string{strconv.Quote(run.RunNow), strconv.Quote(run.Backfill),
		strconv.FormatInt(int64(run.Retry), 10), strconv.FormatInt(deadline, 10)}
	for _, name := range slices.Sorted(maps.Keys(run.Parameters)) {
		parts = append(parts, strconv.Quote(name)+"="+strconv.Quote(run.Parameters[name]))
	}
	return strings.Join(parts, " ")
}

// Trust is what step AdoptUnrecorded checks a Job's run annotation against.
type Trust struct {
	// Cluster and OwnerUID: this manager's cluster name and the GuardedJob's UID.
	Cluster  string
	OwnerUID types.UID
	// JobName and JobCreated: the Job's name and creation time, which the API
	// server stamps.
	JobName    string
	JobCreated metav1.Time
	// Recorded is the run status records under the Job's name, or nil.
	Recorded *batchv1alpha1.ActiveRun
	// FromSpec returns the run the spec gives the occurrence scheduled at, with
	// keys this GuardedJob may use, or why it gives none; nil when the spec is not
	// valid now.
	FromSpec func(scheduled metav1.Time) (batchv1alpha1.ActiveRun, error)
}

// TrustedRun returns the run a Job waiting for adoption would be adopted as, or
// why it may not be. Its run annotation (hint) is a hint: anyone who may create
// Jobs in the namespace can write one. So everything the manager acts on (the
// keys, the store, the lease timing, the pod guard) comes from status when status
// records the run, or else from the spec for the occurrence the annotation names,
// and the annotation must say the same. From the annotation come only the fence
// (which the store's fence counter must show), the acquisition time (never later
// than the Job's creation), the holder (which the key must hold, minted for this
// very Job), and, for a run no status records, what started it (which the token
// must attest: StartOf).
func TrustedRun(t Trust, hint *batchv1alpha1.ActiveRun) (*batchv1alpha1.ActiveRun, string) {
	if hint.JobName != t.JobName || hint.OwnerUID != t.OwnerUID || hint.Cluster != t.Cluster {
		return nil, fmt.Sprintf("its run was recorded by cluster %q for object %s", hint.Cluster, hint.OwnerUID)
	}
	if hint.Unguarded {
		return nil, "its run claims to hold no lease, and such a run's Job is never gated"
	}
	var want batchv1alpha1.ActiveRun
	source := "the run status records"
	switch {
	case t.Recorded != nil:
		want = *t.Recorded.DeepCopy()
	case t.FromSpec == nil:
		return nil, "the spec is not valid now, so the run its annotation names cannot be checked against it"
	default:
		var err error
		if want, err = t.FromSpec(hint.ScheduledTime); err != nil {
			return nil, "the spec gives its occurrence no keys this GuardedJob may use: " + err.Error()
		}
		source = "the spec for its occurrence"
		want.Backfill, want.Parameters, want.StartDeadline, want.RunNow = hint.Backfill, hint.Parameters, hint.StartDeadline, hint.RunNow
		want.Retry = hint.Retry // what started it, for history; the manager acts on nothing in it
	}
	if field := RunDiffers(&want, hint); field != "" {
		return nil, "its " + batchv1alpha1.RunAnnotation + " annotation does not match " + source + " (" + field + ")"
	}
	run := want
	run.JobName, run.Holder, run.Fence = t.JobName, hint.Holder, hint.Fence
	run.AcquiredAt = hint.AcquiredAt
	if run.AcquiredAt == nil || t.JobCreated.Before(run.AcquiredAt) {
		run.AcquiredAt = t.JobCreated.DeepCopy() // the lease was taken before its Job was created
	}
	return &run, ""
}

// Waiting is what a Job shows of whether it waits for adoption.
type Waiting struct {
	// Controlled: the GuardedJob controls the Job.
	Controlled bool
	Deleting   bool
	// Gated: the Job is suspended at its lease start gate.
	Gated    bool
	Finished bool
	// CarriesRun: the Job has a run annotation.
	CarriesRun bool
	// Recorded: an active run of status names the Job.
	Recorded bool
	// Early: the manager opens gates before the status write (the early
	// gate), so a Job past its gate may be a run no status records yet.
	Early bool
	// Finalized: the Job still has its lease finalizer, which goes only once
	// status has recorded its run's end (or, for a Job that was never
	// adopted, its fence and occurrence).
	Finalized bool
}

// WaitsForAdoption says whether a Job was created ahead of its run's status
// write and no status records it. Behind its gate it never had a Pod; a
// finished Job there is some run's history (its run ended before its gate
// opened), never one waiting. In the early gate a Job past its gate waits too,
// even finished, while it has its lease finalizer: its run may have worked,
// and status must record its end. That holds for a finished one being deleted
// too (ttlSecondsAfterFinished, a person): its finalizer keeps it until status
// has its run in the history and its lease released.
func (w Waiting) WaitsForAdoption() bool {
	if !w.Controlled || !w.CarriesRun || w.Recorded {
		return false
	}
	if w.Deleting && (w.Gated || !w.Finished) {
		return false
	}
	if w.Gated {
		return !w.Finished
	}
	return w.Early && (!w.Finished || w.Finalized)
}

// WorksUnrecorded says whether a Job waiting for adoption works past its gate
// and has not finished: with the early gate, its run's only record.
func (w Waiting) WorksUnrecorded() bool { return w.WaitsForAdoption() && w.Started() && !w.Finished }

// Started says whether a Job waiting for adoption is past its gate: its Pods
// may work, so a Job that may not be adopted is stopped (by the stop
// controller, urgently), never deleted as one that never started.
func (w Waiting) Started() bool { return !w.Gated }

// LooksForItsJob says whether a run about to acquire its lease must first read
// its Job from the API server: a recorded run with no Job yet whose earlier
// pass may have created its Job and then failed the status write. Acquiring
// again would give it a fence that is not its Job's; the Job is adopted
// (AdoptUnrecorded, with the run as recorded) or the run stops.
func LooksForItsJob(run *batchv1alpha1.ActiveRun, recorded bool) bool {
	return recorded && run.JobUID == ""
}

// WaitsForItsRun says whether the Job read for a recorded run (LooksForItsJob)
// is one its run's pass created ahead of the status write: controlled, not
// being deleted, at its start gate and carrying its run.
func (w Waiting) WaitsForItsRun() bool {
	return w.Controlled && !w.Deleting && w.Gated && w.CarriesRun
}
