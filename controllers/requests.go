package controllers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// Request objects (GuardedJobRun, GuardedJobBackfill, GuardedJobInspect,
// GuardedJobUnlock) are read at the start of
// the pass of the GuardedJob they name, and answered after that pass's status
// write: the GuardedJob's status is the record of what was done (a run's
// runNow, a recent run's request, status.backfill.request), and each request's
// status is derived from it. So a manager that stops between the two writes
// answers the request in its next pass, and a request is never acted on twice.
// A request's fields are a tenant's input like an annotation's: parameters are
// checked against the GuardedJob's declarations, a backfill's range against its
// schedule, and nothing else of it is used.

// requestNameKey indexes request objects by the GuardedJob they name.
const requestNameKey = ".spec.guardedJobName"

// requestSet is the request objects naming one GuardedJob, oldest first.
type requestSet struct {
	runs      []*batchv1alpha1.GuardedJobRun
	backfills []*batchv1alpha1.GuardedJobBackfill
	inspects  []*batchv1alpha1.GuardedJobInspect
	unlocks   []*batchv1alpha1.GuardedJobUnlock
	// refused holds what this pass refused, by request value, for the answer;
	// waiting says why requests that wait do.
	refused map[string]string
	waiting string
}

func olderFirst[P client.Object](a, b P) int {
	if c := a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time); c != 0 {
		return c
	}
	return cmp.Compare(a.GetName(), b.GetName())
}

// loadRequests reads the request objects naming gj from the cache.
func (r *GuardedJobReconciler) loadRequests(ctx context.Context, ns, name string) (*requestSet, error) {
	var (
		set       = &requestSet{}
		err       error
		runs      batchv1alpha1.GuardedJobRunList
		backfills batchv1alpha1.GuardedJobBackfillList
		inspects  batchv1alpha1.GuardedJobInspectList
		unlocks   batchv1alpha1.GuardedJobUnlockList
	)
	if set.runs, err = listNaming(ctx, r, &runs, &runs.Items, ns, name); err != nil {
		return nil, err
	}
	if set.backfills, err = listNaming(ctx, r, &backfills, &backfills.Items, ns, name); err != nil {
		return nil, err
	}
	if set.inspects, err = listNaming(ctx, r, &inspects, &inspects.Items, ns, name); err != nil {
		return nil, err
	}
	if set.unlocks, err = listNaming(ctx, r, &unlocks, &unlocks.Items, ns, name); err != nil {
		return nil, err
	}
	return set, nil
}

// listNaming lists the request objects of one kind that name the GuardedJob
// name in ns (items is list's item slice), oldest first.
func listNaming[T any, P interface {
	*T
	client.Object
}](ctx context.Context, c client.Reader, list client.ObjectList, items *[]T, ns, name string) ([]P, error) {
	if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingFields{requestNameKey: name}); err != nil {
		return nil, fmt.Errorf("list %T: %w", list, err)
	}
	out := make([]P, 0, len(*items))
	for i := range *items {
		out = append(out, P(&(*items)[i]))
	}
	slices.SortFunc(out, olderFirst[P])
	return out, nil
}

// nextInspect is the oldest GuardedJobInspect not answered yet, or nil.
func (set *requestSet) nextInspect(gj *batchv1alpha1.GuardedJob) *batchv1alpha1.GuardedJobInspect {
	if set == nil {
		return nil
	}
	answered := ""
	if sv := gj.Status.StoreView; sv != nil {
		answered = sv.Request
	}
	return nextOpen(set.inspects, func(r *batchv1alpha1.GuardedJobInspect) batchv1alpha1.RequestPhase { return r.Status.Phase }, answered)
}

// nextUnlock is the oldest GuardedJobUnlock not answered yet, or nil.
func (set *requestSet) nextUnlock(gj *batchv1alpha1.GuardedJob) *batchv1alpha1.GuardedJobUnlock {
	if set == nil {
		return nil
	}
	answered := ""
	if lu := gj.Status.LastUnlock; lu != nil {
		answered = lu.Request
	}
	return nextOpen(set.unlocks, func(r *batchv1alpha1.GuardedJobUnlock) batchv1alpha1.RequestPhase { return r.Status.Phase }, answered)
}

