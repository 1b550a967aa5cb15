package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

func newStatusCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a GuardedJob's state, and what the lock store holds for it now",
		Long: `Show a GuardedJob's schedule, lock status, last run, conditions, active runs and
recent events, then "Redis now": the lock's holder and whose it is, its expiry, the
fence counter and the current occurrence's done-marker, as the manager reads them on
request (the batch.guardedjob.dev/inspect-now annotation; needs patch on the
GuardedJob). A user who may only read sees the last recorded observation instead.
With -o json or yaml the GuardedJob is printed, status.storeView holding the answer.`,
		Example: `  kubectl guardedjob -n payments status daily-settlement
  kubectl guardedjob status daily-settlement -n payments -o yaml
  kubectl guardedjob status daily-settlement -n payments --redis-secret guardedjob-system/guardedjob-redis`,
		Args:              oneName,
		ValidArgsFunction: o.completeNames,
	}
	out := outputFlags(cmd)
	timeout := timeoutFlag(cmd, 30*time.Second, "how long to wait for the manager's answer")
	o.addStoreFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		o.timeout = *timeout
		if err := out.check(); err != nil {
			return err
		}
		return statusCmd(cmd.Context(), o, out, args[0])
	}
	return cmd
}

// statusCmd prints the GuardedJob as describe would summarise it, then what the
// lock store says now about its keys.
func statusCmd(ctx context.Context, o *options, out *output, name string) error {
	gj, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	// Redis now: asked of the manager, or read directly (break-glass).
	var view *batchv1alpha1.StoreView
	var viewErr error
	readOnly := false
	if o.direct() {
		st, err := newStores(o)
		if err != nil {
			return err
		}
		defer st.close()
		if view, viewErr = directView(ctx, st, o.thisCluster(ctx), gj); view != nil {
			gj.Status.StoreView = view
		}
	} else {
		cur, err := o.askView(ctx, gj)
		switch {
		case err == nil:
			gj, view = cur, cur.Status.StoreView
			if view.Error != "" {
				viewErr = fmt.Errorf("the manager could not read the lock store: %s", view.Error)
			}
		case isForbidden(err):
			readOnly = true
		default:
			viewErr = err
		}
	}

	if !out.human() {
		if readOnly {
			_, _ = fmt.Fprintf(o.ErrOut, "warning: %s; status.storeView is the last answer, if any\n", noPatchNote(gj.Namespace))
		}
		if err := out.printObj(gj, o.Out); err != nil {
			return err
		}
		return viewErr
	}

	printSummary(o, gj)
	switch {
	case readOnly:
		_, _ = fmt.Fprintf(o.Out, "\nRedis now: not available: %s.\n", noPatchNote(gj.Namespace))
		if l := gj.Status.Lock; l != nil {
			_, _ = fmt.Fprintf(o.Out, "  last recorded observation (status.lock): %s %s holder=%s fence=%d\n", l.State, l.Key, dash(l.Holder), l.Fence)
		}
		if v := gj.Status.StoreView; v != nil && v.Error == "" {
			_, _ = fmt.Fprintf(o.Out, "  last answer of the manager, read at %s:\n", v.ObservedAt.UTC().Format(time.RFC3339))
			printView(o.Out, v)
		}
	case view != nil:
		switch {
		case len(view.Entries) > 0:
			_, _ = fmt.Fprintf(o.Out, "\nRedis now (read at %s):\n", view.ObservedAt.UTC().Format(time.RFC3339))
			printView(o.Out, view)
		case view.Error == "":
			_, _ = fmt.Fprintln(o.Out, "\nRedis now:\n  nothing to look at: no run yet, and the spec's keys do not render (see the Ready condition)")
		}
		if view.Error != "" {
			_, _ = fmt.Fprintf(o.Out, "\nRedis now: not available: %s\n", view.Error)
		}
	case errors.As(viewErr, new(errNoAnswer)):
		_, _ = fmt.Fprintf(o.Out, "\nRedis now: not available: %v\n", viewErr)
	}
	printEvents(ctx, o, gj)
	return viewErr
}

