package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

func newLocksCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "locks",
		Short: "List every lock key the GuardedJobs in scope use, and who holds it now",
		Long: `List one line per lock key the GuardedJobs of the namespace (or, with -A, of every
namespace) use: holder, whose it is, expiry and fence; -o wide adds the done-marker
and the store. The manager reads the store on request (the inspect-now annotation on
each GuardedJob; needs patch on them); GuardedJobs you may only read show the last
recorded observation. With -o json or yaml the GuardedJobs are printed, each
status.storeView holding the answer.`,
		Example: `  kubectl guardedjob locks -n payments
  kubectl guardedjob locks -A -o wide --no-headers
  kubectl guardedjob locks -A --redis-secret guardedjob-system/guardedjob-redis --store-allow '*.svc.cluster.local,10.96.0.0/12'`,
		Args: noArgs,
	}
	out := outputFlags(cmd)
	timeout := timeoutFlag(cmd, 30*time.Second, "how long to wait for the manager's answers")
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "every namespace")
	o.addStoreFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		o.timeout = *timeout
		if err := out.check(); err != nil {
			return err
		}
		return locksCmd(cmd.Context(), o, out)
	}
	return cmd
}

// lockRow is one GuardedJob's line(s) in the locks table.
type lockRow struct {
	gj *batchv1alpha1.GuardedJob
	// recorded is true when the view is not an answer to this command: the user
	// may only read, so the last recorded observation is shown.
	recorded bool
}

// locksCmd lists every lock key the GuardedJobs in scope use and who holds it.
func locksCmd(ctx context.Context, o *options, out *output) error {
	if err := o.connect(); err != nil {
		return err
	}
	namespace := o.namespace
	if o.allNamespaces {
		namespace = ""
	}
	list := &batchv1alpha1.GuardedJobList{}
	if err := o.k8s.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return err
	}
	slices.SortFunc(list.Items, func(a, b batchv1alpha1.GuardedJob) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	var rows []lockRow
	var failed []string
	if o.direct() {
		st, err := newStores(o)
		if err != nil {
			return err
		}
		defer st.close()
		cluster := o.thisCluster(ctx)
		for i := range list.Items {
			gj := &list.Items[i]
			view, err := directView(ctx, st, cluster, gj)
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s/%s: %v", gj.Namespace, gj.Name, err))
				continue
			}
			gj.Status.StoreView = view
			rows = append(rows, lockRow{gj: gj})
		}
	} else {
		rows, failed = askViews(ctx, o, namespace, list.Items)
	}

	if !out.human() {
		items := &batchv1alpha1.GuardedJobList{}
		for _, r := range rows {
			gj := r.gj.DeepCopy()
			gj.APIVersion, gj.Kind = batchv1alpha1.GroupVersion.String(), "GuardedJob"
			items.Items = append(items.Items, *gj)
		}
		if err := out.printObj(items, o.Out); err != nil {
			return err
		}
	} else {
		table := locksTable(rows)
		printer := printers.NewTablePrinter(printers.PrintOptions{NoHeaders: out.noHeaders, Wide: out.wide(), WithNamespace: o.allNamespaces})
		if err := printer.PrintObj(table, o.Out); err != nil {
			return err
		}
		if len(table.Rows) == 0 && len(failed) == 0 {
			if o.allNamespaces {
				_, _ = fmt.Fprintln(o.ErrOut, "No GuardedJobs found.")
			} else {
				_, _ = fmt.Fprintf(o.ErrOut, "No GuardedJobs found in %s namespace.\n", namespace)
			}
		}
	}
	for _, r := range rows {
		if r.recorded {
			_, _ = fmt.Fprintf(o.ErrOut, "note: lines marked (recorded) are the last observation in status: %s\n", noPatchNote(r.gj.Namespace))
			break
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not read every lock:\n  %s", strings.Join(failed, "\n  "))
	}
	return nil
}

