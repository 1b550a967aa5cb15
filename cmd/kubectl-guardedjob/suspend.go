package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// suspendNote builds the note of suspend: who (--by, or the user the API
// server knows), why, and until when (RFC 3339, or a duration from now).
func suspendNote(ctx context.Context, o *options, by, reason, until string, now time.Time) (*batchv1alpha1.SuspendNote, error) {
	note := &batchv1alpha1.SuspendNote{By: by, Reason: reason}
	if len(reason) > 512 {
		return nil, usageError{msg: fmt.Sprintf("--reason is %d characters, more than 512", len(reason))}
	}
	if until != "" {
		t, err := time.Parse(time.RFC3339, until)
		if err != nil {
			d, derr := time.ParseDuration(until)
			if derr != nil || d <= 0 {
				return nil, usageError{msg: fmt.Sprintf("--until %q is neither an RFC 3339 time such as 2026-12-01T06:00:00Z nor a duration such as 2h", until)}
			}
			t = now.Add(d)
		}
		if !t.After(now) {
			return nil, usageError{msg: fmt.Sprintf("--until %s is not in the future", t.UTC().Format(time.RFC3339))}
		}
		note.Until = &metav1.Time{Time: t.Truncate(time.Second)}
	}
	if note.By == "" {
		note.By = o.whoAmI(ctx)
	}
	if len(note.By) > 128 {
		note.By = note.By[:128]
	}
	return note, nil
}

// whoAmI returns the user the API server knows this client as
// (SelfSubjectReview), or "" when it cannot tell.
func (o *options) whoAmI(ctx context.Context) string {
	if err := o.connect(); err != nil {
		return ""
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := o.k8s.Create(ctx, review); err != nil {
		return ""
	}
	return review.Status.UserInfo.Username
}

// pauseCmd asks the manager to pause the GuardedJob in status (the pause and
// pause-note annotations, removing a resume request) and waits for its answer.
// A running run goes on: a pause only stops new ones.
func pauseCmd(ctx context.Context, o *options, name string, note *batchv1alpha1.SuspendNote) error {
	gj, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	noteJSON, err := json.Marshal(note)
	if err != nil {
		return err
	}
	value := time.Now().UTC().Format(time.RFC3339Nano)
	ann := map[string]*string{
		batchv1alpha1.PauseAnnotation:     &value,
		batchv1alpha1.PauseNoteAnnotation: ptr.To(string(noteJSON)),
		batchv1alpha1.ResumeAnnotation:    nil,
	}
	if err := o.setAnnotations(ctx, gj, ann); err != nil {
		return fmt.Errorf("set %s: %w", batchv1alpha1.PauseAnnotation, err)
	}
	wctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cur, err := o.waitFor(wctx, gj.Namespace, gj.Name, func(cur *batchv1alpha1.GuardedJob) (bool, error) {
		return cur.Status.LastPauseRequest == value, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the manager to pause it: %w", deadlineOr(wctx, err, o.timeout))
	}
	if p := cur.Status.Pause; p == nil || p.Request != value {
		return fmt.Errorf("guardedjob %s/%s: the manager did not pause it (kubectl describe shows its InvalidPauseRequest event)", gj.Namespace, gj.Name)
	}
	verb := "suspended" + cur.Status.Pause.Suffix()
	if n := len(cur.Status.Active); n > 0 {
		verb += fmt.Sprintf(" (%d active run(s) go on; delete their Jobs to stop them)", n)
	}
	_, _ = fmt.Fprintf(o.Out, "guardedjob %s/%s %s\n", gj.Namespace, gj.Name, verb)
	return nil
}

// resumeCmd asks the manager to end the GuardedJob's pause and waits for its
// answer. spec.suspend is the manifest's: the plugin only says so.
func resumeCmd(ctx context.Context, o *options, name string) error {
	gj, err := o.get(ctx, name)
	now := time.Now()
	if err != nil {
		return err
	}
	specSuspended := gj.Spec.SuspendedAt(now)
	specHint := fmt.Sprintf("spec.suspend is true in guardedjob %s/%s: it is the manifest's; set it to false there (or: kubectl patch guardedjob %s -n %s --type merge -p '{\"spec\":{\"suspend\":false,\"suspendNote\":null}}')",
		gj.Namespace, gj.Name, gj.Name, gj.Namespace)
	if !gj.Status.Pause.PausedAt(now) {
		if specSuspended {
			return fmt.Errorf("%s", specHint)
		}
		_, _ = fmt.Fprintf(o.Out, "guardedjob %s/%s is not suspended\n", gj.Namespace, gj.Name)
		return nil
	}
	value := now.UTC().Format(time.RFC3339Nano)
	ann := map[string]*string{
		batchv1alpha1.ResumeAnnotation:    &value,
		batchv1alpha1.PauseAnnotation:     nil,
		batchv1alpha1.PauseNoteAnnotation: nil,
	}
	if err := o.setAnnotations(ctx, gj, ann); err != nil {
		return fmt.Errorf("set %s: %w", batchv1alpha1.ResumeAnnotation, err)
	}
	wctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if _, err := o.waitFor(wctx, gj.Namespace, gj.Name, func(cur *batchv1alpha1.GuardedJob) (bool, error) {
		return cur.Status.LastResumeRequest == value, nil
	}); err != nil {
		return fmt.Errorf("waiting for the manager to resume it: %w", deadlineOr(wctx, err, o.timeout))
	}
	_, _ = fmt.Fprintf(o.Out, "guardedjob %s/%s resumed\n", gj.Namespace, gj.Name)
	if specSuspended {
		_, _ = fmt.Fprintf(o.ErrOut, "warning: no runs are scheduled yet: %s\n", specHint)
	}
	return nil
}
