package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// statusCmd prints the GuardedJob as describe would summarise it, then what the
// lock store says now about its keys.
func statusCmd(ctx context.Context, o *options, args []string) error {
	gj, err := o.get(ctx, args[0])
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	row := func(k, format string, a ...any) {
		_, _ = fmt.Fprintf(w, "%s:\t"+format+"\n", append([]any{k}, a...)...)
	}
	row("Name", "%s/%s", gj.Namespace, gj.Name)
	row("Schedule", "%s (%s)", gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	row("Suspend", "%t", gj.Spec.Suspended())
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
	for _, c := range gj.Status.Conditions {
		row("Condition "+c.Type, "%s %s %s", c.Status, c.Reason, c.Message)
	}
	for _, r := range gj.Status.Active {
		row("Active run", "%s phase=%s fence=%d holder=%s scheduled=%s", r.JobName, r.Phase, r.Fence, r.Holder, r.ScheduledTime.UTC().Format(time.RFC3339))
	}
	_ = w.Flush()

	_, _ = fmt.Fprintln(o.stdout, "\nRedis now:")
	keys := keysOf(gj, time.Now())
	if len(keys) == 0 {
		_, _ = fmt.Fprintln(o.stdout, "  nothing to look at: no run yet, and the spec's keys do not render (see the Ready condition)")
	} else {
		st := newStores(o)
		defer st.close()
		store, err := st.forJob(ctx, gj)
		if err != nil {
			return err
		}
		cluster := o.thisCluster(ctx)
		w = tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
		for _, k := range keys {
			state, err := store.Inspect(ctx, k)
			if err != nil {
				return fmt.Errorf("inspect %s in %s: %w", k.Lock, store.Identity(), err)
			}
			if state.Holder == "" {
				_, _ = fmt.Fprintf(w, "  lock\t%s\tfree\n", k.Lock)
			} else {
				_, _ = fmt.Fprintf(w, "  lock\t%s\theld by %s (%s), %s\n", k.Lock, lockclient.HolderOf(state.Holder), where(state.Holder, cluster, gj), expiry(state.TTL))
			}
			if k.Fence != "" {
				_, _ = fmt.Fprintf(w, "  fence\t%s\t%d\n", k.Fence, state.Fence)
			}
			if k.Occurrence != "" {
				done := "absent: the occurrence has not succeeded"
				if state.Done != "" {
					done = "done by " + lockclient.HolderOf(state.Done)
				}
				_, _ = fmt.Fprintf(w, "  done-marker\t%s\t%s\n", k.Occurrence, done)
			}
		}
		_ = w.Flush()
		_, _ = fmt.Fprintf(o.stdout, "  store: %s\n", store.Identity())
	}
	printEvents(ctx, o, gj)
	return nil
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
	_, _ = fmt.Fprintln(o.stdout, "\nEvents:")
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	for _, e := range evs {
		_, _ = fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", when(e).UTC().Format(time.RFC3339), e.Type, e.Reason, e.Message)
	}
	_ = w.Flush()
}

// locksCmd lists every lock key the GuardedJobs in scope use and who holds it.
func locksCmd(ctx context.Context, o *options, _ []string) error {
	if err := o.connect(); err != nil {
		return err
	}
	list := &batchv1alpha1.GuardedJobList{}
	var opts []client.ListOption
	if !o.allNamespaces {
		opts = append(opts, client.InNamespace(o.namespace))
	}
	if err := o.k8s.List(ctx, list, opts...); err != nil {
		return err
	}
	slices.SortFunc(list.Items, func(a, b batchv1alpha1.GuardedJob) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	st := newStores(o)
	defer st.close()
	cluster := o.thisCluster(ctx)
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "NAMESPACE\tGUARDEDJOB\tKEY\tHOLDER\tWHERE\tEXPIRES\tFENCE")
	var failed []string
	for i := range list.Items {
		gj := &list.Items[i]
		keys := keysOf(gj, time.Now())
		if len(keys) == 0 {
			continue
		}
		store, err := st.forJob(ctx, gj)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s/%s: %v", gj.Namespace, gj.Name, err))
			continue
		}
		for _, k := range keys {
			state, err := store.Inspect(ctx, k)
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s/%s: inspect %s: %v", gj.Namespace, gj.Name, k.Lock, err))
				continue
			}
			fence := "-"
			if k.Fence != "" {
				fence = fmt.Sprint(state.Fence)
			}
			exp := "-"
			switch {
			case state.Holder != "" && state.TTL > 0:
				exp = state.TTL.Round(100 * time.Millisecond).String()
			case state.Holder != "":
				exp = "never"
			}
			_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", gj.Namespace, gj.Name, k.Lock,
				dash(lockclient.HolderOf(state.Holder)), where(state.Holder, cluster, gj), exp, fence)
		}
	}
	_ = w.Flush()
	if len(failed) > 0 {
		return fmt.Errorf("could not read every lock:\n  %s", strings.Join(failed, "\n  "))
	}
	return nil
}

func expiry(ttl time.Duration) string {
	if ttl <= 0 {
		return "no expiry"
	}
	return "expires in " + ttl.Round(100*time.Millisecond).String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
