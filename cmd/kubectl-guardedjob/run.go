package main

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// pollInterval is how often run and its waits read the GuardedJob.
const pollInterval = 250 * time.Millisecond

// runFailed is run --wait's error when the run ended other than Succeeded.
type runFailed struct{ result, message string }

func (e runFailed) Error() string {
	return fmt.Sprintf("the run ended %s: %s", e.result, e.message)
}
func (runFailed) ExitCode() int { return 1 }

// runCmd sets the run-now annotation to now, waits until the manager handles it,
// and shows the run's Job; with --wait, also its result.
func runCmd(ctx context.Context, o *options, args []string) error {
	gj, err := o.get(ctx, args[0])
	if err != nil {
		return err
	}
	trigger := time.Now().UTC().Truncate(time.Second)
	value := trigger.Format(time.RFC3339)
	if gj.Status.LastRunNow == value { // a trigger in the same second was handled already
		trigger = trigger.Add(time.Second)
		time.Sleep(time.Until(trigger))
		value = trigger.Format(time.RFC3339)
	}
	patch := client.MergeFrom(gj.DeepCopy())
	if gj.Annotations == nil {
		gj.Annotations = map[string]string{}
	}
	gj.Annotations[batchv1alpha1.RunNowAnnotation] = value
	if err := o.k8s.Patch(ctx, gj, patch); err != nil {
		return fmt.Errorf("set %s: %w", batchv1alpha1.RunNowAnnotation, err)
	}
	_, _ = fmt.Fprintf(o.stdout, "guardedjob %s/%s: %s=%s\n", gj.Namespace, gj.Name, batchv1alpha1.RunNowAnnotation, value)

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// The manager records the trigger it handled in status.lastRunNow, together with
	// the run's intent or with the reason it did not run.
	var jobName string
	err = poll(ctx, func() (bool, error) {
		cur, err := o.get(ctx, args[0])
		if err != nil {
			return false, err
		}
		if cur.Status.LastRunNow != value {
			return false, nil
		}
		for _, r := range cur.Status.Active {
			if !r.ScheduledTime.After(trigger) && r.JobUID != "" {
				jobName = r.JobName
				_, _ = fmt.Fprintf(o.stdout, "job.batch/%s started (scheduled %s, fence %d, holder %s)\n",
					r.JobName, r.ScheduledTime.UTC().Format(time.RFC3339), r.Fence, r.Holder)
				return true, nil
			}
		}
		// Ended already, or not started (skipped, busy, ...): lastRun says so.
		if lr := cur.Status.LastRun; lr != nil && lr.FinishedAt != nil && !lr.FinishedAt.Time.Before(trigger) && len(cur.Status.Active) == 0 {
			jobName = lr.JobName
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the manager to handle the trigger (is it running?): %w", err)
	}
	if !o.wait {
		return reportIfEnded(ctx, o, args[0], jobName)
	}
	var ended *batchv1alpha1.RunRecord
	err = poll(ctx, func() (bool, error) {
		cur, err := o.get(ctx, args[0])
		if err != nil {
			return false, err
		}
		if lr := cur.Status.LastRun; lr != nil && lr.JobName == jobName {
			ended = lr
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for job %s to end: %w", jobName, err)
	}
	return report(o, ended)
}

// reportIfEnded prints the result when the run is already over (it never started,
// or ended before the first look).
func reportIfEnded(ctx context.Context, o *options, name, jobName string) error {
	cur, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	for _, r := range cur.Status.Active {
		if r.JobName == jobName {
			return nil
		}
	}
	if lr := cur.Status.LastRun; lr != nil && lr.JobName == jobName {
		return report(o, lr)
	}
	return nil
}

func report(o *options, lr *batchv1alpha1.RunRecord) error {
	line := fmt.Sprintf("run %s: %s", lr.JobName, lr.Result)
	if lr.Fence != 0 {
		line += fmt.Sprintf(" (fence %d)", lr.Fence)
	}
	if lr.Message != "" {
		line += ": " + lr.Message
	}
	_, _ = fmt.Fprintln(o.stdout, line)
	if lr.Result != batchv1alpha1.RunResultSucceeded {
		return runFailed{result: string(lr.Result), message: lr.Message}
	}
	return nil
}

func poll(ctx context.Context, done func() (bool, error)) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// setSuspend sets spec.suspend. A running run goes on: suspend only stops new ones.
func setSuspend(ctx context.Context, o *options, name string, suspend bool) error {
	gj, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	patch := client.MergeFrom(gj.DeepCopy())
	gj.Spec.Suspend = &suspend
	if err := o.k8s.Patch(ctx, gj, patch); err != nil {
		return err
	}
	verb := "resumed"
	if suspend {
		verb = "suspended"
		if n := len(gj.Status.Active); n > 0 {
			verb += fmt.Sprintf(" (%d active run(s) go on; delete their Jobs to stop them)", n)
		}
	}
	_, _ = fmt.Fprintf(o.stdout, "guardedjob %s/%s %s\n", gj.Namespace, gj.Name, verb)
	return nil
}