// printSummary prints what status records about the GuardedJob.
func printSummary(o *options, gj *batchv1alpha1.GuardedJob) {
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	row := func(k, format string, a ...any) {
		_, _ = fmt.Fprintf(w, "%s:\t"+format+"\n", append([]any{k}, a...)...)
	}
	row("Name", "%s/%s", gj.Namespace, gj.Name)
	row("Schedule", "%s (%s)", gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	row("Suspend", "%t%s", gj.Spec.Suspended(), gj.Spec.SuspendNoteOf().Suffix())
	if p := gj.Status.Pause; p != nil {
		row("Paused", "since %s%s (resume with kubectl guardedjob resume %s)", p.Since.UTC().Format(time.RFC3339), p.Suffix(), gj.Name)
	}
	if line := retryLine(gj.Status.Retry, time.UTC, time.Now()); line != "" {
		row("Retry", "%s", strings.TrimPrefix(line, "Retrying "))
	}
	row("Lock key", "%s", gj.Spec.Lock.Key)
	if t := gj.Status.LastScheduleTime; t != nil {
		row("Last schedule", "%s", t.UTC().Format(time.RFC3339))
	}
	if t := gj.Status.NextScheduleTime; t != nil {
		row("Next schedule", "%s", t.UTC().Format(time.RFC3339))
	}
	if l := gj.Status.Lock; l != nil {
		row("Lock (status)", "%s %s holder=%s fence=%d", l.State, l.Key, dash(l.Holder), l.Fence)
	}
	row("Last fence", "%d", gj.Status.LastFence)
	if lr := gj.Status.LastRun; lr != nil {
		finished := ""
		if lr.FinishedAt != nil {
			finished = " at " + lr.FinishedAt.UTC().Format(time.RFC3339)
		}
		row("Last run", "%s %s%s fence=%d %s", lr.JobName, lr.Result, finished, lr.Fence, lr.Message)
	}
	if d := gj.Status.LastOccurrenceDone; d != nil {
		row("Last occurrence done", "%s by %s at %s", d.ScheduledTime.UTC().Format(time.RFC3339), dash(d.By), d.At.UTC().Format(time.RFC3339))
	}
	if u := gj.Status.LastUnlock; u != nil {
		row("Last unlock", "%s %s %s at %s: %s", u.Result, u.Key, u.Holder, u.FinishedAt.UTC().Format(time.RFC3339), u.Message)
	}
	for _, c := range gj.Status.Conditions {
		row("Condition "+c.Type, "%s %s %s", c.Status, c.Reason, c.Message)
	}
	for _, r := range gj.Status.Active {
		row("Active run", "%s phase=%s fence=%d holder=%s scheduled=%s%s", r.JobName, r.Phase, r.Fence, r.Holder, r.ScheduledTime.UTC().Format(time.RFC3339), runExtrasText(r))
	}
	printScheduleSummary(row, gj) // backfill.go's status lines
	_ = w.Flush()
}

// printEvents lists the GuardedJob's recent events, if the user may read them.
func printEvents(ctx context.Context, o *options, gj *batchv1alpha1.GuardedJob) {
	list := &corev1.EventList{}
	if err := o.k8s.List(ctx, list, client.InNamespace(gj.Namespace),
		client.MatchingFields{"involvedObject.name": gj.Name, "involvedObject.kind": "GuardedJob"}); err != nil || len(list.Items) == 0 {
		return
	}
	evs := list.Items
	when := func(e corev1.Event) time.Time {
		for _, t := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time, e.CreationTimestamp.Time} {
			if !t.IsZero() {
				return t
			}
		}
		return time.Time{}
	}
	slices.SortFunc(evs, func(a, b corev1.Event) int { return when(a).Compare(when(b)) })
	if len(evs) > 10 {
		evs = evs[len(evs)-10:]
	}
	_, _ = fmt.Fprintln(o.Out, "\nEvents:")
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	for _, e := range evs {
		_, _ = fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", when(e).UTC().Format(time.RFC3339), e.Type, e.Reason, e.Message)
	}
	_ = w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
