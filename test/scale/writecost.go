package main

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// writeCostRounds is how often each way of writing is measured; the ways take
// turns, so that a drift of the machine's speed spreads over all of them.
const writeCostRounds = 3

// writeWay is one way of making a write: a merge patch with the
// resourceVersion as precondition (the patch the API server turns into JSON,
// merges and decodes) or an update of the whole object, each with the API
// server's default field validation (Warn: a strict decode that looks for
// unknown fields) or with Ignore.
type writeWay struct {
	update bool
	ignore bool
}

func (w writeWay) String() string {
	verb := "merge patch"
	if w.update {
		verb = "update"
	}
	if w.ignore {
		return verb + ", fieldValidation=Ignore"
	}
	return verb + ", default field validation"
}

var writeWays = []writeWay{{false, false}, {false, true}, {true, false}, {true, true}}

// writeCost measures the API server's CPU for one write of each kind a run
// makes, in each way it could be made: the GuardedJob status write that
// records a run, the create of a run's gated Job and the write that opens its
// gate. N objects each, writeCostRounds rounds, b.writers writers, the API
// server's CPU time over each batch divided by its writes.
func (b *bench) writeCost(ctx context.Context) error {
	status, err := b.statusWriteCost(ctx)
	if err != nil {
		return err
	}
	create, gate, err := b.jobWriteCost(ctx)
	if err != nil {
		return err
	}
	b.printf("\n### API server CPU per write (N=%d, %d writers, %d rounds; mean per write, best round in brackets)\n\n", b.n, b.writers, writeCostRounds)
	b.printf("| write | way | CPU per write |\n|---|---|---|\n")
	row := func(what string, way string, ds []time.Duration) {
		per := func(d time.Duration) string {
			return fmt.Sprintf("%.2f ms", float64(d)/float64(b.n)/float64(time.Millisecond))
		}
		b.printf("| %s | %s | %s (%s) |\n", what, way, per(meanOf(ds)), per(minOf(ds)))
	}
	for i, w := range writeWays {
		row("GuardedJob status, a run recorded", w.String(), status[i])
	}
	for i, ignore := range []bool{false, true} {
		row("Job create, gated", writeWay{update: true, ignore: ignore}.createString(), create[i])
	}
	for i, w := range writeWays {
		row("Job gate opened", w.String(), gate[i])
	}
	return nil
}

func (w writeWay) createString() string {
	if w.ignore {
		return "create, fieldValidation=Ignore"
	}
	return "create, default field validation"
}

// write makes one write of obj, changed by change, in way w.
func (b *bench) write(ctx context.Context, obj client.Object, status bool, w writeWay, change func()) error {
	var opts []client.SubResourceUpdateOption
	var objOpts []client.UpdateOption
	var patchOpts []client.PatchOption
	var subPatchOpts []client.SubResourcePatchOption
	if w.ignore {
		v := client.FieldValidation(metav1.FieldValidationIgnore)
		opts, objOpts, patchOpts, subPatchOpts = append(opts, v), append(objOpts, v), append(patchOpts, v), append(subPatchOpts, v)
	}
	orig := obj.DeepCopyObject().(client.Object)
	change()
	switch {
	case w.update && status:
		return b.w.client.Status().Update(ctx, obj, opts...)
	case w.update:
		return b.w.client.Update(ctx, obj, objOpts...)
	case status:
		return b.w.client.Status().Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), subPatchOpts...)
	default:
		return b.w.client.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), patchOpts...)
	}
}

// cpuOver runs fn and returns the API server's CPU time over it.
func (b *bench) cpuOver(fn func() error) (time.Duration, error) {
	cpu0, err := b.w.apiServerCPU()
	if err != nil {
		return 0, err
	}
	if err := fn(); err != nil {
		return 0, err
	}
	cpu1, err := b.w.apiServerCPU()
	return cpu1 - cpu0, err
}

