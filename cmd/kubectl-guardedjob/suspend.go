package main

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
