package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// askView asks the manager what the store holds for a GuardedJob's keys (the
// inspect-now annotation) and waits for the answer in status.storeView. It
// returns the GuardedJob as it was when answered. A user who may not patch the
// GuardedJob gets the API server's Forbidden error.
func (o *options) askView(ctx context.Context, gj *batchv1alpha1.GuardedJob) (*batchv1alpha1.GuardedJob, error) {
	value, err := o.requestInspect(ctx, gj)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cur, err := o.waitFor(ctx, gj.Namespace, gj.Name, func(g *batchv1alpha1.GuardedJob) (bool, error) {
		return g.Status.StoreView != nil && g.Status.StoreView.Request == value, nil
	})
	if err != nil {
		return nil, deadlineOr(ctx, err, o.timeout)
	}
	return cur, nil
}

// whereText says in words whose a holder is.
func whereText(lock batchv1alpha1.StoreLockView, jobName string) string {
	switch lock.Whose {
	case batchv1alpha1.LockWhoseThisGuardedJob:
		job := jobName
		if i := strings.LastIndexByte(lock.Holder, '/'); i >= 0 {
			job = lock.Holder[i+1:]
		}
		return "this GuardedJob (" + job + ")"
	case batchv1alpha1.LockWhoseThisCluster:
		return "this cluster"
	case batchv1alpha1.LockWhoseOtherCluster:
		cluster, _, _ := strings.Cut(lock.Holder, "/")
		return "cluster " + cluster
	case batchv1alpha1.LockWhoseForeign:
		return "foreign process"
	}
	return "-"
}

// expiresIn is how long the lock had left when it was read.
func expiresIn(lock batchv1alpha1.StoreLockView, observed time.Time) string {
	switch {
	case lock.Holder == "":
		return "-"
	case lock.NoExpiry || lock.ExpiresAt == nil:
		return "never"
	}
	d := lock.ExpiresAt.Sub(observed)
	if d < 0 {
		d = 0
	}
	return d.Round(100 * time.Millisecond).String()
}

// printView prints a store view as the "Redis now" part of status.
func printView(w io.Writer, view *batchv1alpha1.StoreView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, e := range view.Entries {
		if e.Lock.Holder == "" {
			_, _ = fmt.Fprintf(tw, "  lock\t%s\tfree\n", e.Lock.Key)
		} else {
			exp := "no expiry"
			if in := expiresIn(e.Lock, view.ObservedAt.Time); in != "never" {
				exp = "expires in " + in
			}
			_, _ = fmt.Fprintf(tw, "  lock\t%s\theld by %s (%s), %s\n", e.Lock.Key, e.Lock.Holder, whereText(e.Lock, e.JobName), exp)
		}
		if e.Fence != nil {
			_, _ = fmt.Fprintf(tw, "  fence\t%s\t%d\n", e.Fence.Key, e.Fence.Value)
		}
		if e.DoneMarker != nil {
			done := "absent: the occurrence has not succeeded"
			if e.DoneMarker.Holder != "" {
				done = "done by " + e.DoneMarker.Holder
			}
			_, _ = fmt.Fprintf(tw, "  done-marker\t%s\t%s\n", e.DoneMarker.Key, done)
		}
	}
	_ = tw.Flush()
	if view.Store != "" {
		_, _ = fmt.Fprintf(w, "  store: %s\n", view.Store)
	}
}

// noPatchNote is what a user who may only read is told about "Redis now".
func noPatchNote(namespace string) string {
	return fmt.Sprintf("asking the manager what the lock store holds needs create on guardedjobinspects in namespace %s (the guardedjob-requester role, part of edit); you may only read", namespace)
}

// requestInspect asks the manager to read the lock store for gj's keys, with a
// GuardedJobInspect (or, against an API server that does not serve it, the
// inspect-now annotation), and returns the value status.storeView.request will
// repeat in the answer.
func (o *options) requestInspect(ctx context.Context, gj *batchv1alpha1.GuardedJob) (string, error) {
	req := &batchv1alpha1.GuardedJobInspect{
		ObjectMeta: metav1.ObjectMeta{Namespace: gj.Namespace, GenerateName: requestName(gj.Name)},
		Spec:       batchv1alpha1.GuardedJobInspectSpec{GuardedJobName: gj.Name},
	}
	err := o.k8s.Create(ctx, req)
	if err == nil || !meta.IsNoMatchError(err) {
		return req.RequestValue(), err
	}
	value := requestValue()
	return value, o.annotate(ctx, gj, map[string]string{batchv1alpha1.InspectNowAnnotation: value})
}

// requestUnlock asks the manager to delete key while it holds holder, with a
// GuardedJobUnlock (or, against an API server that does not serve it, the unlock
// annotations), and returns the value status.lastUnlock.request will repeat in
// the answer.
func (o *options) requestUnlock(ctx context.Context, gj *batchv1alpha1.GuardedJob, key, holder string) (string, error) {
	req := &batchv1alpha1.GuardedJobUnlock{
		ObjectMeta: metav1.ObjectMeta{Namespace: gj.Namespace, GenerateName: requestName(gj.Name)},
		Spec:       batchv1alpha1.GuardedJobUnlockSpec{GuardedJobName: gj.Name, Key: key, Holder: holder},
	}
	err := o.k8s.Create(ctx, req)
	if err == nil || !meta.IsNoMatchError(err) {
		return req.RequestValue(), err
	}
	value := requestValue()
	return value, o.annotate(ctx, gj, map[string]string{
		batchv1alpha1.UnlockAnnotation:       value,
		batchv1alpha1.UnlockKeyAnnotation:    key,
		batchv1alpha1.UnlockHolderAnnotation: holder,
	})
}