// statusWriteCost: N GuardedJobs, each with a run recorded as the manager
// records it; each round writes every status once in every way.
func (b *bench) statusWriteCost(ctx context.Context) ([][]time.Duration, error) {
	n := b.n
	objs := make([]*batchv1alpha1.GuardedJob, n)
	if err := parallel(ctx, n, b.writers, func(ctx context.Context, i int) error {
		gj := guardedJob(nsFloor, fmt.Sprintf("cost-%d", i), "0 0 1 1 *")
		gj.Spec.Suspend = ptr.To(true)
		if err := b.w.client.Create(ctx, gj); err != nil {
			return err
		}
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		jobName := fmt.Sprintf("%s-%d-abcdef", gj.Name, now.Unix()/60)
		gj.Status.Active = []batchv1alpha1.ActiveRun{{
			JobName: jobName, Phase: batchv1alpha1.RunPhaseRunning, ScheduledTime: now,
			Key: gj.Spec.Lock.Key, OccurrenceKey: gj.Spec.Lock.Key + ":done:1", FenceKey: gj.Spec.Lock.Key + ":fence",
			Store: "redis://127.0.0.1:6379/0", Holder: "bench/floor/" + jobName, Token: "bench/floor/" + jobName + "#0123456789abcdef",
			Cluster: "bench", OwnerUID: gj.UID, Fence: int64(i + 1), AcquiredAt: &now,
			TTL: metav1.Duration{Duration: benchTTL}, RenewInterval: metav1.Duration{Duration: benchInterval},
			MaxHold: metav1.Duration{Duration: 24 * time.Hour}, StartDeadline: &now,
		}}
		gj.Status.Conditions = []metav1.Condition{
			{Type: batchv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Scheduled", Message: "next run at 00:00", LastTransitionTime: now},
			{Type: batchv1alpha1.LockHeldCondition, Status: metav1.ConditionTrue, Reason: "Running", Message: "held by " + jobName, LastTransitionTime: now},
		}
		if err := b.w.client.Status().Update(ctx, gj); err != nil {
			return err
		}
		objs[i] = gj
		return nil
	}); err != nil {
		return nil, fmt.Errorf("create GuardedJobs: %w", err)
	}
	out := make([][]time.Duration, len(writeWays))
	// With -profile-dir: the API server's profile over the first round's
	// status writes.
	defer b.profileBurst(ctx, "writecost-status", time.Now(), false)()
	for round := range writeCostRounds {
		for wi, w := range writeWays {
			cpu, err := b.cpuOver(func() error {
				return parallel(ctx, n, b.writers, func(ctx context.Context, i int) error {
					gj := objs[i]
					return b.write(ctx, gj, true, w, func() {
						gj.Status.LastFence++
						gj.Status.Active[0].Fence = gj.Status.LastFence
					})
				})
			})
			if err != nil {
				return nil, fmt.Errorf("status writes (%s), round %d: %w", w, round+1, err)
			}
			out[wi] = append(out[wi], cpu)
		}
	}
	if err := b.w.client.DeleteAllOf(ctx, &batchv1alpha1.GuardedJob{}, client.InNamespace(nsFloor)); err != nil {
		return nil, err
	}
	return out, nil
}

// jobWriteCost: each round creates N gated Jobs (in turn with the default
// field validation and with Ignore) and opens their gates in one of the ways.
func (b *bench) jobWriteCost(ctx context.Context) (create, gate [][]time.Duration, err error) {
	n := b.n
	create, gate = make([][]time.Duration, 2), make([][]time.Duration, len(writeWays))
	for round := range writeCostRounds {
		for wi, w := range writeWays {
			ignoreCreate := wi%2 == 1
			jobs := make([]*batchv1.Job, n)
			cpu, err := b.cpuOver(func() error {
				return parallel(ctx, n, b.writers, func(ctx context.Context, i int) error {
					job := &batchv1.Job{
						ObjectMeta: metav1.ObjectMeta{
							Name: fmt.Sprintf("cost-%d-%d-%d", round, wi, i), Namespace: nsFloor,
							Labels: map[string]string{batchv1alpha1.GuardedJobLabel: fmt.Sprintf("cost-%d", i)},
							Annotations: map[string]string{
								batchv1alpha1.FenceAnnotation:     fmt.Sprint(i + 1),
								batchv1alpha1.StartGateAnnotation: batchv1alpha1.StartGateLease,
							},
						},
						Spec: batchv1.JobSpec{Template: podTemplate(), Suspend: ptr.To(true)},
					}
					var opts []client.CreateOption
					if ignoreCreate {
						opts = append(opts, client.FieldValidation(metav1.FieldValidationIgnore))
					}
					jobs[i] = job
					return b.w.client.Create(ctx, job, opts...)
				})
			})
			if err != nil {
				return nil, nil, fmt.Errorf("job creates, round %d: %w", round+1, err)
			}
			create[wi%2] = append(create[wi%2], cpu)
			cpu, err = b.cpuOver(func() error {
				return parallel(ctx, n, b.writers, func(ctx context.Context, i int) error {
					job := jobs[i]
					return b.write(ctx, job, false, w, func() {
						job.Spec.Suspend = ptr.To(false)
						delete(job.Annotations, batchv1alpha1.StartGateAnnotation)
					})
				})
			})
			if err != nil {
				return nil, nil, fmt.Errorf("gate writes (%s), round %d: %w", w, round+1, err)
			}
			gate[wi] = append(gate[wi], cpu)
			if err := b.w.client.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(nsFloor), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
				return nil, nil, err
			}
			if err := poll(ctx, 2*time.Minute, 200*time.Millisecond, "the Jobs to be gone", func() (bool, error) {
				var list batchv1.JobList
				err := b.w.client.List(ctx, &list, client.InNamespace(nsFloor))
				return err == nil && len(list.Items) == 0, err
			}); err != nil {
				return nil, nil, err
			}
		}
	}
	return create, gate, nil
}

func meanOf(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(max(len(ds), 1))
}

func minOf(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds[1:] {
		m = min(m, d)
	}
	return m
}
