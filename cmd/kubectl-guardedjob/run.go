package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runparams"
)

func newRunCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run NAME",
		Short: "Run the GuardedJob now (a GuardedJobRun request), and show its Job",
		Long: `Create a GuardedJobRun for the GuardedJob (it needs only the guardedjob-requester role,
not patch on the GuardedJob), wait until the manager answers it, and print the run's Job
and fence, or why it did not run. With --wait, follow the run (its request and its Job)
to its end and exit 1 unless it Succeeded. Against an install without the GuardedJobRun
kind it sets the batch.guardedjob.dev/run-now annotation instead.`,
		Example:           `  kubectl guardedjob run daily-settlement -n payments --wait`,
		Args:              oneName,
		ValidArgsFunction: o.completeNames,
	}
	timeout := timeoutFlag(cmd, 5*time.Minute, "how long to wait for the manager (and, with --wait, for the run)")
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait until the run ends and show its result")
	params := cmd.Flags().StringArray("param", nil, "NAME=VALUE: a value for a parameter the GuardedJob declares (spec.parameters), for this run only; repeat for several")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		o.timeout = *timeout
		values, err := parseParams(*params)
		if err != nil {
			return err
		}
		o.params = values
		return runCmd(cmd.Context(), o, args[0])
	}
	return cmd
}

func newSuspendCommand(o *options, suspend bool) *cobra.Command {
	if !suspend {
		cmd := &cobra.Command{
			Use:   "resume NAME",
			Short: "End a pause (the failure policy's, or kubectl guardedjob suspend's)",
			Long: `Ask the manager to end the GuardedJob's pause (status.pause): the failure policy's, or one
kubectl guardedjob suspend asked for. It sets the batch.guardedjob.dev/resume annotation and
waits for the manager's answer. spec.suspend is the manifest's: when it is true, set it to
false where the manifest lives (Git), or with kubectl patch.`,
			Args:              oneName,
			ValidArgsFunction: o.completeNames,
		}
		timeout := timeoutFlag(cmd, 30*time.Second, "how long to wait for the manager's answer")
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			o.timeout = *timeout
			return resumeCmd(cmd.Context(), o, args[0])
		}
		return cmd
	}
	cmd := &cobra.Command{
		Use:   "suspend NAME [--reason TEXT] [--until TIME]",
		Short: "Stop scheduling new runs (a running one goes on), with a note: who, why, until when",
		Long: `Ask the manager to pause the GuardedJob in status (status.pause), with a note: who (the
user the API server knows you as, or --by), why (--reason) and, with --until, when the
pause ends by itself. The spec, which Git or your manifest owns, is not changed; end the
pause with kubectl guardedjob resume. kubectl guardedjob status shows the note.`,
		Example: `  kubectl guardedjob suspend daily-settlement -n payments --reason "ledger migration" --until 2026-12-01T06:00:00Z
  kubectl guardedjob suspend daily-settlement -n payments --reason "incident 4711" --until 2h`,
		Args:              oneName,
		ValidArgsFunction: o.completeNames,
	}
	reason := cmd.Flags().String("reason", "", "why it is suspended (at most 512 characters)")
	until := cmd.Flags().String("until", "", "when the pause ends by itself: an RFC 3339 time, or a duration from now such as 2h")
	by := cmd.Flags().String("by", "", "who suspends it (default: the user the API server knows you as)")
	timeout := timeoutFlag(cmd, 30*time.Second, "how long to wait for the manager's answer")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		o.timeout = *timeout
		note, err := suspendNote(cmd.Context(), o, *by, *reason, *until, time.Now())
		if err != nil {
			return err
		}
		return pauseCmd(cmd.Context(), o, args[0], note)
	}
	return cmd
}

// runFailed is run --wait's error when the run ended other than Succeeded.
type runFailed struct{ result, message string }

func (e runFailed) Error() string {
	return fmt.Sprintf("the run ended %s: %s", e.result, e.message)
}
func (runFailed) ExitCode() int { return 1 }

// lockedWriter serialises the lines of the run's and its Job's watches.
type lockedWriter struct {
	mu sync.Mutex
	o  *options
}

func (w *lockedWriter) printf(format string, a ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = fmt.Fprintf(w.o.Out, format, a...)
}