// nextOpen is the oldest of reqs not answered for good, or nil. One is served at
// a time: while the GuardedJob's status holds the answer to one (its value is
// answered) that its own status does not show yet, the next waits, since that
// status field holds one answer.
func nextOpen[P interface {
	client.Object
	RequestValue() string
}](reqs []P, phase func(P) batchv1alpha1.RequestPhase, answered string) P {
	var none P
	for _, req := range reqs {
		if phase(req).Final() || !req.GetDeletionTimestamp().IsZero() {
			continue
		}
		if req.RequestValue() == answered {
			return none
		}
		return req
	}
	return none
}

// runRequestAnswered says whether the GuardedJob's status shows that the
// request value was acted on: a run in flight or waiting, or a recent outcome.
func runRequestAnswered(gj *batchv1alpha1.GuardedJob, value string) bool {
	return activeRunFor(gj, value) != nil || bufferedFor(gj, value) != nil || recentFor(gj, value) != nil
}

// nextRunRequest is the oldest GuardedJobRun not acted on yet, or nil.
func (set *requestSet) nextRunRequest(gj *batchv1alpha1.GuardedJob) *batchv1alpha1.GuardedJobRun {
	if set == nil {
		return nil
	}
	for _, req := range set.runs {
		if req.DeletionTimestamp.IsZero() && !req.Status.Phase.Final() && req.Status.AcceptedAt == nil &&
			!runRequestAnswered(gj, req.RequestValue()) {
			return req
		}
	}
	return nil
}

// refuse records that this pass refused a request, for its answer.
func (set *requestSet) refuse(value, msg string) {
	if set == nil || !batchv1alpha1.IsRequestObjectValue(value) {
		return
	}
	if set.refused == nil {
		set.refused = map[string]string{}
	}
	set.refused[value] = msg
}

// answerRequests writes each open request's status as the GuardedJob's written
// status shows it, and deletes finished requests past their TTL. It runs after
// the pass's status write succeeded.
func (r *GuardedJobReconciler) answerRequests(ctx context.Context, s *scope) error {
	set := s.requests
	if set == nil {
		return nil
	}
	var errs []error
	for _, req := range set.runs {
		want := runRequestStatus(s.gj, req, set.refused[req.RequestValue()], set.waiting, s.now)
		changed := !equality.Semantic.DeepEqual(&req.Status, want)
		req.Status = *want
		if err := r.writeRequest(ctx, s, req, changed, want.Phase, want.FinishedAt, req.Spec.TTLSecondsAfterFinished); err != nil {
			errs = append(errs, err)
		}
	}
	for _, req := range set.backfills {
		want := backfillRequestStatus(s.gj, req, set.refused[req.RequestValue()], set.waiting, s.now)
		changed := !equality.Semantic.DeepEqual(&req.Status, want)
		req.Status = *want
		if err := r.writeRequest(ctx, s, req, changed, want.Phase, want.FinishedAt, req.Spec.TTLSecondsAfterFinished); err != nil {
			errs = append(errs, err)
		}
	}
	for _, req := range set.inspects {
		want := inspectRequestStatus(s.gj, req, set.refused[req.RequestValue()], set.waiting, s.now)
		changed := !equality.Semantic.DeepEqual(&req.Status, want)
		req.Status = *want
		if err := r.writeRequest(ctx, s, req, changed, want.Phase, want.FinishedAt, req.Spec.TTLSecondsAfterFinished); err != nil {
			errs = append(errs, err)
		}
	}
	for _, req := range set.unlocks {
		want := unlockRequestStatus(s.gj, req, set.refused[req.RequestValue()], set.waiting, s.now)
		changed := !equality.Semantic.DeepEqual(&req.Status, want)
		req.Status = *want
		if err := r.writeRequest(ctx, s, req, changed, want.Phase, want.FinishedAt, req.Spec.TTLSecondsAfterFinished); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("answer requests: %w", errs[0])
	}
	return nil
}

