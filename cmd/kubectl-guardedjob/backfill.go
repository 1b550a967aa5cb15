package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runparams"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

func newBackfillCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backfill NAME --from TIME [--to TIME] [--parallelism N] [--wait | --dry-run]",
		Short: "Run every occurrence of the schedule in a range, once, through the lock",
		Long: `Ask the manager (a GuardedJobBackfill request: it needs only the guardedjob-requester
role, never patch on the GuardedJob or the store's credentials) to run every occurrence of the schedule from
--from to --to, both included, one at a time or --parallelism at once. An occurrence
whose done-marker exists (it succeeded in this cluster or another sharing the store) is
skipped; one whose lock another holder has is tried again later. Each run gets its
occurrence's scheduled time, as a scheduled run does (GUARDEDJOB_SCHEDULED_TIME). At
most 1000 occurrences; --to is not in the future.

--from and --to are read in the schedule's zone (spec.timeZone) unless they carry an
offset: 2026-11-01 (a date: from its start, or to its last second), 2026-11-01T00:05,
or RFC 3339 such as 2026-11-01T00:00:00Z. --dry-run lists the occurrences the backfill
would run, with those whose Job succeeded in this cluster, and writes nothing.

It checks the range, waits until the manager accepts or refuses it, and with --wait
follows the progress (status.backfill) to the end: exit 1 when an occurrence failed or
the backfill was cancelled. --cancel cancels the running backfill: occurrences running
go on, the others never start.`,
		Example: `  kubectl guardedjob backfill daily-settlement -n payments --from 2026-11-01 --to 2026-11-30 --dry-run
  kubectl guardedjob backfill daily-settlement -n payments --from 2026-11-01 --to 2026-11-30 --wait
  kubectl guardedjob backfill hourly-report --from 2026-11-30T00:00:00Z --parallelism 4
  kubectl guardedjob backfill daily-settlement -n payments --cancel`,
		Args:              oneName,
		ValidArgsFunction: o.completeNames,
	}
	timeout := timeoutFlag(cmd, 30*time.Second, "how long to wait for the manager to accept the request (--wait then follows the backfill for as long as it takes)")
	from := cmd.Flags().String("from", "", "the first time of the range: a date (2026-11-01) or time (2026-11-01T00:05) in the schedule's zone, or RFC 3339 with an offset (2026-11-01T00:00:00Z)")
	to := cmd.Flags().String("to", "now", `the last time of the range, as --from (a date: to its last second), or "now"`)
	dryRun := cmd.Flags().Bool("dry-run", false, "list the occurrences the backfill would run, and those whose Job succeeded here, without asking the manager anything")
	parallelism := cmd.Flags().Int("parallelism", 1, "how many occurrences run at once (1 to 10; more than 1 needs a lock.key that differs per occurrence, or they wait for each other's lock)")
	cancel := cmd.Flags().Bool("cancel", false, "cancel the running backfill instead")
	cmd.Flags().BoolVar(&o.wait, "wait", false, "follow the backfill until it ends; exit 1 if an occurrence failed")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		o.timeout = *timeout
		if *cancel {
			return cancelBackfill(cmd.Context(), o, args[0])
		}
		if *from == "" {
			return usageError{msg: "backfill needs --from"}
		}
		return backfillCmd(cmd.Context(), o, args[0], *from, *to, *parallelism, *dryRun)
	}
	return cmd
}

// zoneNote names a zone other than UTC beside times printed in it.
func zoneNote(loc *time.Location) string {
	if loc == time.UTC {
		return ""
	}
	return " (" + loc.String() + ")"
}

