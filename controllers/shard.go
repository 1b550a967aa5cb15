package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// Sharding. Several managers, each with its own leader election, serve disjoint
// sets of GuardedJobs: a manager started with --watch-label-selector caches, and so
// reconciles, only the GuardedJobs its selector matches. Jobs and Pods are cached
// by every shard (a moved GuardedJob's Job keeps its labels), but a shard acts only
// on the Jobs of the GuardedJobs in its own cache.
//
// Relabelling a GuardedJob moves it, with its runs in flight, make before break
// (as Kubernetes leader election hands over):
//   - the API server tells the old shard's watch that the object is gone, and the
//     new shard's that it was added. Every status write is made with a
//     resourceVersion precondition and the relabel changed the resourceVersion, so
//     a pass of the old shard still in flight can write nothing more: the new
//     shard is the only writer from the relabel on;
//   - the new shard renews the recorded leases (one pipeline per store) as soon as
//     its cache sees the object, without waiting for a work-queue slot, then its
//     first pass records in status.shard that it holds them;
//   - the old shard keeps renewing them, with their self-fence deadlines, until it
//     reads (from the API server) that status.shard names another shard; then it
//     lets go. Its stop controller still stops a handed-over run whose lease is
//     lost, past its deadline or past maxHold. If no shard takes the run over
//     within --shard-handover-timeout, the old shard stops the run's Job and Pods
//     and lets the lease go once they are gone: stopped, never abandoned;
//   - neither shard releases a lease or deletes a Job because of the move itself.
// Both shards renew the same token for a while; that is harmless (compare token,
// then PEXPIRE).

// CacheOptionsFor is CacheOptions for a manager that serves only the GuardedJobs
// selector matches; nil or empty serves every GuardedJob.
func CacheOptionsFor(selector labels.Selector) cache.Options {
	o := CacheOptions()
	if selector != nil && !selector.Empty() {
		o.ByObject[&batchv1alpha1.GuardedJob{}] = cache.ByObject{Label: selector}
	}
	return o
}

// ParseShardSelector parses --watch-label-selector: a label selector in kubectl's
// syntax (sharding.guardedjob.dev/key=a, !sharding.guardedjob.dev/key); empty
// selects every GuardedJob.
func ParseShardSelector(s string) (labels.Selector, error) {
	if s == "" {
		return labels.Everything(), nil
	}
	return labels.Parse(s)
}

// inShard says whether a GuardedJob's labels match a shard's selector (nil: every
// GuardedJob).
func inShard(selector labels.Selector, gj *batchv1alpha1.GuardedJob) bool {
	return selector == nil || selector.Matches(labels.Set(gj.Labels))
}

// judgesOrphans says whether a shard stops a Job whose GuardedJob is not in its
// cache when the API server confirms that GuardedJob gone: the shard whose
// selector matches the Job's labels (which carry the ShardLabel of the GuardedJob
// that created it), so exactly one shard does, and the others never ask the API
// server about Jobs of other shards.
func judgesOrphans(selector labels.Selector, job *batchv1.Job) bool {
	return selector == nil || selector.Matches(labels.Set(job.Labels))
}

// ensureTracked makes sure the keeper renews the leases of a GuardedJob's runs,
// renewing those it does not renew yet at once (one pipeline per store) before
// it returns: the object is new to this manager (it moved into this shard, or
// the keeper dropped a run), and nothing else may happen to it first. Leases of
// objects present at the start are already renewed by resumeLeases. A lease
// found lost is reported as any renewal is, and the run's pass handles it.
func (r *GuardedJobReconciler) ensureTracked(ctx context.Context, gj *batchv1alpha1.GuardedJob) {
	var reqs []lockclient.TrackRequest
	for i := range gj.Status.Active {
		run := &gj.Status.Active[i]
		if !runcore.RenewsHere(r.ClusterName, gj.UID, run) {
			continue
		}
		if _, tracked := r.Keeper.Get(run.Token); tracked {
			continue
		}
		store, err := r.runStore(ctx, gj, run)
		if err != nil {
			continue // advanceRun stops a run whose store cannot be resolved
		}
		reqs = append(reqs, r.trackRequest(gj, run, store, resumed))
	}
	if len(reqs) == 0 {
		return
	}
	started := r.Clock.Now()
	lost, failed := 0, 0
	var storeErr error
	for _, err := range r.Keeper.ResumeAll(ctx, reqs) {
		switch {
		case errors.Is(err, lockclient.ErrNotHeld):
			lost++
		case err != nil:
			failed++
			storeErr = err
		}
	}
	log := ctrl.LoggerFrom(ctx).WithValues("guardedjob", gj.Namespace+"/"+gj.Name)
	if storeErr != nil {
		log = log.WithValues("storeError", storeErr.Error())
	}
	log.Info("Resumed the leases of a GuardedJob new to this manager",
		"runs", len(reqs), "lost", lost, "storeErrors", failed, "took", r.Clock.Since(started).Round(time.Millisecond).String())
}

