package due

import (
	"encoding/json"
	"fmt"
	"time"

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