// writeRequest writes a request's status when it changed, and deletes a
// finished request whose TTL has passed (or has the pass look again then).
func (r *GuardedJobReconciler) writeRequest(ctx context.Context, s *scope, obj client.Object, changed bool, phase batchv1alpha1.RequestPhase, finishedAt *metav1.Time, ttl *int32) error {
	if changed {
		if err := r.Status().Update(ctx, obj); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			s.requeueAfter(time.Second)
			return fmt.Errorf("status of %s: %w", obj.GetName(), err)
		}
	}
	if !phase.Final() || finishedAt == nil || !obj.GetDeletionTimestamp().IsZero() {
		return nil
	}
	keep := time.Duration(batchv1alpha1.DefaultRequestTTL) * time.Second
	if ttl != nil {
		keep = time.Duration(*ttl) * time.Second
	}
	if gone := finishedAt.Add(keep); s.now.Before(gone) {
		s.requeueAt(gone)
		return nil
	}
	// The UID precondition: never a request created again under the same name.
	uid := obj.GetUID()
	if err := r.Delete(ctx, obj, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete finished request %s: %w", obj.GetName(), err)
	}
	return nil
}

// setRequestConditions sets a request's Accepted and Complete conditions from
// its phase.
func setRequestConditions(conds *[]metav1.Condition, gen int64, phase batchv1alpha1.RequestPhase, result, msg string, now time.Time) {
	set := func(t string, st metav1.ConditionStatus, reason string) {
		c := metav1.Condition{Type: t, Status: st, Reason: reason, Message: due.Clip(msg, 1024), ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(now)}
		if old := meta.FindStatusCondition(*conds, t); old != nil && old.Status == st {
			c.LastTransitionTime = old.LastTransitionTime
		}
		meta.SetStatusCondition(conds, c)
	}
	switch phase {
	case batchv1alpha1.RequestPending:
		set(batchv1alpha1.RequestAcceptedCondition, metav1.ConditionFalse, batchv1alpha1.RequestWaitingReason)
		set(batchv1alpha1.RequestCompleteCondition, metav1.ConditionFalse, batchv1alpha1.RequestWaitingReason)
	case batchv1alpha1.RequestRunning:
		set(batchv1alpha1.RequestAcceptedCondition, metav1.ConditionTrue, batchv1alpha1.RequestAcceptedReason)
		set(batchv1alpha1.RequestCompleteCondition, metav1.ConditionFalse, batchv1alpha1.RequestInProgressReason)
	case batchv1alpha1.RequestRefused:
		reason := batchv1alpha1.RequestRefusedReason
		if result != "" {
			reason = result
		}
		set(batchv1alpha1.RequestAcceptedCondition, metav1.ConditionFalse, reason)
		set(batchv1alpha1.RequestCompleteCondition, metav1.ConditionTrue, reason)
	default: // Finished, Cancelled
		set(batchv1alpha1.RequestAcceptedCondition, metav1.ConditionTrue, batchv1alpha1.RequestAcceptedReason)
		reason := string(phase)
		if result != "" {
			reason = result
		}
		set(batchv1alpha1.RequestCompleteCondition, metav1.ConditionTrue, reason)
	}
}