// takeOverOnSight asks for the leases of a GuardedJob the cache has just added
// (a move into this shard) to be renewed at once, so that the take-over never
// waits for a slot in the work queue. The event handler that calls it gets a
// context that ends when it returns, so the take-over runs on takeOvers, which
// lives as long as the manager leads. A full queue leaves the take-over to the
// object's pass.
func (r *GuardedJobReconciler) takeOverOnSight(added *batchv1alpha1.GuardedJob) {
	if len(added.Status.Active) == 0 || r.takeOvers == nil {
		return
	}
	select {
	case r.takeOvers <- client.ObjectKeyFromObject(added):
	default:
	}
}

// takeOverQueue is how many take-overs may wait for takeOvers at once.
const takeOverQueue = 1024

// runTakeOvers renews, each on its own goroutine, the leases of the objects
// takeOverOnSight names. Objects added before the start-up resume has run are
// its to renew.
func (r *GuardedJobReconciler) runTakeOvers(ctx context.Context) error {
	if r.waitResumed(ctx) != nil {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case key := <-r.takeOvers:
			go r.takeOver(ctx, key)
		}
	}
}

func (r *GuardedJobReconciler) takeOver(ctx context.Context, key types.NamespacedName) {
	// As a pass does: from the cache as it is now, and not from a version this
	// manager has written over (a pass may have ended a run since).
	unlock := r.lockObject(key)
	defer unlock()
	gj := &batchv1alpha1.GuardedJob{}
	if err := r.Get(ctx, key, gj); err != nil || r.cacheBehind(key, gj.ResourceVersion) {
		return // the object's next pass takes the leases over
	}
	r.ensureTracked(ctx, gj)
}

// leftShard handles a GuardedJob that is not in this manager's cache: deleted,
// or moved to another shard. A manager that serves every GuardedJob stops
// renewing its leases at once (the stop controller stops the Jobs of an object
// the API server says is gone, and their leases expire). A shard hands the
// leases of its runs over (see the top of this file): it goes on renewing them
// until the API server shows that the object is gone or that another shard has
// taken them.
func (r *GuardedJobReconciler) leftShard(key types.NamespacedName) {
	r.superseded.Delete(key)
	r.objectLocks.Delete(key)
	guardedJobMetrics.forget(key)
	if !runcore.HandsOver(r.shardName()) || r.Handovers == nil {
		r.untrackOwner(key.Namespace, key.Name)
		return
	}
	runs := map[string]string{}
	prefix := ownerPrefix(key.Namespace, key.Name)
	for _, st := range r.Keeper.Snapshot() {
		if job, ok := strings.CutPrefix(st.Owner, prefix); ok {
			runs[job] = st.Token
		}
	}
	r.Handovers.begin(key, runs, r.Handovers.clock.Now())
}

// untrackMissing stops renewing the leases resumed at the start for GuardedJobs
// that the cache does not hold once it has synced: they left this shard between
// the resume's list and the cache's, so no watch event would ever say so.
func (r *GuardedJobReconciler) untrackMissing(ctx context.Context, resumedObjects []types.NamespacedName) {
	for _, key := range resumedObjects {
		err := r.Get(ctx, key, &batchv1alpha1.GuardedJob{})
		if apierrors.IsNotFound(err) {
			r.leftShard(key)
		}
	}
}

// handoverPoll is how often a shard that is handing runs over reads their
// GuardedJobs from the API server.
const handoverPoll = time.Second

// Handovers holds the runs of GuardedJobs that left this manager's shard and
// whose leases it still renews until another shard has taken them over. The
// GuardedJob reconciler fills it; its stop controller reads it.
type Handovers struct {
	clock clock.Clock
	mu    sync.Mutex
	// objects maps a GuardedJob to when its hand-over began and its runs.
	objects map[types.NamespacedName]*handover
}

type handover struct {
	since    time.Time
	timedOut bool
	// runs maps a Job name to its run's token.
	runs map[string]string
}

// NewHandovers returns an empty set of hand-overs on the real clock.
func NewHandovers() *Handovers {
	return &Handovers{clock: clock.RealClock{}, objects: map[types.NamespacedName]*handover{}}
}