// dryRunBackfill lists the occurrences a backfill would run, in the schedule's
// zone and in UTC, with those whose Job succeeded in this cluster; it writes
// nothing. Whether another cluster sharing the store did an occurrence only the
// store's done-marker says, when the backfill runs.
func dryRunBackfill(ctx context.Context, o *options, gj *batchv1alpha1.GuardedJob, sched *schedule.Schedule, rng schedule.Backfill, parallelism int) error {
	loc := sched.Location()
	done := map[int64]string{}
	jobs := &batchv1.JobList{}
	listErr := o.k8s.List(ctx, jobs, client.InNamespace(gj.Namespace), client.MatchingLabels{batchv1alpha1.GuardedJobLabel: gj.Name})
	for i := range jobs.Items {
		j := &jobs.Items[i]
		at, err := time.Parse(time.RFC3339, j.Annotations[batchv1alpha1.ScheduledTimeAnnotation])
		if err != nil || !metav1.IsControlledBy(j, gj) {
			continue
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				done[at.Unix()] = j.Name
			}
		}
	}
	_, _ = fmt.Fprintf(o.Out, "guardedjob %s/%s: a backfill from %s to %s%s would run %d occurrence(s), %d at a time:\n", gj.Namespace, gj.Name,
		rng.From.In(loc).Format(time.RFC3339), rng.To.In(loc).Format(time.RFC3339), zoneNote(loc), rng.Count, parallelism)
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	for _, at := range sched.Between(rng.From, rng.To, rng.Count) {
		line := fmt.Sprintf("  %s\t%s", at.In(loc).Format(time.RFC3339), at.UTC().Format(time.RFC3339))
		if job, ok := done[at.Unix()]; ok {
			line += "\tdone here: Job " + job + " succeeded (skipped when the backfill runs)"
		}
		_, _ = fmt.Fprintln(w, line)
	}
	_ = w.Flush()
	if listErr != nil {
		_, _ = fmt.Fprintf(o.Out, "(this cluster's Jobs could not be listed: %v)\n", listErr)
	}
	_, _ = fmt.Fprintf(o.Out, "Nothing was written (--dry-run). An occurrence whose done-marker exists, from this cluster or another sharing the store, is skipped when the backfill runs; this cluster's Jobs show only those its history limits kept.\n")
	return nil
}

// backfillFailed is backfill --wait's error when an occurrence failed or the
// backfill was cancelled.
type backfillFailed struct{ msg string }

func (e backfillFailed) Error() string { return e.msg }
func (backfillFailed) ExitCode() int   { return 1 }