// runRequestStatus is what a GuardedJobRun's status should say, given the
// GuardedJob's status (as written) and what this pass refused.
func runRequestStatus(gj *batchv1alpha1.GuardedJob, req *batchv1alpha1.GuardedJobRun, refused, waiting string, now time.Time) *batchv1alpha1.GuardedJobRunStatus {
	st := req.Status.DeepCopy()
	if st.Phase.Final() {
		return st
	}
	value := req.RequestValue()
	st.Request = value
	stamp := func(p **metav1.Time) {
		if *p == nil {
			*p = &metav1.Time{Time: now}
		}
	}
	switch {
	case refused != "" && st.AcceptedAt != nil:
		st.Phase, st.Message = batchv1alpha1.RequestFinished, refused
		stamp(&st.FinishedAt)
	case refused != "":
		st.Phase, st.Message = batchv1alpha1.RequestRefused, refused
		stamp(&st.FinishedAt)
	case activeRunFor(gj, value) != nil:
		run := activeRunFor(gj, value)
		st.Phase, st.Fence = batchv1alpha1.RequestRunning, run.Fence
		if run.JobUID != "" { // its Job exists
			st.JobName = run.JobName
		}
		st.ScheduledTime = run.ScheduledTime.DeepCopy()
		st.Message = fmt.Sprintf("run %s is %s", run.JobName, strings.ToLower(string(run.Phase)))
		stamp(&st.AcceptedAt)
	case bufferedFor(gj, value) != nil:
		b := bufferedFor(gj, value)
		st.Phase, st.ScheduledTime = batchv1alpha1.RequestRunning, b.ScheduledTime.DeepCopy()
		st.Message = fmt.Sprintf("waits for the active run to end (concurrencyPolicy %s)", gj.Spec.ConcurrencyPolicyOrDefault())
		stamp(&st.AcceptedAt)
	case recentFor(gj, value) != nil:
		rr := recentFor(gj, value)
		st.Phase, st.Result, st.JobName, st.Fence, st.HeldBy = batchv1alpha1.RequestFinished, rr.Result, rr.JobName, rr.Fence, rr.HeldBy
		st.ScheduledTime, st.Message = rr.ScheduledTime.DeepCopy(), rr.Message
		if st.Message == "" {
			st.Message = "the run " + strings.ToLower(string(rr.Result))
		}
		stamp(&st.AcceptedAt)
		st.FinishedAt = rr.FinishedAt.DeepCopy()
		stamp(&st.FinishedAt)
	case st.Phase == batchv1alpha1.RequestRunning:
		// Its outcome fell out of status.recentRuns before it was copied here.
		st.Phase, st.Message = batchv1alpha1.RequestFinished, "the run ended; its outcome is no longer in the GuardedJob's status.recentRuns: see kubectl guardedjob history "+gj.Name
		stamp(&st.FinishedAt)
	default:
		st.Phase, st.Message = batchv1alpha1.RequestPending, "waiting for the manager"
		if waiting != "" {
			st.Message = waiting
		}
	}
	setRequestConditions(&st.Conditions, req.Generation, st.Phase, string(st.Result), st.Message, now)
	return st
}

// find returns a pointer to the first item whose request value is value, or nil.
func find[T any](items []T, requestOf func(*T) string, value string) *T {
	for i := range items {
		if requestOf(&items[i]) == value {
			return &items[i]
		}
	}
	return nil
}

func activeRunFor(gj *batchv1alpha1.GuardedJob, value string) *batchv1alpha1.ActiveRun {
	return find(gj.Status.Active, func(r *batchv1alpha1.ActiveRun) string { return r.RunNow }, value)
}

func bufferedFor(gj *batchv1alpha1.GuardedJob, value string) *batchv1alpha1.BufferedRun {
	return find(gj.Status.Buffered, func(b *batchv1alpha1.BufferedRun) string { return b.RunNow }, value)
}

func recentFor(gj *batchv1alpha1.GuardedJob, value string) *batchv1alpha1.RecentRun {
	return find(gj.Status.RecentRuns, func(r *batchv1alpha1.RecentRun) string { return r.Request }, value)
}

