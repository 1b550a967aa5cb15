package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// resumeParallel bounds how many tenant store Secrets are read at once while
// resuming.
const resumeParallel = 16

// resumePage is how many GuardedJobs one list request of the resume returns.
const resumePage = 500

// resumeLeases runs once when this manager becomes the leader, before any
// reconcile: it renews every lease recorded in status.active, in one pipeline per
// store, so a handover never lets a lease lapse while reconcilers catch up. The
// GuardedJobs are listed from the API server (paginated), not from a cache that
// may still be filling; leases in the manager's own store are renewed at once,
// while tenant stores' Secrets are read in parallel. A sharded manager lists only
// the GuardedJobs of its shard, and stops renewing those that have left it by the
// time its cache has synced. Then it opens the gate the reconciler waits on.
func (r *GuardedJobReconciler) resumeLeases(ctx context.Context) error {
	defer r.resumeOnce.Do(func() { close(r.resumed) })
	log := ctrl.LoggerFrom(ctx).WithName("resume")
	started := r.Clock.Now()

	type tenantRun struct {
		gj  *batchv1alpha1.GuardedJob
		run *batchv1alpha1.ActiveRun
	}
	var own []lockclient.TrackRequest
	tenants := map[string][]tenantRun{} // by store identity
	var objects []types.NamespacedName
	list := &batchv1alpha1.GuardedJobList{}
	opts := []client.ListOption{client.InNamespace(r.Namespace), client.Limit(resumePage)}
	if r.Selector != nil && !r.Selector.Empty() {
		opts = append(opts, client.MatchingLabelsSelector{Selector: r.Selector})
	}
	for cont := ""; ; {
		if err := r.APIReader.List(ctx, list, append(opts, client.Continue(cont))...); err != nil {
			return fmt.Errorf("list guardedjobs to resume their leases: %w", err)
		}
		for i := range list.Items {
			gj := list.Items[i].DeepCopy()
			key := types.NamespacedName{Namespace: gj.Namespace, Name: gj.Name}
			resuming := false
			for j := range gj.Status.Active {
				run := &gj.Status.Active[j]
				if !r.ownsRun(gj, run) || run.Phase == batchv1alpha1.RunPhaseAcquiring {
					continue // not ours, or not acquired yet (the reconciler acquires it)
				}
				resuming = true
				if run.Store == "" || run.Store == r.Store.Identity() {
					own = append(own, r.trackRequest(gj, run, r.Store, resumed))
				} else {
					tenants[run.Store] = append(tenants[run.Store], tenantRun{gj, run})
				}
			}
			if resuming {
				objects = append(objects, key)
			}
		}
		if cont = list.Continue; cont == "" {
			break
		}
	}

	var (
		mu            sync.Mutex
		wg            sync.WaitGroup
		runs, lost    int
		failed, stray int
	)
	renew := func(reqs []lockclient.TrackRequest) {
		defer wg.Done()
		results := r.Keeper.ResumeAll(ctx, reqs)
		mu.Lock()
		defer mu.Unlock()
		runs += len(reqs)
		for _, err := range results {
			switch {
			case errors.Is(err, lockclient.ErrNotHeld):
				lost++
			case err != nil:
				failed++
			}
		}
	}
	if len(own) > 0 {
		wg.Add(1)
		go renew(own)
	}
	sem := make(chan struct{}, resumeParallel)
	for _, group := range tenants {
		wg.Add(1)
		go func() {
			sem <- struct{}{}
			store, err := r.runStore(ctx, group[0].gj, group[0].run)
			<-sem
			if err != nil {
				mu.Lock()
				stray += len(group)
				mu.Unlock()
				log.Error(err, "Cannot resume leases: their store is unknown", "guardedjob", group[0].gj.Namespace+"/"+group[0].gj.Name, "runs", len(group))
				wg.Done()
				return
			}
			reqs := make([]lockclient.TrackRequest, 0, len(group))
			for _, tr := range group {
				reqs = append(reqs, r.trackRequest(tr.gj, tr.run, store, resumed))
			}
			renew(reqs)
		}()
	}
	wg.Wait()
	r.untrackMissing(ctx, objects)
	if runs+stray > 0 {
		log.Info("Resumed leases", "runs", runs, "lost", lost, "storeErrors", failed, "storeUnknown", stray,
			"took", r.Clock.Since(started).Round(time.Millisecond).String())
	}
	return nil
}

// waitResumed blocks a reconcile until the leases of the previous leader are
// renewed.
func (r *GuardedJobReconciler) waitResumed(ctx context.Context) error {
	select {
	case <-r.resumed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
