package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/jobbuild"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/runtoken"
)

// The Job-first order: a run's Job is created right after its acquisition,
// before status records the run, and status is then written from it. The Job
// is suspended behind its start gate and carries the run (RunAnnotation), so a
// manager that dies between the two leaves a Job that never had a Pod and that
// the next pass adopts: when the lock key still holds the token minted for
// that Job, the fence counter still shows the Job's fence, and the lease
// ledger does not record the run as over. Every other such Job is deleted.
// The gate opens only for a run status records. docs/reliability.md maps this
// to the protocol model.

// jobRun is what RunAnnotation holds: the run without its token (with the
// run-now value that started it, runNow).
type jobRun struct {
	batchv1alpha1.ActiveRun
}

// annotateRun writes the run into the Job it is about to create.
func annotateRun(job *batchv1.Job, run *batchv1alpha1.ActiveRun) error {
	rec := jobRun{ActiveRun: *run.DeepCopy()}
	rec.Token, rec.JobUID, rec.Phase, rec.StopResult, rec.StopReason = "", "", "", "", ""
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode run of job %s: %w", job.Name, err)
	}
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[batchv1alpha1.RunAnnotation] = string(b)
	return nil
}

// createFirst creates the Job of a run whose lease this pass has just
// acquired and confirmed with room to stop the Pods (runcore.NewStart), before
// status records the run. It returns nil (and no error) when the run goes on
// in the status-first order instead: its Job would not wait at the manager's
// start gate (a queue starts it), a Job of its name exists already, or the API
// server did not answer; status then records the run without a Job,
// and running() creates or judges it as for any recorded run. rejected is the
// API server's refusal of an invalid or forbidden Job.
func (r *GuardedJobReconciler) createFirst(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun) (job *batchv1.Job, warnings []jobbuild.Warning, rejected string) {
	job, warnings = jobbuild.Build(s.gj, run)
	if !jobbuild.Gated(job) {
		// A queue starts a Job that asks to be suspended: its Pods wait at
		// the lease's scheduling gate, but no Job may exist before status
		// records its run.
		return nil, nil, ""
	}
	shardLabelOnJob(s.gj, job)
	if err := annotateRun(job, run); err != nil {
		log.FromContext(ctx).Error(err, "creating the Job after status records the run", "job", run.JobName)
		return nil, nil, ""
	}
	if err := r.createJob(ctx, job); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return nil, nil, "the API server rejected the Job: " + err.Error()
		}
		if !apierrors.IsAlreadyExists(err) {
			log.FromContext(ctx).Info("creating the Job after status records the run", "job", run.JobName, "error", err.Error())
		}
		return nil, nil, ""
	}
	return job, warnings, ""
}

// jobCreatedFirst finishes the pass that created a run's Job before recording
// it, once status records it: the events, then the start gate.
func (r *GuardedJobReconciler) jobCreatedFirst(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun, job *batchv1.Job, warnings []jobbuild.Warning, store *lockclient.Client) error {
	observeScheduleSkew(s.now.Sub(runDueTime(s.gj, run)))
	for _, w := range warnings {
		r.event(s.gj, job, corev1.EventTypeWarning, w.Reason, "%s", w.Message)
	}
	r.event(s.gj, job, corev1.EventTypeNormal, batchv1alpha1.JobCreatedReason, "Created Job %s%s", job.Name, runcore.FenceSuffix(run.Fence))
	runcore.SetLockHeld(s.gj, "", "", s.now)
	return r.openGate(ctx, s, run, job, store)
}

// adoptionRetry is how soon a pass looks again at a Job waiting for adoption
// whose store did not answer.
const adoptionRetry = storeRetry