func (h *Handovers) begin(key types.NamespacedName, runs map[string]string, now time.Time) {
	if len(runs) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := h.objects[key]; ok {
		for job, token := range runs {
			cur.runs[job] = token
		}
		return
	}
	h.objects[key] = &handover{since: now, runs: runs}
}

// run returns the token of a Job's run being handed over, and whether the
// hand-over timed out.
func (h *Handovers) run(job types.NamespacedName) (token string, timedOut, ok bool) {
	if h == nil {
		return "", false, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, ho := range h.objects {
		if key.Namespace != job.Namespace {
			continue
		}
		if token, ok := ho.runs[job.Name]; ok {
			return token, ho.timedOut, true
		}
	}
	return "", false, false
}

// snapshot returns the objects being handed over.
func (h *Handovers) snapshot() map[types.NamespacedName]handover {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[types.NamespacedName]handover, len(h.objects))
	for k, v := range h.objects {
		runs := make(map[string]string, len(v.runs))
		for job, token := range v.runs {
			runs[job] = token
		}
		out[k] = handover{since: v.since, timedOut: v.timedOut, runs: runs}
	}
	return out
}

func (h *Handovers) timeOut(key types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ho, ok := h.objects[key]; ok {
		ho.timedOut = true
	}
}

// done ends the hand-over of one run (job set) or of every run of an object.
func (h *Handovers) done(key types.NamespacedName, job string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ho, ok := h.objects[key]
	if !ok {
		return
	}
	if job != "" {
		delete(ho.runs, job)
	}
	if job == "" || len(ho.runs) == 0 {
		delete(h.objects, key)
	}
}

// watchHandovers reads, every handoverPoll, the GuardedJobs whose runs this
// shard is handing over, and lets go of a run's lease when another shard has
// taken it over (status.shard names it), when the object is gone, or, past
// the hand-over timeout, once the run's Pods are gone (its stop controller
// stops them).
func (r *GuardedJobReconciler) watchHandovers(ctx context.Context) error {
	if r.Handovers == nil {
		return nil
	}
	t := time.NewTicker(handoverPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for key, ho := range r.Handovers.snapshot() {
			r.checkHandover(ctx, key, ho)
		}
	}
}

func (r *GuardedJobReconciler) checkHandover(ctx context.Context, key types.NamespacedName, ho handover) {
	log := ctrl.LoggerFrom(ctx).WithValues("guardedjob", key.String())
	fresh := &batchv1alpha1.GuardedJob{}
	err := r.APIReader.Get(ctx, key, fresh)
	if err != nil && !apierrors.IsNotFound(err) {
		return // asked again at the next poll; the leases are renewed meanwhile
	}
	switch runcore.HandOver(runcore.HandOverView{Gone: err != nil, InShard: err == nil && inShard(r.Selector, fresh), Shard: fresh.Status.Shard, Ours: r.shardName(),
		Since: ho.since, Timeout: r.HandoverTimeout, TimedOut: ho.timedOut}, r.Handovers.clock.Now()) {
	case runcore.LetGoOfAll:
		if err == nil {
			log.Info("Handed the leases of a GuardedJob over to its new shard", "shard", fresh.Status.Shard, "runs", len(ho.runs))
		}
		r.letGo(key, "", ho)
		return
	case runcore.TakeBack:
		r.Handovers.done(key, "") // back in this shard: its passes go on with the runs
		return
	case runcore.GiveUpHandOver:
		log.Info("No shard took the runs of a GuardedJob over within the hand-over timeout: stopping them", "timeout", r.HandoverTimeout.String(), "runs", len(ho.runs))
		r.event(fresh, nil, corev1.EventTypeWarning, batchv1alpha1.JobStoppedReason,
			"No shard took over the runs of this GuardedJob within --shard-handover-timeout %s after it left shard %q: stopping them before their leases could expire (%s)",
			r.HandoverTimeout, r.shardName(), strings.Join(jobNames(ho.runs), ", "))
		r.Handovers.timeOut(key)
		ho.timedOut = true
	}
	// A run whose lease must stop (lost, deadline, maxHold) or whose hand-over
	// timed out is stopped by the stop controller; its lease goes once no Pod of
	// its Job is left.
	for job, token := range ho.runs {
		switch runcore.HandedRun(r.keptLease(token), ho.timedOut) {
		case runcore.ForgetHandedRun:
			r.Handovers.done(key, job)
			continue
		case runcore.RenewHandedRun:
			continue
		}
		r.pokeStopper(key.Namespace, job)
		if gone, err := r.runPodsGone(ctx, key.Namespace, job); err != nil || !gone {
			continue
		}
		r.Keeper.Untrack(token)
		r.Handovers.done(key, job)
		log.Info("Let the lease of a stopped run go: no Pod of it is left", "job", job)
	}
}

