package due

import (
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// MaxNoteReason and MaxNoteBy are the schema's bounds of a note's reason and by.
const (
	MaxNoteReason = 512
	MaxNoteBy     = 128
)

// PauseNote reads a pause request's note (the batch.guardedjob.dev/pause-note
// annotation, JSON with by, reason and until): by and reason within the
// schema's bounds, until in the future. An empty value is an empty note.
func PauseNote(value string, now time.Time) (batchv1alpha1.SuspendNote, error) {
	var note batchv1alpha1.SuspendNote
	if value == "" {
		return note, nil
	}
	if err := json.Unmarshal([]byte(value), &note); err != nil {
		return note, fmt.Errorf("not a JSON object with by, reason and until: %w", err)
	}
	switch {
	case note.By == batchv1alpha1.FailurePolicySuspender:
		return note, fmt.Errorf("by %q is the failure policy's name: a request names who asks", note.By)
	case len(note.By) > MaxNoteBy:
		return note, fmt.Errorf("by is %d characters, more than %d", len(note.By), MaxNoteBy)
	case len(note.Reason) > MaxNoteReason:
		return note, fmt.Errorf("reason is %d characters, more than %d", len(note.Reason), MaxNoteReason)
	case note.Until != nil && !note.Until.After(now):
		return note, fmt.Errorf("until %s is not in the future", note.Until.UTC().Format(time.RFC3339))
	}
	return note, nil
}

// LegacyPause says whether gj carries a pause an earlier version wrote into
// spec that the manager should move to status.pause, and since when: a
// suspendNote by guardedjob-manager on a suspended spec. Anyone who may edit
// the spec can write that note (Git may hold a copy of the old object), so the
// note alone decides nothing: the status, which only the manager writes, must
// still say the failure policy suspended the object (Suspended=True,
// TooManyFailures) and hold no pause yet. The move thus happens once, and a
// note Git puts back afterwards is the manifest's own suspension.
func LegacyPause(gj *batchv1alpha1.GuardedJob) (metav1.Time, bool) {
	note := gj.Spec.SuspendNoteOf()
	if note == nil || note.By != batchv1alpha1.FailurePolicySuspender || gj.Status.Pause != nil {
		return metav1.Time{}, false
	}
	for _, c := range gj.Status.Conditions {
		if c.Type == batchv1alpha1.SuspendedCondition {
			return c.LastTransitionTime, c.Status == metav1.ConditionTrue && c.Reason == batchv1alpha1.TooManyFailuresReason
		}
	}
	return metav1.Time{}, false
}