// orphanRequests answers the requests naming a GuardedJob that does not exist:
// refused once they have waited RequestWaitForGuardedJob for it (a GitOps sync
// may create them first). The API server, not the cache, says it does not
// exist: a shard's cache holds only its own GuardedJobs.
func (r *GuardedJobReconciler) orphanRequests(ctx context.Context, key types.NamespacedName, now time.Time) (time.Duration, error) {
	set, err := r.loadRequests(ctx, key.Namespace, key.Name)
	if err != nil || len(set.runs)+len(set.backfills)+len(set.inspects)+len(set.unlocks) == 0 {
		return 0, err
	}
	if err := r.APIReader.Get(ctx, key, &batchv1alpha1.GuardedJob{}); !apierrors.IsNotFound(err) {
		return 0, client.IgnoreNotFound(err) // it exists (another shard's), or the read failed
	}
	s := &scope{gj: &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, now: now, requests: set}
	wait := time.Duration(batchv1alpha1.RequestWaitForGuardedJob) * time.Second
	msg := fmt.Sprintf("there is no GuardedJob %s in namespace %s", key.Name, key.Namespace)
	set.waiting = fmt.Sprintf("waits for GuardedJob %s to exist in namespace %s", key.Name, key.Namespace)
	type open struct {
		created time.Time
		value   string
		running bool
	}
	var all []open
	for _, req := range set.runs {
		all = append(all, open{req.CreationTimestamp.Time, req.RequestValue(), req.Status.Phase == batchv1alpha1.RequestRunning})
	}
	for _, req := range set.backfills {
		all = append(all, open{req.CreationTimestamp.Time, req.RequestValue(), req.Status.Phase == batchv1alpha1.RequestRunning})
	}
	for _, req := range set.inspects {
		all = append(all, open{created: req.CreationTimestamp.Time, value: req.RequestValue()})
	}
	for _, req := range set.unlocks {
		all = append(all, open{created: req.CreationTimestamp.Time, value: req.RequestValue()})
	}
	for _, req := range all {
		if now.Sub(req.created) >= wait || req.running {
			set.refuse(req.value, msg)
		} else {
			s.requeueAt(req.created.Add(wait))
		}
	}
	err = r.answerRequests(ctx, s)
	if s.requeue.IsZero() {
		return 0, err
	}
	return max(s.requeue.Sub(now), time.Millisecond), err
}

// deprecatedAnnotation warns, once per value (the pass that handles it), that a
// request annotation is deprecated in favour of a request object.
func (r *GuardedJobReconciler) deprecatedAnnotation(s *scope, annotation, value, kind string) {
	r.event(s.gj, nil, corev1.EventTypeWarning, batchv1alpha1.DeprecatedAnnotationReason,
		"%s=%s was handled, but request annotations are deprecated and will be removed: create a %s instead (kubectl guardedjob uses one); see docs/upgrade.md",
		annotation, due.Clip(value, runcore.MaxRequestValue), kind)
}

// acceptBackfillObject reads a GuardedJobBackfill's range in the schedule's
// zone (unless it names an offset) and returns the backfill's initial state.
func (r *GuardedJobReconciler) acceptBackfillObject(s *scope, spec *compiledSpec, req *batchv1alpha1.GuardedJobBackfill, value string) (*batchv1alpha1.BackfillStatus, error) {
	loc := spec.rules.Schedule.Location()
	from, err := schedule.ParseRangeTime("spec.from", req.Spec.From, loc, false)
	if err != nil {
		return nil, err
	}
	to, err := schedule.ParseRangeTime("spec.to", req.Spec.To, loc, true)
	if err != nil {
		return nil, err
	}
	parallelism := int32(1)
	if req.Spec.Parallelism != nil {
		parallelism = *req.Spec.Parallelism
	}
	if parallelism < 1 || parallelism > batchv1alpha1.MaxBackfillParallelism {
		return nil, fmt.Errorf("spec.parallelism %d must be from 1 to %d", parallelism, batchv1alpha1.MaxBackfillParallelism)
	}
	return newBackfill(s, spec, value, from, to, parallelism)
}