// unrecordedJobsOf returns the Jobs of this GuardedJob that are waiting for
// adoption: created by a run's acquisition pass (gated, carrying their run)
// and recorded by no status. jobs are the owned Jobs the cache lists; a Job
// this manager created and failed to record is read from the API server when
// the cache has not seen it yet.
func (r *GuardedJobReconciler) unrecordedJobsOf(ctx context.Context, s *scope, jobs []batchv1.Job) ([]batchv1.Job, error) {
	var pending []batchv1.Job
	listed := map[string]bool{}
	for i := range jobs {
		listed[jobs[i].Name] = true
		if waitingOf(s.gj, &jobs[i], r.EarlyGate).WaitsForAdoption() {
			pending = append(pending, jobs[i])
		}
	}
	key := client.ObjectKeyFromObject(s.gj)
	for _, name := range r.memory.unrecorded(key) {
		if runcore.RunByName(s.gj, name) != nil {
			r.memory.forget(key, name)
			continue
		}
		if listed[name] {
			continue // judged from the cache above; remembered until status records it
		}
		job := &batchv1.Job{}
		err := r.getJobLive(ctx, client.ObjectKey{Namespace: s.gj.Namespace, Name: name}, job)
		switch {
		case apierrors.IsNotFound(err):
			r.memory.forget(key, name)
		case err != nil:
			return nil, fmt.Errorf("get job %s: %w", name, err)
		case waitingOf(s.gj, job, r.EarlyGate).WaitsForAdoption():
			pending = append(pending, *job)
		default:
			r.memory.forget(key, name)
		}
	}
	return pending, nil
}

// jobRecordOf is what a Job carries of its run (runcore.JobRecord): its fence
// annotation when runcore.TrustedFence bounds it, and the occurrence of its run
// annotation when the Job's name and creation time agree with it
// (runcore.TrustedOccurrence).
func jobRecordOf(gj *batchv1alpha1.GuardedJob, job *batchv1.Job) runcore.JobRecord {
	var rec runcore.JobRecord
	if f, err := strconv.ParseInt(job.Annotations[batchv1alpha1.FenceAnnotation], 10, 64); err == nil && runcore.TrustedFence(f) {
		rec.Fence = f
	}
	var run jobRun
	if raw := job.Annotations[batchv1alpha1.RunAnnotation]; raw != "" && json.Unmarshal([]byte(raw), &run) == nil {
		if occ := run.ScheduledTime.Time; runcore.TrustedOccurrence(gj.Name, job.Name, occ, job.CreationTimestamp.Time) {
			rec.Occurrence = occ
		}
	}
	return rec
}

// jobRecordsOf is what the Jobs carry of their runs.
func jobRecordsOf(gj *batchv1alpha1.GuardedJob, jobs []batchv1.Job) []runcore.JobRecord {
	recs := make([]runcore.JobRecord, 0, len(jobs))
	for i := range jobs {
		recs = append(recs, jobRecordOf(gj, &jobs[i]))
	}
	return recs
}

// jobWaitingFor returns the Job of a recorded run that has none yet, when one
// was created for it ahead of a status write that failed, or nil.
func (r *GuardedJobReconciler) jobWaitingFor(ctx context.Context, s *scope, run *batchv1alpha1.ActiveRun) (*batchv1.Job, error) {
	if !runcore.LooksForItsJob(run, s.unrecorded != run.JobName) {
		return nil, nil
	}
	// The cache may not have seen it (created by this manager's own failed
	// pass moments ago, or the cache is older than the world): a run about to
	// give up or acquire again must not miss its Job.
	job, err := r.getJobConfirmed(ctx, s.gj.Namespace, run.JobName)
	if err != nil || job == nil {
		return nil, err
	}
	w := runcore.Waiting{Controlled: metav1.IsControlledBy(job, s.gj), Deleting: !job.DeletionTimestamp.IsZero(), Gated: jobbuild.Gated(job),
		CarriesRun: job.Annotations[batchv1alpha1.RunAnnotation] != ""}
	if !w.WaitsForItsRun() {
		return nil, nil
	}
	return job, nil
}