// backfillCmd checks a backfill request as the manager will, sets it, waits
// for the manager's answer and, with --wait, follows the backfill.
func backfillCmd(ctx context.Context, o *options, name, fromText, toText string, parallelism int, dryRun bool) error {
	gj, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	sched, err := schedule.Parse(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	if err != nil {
		return fmt.Errorf("guardedjob %s/%s: %w", gj.Namespace, gj.Name, err)
	}
	loc := sched.Location()
	now := time.Now()
	from, err := schedule.ParseRangeTime("--from", fromText, loc, false)
	if err != nil {
		return usageError{msg: err.Error()}
	}
	to := now.Truncate(time.Second)
	if toText != "now" {
		if to, err = schedule.ParseRangeTime("--to", toText, loc, true); err != nil {
			return usageError{msg: err.Error()}
		}
	}
	if parallelism < 1 || parallelism > batchv1alpha1.MaxBackfillParallelism {
		return usageError{msg: fmt.Sprintf("--parallelism must be from 1 to %d", batchv1alpha1.MaxBackfillParallelism)}
	}
	rng, err := schedule.CheckBackfill(sched, gj.Spec.Schedule, from, to, now, batchv1alpha1.MaxBackfillOccurrences)
	if err != nil {
		return fmt.Errorf("guardedjob %s/%s: %w", gj.Namespace, gj.Name, err)
	}
	if dryRun {
		return dryRunBackfill(ctx, o, gj, sched, rng, parallelism)
	}
	if b := gj.Status.Backfill; b != nil && b.State == batchv1alpha1.BackfillRunning {
		return fmt.Errorf("guardedjob %s/%s: backfill %s is running (%d occurrence(s) remaining): cancel it first with --cancel", gj.Namespace, gj.Name, b.Request, b.Remaining)
	}
	summary := fmt.Sprintf("guardedjob %s/%s: backfill of %d occurrence(s) from %s to %s%s, %d at a time", gj.Namespace, gj.Name,
		rng.Count, rng.First.In(loc).Format(time.RFC3339), rng.Last.In(loc).Format(time.RFC3339), zoneNote(loc), parallelism)
	if served, err := backfillByRequest(ctx, o, gj, rng.From, rng.To, int32(parallelism), summary); served || err != nil { //nolint:gosec // 1 to 10
		return err
	}
	// An API server without the GuardedJobBackfill kind: the annotations.

	value := requestValue()
	err = o.setAnnotations(ctx, gj, map[string]*string{
		batchv1alpha1.BackfillAnnotation:            &value,
		batchv1alpha1.BackfillFromAnnotation:        ptr.To(rng.From.UTC().Format(time.RFC3339)),
		batchv1alpha1.BackfillToAnnotation:          ptr.To(rng.To.UTC().Format(time.RFC3339)),
		batchv1alpha1.BackfillParallelismAnnotation: ptr.To(strconv.Itoa(parallelism)),
	})
	if err != nil {
		return fmt.Errorf("set %s: %w", batchv1alpha1.BackfillAnnotation, err)
	}
	_, _ = fmt.Fprintf(o.Out, "guardedjob %s/%s: backfill of %d occurrence(s) from %s to %s%s, %d at a time (%s=%s)\n", gj.Namespace, gj.Name,
		rng.Count, rng.First.In(loc).Format(time.RFC3339), rng.Last.In(loc).Format(time.RFC3339), zoneNote(loc), parallelism, batchv1alpha1.BackfillAnnotation, value)

	answerCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cur, err := o.waitFor(answerCtx, gj.Namespace, gj.Name, func(g *batchv1alpha1.GuardedJob) (bool, error) {
		return g.Status.LastBackfillRequest != nil && g.Status.LastBackfillRequest.Request == value, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the manager to take the request: %w", deadlineOr(answerCtx, err, o.timeout))
	}
	if rec := cur.Status.LastBackfillRequest; rec.Result == batchv1alpha1.BackfillRefused {
		return fmt.Errorf("the manager refused the backfill: %s", rec.Message)
	}
	_, _ = fmt.Fprintf(o.Out, "accepted: %s\n", cur.Status.LastBackfillRequest.Message)
	if !o.wait {
		_, _ = fmt.Fprintf(o.Out, "follow it with: kubectl guardedjob status %s -n %s (status.backfill)\n", gj.Name, gj.Namespace)
		return nil
	}
	return followBackfill(ctx, o, gj.Namespace, gj.Name, value)
}

// followBackfill prints a backfill's progress each time it changes, until it
// ends.
func followBackfill(ctx context.Context, o *options, namespace, name, request string) error {
	last := ""
	var final *batchv1alpha1.BackfillStatus
	_, err := o.waitFor(ctx, namespace, name, func(g *batchv1alpha1.GuardedJob) (bool, error) {
		b := g.Status.Backfill
		if b == nil || b.Request != request {
			return false, nil
		}
		if line := progressLine(b, g.Status.Active); line != last {
			_, _ = fmt.Fprintln(o.Out, line)
			last = line
		}
		final = b
		return b.State != batchv1alpha1.BackfillRunning && len(b.Current) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("following the backfill: %w", err)
	}
	switch {
	case final.State == batchv1alpha1.BackfillCancelled:
		return backfillFailed{msg: "the backfill was cancelled: " + final.Message}
	case final.Failed > 0:
		times := make([]string, len(final.FailedOccurrences))
		for i, t := range final.FailedOccurrences {
			times[i] = t.UTC().Format(time.RFC3339)
		}
		return backfillFailed{msg: fmt.Sprintf("%d occurrence(s) failed (%s); a backfill of the same range runs them again and skips the others", final.Failed, strings.Join(times, ", "))}
	}
	return nil
}

// progressLine is one line of a backfill's progress.
func progressLine(b *batchv1alpha1.BackfillStatus, active []batchv1alpha1.ActiveRun) string {
	line := fmt.Sprintf("%s: %d/%d done (succeeded %d, skipped %d, failed %d), remaining %d", b.State,
		b.Succeeded+b.Skipped+b.Failed, b.Total, b.Succeeded, b.Skipped, b.Failed, b.Remaining)
	var current []string
	for _, e := range b.Current {
		what := e.ScheduledTime.UTC().Format(time.RFC3339)
		for _, r := range active {
			if r.Backfill == b.Request && r.ScheduledTime.Equal(&e.ScheduledTime) && r.JobName != "" {
				what += " (job.batch/" + r.JobName + ")"
			}
		}
		if e.RetryAt != nil {
			what += fmt.Sprintf(" (lock busy, try %d at %s)", e.Attempts+1, e.RetryAt.UTC().Format(time.RFC3339))
		}
		current = append(current, what)
	}
	if len(current) > 0 {
		line += "; now: " + strings.Join(current, ", ")
	}
	return line
}

// cancelBackfill cancels the running backfill and waits until the manager has.
func cancelBackfill(ctx context.Context, o *options, name string) error {
	gj, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	b := gj.Status.Backfill
	if b == nil || b.State != batchv1alpha1.BackfillRunning {
		return fmt.Errorf("guardedjob %s/%s has no backfill running", gj.Namespace, gj.Name)
	}
	if batchv1alpha1.IsRequestObjectValue(b.Request) {
		if err := cancelBackfillRequest(ctx, o, gj, b.Request); err != nil {
			return err
		}
	} else if err := o.setAnnotations(ctx, gj, map[string]*string{batchv1alpha1.BackfillCancelAnnotation: &b.Request}); err != nil {
		return fmt.Errorf("set %s: %w", batchv1alpha1.BackfillCancelAnnotation, err)
	}
	answerCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cur, err := o.waitFor(answerCtx, gj.Namespace, gj.Name, func(g *batchv1alpha1.GuardedJob) (bool, error) {
		return g.Status.Backfill != nil && (g.Status.Backfill.Request != b.Request || g.Status.Backfill.State != batchv1alpha1.BackfillRunning), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the manager to cancel the backfill: %w", deadlineOr(answerCtx, err, o.timeout))
	}
	_, _ = fmt.Fprintf(o.Out, "guardedjob %s/%s: backfill %s %s\n", gj.Namespace, gj.Name, b.Request, cur.Status.Backfill.Message)
	return nil
}

// printScheduleSummary adds status's failure count, waiting runs and backfill
// to status's summary.
func printScheduleSummary(row func(k, format string, a ...any), gj *batchv1alpha1.GuardedJob) {
	if n := gj.Spec.SuspendAfter(); n > 0 {
		row("Failure policy", "suspend after %d failed runs in a row (now %d)", n, gj.Status.ConsecutiveFailures)
	}
	for _, b := range gj.Status.Buffered {
		what := "scheduled"
		if b.RunNow != "" {
			what = "run-now " + b.RunNow
		}
		row("Waiting run", "%s (%s, waiting since %s)", b.ScheduledTime.UTC().Format(time.RFC3339), what, b.BufferedAt.UTC().Format(time.RFC3339))
	}
	if b := gj.Status.Backfill; b != nil {
		row("Backfill", "%s from %s to %s: %s", b.Request, b.From.UTC().Format(time.RFC3339), b.To.UTC().Format(time.RFC3339), progressLine(b, gj.Status.Active))
	}
	if rec := gj.Status.LastBackfillRequest; rec != nil && rec.Result == batchv1alpha1.BackfillRefused {
		row("Last backfill request", "%s refused: %s", rec.Request, rec.Message)
	}
}

// runExtrasText says what an active run is besides its schedule: a backfill
// occurrence, the parameters of its run-now request.
func runExtrasText(r batchv1alpha1.ActiveRun) string {
	out := ""
	if r.Backfill != "" {
		out += " backfill=" + r.Backfill
	}
	if len(r.Parameters) > 0 {
		out += " parameters=" + runparams.Describe(r.Parameters)
	}
	return out
}