// backfillRequestStatus is what a GuardedJobBackfill's status should say,
// given the GuardedJob's status (as written) and what this pass refused.
func backfillRequestStatus(gj *batchv1alpha1.GuardedJob, req *batchv1alpha1.GuardedJobBackfill, refused, waiting string, now time.Time) *batchv1alpha1.GuardedJobBackfillStatus {
	st := req.Status.DeepCopy()
	if st.Phase.Final() {
		return st
	}
	value := req.RequestValue()
	st.Request = value
	b := gj.Status.Backfill
	switch {
	case b != nil && b.Request == value:
		st.RangeStart, st.RangeEnd = b.From.DeepCopy(), b.To.DeepCopy()
		st.Total, st.Succeeded, st.Skipped, st.Failed, st.Remaining = b.Total, b.Succeeded, b.Skipped, b.Failed, b.Remaining
		st.FailedOccurrences = slices.Clone(b.FailedOccurrences)
		st.AcceptedAt, st.Message = b.StartedAt.DeepCopy(), b.Message
		switch b.State {
		case batchv1alpha1.BackfillComplete:
			st.Phase, st.FinishedAt = batchv1alpha1.RequestFinished, b.FinishedAt.DeepCopy()
		case batchv1alpha1.BackfillCancelled:
			st.Phase, st.FinishedAt = batchv1alpha1.RequestCancelled, b.FinishedAt.DeepCopy()
		default:
			st.Phase = batchv1alpha1.RequestRunning
		}
		if st.FinishedAt == nil && st.Phase != batchv1alpha1.RequestRunning {
			st.FinishedAt = &metav1.Time{Time: now}
		}
	case refused != "" && req.Spec.Cancel:
		st.Phase, st.Message, st.FinishedAt = batchv1alpha1.RequestCancelled, refused, &metav1.Time{Time: now}
	case refused != "" && st.AcceptedAt != nil:
		st.Phase, st.Message, st.FinishedAt = batchv1alpha1.RequestFinished, refused, &metav1.Time{Time: now}
	case refused != "":
		st.Phase, st.Message, st.FinishedAt = batchv1alpha1.RequestRefused, refused, &metav1.Time{Time: now}
	case st.AcceptedAt != nil:
		// status.backfill no longer shows it: the GuardedJob's status was replaced.
		st.Phase, st.FinishedAt = batchv1alpha1.RequestFinished, &metav1.Time{Time: now}
		st.Message = "the GuardedJob's status.backfill no longer shows this backfill; the counts above are the last seen"
	default:
		st.Phase, st.Message = batchv1alpha1.RequestPending, "waiting for the manager"
		if waiting != "" {
			st.Message = waiting
		}
		if b != nil && b.State == batchv1alpha1.BackfillRunning {
			st.Message = fmt.Sprintf("waits for backfill %s of %s to end (one backfill at a time)", b.Request, gj.Name)
		}
	}
	setRequestConditions(&st.Conditions, req.Generation, st.Phase, "", st.Message, now)
	return st
}

// setupRequests indexes the request objects by the GuardedJob they name and
// returns the kinds to watch: none when the API server does not serve them (the
// CRDs are not installed yet), with a log line saying so.
func (r *GuardedJobReconciler) setupRequests(mgr ctrl.Manager) ([]client.Object, error) {
	kinds := []client.Object{&batchv1alpha1.GuardedJobRun{}, &batchv1alpha1.GuardedJobBackfill{}, &batchv1alpha1.GuardedJobInspect{}, &batchv1alpha1.GuardedJobUnlock{}}
	for _, obj := range kinds {
		gvk, err := apiutil.GVKForObject(obj, mgr.GetScheme())
		if err != nil {
			return nil, err
		}
		if _, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			if meta.IsNoMatchError(err) {
				ctrl.Log.WithName("setup").Info("Request objects are off: the API server does not serve them; install the CRDs in config/crd (or the chart's) and restart the manager", "kind", gvk.Kind)
				return nil, nil
			}
			return nil, fmt.Errorf("look up %s: %w", gvk.Kind, err)
		}
	}
	for _, obj := range kinds {
		err := mgr.GetFieldIndexer().IndexField(context.Background(), obj, requestNameKey, func(o client.Object) []string {
			if name := requestedName(o); name != "" {
				return []string{name}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("index requests: %w", err)
		}
	}
	r.requestsServed = true
	return kinds, nil
}

// byRequest queues the GuardedJob a request names.
var byRequest = handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrl.Request {
	name := requestedName(o)
	if name == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
})

// requestedName is the GuardedJob a request object names.
func requestedName(o client.Object) string {
	switch req := o.(type) {
	case *batchv1alpha1.GuardedJobRun:
		return req.Spec.GuardedJobName
	case *batchv1alpha1.GuardedJobBackfill:
		return req.Spec.GuardedJobName
	case *batchv1alpha1.GuardedJobInspect:
		return req.Spec.GuardedJobName
	case *batchv1alpha1.GuardedJobUnlock:
		return req.Spec.GuardedJobName
	}
	return ""
}