// askViews asks the manager for a store view of every GuardedJob, then watches
// until each has answered or the timeout passed. GuardedJobs the user may not
// ask about (create guardedjobinspects) get their last recorded observation.
func askViews(ctx context.Context, o *options, namespace string, items []batchv1alpha1.GuardedJob) ([]lockRow, []string) {
	asked := map[string]string{} // namespace/name -> the value its answer repeats
	var failed []string
	recorded := map[string]bool{}
	for i := range items {
		gj := &items[i]
		id := gj.Namespace + "/" + gj.Name
		value, err := o.requestInspect(ctx, gj)
		switch {
		case err == nil:
			asked[id] = value
		case isForbidden(err):
			recorded[id] = true
		default:
			failed = append(failed, fmt.Sprintf("%s: %v", id, err))
		}
	}
	answered := map[string]*batchv1alpha1.GuardedJob{}
	if len(asked) > 0 {
		wctx, cancel := context.WithTimeout(ctx, o.timeout)
		err := o.watchAll(wctx, namespace, func(gj *batchv1alpha1.GuardedJob) (bool, error) {
			id := gj.Namespace + "/" + gj.Name
			if value, ok := asked[id]; ok && gj.Status.StoreView != nil && gj.Status.StoreView.Request == value {
				answered[id] = gj
			}
			return len(answered) == len(asked), nil
		})
		cancel()
		if err != nil && len(answered) < len(asked) {
			for id := range asked {
				if answered[id] == nil {
					failed = append(failed, fmt.Sprintf("%s: %v", id, deadlineOr(wctx, err, o.timeout)))
				}
			}
		}
	}
	var rows []lockRow
	for i := range items {
		gj := &items[i]
		id := gj.Namespace + "/" + gj.Name
		switch {
		case answered[id] != nil:
			cur := answered[id]
			if cur.Status.StoreView.Error != "" {
				failed = append(failed, fmt.Sprintf("%s: %s", id, cur.Status.StoreView.Error))
				continue
			}
			rows = append(rows, lockRow{gj: cur})
		case recorded[id]:
			rows = append(rows, lockRow{gj: gj, recorded: true})
		}
	}
	slices.Sort(failed)
	return rows, failed
}

// locksTable turns the views into a table: one row per key set read; for a
// GuardedJob shown from its recorded observation, status.lock.
func locksTable(rows []lockRow) *metav1.Table {
	table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "GuardedJob", Type: "string", Format: "name"},
		{Name: "Key", Type: "string"},
		{Name: "Holder", Type: "string"},
		{Name: "Where", Type: "string"},
		{Name: "Expires", Type: "string"},
		{Name: "Fence", Type: "string"},
		{Name: "Done-Marker", Type: "string", Priority: 1},
		{Name: "Done-By", Type: "string", Priority: 1},
		{Name: "Observed", Type: "string", Priority: 1},
		{Name: "Store", Type: "string", Priority: 1},
	}}
	add := func(gj *batchv1alpha1.GuardedJob, cells ...any) {
		table.Rows = append(table.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: gj}})
	}
	for _, r := range rows {
		gj := r.gj
		view := gj.Status.StoreView
		recorded := ""
		if r.recorded {
			// The manager's last answer to someone who may ask, else status.lock.
			if view == nil || view.Error != "" || len(view.Entries) == 0 {
				if l := gj.Status.Lock; l != nil && l.Key != "" {
					fence := "-"
					if l.Fence != 0 {
						fence = fmt.Sprint(l.Fence)
					}
					add(gj, gj.Name, l.Key, dash(l.Holder), "(recorded) "+string(l.State), "-", fence, "-", "-", "-", "-")
				}
				continue
			}
			recorded = "(recorded) "
		}
		for _, e := range view.Entries {
			fence, marker, doneBy := "-", "-", "-"
			if e.Fence != nil {
				fence = fmt.Sprint(e.Fence.Value)
			}
			if e.DoneMarker != nil {
				marker, doneBy = e.DoneMarker.Key, dash(e.DoneMarker.Holder)
			}
			add(gj, gj.Name, e.Lock.Key, dash(e.Lock.Holder), recorded+whereText(e.Lock, e.JobName), expiresIn(e.Lock, view.ObservedAt.Time), fence,
				marker, doneBy, view.ObservedAt.UTC().Format(time.RFC3339), dash(view.Store))
		}
	}
	return table
}