// adoptUnrecorded adopts a Job waiting for adoption into status, or deletes
// it. recorded is the run's record when status has it (waiting to acquire
// again), else nil. It returns whether the Job still waits (its store did not
// answer).
func (r *GuardedJobReconciler) adoptUnrecorded(ctx context.Context, s *scope, job *batchv1.Job, recorded *batchv1alpha1.ActiveRun) (waiting bool, err error) {
	gj := s.gj
	u, store := r.judgeUnrecorded(ctx, s, job, recorded)
	act, why := runcore.Adoption(u)
	switch act {
	case runcore.WaitForTheStore:
		runcore.SetStoreReachable(gj, u.ReadErr, s.now)
		s.requeueAfter(adoptionRetry)
		return true, nil
	case runcore.StopRecorded:
		recorded.JobUID, recorded.Phase = job.UID, batchv1alpha1.RunPhaseRunning
		return false, r.beginStop(s, recorded, batchv1alpha1.RunResultLockLost, "its Job was created before the run was recorded, and cannot start: "+why,
			batchv1alpha1.LockLostReason, batchv1alpha1.LockStateLost, "")
	case runcore.DeleteUnadopted:
		return r.deleteUnadopted(ctx, s, job, u.DeleteNames(), why)
	case runcore.LeaveToStopper:
		// Past its gate: its Pods may work under a lease nobody renews. The
		// stop controller stops it unless this process renews that lease.
		log.FromContext(ctx).V(1).Info("a Job past its gate that no status records cannot be adopted", "job", job.Name, "why", why)
		r.pokeStopper(job.Namespace, job.Name)
		return false, nil
	}

	token := u.Key.Holder
	run := runcore.AdoptInto(gj, u, job.UID, s.now)
	r.track(gj, run, store, resumed)
	r.claimShard(ctx, gj)
	key := client.ObjectKeyFromObject(gj)
	if !u.WritesRecord() {
		// The pass's own status write at its end (with a resourceVersion
		// precondition) carries the record with whatever else the pass
		// changes; the memory goes once a pass reads the run in status.
		logStep(ctx, u.Step(), "job", run.JobName, "fence", run.Fence)
		return false, nil
	}
	if err := r.writeGuarded(ctx, s); err != nil {
		if !u.KeepsLeaseUnwritten() {
			r.untrack(token)
		}
		return false, err
	}
	r.memory.forget(key, job.Name)
	if run = runcore.RunByName(s.gj, job.Name); run == nil {
		return false, nil
	}
	logStep(ctx, u.Step(), "job", run.JobName, "fence", run.Fence)
	r.event(s.gj, job, corev1.EventTypeNormal, batchv1alpha1.RunAdoptedReason,
		"Adopted Job %s, created before its run was recorded: lock %s still holds its lease%s", job.Name, run.Key, runcore.FenceSuffix(run.Fence))
	return false, r.openGate(ctx, s, run, job, store)
}

// judgeUnrecorded gathers what step AdoptUnrecorded needs of a Job waiting for
// adoption (runcore.Unrecorded): the run it would be adopted as, its store, and
// what the store says of its keys.
func (r *GuardedJobReconciler) judgeUnrecorded(ctx context.Context, s *scope, job *batchv1.Job, recorded *batchv1alpha1.ActiveRun) (u runcore.Unrecorded, store *lockclient.Client) {
	gj := s.gj
	why := ""
	var rec jobRun
	if err := json.Unmarshal([]byte(job.Annotations[batchv1alpha1.RunAnnotation]), &rec); err != nil {
		why = "its " + batchv1alpha1.RunAnnotation + " annotation does not parse"
	}
	var run *batchv1alpha1.ActiveRun
	if why == "" {
		run, why = r.trustedRun(s, job, &rec.ActiveRun, recorded)
	}
	u = runcore.Unrecorded{Run: run, Why: why, Recorded: recorded, Leases: gj.Status.Leases, Started: !jobbuild.Gated(job),
		Judged:     runcore.JobVersion{UID: job.UID, ResourceVersion: job.ResourceVersion},
		OpenedHere: r.memory.openedHere(client.ObjectKeyFromObject(gj), job.Name, job.UID)}
	if u.Why == "" {
		var err error
		store, err = r.runStore(ctx, gj, run)
		if err != nil {
			u.Why = "its run's store cannot be resolved: " + err.Error()
		}
	}
	if u.Why == "" {
		keys := lockclient.Keys{Lock: run.Key}
		if run.Fence > 0 {
			keys.Fence = run.FenceKey
		}
		st, err := r.inspectKeys(ctx, store, keys)
		var storeErr *lockclient.StoreError
		u.StoreDown = errors.As(err, &storeErr)
		u.Key, u.ReadErr, u.Identity = runcore.KeyView{Holder: st.Holder, Fence: st.Fence}, err, r.runIdentity(gj, run)
	}
	return u, store
}