// inspectRequestStatus is what a GuardedJobInspect's status should say: the
// GuardedJob's status.storeView once it answers this request.
func inspectRequestStatus(gj *batchv1alpha1.GuardedJob, req *batchv1alpha1.GuardedJobInspect, refused, waiting string, now time.Time) *batchv1alpha1.GuardedJobInspectStatus {
	st := req.Status.DeepCopy()
	if st.Phase.Final() {
		return st
	}
	value := req.RequestValue()
	st.Request = value
	switch sv := gj.Status.StoreView; {
	case refused != "":
		st.Phase, st.Message, st.FinishedAt = batchv1alpha1.RequestRefused, refused, &metav1.Time{Time: now}
	case sv != nil && sv.Request == value:
		st.Phase, st.View, st.FinishedAt = batchv1alpha1.RequestFinished, sv.DeepCopy(), sv.ObservedAt.DeepCopy()
		st.Message = fmt.Sprintf("read %d set(s) of keys in %s", len(sv.Entries), sv.Store)
		if sv.Error != "" {
			st.Message = sv.Error
		}
	default:
		st.Phase, st.Message = batchv1alpha1.RequestPending, "waiting for the manager"
		if waiting != "" {
			st.Message = waiting
		}
	}
	setRequestConditions(&st.Conditions, req.Generation, st.Phase, "", st.Message, now)
	return st
}

// unlockRequestStatus is what a GuardedJobUnlock's status should say: the
// GuardedJob's status.lastUnlock once it answers this request.
func unlockRequestStatus(gj *batchv1alpha1.GuardedJob, req *batchv1alpha1.GuardedJobUnlock, refused, waiting string, now time.Time) *batchv1alpha1.GuardedJobUnlockStatus {
	st := req.Status.DeepCopy()
	if st.Phase.Final() {
		return st
	}
	value := req.RequestValue()
	st.Request = value
	switch lu := gj.Status.LastUnlock; {
	case refused != "":
		st.Phase, st.Result, st.Message, st.FinishedAt = batchv1alpha1.RequestRefused, batchv1alpha1.UnlockRefused, refused, &metav1.Time{Time: now}
	case lu != nil && lu.Request == value:
		st.Phase = batchv1alpha1.RequestFinished
		if lu.Result == batchv1alpha1.UnlockRefused {
			st.Phase = batchv1alpha1.RequestRefused
		}
		st.Result, st.Key, st.FoundHolder, st.Message, st.FinishedAt = lu.Result, lu.Key, lu.FoundHolder, lu.Message, lu.FinishedAt.DeepCopy()
	default:
		st.Phase, st.Message = batchv1alpha1.RequestPending, "waiting for the manager"
		if waiting != "" {
			st.Message = waiting
		}
	}
	setRequestConditions(&st.Conditions, req.Generation, st.Phase, string(st.Result), st.Message, now)
	return st
}

// newBackfill checks a backfill's range against the schedule and returns its
// initial state.
func newBackfill(s *scope, spec *compiledSpec, value string, from, to time.Time, parallelism int32) (*batchv1alpha1.BackfillStatus, error) {
	rng, err := schedule.CheckBackfill(spec.rules.Schedule, s.gj.Spec.Schedule, from, to, s.now, batchv1alpha1.MaxBackfillOccurrences)
	if err != nil {
		return nil, err
	}
	return &batchv1alpha1.BackfillStatus{
		Request: due.Clip(value, runcore.MaxRequestValue), From: metav1.Time{Time: rng.From}, To: metav1.Time{Time: rng.To},
		Parallelism: parallelism, State: batchv1alpha1.BackfillRunning,
		Total: int32(rng.Count), Remaining: int32(rng.Count), //nolint:gosec // at most 1000
		Next: &metav1.Time{Time: rng.First}, StartedAt: metav1.Time{Time: s.now},
		Message: "accepted",
	}, nil
}
