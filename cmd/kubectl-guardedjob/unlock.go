package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

func newUnlockCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "unlock NAME --force",
		Short: "Delete a stale lock of a GuardedJob, or its current occurrence's done-marker",
		Long: `Delete, after a y/N question for each, the GuardedJob's lock when no active run of
it holds it (a stale lock, another cluster's, or a foreign process's), and the current
occurrence's done-marker (so the occurrence may run again). The manager does it on
request (the batch.guardedjob.dev/unlock annotation; needs patch on the GuardedJob):
a key is deleted only while it still has the holder you were shown, the lease of a
run that may still be working is never deleted, and the manager records a ManualUnlock
event. With --redis-secret or GUARDEDJOB_REDIS_URL the plugin deletes directly.`,
		Example:           `  kubectl guardedjob unlock daily-settlement -n payments --force`,
		Args:              oneName,
		ValidArgsFunction: o.completeNames,
	}
	timeout := timeoutFlag(cmd, 30*time.Second, "how long to wait for each of the manager's answers")
	cmd.Flags().BoolVar(&o.force, "force", false, "required: unlock deletes keys other holders rely on")
	cmd.Flags().BoolVar(&o.yes, "yes", false, "do not ask for confirmation")
	o.addStoreFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		o.timeout = *timeout
		return unlockCmd(cmd.Context(), o, args[0])
	}
	return cmd
}

// candidate is a key unlock may delete, with the value it had when shown (the
// holder when the manager deletes it, the whole value when the plugin does).
type candidate struct {
	what, key, value, detail string
}

// unlockCmd deletes, after confirmation, the lock key of a GuardedJob when no run of
// it holds the lock (a stale or foreign lock), and the done-marker of its current
// occurrence (so the occurrence may run again). A key is deleted only if it still
// holds the value shown (compare-and-delete), and every deletion is recorded as an
// event on the GuardedJob.
func unlockCmd(ctx context.Context, o *options, name string) error {
	if !o.force {
		return errors.New("unlock deletes keys other holders rely on: pass --force (it still asks before each deletion)")
	}
	gj, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	if o.direct() {
		return unlockDirect(ctx, o, gj)
	}
	cur, err := o.askView(ctx, gj)
	if isForbidden(err) {
		return fmt.Errorf("unlock needs create on guardedjobinspects and guardedjobunlocks in namespace %s (the guardedjob-requester role, part of edit): %w", gj.Namespace, err)
	}
	if err != nil {
		return err
	}
	view := cur.Status.StoreView
	if view.Error != "" {
		return fmt.Errorf("the manager could not read the lock store: %s", view.Error)
	}
	var cands []candidate
	for _, e := range view.Entries {
		if h := e.Lock.Holder; h != "" {
			switch {
			case e.Lock.Whose == batchv1alpha1.LockWhoseThisGuardedJob:
				_, _ = fmt.Fprintf(o.Out, "lock %s is held by the active run %s of this GuardedJob: not deleting it (delete the run's Job to stop it)\n", e.Lock.Key, h)
			case e.Lock.Whose != batchv1alpha1.LockWhoseForeign && !e.Lock.NoExpiry && e.Lock.ExpiresAt != nil:
				// The manager never deletes a GuardedJob lease with time to live.
				_, _ = fmt.Fprintf(o.Out, "lock %s is held by %s (%s), a GuardedJob lease that expires by itself in %s: not deleting it (its run may still be working; stop its Job in the cluster that runs it, or wait)\n",
					e.Lock.Key, h, whereText(e.Lock, e.JobName), expiresIn(e.Lock, view.ObservedAt.Time))
			default:
				exp := "no expiry"
				if in := expiresIn(e.Lock, view.ObservedAt.Time); in != "never" {
					exp = "expires in " + in
				}
				cands = append(cands, candidate{what: "lock", key: e.Lock.Key, value: h,
					detail: fmt.Sprintf("held by %s (%s), %s; if that holder is still working, another run may start beside it", h, whereText(e.Lock, e.JobName), exp)})
			}
		}
		if m := e.DoneMarker; m != nil && m.Holder != "" {
			cands = append(cands, candidate{what: "done-marker", key: m.Key, value: m.Holder,
				detail: fmt.Sprintf("done by %s; deleting it lets this occurrence run again", m.Holder)})
		}
	}
	return confirmEach(o, cands, func(c candidate) (bool, error) {
		value, err := o.requestUnlock(ctx, cur, c.key, c.value)
		if err != nil {
			return false, err
		}
		wctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		answered, err := o.waitFor(wctx, cur.Namespace, cur.Name, func(g *batchv1alpha1.GuardedJob) (bool, error) {
			return g.Status.LastUnlock != nil && g.Status.LastUnlock.Request == value, nil
		})
		if err != nil {
			return false, fmt.Errorf("waiting for the manager to unlock %s: %w", c.key, deadlineOr(wctx, err, o.timeout))
		}
		rec := answered.Status.LastUnlock
		switch rec.Result {
		case batchv1alpha1.UnlockDeleted:
			_, _ = fmt.Fprintf(o.Out, "deleted %s %s\n", c.what, c.key)
			return true, nil
		case batchv1alpha1.UnlockChanged:
			_, _ = fmt.Fprintf(o.Out, "%s %s changed since it was shown (now %s): not deleted\n", c.what, c.key, rec.FoundHolder)
		case batchv1alpha1.UnlockAbsent:
			_, _ = fmt.Fprintf(o.Out, "%s %s is gone already: nothing deleted\n", c.what, c.key)
		default:
			_, _ = fmt.Fprintf(o.Out, "%s %s not deleted: %s: %s\n", c.what, c.key, rec.Result, rec.Message)
		}
		return false, nil
	})
}

