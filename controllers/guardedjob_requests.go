package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// Requests made through the GuardedJob itself (the inspect-now and unlock
// annotations) let anyone who may patch the object see and clear its keys in the
// lock store without the store's credentials: Kubernetes RBAC on the GuardedJob is
// the authorization, and the manager touches no key but the object's own.

// requestTarget is one set of a GuardedJob's keys a request may read or delete,
// and the store they live in.
type requestTarget struct {
	jobName   string
	scheduled time.Time
	keys      lockclient.Keys
	store     *lockclient.Client
}

// serveRequests answers the oldest open GuardedJobInspect and GuardedJobUnlock
// (one of each per pass: the GuardedJob's status holds one answer of each), or
// else the inspect-now and unlock annotations. It reports whether an unlock
// deleted a key: the pass then ends, so that the status recording the deletion
// is written before anything else in the pass could drop the write. spec is nil
// when the spec is invalid (specErr says why) or the object is being deleted.
func (r *GuardedJobReconciler) serveRequests(ctx context.Context, s *scope, spec *compiledSpec, specErr error) bool {
	if s.guardedWriteFailed {
		return false
	}
	inspect, unlock := r.inspectAsked(s), r.unlockAsked(s)
	if inspect == nil && unlock == nil {
		return false
	}
	targets, targetErr := r.requestTargets(ctx, s, spec, specErr)
	deleted := false
	if unlock != nil {
		deleted = r.handleUnlock(ctx, s, *unlock, targets, targetErr)
	}
	if inspect != nil {
		r.answerInspect(ctx, s, *inspect, targets, targetErr)
	}
	return deleted
}

// inspectAsk is a request to read the store: its value (status.storeView.request)
// and, for an annotation, why its value is not a time.
type inspectAsk struct {
	value string
	bad   error
}

// inspectAsked is the inspect request to answer in this pass, or nil: the oldest
// open GuardedJobInspect, or else an inspect-now annotation not answered yet.
func (r *GuardedJobReconciler) inspectAsked(s *scope) *inspectAsk {
	if req := s.requests.nextInspect(s.gj); req != nil {
		return &inspectAsk{value: req.RequestValue()}
	}
	value := s.gj.Annotations[batchv1alpha1.InspectNowAnnotation]
	if value == "" || s.gj.Status.StoreView != nil && s.gj.Status.StoreView.Request == due.Clip(value, runcore.MaxRequestValue) {
		return nil
	}
	r.deprecatedAnnotation(s, batchv1alpha1.InspectNowAnnotation, value, "GuardedJobInspect")
	ask := &inspectAsk{value: value}
	if _, err := due.ParseRequestTime(value); err != nil {
		ask.bad = fmt.Errorf("%s: %w", batchv1alpha1.InspectNowAnnotation, err)
	}
	return ask
}

// unlockAsk is a request to delete a key: its value (status.lastUnlock.request),
// what it names, when it was made, and how the user named the fields (for the
// messages).
type unlockAsk struct {
	value, key, holder string
	at                 time.Time
	bad                error
	// label names the request in events; keyField and holderField name where
	// the key and the holder are given.
	label, keyField, holderField string
}

// unlockAsked is the unlock request to carry out in this pass, or nil: the
// oldest open GuardedJobUnlock (made when the API server created it), or else an
// unlock annotation not answered yet.
func (r *GuardedJobReconciler) unlockAsked(s *scope) *unlockAsk {
	if req := s.requests.nextUnlock(s.gj); req != nil {
		return &unlockAsk{value: req.RequestValue(), key: req.Spec.Key, holder: req.Spec.Holder, at: req.CreationTimestamp.Time,
			label: "GuardedJobUnlock " + req.Name, keyField: "spec.key", holderField: "spec.holder"}
	}
	ann := s.gj.Annotations
	value := ann[batchv1alpha1.UnlockAnnotation]
	if value == "" || s.gj.Status.LastUnlock != nil && s.gj.Status.LastUnlock.Request == due.Clip(value, runcore.MaxRequestValue) {
		return nil
	}
	r.deprecatedAnnotation(s, batchv1alpha1.UnlockAnnotation, value, "GuardedJobUnlock")
	ask := &unlockAsk{value: value, key: ann[batchv1alpha1.UnlockKeyAnnotation], holder: ann[batchv1alpha1.UnlockHolderAnnotation],
		label: batchv1alpha1.UnlockAnnotation + "=" + due.Clip(value, runcore.MaxRequestValue), keyField: batchv1alpha1.UnlockKeyAnnotation, holderField: batchv1alpha1.UnlockHolderAnnotation}
	ask.at, ask.bad = due.ParseRequestTime(value)
	return ask
}

