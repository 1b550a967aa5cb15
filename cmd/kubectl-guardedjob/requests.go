package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runparams"
)

// run and backfill ask through request objects (GuardedJobRun,
// GuardedJobBackfill): creating one needs only the guardedjob-requester role,
// not patch on the GuardedJob. Against an API server that does not serve them
// (an older install) they fall back to the annotations.

// requestName is the name prefix of the requests the plugin creates.
func requestName(gjName string) string { return gjName + "-" }

// waitForRequest watches one request object until done says so.
func waitForRequest[T client.Object](ctx context.Context, o *options, list client.ObjectList, obj T, done func(T) bool) (T, error) {
	var last T
	_, err := watchtools.UntilWithSync(ctx, o.listWatch(list, obj.GetNamespace(), obj.GetName()), obj, nil,
		func(ev watch.Event) (bool, error) {
			switch ev.Type {
			case watch.Deleted:
				return false, fmt.Errorf("%s was deleted", obj.GetName())
			case watch.Added, watch.Modified:
				cur, ok := ev.Object.(T)
				if !ok {
					return false, nil
				}
				last = cur
				return done(cur), nil
			}
			return false, nil
		})
	return last, err
}

// createRunRequest creates a GuardedJobRun for gj with the parameters; served
// is false when the API server does not know the kind.
func createRunRequest(ctx context.Context, o *options, gj *batchv1alpha1.GuardedJob) (req *batchv1alpha1.GuardedJobRun, served bool, err error) {
	req = &batchv1alpha1.GuardedJobRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: gj.Namespace, GenerateName: requestName(gj.Name)},
		Spec:       batchv1alpha1.GuardedJobRunSpec{GuardedJobName: gj.Name, Parameters: o.params},
	}
	if err := o.k8s.Create(ctx, req); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, false, nil
		}
		return nil, true, fmt.Errorf("create a GuardedJobRun for guardedjob %s/%s: %w", gj.Namespace, gj.Name, err)
	}
	return req, true, nil
}