// trustedRun returns the run a Job waiting for adoption would be adopted as, or
// why it may not be (runcore.TrustedRun: the annotation is a hint, checked
// against status or the spec for the occurrence it names).
func (r *GuardedJobReconciler) trustedRun(s *scope, job *batchv1.Job, hint, recorded *batchv1alpha1.ActiveRun) (*batchv1alpha1.ActiveRun, string) {
	t := runcore.Trust{Cluster: r.ClusterName, OwnerUID: s.gj.UID, JobName: job.Name, JobCreated: job.CreationTimestamp, Recorded: recorded}
	if s.spec != nil {
		t.FromSpec = func(scheduled metav1.Time) (batchv1alpha1.ActiveRun, error) {
			return r.runFromSpec(s.gj, s.spec, scheduled.Time)
		}
	}
	return runcore.TrustedRun(t, hint)
}

// deleteUnadopted deletes a Job that waited for adoption and may not run. It
// never had a Pod (its start gate never opened); its lease finalizer goes once
// it is being deleted (reapUnclaimedJobs). The delete is conditional on the
// version judged (runcore.Unrecorded.DeleteNames).
// It returns whether the Job still waits (its delete found a newer version: it
// is judged again once the cache shows that one).
func (r *GuardedJobReconciler) deleteUnadopted(ctx context.Context, s *scope, job *batchv1.Job, judged runcore.JobVersion, why string) (waiting bool, err error) {
	pre := client.Preconditions{UID: &judged.UID}
	if judged.ResourceVersion != "" {
		pre.ResourceVersion = &judged.ResourceVersion
	}
	err = r.deleteJob(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground), pre)
	if apierrors.IsConflict(err) {
		s.requeueAfter(adoptionRetry)
		return true, nil
	}
	if client.IgnoreNotFound(err) != nil {
		return false, fmt.Errorf("delete job %s: %w", job.Name, err)
	}
	r.memory.forget(client.ObjectKeyFromObject(s.gj), job.Name)
	r.event(s.gj, job, corev1.EventTypeWarning, batchv1alpha1.StaleJobReason,
		"Deleted Job %s, which was created before its run was recorded and never started: %s", job.Name, why)
	return false, nil
}

// runFromSpec is what the spec says a run of the occurrence at scheduled holds
// (its keys, store and lease timing), before it has a token, a Job or a phase:
// the snapshot a run takes when it starts, and what a run found elsewhere (a
// Job's annotation, which anyone who may create Jobs can write) must match. The
// keys are checked against the namespace's grants. Errors are
// *specerror.Error, or store errors.
func (r *GuardedJobReconciler) runFromSpec(gj *batchv1alpha1.GuardedJob, spec *compiledSpec, scheduled time.Time) (batchv1alpha1.ActiveRun, error) {
	keys, err := spec.keys(r, gj, scheduled)
	if err != nil {
		return batchv1alpha1.ActiveRun{}, err
	}
	return batchv1alpha1.ActiveRun{
		ScheduledTime:      metav1.Time{Time: scheduled},
		Key:                keys.Lock,
		OccurrenceKey:      keys.Occurrence,
		FenceKey:           keys.Fence,
		Store:              spec.store.Identity(),
		Cluster:            r.ClusterName,
		OwnerUID:           gj.UID,
		TTL:                metav1.Duration{Duration: gj.Spec.Lock.TTLOrDefault()},
		RenewInterval:      metav1.Duration{Duration: gj.Spec.Lock.RenewIntervalOrDefault()},
		MaxHold:            metav1.Duration{Duration: gj.Spec.Lock.MaxHoldOrDefault()},
		EnvName:            gj.Spec.Fencing.EnvNameOrDefault(),
		FencingPolicy:      gj.Spec.Fencing.PolicyOrDefault(),
		StoreFailurePolicy: gj.Spec.Lock.StoreFailurePolicyOrDefault(),
		PodGuard:           spec.guard.DeepCopy(),
	}, nil
}

// runIdentity is what a run's token is minted for: this cluster, the object and
// the occurrence, and what started the run.
func (r *GuardedJobReconciler) runIdentity(gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) runtoken.Run {
	return runtoken.Run{Cluster: r.ClusterName, Namespace: gj.Namespace, Name: gj.Name, UID: string(gj.UID),
		Occurrence: run.ScheduledTime.Time, Start: runcore.StartOf(run)}
}