// runCmd sets the run-now annotation to now, waits until the manager handles it,
// and shows the run's Job; with --wait, also its result.
func runCmd(ctx context.Context, o *options, name string) error {
	gj, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	if err := runparams.Check(gj.Spec.Parameters, o.params); err != nil {
		return fmt.Errorf("guardedjob %s/%s refuses these parameters: %w", gj.Namespace, gj.Name, err)
	}
	req, served, err := createRunRequest(ctx, o, gj)
	if err != nil {
		return err
	}
	if served {
		return runByRequest(ctx, o, gj, req, &lockedWriter{o: o})
	}
	// An API server without the GuardedJobRun kind: the run-now annotation.
	trigger := time.Now().UTC().Truncate(time.Second)
	value := trigger.Format(time.RFC3339)
	if gj.Status.LastRunNow == value { // a trigger in the same second was handled already
		trigger = trigger.Add(time.Second)
		select {
		case <-time.After(time.Until(trigger)):
		case <-ctx.Done():
			return ctx.Err()
		}
		value = trigger.Format(time.RFC3339)
	}
	// The parameters go with the trigger in one patch, and a run without any
	// removes those of an earlier one.
	ann := map[string]*string{batchv1alpha1.RunNowAnnotation: &value, batchv1alpha1.RunNowParametersAnnotation: nil}
	if len(o.params) > 0 {
		ann[batchv1alpha1.RunNowParametersAnnotation] = ptr.To(runparams.Format(o.params))
	}
	if err := o.setAnnotations(ctx, gj, ann); err != nil {
		return fmt.Errorf("set %s: %w", batchv1alpha1.RunNowAnnotation, err)
	}
	out := &lockedWriter{o: o}
	out.printf("guardedjob %s/%s: %s=%s\n", gj.Namespace, gj.Name, batchv1alpha1.RunNowAnnotation, value)
	if len(o.params) > 0 {
		out.printf("parameters: %s\n", runparams.Describe(o.params))
	}

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// The manager records the trigger it handled in status.lastRunNow, together with
	// the run's intent or with the reason it did not run.
	var jobName string
	cur, err := o.waitFor(ctx, gj.Namespace, gj.Name, func(cur *batchv1alpha1.GuardedJob) (bool, error) {
		if cur.Status.LastRunNow != value {
			return false, nil
		}
		for _, r := range cur.Status.Active {
			if !r.ScheduledTime.After(trigger) && r.JobUID != "" {
				jobName = r.JobName
				out.printf("job.batch/%s started (scheduled %s, fence %d, holder %s)\n",
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
		return fmt.Errorf("waiting for the manager to handle the trigger: %w", deadlineOr(ctx, err, o.timeout))
	}
	if ended := endedRun(cur, jobName); ended != nil || !o.wait {
		if ended == nil {
			return nil
		}
		return report(out, ended)
	}

	// Follow the run: its Job's conditions as they come, and its end in the
	// GuardedJob's status (the lease released or completed).
	stopJob, reportJob := followJob(ctx, o, out, gj.Namespace, jobName)
	var ended *batchv1alpha1.RunRecord
	_, err = o.waitFor(ctx, gj.Namespace, gj.Name, func(cur *batchv1alpha1.GuardedJob) (bool, error) {
		ended = endedRun(cur, jobName)
		return ended != nil, nil
	})
	stopJob()
	// The run may end before the Job's watch saw its last change: show it.
	job := &batchv1.Job{}
	if o.k8s.Get(ctx, client.ObjectKey{Namespace: gj.Namespace, Name: jobName}, job) == nil {
		reportJob(job)
	}
	if err != nil {
		return fmt.Errorf("waiting for job %s to end: %w", jobName, deadlineOr(ctx, err, o.timeout))
	}
	return report(out, ended)
}

// followJob prints the Job's conditions as they come, until the returned stop
// is called (it waits for the watch to end); report prints the Job once more.
func followJob(ctx context.Context, o *options, out *lockedWriter, namespace, name string) (stop func(), report func(*batchv1.Job)) {
	jobCtx, cancel := context.WithCancel(ctx)
	report = jobReporter(out)
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.watchJob(jobCtx, namespace, name, report)
	}()
	return func() { cancel(); <-done }, report
}

// endedRun is the record of the run with the given Job name once it is over.
func endedRun(gj *batchv1alpha1.GuardedJob, jobName string) *batchv1alpha1.RunRecord {
	for _, r := range gj.Status.Active {
		if r.JobName == jobName {
			return nil
		}
	}
	if lr := gj.Status.LastRun; lr != nil && lr.JobName == jobName {
		return lr
	}
	return nil
}

// jobReporter prints each Job condition the first time it is true.
func jobReporter(out *lockedWriter) func(*batchv1.Job) {
	var mu sync.Mutex
	seen := map[batchv1.JobConditionType]bool{}
	return func(job *batchv1.Job) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range job.Status.Conditions {
			if c.Status != corev1.ConditionTrue || seen[c.Type] {
				continue
			}
			seen[c.Type] = true
			line := fmt.Sprintf("job.batch/%s: %s", job.Name, c.Type)
			if c.Reason != "" {
				line += " (" + c.Reason + ")"
			}
			out.printf("%s\n", line)
		}
	}
}

func report(out *lockedWriter, lr *batchv1alpha1.RunRecord) error {
	line := fmt.Sprintf("run %s: %s", lr.JobName, lr.Result)
	if lr.Fence != 0 {
		line += fmt.Sprintf(" (fence %d)", lr.Fence)
	}
	if lr.Message != "" {
		line += ": " + lr.Message
	}
	out.printf("%s\n", line)
	if lr.Result != batchv1alpha1.RunResultSucceeded {
		return runFailed{result: string(lr.Result), message: lr.Message}
	}
	return nil
}