// confirmEach asks about each candidate (unless --yes) and deletes the ones
// confirmed. It fails when there were candidates and none was deleted.
func confirmEach(o *options, cands []candidate, del func(candidate) (bool, error)) error {
	if len(cands) == 0 {
		_, _ = fmt.Fprintln(o.Out, "nothing to unlock")
		return nil
	}
	in := bufio.NewReader(o.In)
	deleted := 0
	for _, c := range cands {
		if !o.yes {
			_, _ = fmt.Fprintf(o.Out, "Delete %s %s (%s)? [y/N] ", c.what, c.key, c.detail)
			answer, _ := in.ReadString('\n')
			if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
				_, _ = fmt.Fprintf(o.Out, "kept %s\n", c.key)
				continue
			}
		}
		ok, err := del(c)
		if err != nil {
			return err
		}
		if ok {
			deleted++
		}
	}
	if deleted == 0 {
		return errors.New("nothing was deleted")
	}
	return nil
}

// unlockDirect is unlock with direct store access: the plugin compares the whole
// value it was shown and deletes it, and records the event itself.
func unlockDirect(ctx context.Context, o *options, gj *batchv1alpha1.GuardedJob) error {
	st, err := newStores(o)
	if err != nil {
		return err
	}
	defer st.close()
	store, err := st.forJob(ctx, gj)
	if err != nil {
		return err
	}
	cluster := o.thisCluster(ctx)
	var cands []candidate
	for _, k := range keysOf(gj, time.Now()) {
		state, err := store.Inspect(ctx, k)
		if err != nil {
			return fmt.Errorf("inspect %s in %s: %w", k.Lock, store.Identity(), err)
		}
		if state.Holder != "" {
			lock := batchv1alpha1.StoreLockView{Holder: leasetoken.HolderOf(state.Holder), Whose: whoseOf(state.Holder, cluster, gj)}
			if lock.Whose == batchv1alpha1.LockWhoseThisGuardedJob {
				_, _ = fmt.Fprintf(o.Out, "lock %s is held by the active run %s of this GuardedJob: not deleting it (delete the run's Job to stop it)\n",
					k.Lock, lock.Holder)
			} else {
				cands = append(cands, candidate{what: "lock", key: k.Lock, value: state.Holder,
					detail: fmt.Sprintf("held by %s (%s), %s; if that holder is still working, another run may start beside it", lock.Holder, whereText(lock, ""), expiry(state.TTL))})
			}
		}
		if k.Occurrence != "" && state.Done != "" {
			cands = append(cands, candidate{what: "done-marker", key: k.Occurrence, value: state.Done,
				detail: fmt.Sprintf("done by %s; deleting it lets this occurrence run again", leasetoken.HolderOf(state.Done))})
		}
	}
	return confirmEach(o, cands, func(c candidate) (bool, error) {
		// Compare-and-delete: only the value shown, never one written since.
		err := store.Release(ctx, lockclient.Lease{Keys: lockclient.Keys{Lock: c.key}, Token: c.value, TTL: time.Minute})
		var notHeld *lockclient.NotHeldError
		switch {
		case errors.As(err, &notHeld):
			_, _ = fmt.Fprintf(o.Out, "%s %s changed since it was shown (now %s): not deleted\n", c.what, c.key, dash(leasetoken.HolderOf(notHeld.Holder)))
			return false, nil
		case err != nil:
			return false, fmt.Errorf("delete %s %s: %w", c.what, c.key, err)
		}
		_, _ = fmt.Fprintf(o.Out, "deleted %s %s\n", c.what, c.key)
		note := fmt.Sprintf("Deleted %s %s (%s) with kubectl guardedjob unlock", c.what, c.key, strings.SplitN(c.detail, ";", 2)[0])
		if err := recordEvent(ctx, o, gj, note); err != nil {
			_, _ = fmt.Fprintf(o.ErrOut, "warning: could not record an event on the GuardedJob: %v\n", err)
		}
		return true, nil
	})
}

func expiry(ttl time.Duration) string {
	if ttl <= 0 {
		return "no expiry"
	}
	return "expires in " + ttl.Round(100*time.Millisecond).String()
}

// recordEvent writes an events.k8s.io event about the GuardedJob, as the manager's
// events are written, so `kubectl describe gj` shows who unlocked what.
func recordEvent(ctx context.Context, o *options, gj *batchv1alpha1.GuardedJob, note string) error {
	host, _ := os.Hostname()
	now := metav1.NowMicro()
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", gj.Name, time.Now().UnixNano()), Namespace: gj.Namespace},
		EventTime:  now,
		Regarding: corev1.ObjectReference{
			APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "GuardedJob",
			Namespace: gj.Namespace, Name: gj.Name, UID: gj.UID, ResourceVersion: gj.ResourceVersion,
		},
		Reason:              batchv1alpha1.ManualUnlockReason,
		Action:              "Unlock",
		Note:                note,
		Type:                corev1.EventTypeWarning,
		ReportingController: "batch.guardedjob.dev/kubectl-guardedjob",
		ReportingInstance:   "kubectl-guardedjob-" + host,
	}
	return o.k8s.Create(ctx, ev)
}
