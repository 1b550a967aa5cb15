package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// ManualUnlockReason is the reason of the event unlock records on the GuardedJob.
const ManualUnlockReason = "ManualUnlock"

// candidate is a key unlock may delete, with the value it had when shown.
type candidate struct {
	what, key, value, detail string
}

// unlockCmd deletes, after confirmation, the lock key of a GuardedJob when no run of
// it holds the lock (a stale or foreign lock), and the done-marker of its current
// occurrence (so the occurrence may run again). A key is deleted only if it still
// holds the value shown (compare-and-delete), and every deletion is recorded as an
// event on the GuardedJob.
func unlockCmd(ctx context.Context, o *options, args []string) error {
	if !o.force {
		return errors.New("unlock deletes keys other holders rely on: pass --force (it still asks before each deletion)")
	}
	gj, err := o.get(ctx, args[0])
	if err != nil {
		return err
	}
	st := newStores(o)
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
			who := where(state.Holder, cluster, gj)
			if strings.HasPrefix(who, "this GuardedJob") {
				_, _ = fmt.Fprintf(o.stdout, "lock %s is held by the active run %s of this GuardedJob: not deleting it (delete the run's Job to stop it)\n",
					k.Lock, lockclient.HolderOf(state.Holder))
			} else {
				cands = append(cands, candidate{what: "lock", key: k.Lock, value: state.Holder,
					detail: fmt.Sprintf("held by %s (%s), %s; if that holder is still working, another run may start beside it", lockclient.HolderOf(state.Holder), who, expiry(state.TTL))})
			}
		}
		if k.Occurrence != "" && state.Done != "" {
			cands = append(cands, candidate{what: "done-marker", key: k.Occurrence, value: state.Done,
				detail: fmt.Sprintf("done by %s; deleting it lets this occurrence run again", lockclient.HolderOf(state.Done))})
		}
	}
	if len(cands) == 0 {
		_, _ = fmt.Fprintln(o.stdout, "nothing to unlock")
		return nil
	}
	in := bufio.NewReader(o.stdin)
	deleted := 0
	for _, c := range cands {
		if !o.yes {
			_, _ = fmt.Fprintf(o.stdout, "Delete %s %s (%s)? [y/N] ", c.what, c.key, c.detail)
			answer, _ := in.ReadString('\n')
			if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
				_, _ = fmt.Fprintf(o.stdout, "kept %s\n", c.key)
				continue
			}
		}
		// Compare-and-delete: only the value shown, never one written since.
		err := store.Release(ctx, lockclient.Lease{Keys: lockclient.Keys{Lock: c.key}, Token: c.value, TTL: time.Minute})
		var notHeld *lockclient.NotHeldError
		switch {
		case errors.As(err, &notHeld):
			_, _ = fmt.Fprintf(o.stdout, "%s %s changed since it was shown (now %s): not deleted\n", c.what, c.key, dash(lockclient.HolderOf(notHeld.Holder)))
			continue
		case err != nil:
			return fmt.Errorf("delete %s %s: %w", c.what, c.key, err)
		}
		deleted++
		_, _ = fmt.Fprintf(o.stdout, "deleted %s %s\n", c.what, c.key)
		note := fmt.Sprintf("Deleted %s %s (%s) with kubectl guardedjob unlock", c.what, c.key, strings.SplitN(c.detail, ";", 2)[0])
		if err := recordEvent(ctx, o, gj, note); err != nil {
			_, _ = fmt.Fprintf(o.stderr, "warning: could not record an event on the GuardedJob: %v\n", err)
		}
	}
	if deleted == 0 {
		return errors.New("nothing was deleted")
	}
	return nil
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
		Reason:              ManualUnlockReason,
		Action:              "Unlock",
		Note:                note,
		Type:                corev1.EventTypeWarning,
		ReportingController: "batch.guardedjob.dev/kubectl-guardedjob",
		ReportingInstance:   "kubectl-guardedjob-" + host,
	}
	return o.k8s.Create(ctx, ev)
}