// requestTargets returns the keys requests may touch: each active run's, as it
// recorded them, or with no active run the current occurrence's, rendered from
// the spec. In the manager's shared store every key must be inside the
// namespace's grants, wherever it came from.
func (r *GuardedJobReconciler) requestTargets(ctx context.Context, s *scope, spec *compiledSpec, specErr error) ([]requestTarget, error) {
	gj := s.gj
	var out []requestTarget
	for i := range gj.Status.Active {
		run := &gj.Status.Active[i]
		if run.Key == "" {
			continue
		}
		store, err := r.runStore(ctx, gj, run)
		if err != nil {
			return nil, fmt.Errorf("the store of run %s cannot be resolved: %w", run.JobName, err)
		}
		k := lockclient.Keys{Lock: run.Key, Occurrence: run.OccurrenceKey, Fence: run.FenceKey}
		if store == r.Store {
			if err := r.KeyGrants.CheckKeys(gj.Namespace, k.Lock, k.Occurrence, k.Fence); err != nil {
				return nil, err
			}
			if err := r.Grants.Agree(gj.Namespace, k.Lock, k.Occurrence, k.Fence); err != nil {
				return nil, err
			}
		}
		out = append(out, requestTarget{jobName: run.JobName, scheduled: run.ScheduledTime.Time, keys: k, store: store})
	}
	if len(out) > 0 {
		return out, nil
	}
	if spec == nil {
		var se *specerror.Error
		switch {
		case errors.As(specErr, &se):
			return nil, fmt.Errorf("the store is not read while the spec is invalid (Ready=False, %s): %s", se.Reason, se.Message)
		case specErr != nil:
			return nil, fmt.Errorf("the store could not be resolved: %w", specErr)
		default:
			return nil, errors.New("the GuardedJob is being deleted and has no active run: there are no keys to look at")
		}
	}
	var occurrence time.Time
	var ok bool
	if t := gj.Status.LastScheduleTime; t != nil {
		occurrence, ok = t.Time, true
	} else {
		occurrence, ok = spec.rules.Schedule.Prev(s.now)
	}
	if !ok {
		occurrence = spec.rules.Schedule.Next(s.now)
	}
	k, err := spec.keys(r, gj, occurrence)
	if err != nil {
		return nil, err
	}
	return []requestTarget{{scheduled: occurrence, keys: k, store: spec.store}}, nil
}

// answerInspect reads the targets' keys and writes what the store holds into
// status.storeView: holders, never tokens. A store that does not answer within
// its call timeout gives an answer with the error.
func (r *GuardedJobReconciler) answerInspect(ctx context.Context, s *scope, ask inspectAsk, targets []requestTarget, targetErr error) {
	gj := s.gj
	view := &batchv1alpha1.StoreView{Request: due.Clip(ask.value, runcore.MaxRequestValue), ObservedAt: metav1.Time{Time: s.now}}
	gj.Status.StoreView = view
	if ask.bad != nil {
		view.Error = ask.bad.Error()
		return
	}
	if targetErr != nil {
		view.Error = targetErr.Error()
		return
	}
	var stores []string
	for _, t := range targets {
		if !slices.Contains(stores, t.store.Identity()) {
			stores = append(stores, t.store.Identity())
		}
		st, err := r.inspectKeys(ctx, t.store, t.keys)
		if err != nil {
			view.Error = fmt.Sprintf("the store did not answer: %v", err)
			break
		}
		entry := batchv1alpha1.StoreViewEntry{
			JobName:       t.jobName,
			ScheduledTime: &metav1.Time{Time: t.scheduled},
			Lock:          batchv1alpha1.StoreLockView{Key: t.keys.Lock},
		}
		if st.Holder != "" {
			entry.Lock.Holder = leasetoken.HolderOf(st.Holder)
			entry.Lock.Whose = r.whose(gj, st.Holder)
			if st.TTL > 0 {
				// Rounded up: the key never expires before the time shown.
				entry.Lock.ExpiresAt = &metav1.Time{Time: s.now.Add(st.TTL).Add(time.Second - 1).Truncate(time.Second)}
			} else {
				entry.Lock.NoExpiry = true
			}
		}
		if t.keys.Fence != "" {
			entry.Fence = &batchv1alpha1.StoreFenceView{Key: t.keys.Fence, Value: st.Fence}
		}
		if t.keys.Occurrence != "" {
			entry.DoneMarker = &batchv1alpha1.StoreDoneMarkerView{Key: t.keys.Occurrence, Holder: leasetoken.HolderOf(st.Done)}
		}
		view.Entries = append(view.Entries, entry)
		if len(view.Entries) == 16 { // the schema's bound; more active runs than that is no tenant's view
			break
		}
	}
	view.Store = strings.Join(stores, ", ")
}

