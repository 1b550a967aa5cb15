package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// historyNext is how many coming occurrences history lists.
const historyNext = 5

func newHistoryCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history NAME",
		Short: "Show what happened to a GuardedJob's recent runs, with their Jobs and Pods, and the coming occurrences",
		Long: `Show the last runs' outcomes (status.recentRuns, newest first: Succeeded, Failed,
Busy, Skipped, ..., the occurrence each was for in the schedule's zone, what started
it, its Job and fence, and why), the Jobs and Pods of those runs that still exist, and
the next occurrences in the schedule's zone. Runs that were Busy or Skipped had no Job;
they are listed all the same, after their events have expired. Needs only read access.`,
		Example:           `  kubectl guardedjob history daily-settlement -n payments`,
		Args:              oneName,
		ValidArgsFunction: o.completeNames,
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return historyCmd(cmd.Context(), o, args[0], time.Now())
	}
	return cmd
}

// historyCmd prints the recent outcomes, the Jobs and Pods that remain of them,
// and the coming occurrences.
func historyCmd(ctx context.Context, o *options, name string, now time.Time) error {
	gj, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	loc := time.UTC
	sched, schedErr := schedule.Parse(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	if schedErr == nil {
		loc = sched.Location()
	}
	local := func(t *metav1.Time) string {
		if t == nil {
			return "-"
		}
		return t.In(loc).Format(time.RFC3339)
	}
	_, _ = fmt.Fprintf(o.Out, "GuardedJob %s/%s: schedule %q (%s)%s\n", gj.Namespace, gj.Name, gj.Spec.Schedule, loc, suspendedNote(gj))
	if line := retryLine(gj.Status.Retry, loc, now); line != "" {
		_, _ = fmt.Fprintln(o.Out, line)
	}
	_, _ = fmt.Fprintln(o.Out)

	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "SCHEDULED\tRESULT\tTRIGGER\tJOB\tFENCE\tENDED\tWHY")
	recent := gj.Status.RecentRuns
	if len(recent) == 0 && gj.Status.LastRun != nil {
		lr := gj.Status.LastRun // written by a manager that kept no recentRuns yet
		recent = []batchv1alpha1.RecentRun{{ScheduledTime: lr.ScheduledTime, Result: lr.Result, JobName: lr.JobName, Fence: lr.Fence,
			HeldBy: lr.HeldBy, FinishedAt: lr.FinishedAt, Message: lr.Message}}
	}
	for _, r := range recent {
		why := r.Message
		if r.HeldBy != "" && !strings.Contains(why, r.HeldBy) {
			why = "held by " + r.HeldBy + ": " + why
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", local(r.ScheduledTime), r.Result, dash(r.Trigger), dash(r.JobName),
			fenceText(r.Fence), ago(r.FinishedAt, now), oneLine(why))
	}
	for _, a := range gj.Status.Active {
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", local(&a.ScheduledTime), "(active: "+string(a.Phase)+")", a.Trigger(), a.JobName,
			fenceText(a.Fence), "-", "")
	}
	if len(recent) == 0 && len(gj.Status.Active) == 0 {
		_, _ = fmt.Fprintln(w, "(no run yet)")
	}
	_ = w.Flush()

	// The Jobs (and their Pods) of the runs above that the history limits kept.
	jobs := &batchv1.JobList{}
	if err := o.k8s.List(ctx, jobs, client.InNamespace(gj.Namespace), client.MatchingLabels{batchv1alpha1.GuardedJobLabel: gj.Name}); err != nil {
		_, _ = fmt.Fprintf(o.Out, "\nJobs: cannot list them: %v\n", err)
	} else {
		pods := &corev1.PodList{}
		podsErr := o.k8s.List(ctx, pods, client.InNamespace(gj.Namespace), client.MatchingLabels{batchv1alpha1.GuardedJobLabel: gj.Name})
		sort.Slice(jobs.Items, func(i, j int) bool { return jobs.Items[j].CreationTimestamp.Before(&jobs.Items[i].CreationTimestamp) })
		_, _ = fmt.Fprintf(o.Out, "\nJobs (kept by the history limits, newest first):\n")
		w = tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(w, "JOB\tSTATUS\tFENCE\tAGE\tPODS")
		for i := range jobs.Items {
			j := &jobs.Items[i]
			if !metav1.IsControlledBy(j, gj) {
				continue
			}
			var podList []string
			for _, p := range pods.Items {
				if p.Labels["job-name"] == j.Name || p.Labels[batchv1.JobNameLabel] == j.Name {
					podList = append(podList, p.Name+" ("+string(p.Status.Phase)+")")
				}
			}
			podText := strings.Join(podList, ", ")
			if podsErr != nil {
				podText = "cannot list Pods: " + podsErr.Error()
			}
			_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", j.Name, jobState(j), dash(j.Annotations[batchv1alpha1.FenceAnnotation]),
				ago(&j.CreationTimestamp, now), dash(podText))
		}
		_ = w.Flush()
	}

	_, _ = fmt.Fprintf(o.Out, "\nNext occurrences (%s):\n", loc)
	switch {
	case schedErr != nil:
		_, _ = fmt.Fprintf(o.Out, "  none: %v\n", schedErr)
	default:
		t := now
		for range historyNext {
			if t = sched.Next(t); t.IsZero() {
				break
			}
			_, _ = fmt.Fprintf(o.Out, "  %s\n", t.In(loc).Format(time.RFC3339))
		}
	}
	return nil
}

func suspendedNote(gj *batchv1alpha1.GuardedJob) string {
	now := time.Now()
	switch {
	case gj.Spec.SuspendedAt(now):
		return ", suspended" + gj.Spec.SuspendNoteOf().Suffix()
	case gj.Status.Pause.PausedAt(now):
		return ", paused" + gj.Status.Pause.Suffix()
	}
	return ""
}

func jobState(j *batchv1.Job) string {
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return string(c.Type)
		}
	}
	if j.Spec.Suspend != nil && *j.Spec.Suspend {
		return "Suspended"
	}
	return fmt.Sprintf("Running (%d active)", j.Status.Active)
}

func fenceText(f int64) string {
	if f == 0 {
		return "-"
	}
	return fmt.Sprint(f)
}

// ago is how long before now t was, as kubectl prints ages.
func ago(t *metav1.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t.Time)) + " ago"
}

// oneLine keeps a message on its row.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// retryLine says which occurrence is being tried again (spec.retryOccurrence),
// when its next try comes and until when; "" when none is.
func retryLine(rt *batchv1alpha1.OccurrenceRetryStatus, loc *time.Location, now time.Time) string {
	if rt == nil {
		return ""
	}
	next := "as soon as no run of it is active"
	if rt.NotBefore != nil {
		next = "at " + rt.NotBefore.In(loc).Format(time.RFC3339)
		if rt.NotBefore.After(now) {
			next += " (in " + duration.HumanDuration(rt.NotBefore.Sub(now)) + ")"
		}
	}
	return fmt.Sprintf("Retrying occurrence %s: try %d %s, until %s; the last run ended %s: %s",
		rt.ScheduledTime.In(loc).Format(time.RFC3339), rt.Attempts+1, next, rt.Until.In(loc).Format(time.RFC3339), rt.LastResult, oneLine(rt.LastMessage))
}