// runPodsGone says whether no Pod of a run's Job can be running: the Job is gone
// or finished, or no Pod of it is left.
func (r *GuardedJobReconciler) runPodsGone(ctx context.Context, namespace, jobName string) (bool, error) {
	job, err := r.getJobConfirmed(ctx, namespace, jobName)
	if err != nil {
		return false, err
	}
	if job != nil {
		if _, finished := jobFinished(job); finished {
			return true, nil
		}
	}
	left, err := r.podsLeftUncached(ctx, namespace, jobName)
	return err == nil && left == 0, err
}

// letGo stops renewing the leases of an object's runs being handed over.
func (r *GuardedJobReconciler) letGo(key types.NamespacedName, job string, ho handover) {
	for j, token := range ho.runs {
		if job == "" || j == job {
			r.Keeper.Untrack(token)
		}
	}
	r.Handovers.done(key, job)
}

// jobNames returns the Job names of a hand-over's runs, sorted.
func jobNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

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
	listed := map[types.NamespacedName]*batchv1alpha1.GuardedJob{}
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
			listed[key] = gj
			resuming := false
			for j := range gj.Status.Active {
				run := &gj.Status.Active[j]
				if !runcore.RenewsHere(r.ClusterName, gj.UID, run) {
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
	unrecorded, unrecordedObjects, err := r.unrecordedLeases(ctx, listed)
	if err != nil {
		return err
	}
	if len(unrecorded) > 0 {
		objects = append(objects, unrecordedObjects...)
		log.Info("Resuming the leases of Jobs past their gate that no status records yet", "runs", len(unrecorded))
		wg.Add(1)
		go renew(unrecorded)
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

// unrecordedLeases returns the leases a restart renews for the runs of Jobs
// past their gate that no status records (the early gate: a manager died, or
// its status write failed, after it opened the gate): every such Job whose lock
// key holds the token minted for it, at its fence, with the ledger not
// recording its run as over (runcore.Adoption, the adoption's own judgement;
// its timing from the spec, never from the annotation alone). Its pass adopts
// it; the stop controller stops every other such Job, whose lease nobody
// renews. The Jobs are listed from the API server, a page at a time.
func (r *GuardedJobReconciler) unrecordedLeases(ctx context.Context, listed map[types.NamespacedName]*batchv1alpha1.GuardedJob) ([]lockclient.TrackRequest, []types.NamespacedName, error) {
	var reqs []lockclient.TrackRequest
	var objects []types.NamespacedName
	opts := []client.ListOption{client.InNamespace(r.Namespace), client.HasLabels{batchv1alpha1.GuardedJobLabel}, client.Limit(resumePage)}
	jobs := &batchv1.JobList{}
	now := r.Clock.Now()
	for cont := ""; ; {
		if err := r.APIReader.List(ctx, jobs, append(opts, client.Continue(cont))...); err != nil {
			return nil, nil, fmt.Errorf("list jobs to resume the leases of runs no status records: %w", err)
		}
		for i := range jobs.Items {
			job := &jobs.Items[i]
			key := types.NamespacedName{Namespace: job.Namespace, Name: job.Labels[batchv1alpha1.GuardedJobLabel]}
			gj := listed[key]
			if gj == nil {
				continue
			}
			w := waitingOf(gj, job, true)
			if !w.WorksUnrecorded() {
				continue // no store read for a Job no restart would renew
			}
			spec, err := r.compile(ctx, gj)
			if err != nil {
				continue // its pass reports the spec; the stop controller stops the Job
			}
			u, store := r.judgeUnrecorded(ctx, &scope{gj: gj, spec: spec, now: now}, job, nil)
			if !runcore.ResumesUnrecorded(w, u) {
				continue
			}
			run := *u.Run
			run.Token = u.Key.Holder
			ctrl.LoggerFrom(ctx).V(1).Info("Resuming the lease of a Job no status records", "job", job.Namespace+"/"+job.Name, "fence", run.Fence)
			reqs = append(reqs, r.trackRequest(gj, &run, store, resumed))
			objects = append(objects, key)
		}
		if cont = jobs.Continue; cont == "" {
			break
		}
	}
	return reqs, objects, nil
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