// whose says whose a lock value is.
func (r *GuardedJobReconciler) whose(gj *batchv1alpha1.GuardedJob, value string) batchv1alpha1.LockWhose {
	holder := leasetoken.HolderOf(value)
	for _, run := range gj.Status.Active {
		if run.Holder != "" && run.Holder == holder {
			return batchv1alpha1.LockWhoseThisGuardedJob
		}
	}
	cluster, _, _, ok := leasetoken.ParseHolder(value)
	switch {
	case !ok:
		return batchv1alpha1.LockWhoseForeign
	case cluster == r.ClusterName:
		return batchv1alpha1.LockWhoseThisCluster
	default:
		return batchv1alpha1.LockWhoseOtherCluster
	}
}

// handleUnlock carries out an unlock request: the named key, if it is this
// GuardedJob's lock key or current done-marker, is deleted while its value still
// has the holder the user saw. The lease of a run that may still be working in
// this cluster is never deleted. It reports whether a key was deleted.
func (r *GuardedJobReconciler) handleUnlock(ctx context.Context, s *scope, ask unlockAsk, targets []requestTarget, targetErr error) bool {
	gj := s.gj
	rec := &batchv1alpha1.UnlockRecord{
		Request:    due.Clip(ask.value, runcore.MaxRequestValue),
		Key:        due.Clip(ask.key, lockclient.MaxKeyLength),
		Holder:     due.Clip(ask.holder, lockclient.MaxKeyLength),
		FinishedAt: metav1.Time{Time: s.now},
	}
	gj.Status.LastUnlock = rec
	refuse := func(format string, args ...any) bool {
		rec.Result = batchv1alpha1.UnlockRefused
		rec.Message = fmt.Sprintf(format, args...)
		r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.UnlockRefusedReason, "Refused %s: %s", ask.label, rec.Message)
		return false
	}

	keys := make([]runcore.UnlockKeys, len(targets))
	for i, t := range targets {
		keys[i] = runcore.UnlockKeys{Lock: t.keys.Lock, Occurrence: t.keys.Occurrence}
	}
	c, refused := runcore.UnlockTarget(runcore.UnlockAsk{Key: rec.Key, Holder: rec.Holder, At: ask.at, Bad: ask.bad, KeyField: ask.keyField, HolderField: ask.holderField},
		keys, targetErr, s.now)
	if refused != "" {
		return refuse("%s", refused)
	}
	rec.Key = c.Key
	if c.ChecksHolder() {
		if why := r.liveHolder(ctx, s, rec.Holder); why != "" {
			return refuse("%s", c.HolderRefusal(rec.Holder, why))
		}
	}
	kind := lockclient.UnlockDoneMarker
	if c.What == "lock" {
		kind = lockclient.UnlockLock
	}
	err := r.unlockKey(ctx, targets[c.Index].store, rec.Key, rec.Holder, kind)
	var (
		nh   *lockclient.NotHeldError
		live *lockclient.LiveLeaseError
	)
	answer := runcore.UnlockAnswer{Deleted: err == nil, StoreDown: errors.Is(err, lockclient.ErrStore), Err: err}
	switch {
	case errors.As(err, &live):
		answer.LiveLease, answer.LiveFor = true, live.TTL
	case errors.As(err, &nh):
		answer.NotHeld, answer.Found = true, nh.Holder
	}
	result, msg, found, refused := c.Unlocked(rec.Holder, answer)
	if refused != "" {
		return refuse("%s", refused)
	}
	rec.Result, rec.Message, rec.FoundHolder = result, msg, found
	if result != batchv1alpha1.UnlockDeleted {
		return false
	}
	r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.ManualUnlockReason, "Deleted %s %s held by %s (%s)", c.What, rec.Key, rec.Holder, ask.label)
	return true
}

// liveHolder says why a lock holder may still be working, or "" when nothing
// says so (runcore.LiveHolder): the core judges status and the keeper's
// leases, and the holder's Job in this cluster when it names one.
func (r *GuardedJobReconciler) liveHolder(ctx context.Context, s *scope, holder string) string {
	renewedFor := ""
	for _, st := range r.keptLeases() {
		if leasetoken.HolderOf(st.Token) == holder && st.State != lockclient.StateLost {
			renewedFor = st.Owner
			break
		}
	}
	why, hj := runcore.LiveHolder(s.gj, holder, renewedFor, r.ClusterName, s.now)
	if hj == nil {
		return why
	}
	job, err := r.getJobConfirmed(ctx, hj.Namespace, hj.Name)
	finished := false
	if job != nil {
		_, finished = jobFinished(job)
	}
	return runcore.LiveHolderJob(*hj, job != nil, finished, err)
}
