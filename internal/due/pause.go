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

// FailurePause decides the failure policy's pause (spec.failurePolicy
// suspendAfter): once that many runs in a row failed, the count starts again
// (reset), and the GuardedJob is paused unless it is suspended already; pause
// is nil then, and reason says why it pauses.
func FailurePause(gj *batchv1alpha1.GuardedJob, now time.Time) (pause *batchv1alpha1.Pause, reason string, reset bool) {
	n := gj.Spec.SuspendAfter()
	if n <= 0 || gj.Status.ConsecutiveFailures < n {
		return nil, "", false
	}
	if gj.SuspendedAt(now) {
		return nil, "", true
	}
	reason = fmt.Sprintf("%d runs in a row failed (the Job failed, MaxHoldExceeded%s; spec.failurePolicy.suspendAfter %d)", gj.Status.ConsecutiveFailures, alsoCounted(gj), n)
	if lr := gj.Status.LastRun; lr != nil {
		reason += fmt.Sprintf("; the last, %s, ended %s: %s", dashIfEmpty(lr.JobName), lr.Result, lr.Message)
	}
	return &batchv1alpha1.Pause{
		SuspendNote: batchv1alpha1.SuspendNote{By: batchv1alpha1.FailurePolicySuspender, Reason: Clip(reason, MaxNoteReason)},
		Since:       metav1.Time{Time: now},
	}, reason, true
}

// PauseOver says whether a pause with an until ends at now; while it lasts,
// wakeAt is when it ends (the pass to come then). A pause without an until
// lasts until a resume request.
func PauseOver(p *batchv1alpha1.Pause, now time.Time) (over bool, wakeAt time.Time) {
	if p == nil || p.Until == nil {
		return false, time.Time{}
	}
	if now.Before(p.Until.Time) {
		return false, p.Until.Time
	}
	return true, time.Time{}
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// alsoCounted names the causes spec.failurePolicy.alsoCount adds, for a message.
func alsoCounted(gj *batchv1alpha1.GuardedJob) string {
	out := ""
	if fp := gj.Spec.FailurePolicy; fp != nil {
		for _, c := range fp.AlsoCount {
			out += ", " + string(c)
		}
	}
	return out
}