// runByRequest follows a GuardedJobRun: until its run's Job exists or it
// ends, and with --wait until its run ends.
func runByRequest(ctx context.Context, o *options, gj *batchv1alpha1.GuardedJob, req *batchv1alpha1.GuardedJobRun, out *lockedWriter) error {
	out.printf("guardedjobrun.batch.guardedjob.dev/%s created: runs guardedjob %s/%s now\n", req.Name, gj.Namespace, gj.Name)
	if len(req.Spec.Parameters) > 0 {
		out.printf("parameters: %s\n", runparams.Describe(req.Spec.Parameters))
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cur, err := waitForRequest(ctx, o, &batchv1alpha1.GuardedJobRunList{}, req, func(r *batchv1alpha1.GuardedJobRun) bool {
		return r.Status.JobName != "" || r.Status.Phase.Final()
	})
	if err != nil {
		return fmt.Errorf("waiting for the manager to answer guardedjobrun %s: %w", req.Name, deadlineOr(ctx, err, o.timeout))
	}
	if !cur.Status.Phase.Final() {
		out.printf("job.batch/%s started (scheduled %s, fence %d)\n", cur.Status.JobName, timeText(cur.Status.ScheduledTime), cur.Status.Fence)
		if !o.wait {
			return nil
		}
		jobName := cur.Status.JobName
		stopJob, _ := followJob(ctx, o, out, gj.Namespace, jobName)
		cur, err = waitForRequest(ctx, o, &batchv1alpha1.GuardedJobRunList{}, req, func(r *batchv1alpha1.GuardedJobRun) bool {
			return r.Status.Phase.Final()
		})
		stopJob()
		if err != nil {
			return fmt.Errorf("waiting for job %s to end: %w", jobName, deadlineOr(ctx, err, o.timeout))
		}
	}
	if cur.Status.Phase == batchv1alpha1.RequestRefused {
		return runFailed{result: "Refused", message: cur.Status.Message}
	}
	return report(out, &batchv1alpha1.RunRecord{JobName: cur.Status.JobName, Fence: cur.Status.Fence, Result: cur.Status.Result, Message: cur.Status.Message})
}

func timeText(t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// backfillByRequest creates a GuardedJobBackfill for the range, waits for the
// manager's answer, and with --wait follows it. served is false when the API
// server does not know the kind.
func backfillByRequest(ctx context.Context, o *options, gj *batchv1alpha1.GuardedJob, from, to time.Time, parallelism int32, summary string) (served bool, err error) {
	req := &batchv1alpha1.GuardedJobBackfill{
		ObjectMeta: metav1.ObjectMeta{Namespace: gj.Namespace, GenerateName: requestName(gj.Name)},
		Spec: batchv1alpha1.GuardedJobBackfillSpec{GuardedJobName: gj.Name, Parallelism: &parallelism,
			From: from.UTC().Format(time.RFC3339), To: to.UTC().Format(time.RFC3339)},
	}
	if err := o.k8s.Create(ctx, req); err != nil {
		if meta.IsNoMatchError(err) {
			return false, nil
		}
		return true, fmt.Errorf("create a GuardedJobBackfill for guardedjob %s/%s: %w", gj.Namespace, gj.Name, err)
	}
	_, _ = fmt.Fprintf(o.Out, "%s (guardedjobbackfill.batch.guardedjob.dev/%s)\n", summary, req.Name)
	answerCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cur, err := waitForRequest(answerCtx, o, &batchv1alpha1.GuardedJobBackfillList{}, req, func(r *batchv1alpha1.GuardedJobBackfill) bool {
		return r.Status.AcceptedAt != nil || r.Status.Phase.Final()
	})
	switch {
	case err != nil && cur != nil && cur.Status.Phase == batchv1alpha1.RequestPending:
		// Queued behind another backfill (one at a time): it starts after that one.
		_, _ = fmt.Fprintf(o.Out, "pending: %s\n", cur.Status.Message)
	case err != nil:
		return true, fmt.Errorf("waiting for the manager to take the request: %w", deadlineOr(answerCtx, err, o.timeout))
	case cur.Status.Phase == batchv1alpha1.RequestRefused:
		return true, fmt.Errorf("the manager refused the backfill: %s", cur.Status.Message)
	default:
		_, _ = fmt.Fprintf(o.Out, "accepted: %d occurrence(s)\n", cur.Status.Total)
	}
	if !o.wait {
		_, _ = fmt.Fprintf(o.Out, "follow it with: kubectl get guardedjobbackfill %s -n %s -w\n", req.Name, gj.Namespace)
		return true, nil
	}
	// The GuardedJob's status.backfill has the occurrences in flight and their Jobs.
	return true, followBackfill(ctx, o, gj.Namespace, gj.Name, req.RequestValue())
}

// cancelBackfillRequest sets spec.cancel on the GuardedJobBackfill whose
// request value (guardedjobbackfill:<uid>) is running.
func cancelBackfillRequest(ctx context.Context, o *options, gj *batchv1alpha1.GuardedJob, value string) error {
	var list batchv1alpha1.GuardedJobBackfillList
	if err := o.k8s.List(ctx, &list, client.InNamespace(gj.Namespace)); err != nil {
		return fmt.Errorf("list GuardedJobBackfills: %w", err)
	}
	for i := range list.Items {
		req := &list.Items[i]
		if req.RequestValue() != value {
			continue
		}
		patch := client.MergeFrom(req.DeepCopy())
		req.Spec.Cancel = true
		if err := o.k8s.Patch(ctx, req, patch); err != nil {
			return fmt.Errorf("cancel guardedjobbackfill %s: %w", req.Name, err)
		}
		return nil
	}
	return fmt.Errorf("guardedjob %s/%s: the GuardedJobBackfill of the running backfill (%s) is gone; the backfill cannot be cancelled from it", gj.Namespace, gj.Name, value)
}
