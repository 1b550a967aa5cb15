package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/test/scale/report"
)

// results are the figures the phases share (the targets are ratios between them).
type results struct {
	floor      time.Duration // all N runs' writes at the API server's pace
	floorRun   time.Duration // p99 of one run's three writes in the floor
	cronP50    time.Duration
	cronP99    time.Duration
	cronMissed int
	gjP50      time.Duration
	gjP99      time.Duration
	gjMissed   int
	gjRuns     int // runs whose Job exists
}

// floor measures what the API server itself allows: for each of N objects, the
// writes one run of the manager needs up to its Job (-floor-status-writes status
// updates of a GuardedJob, each with the resourceVersion the previous one
// returned, and a Job create), from 32 writers without a client-side limit.
func (b *bench) floor(ctx context.Context) error {
	r, err := b.floorRound(ctx, b.floorStatusWrites)
	if err != nil {
		return err
	}
	b.res.floor = r.total
	b.res.floorRun = percentile(r.runs, 0.99)
	writes := b.floorStatusWrites + 1
	b.rep.Floor = &report.Floor{
		Writers: b.writers, StatusWrites: b.floorStatusWrites, JobCreates: 1, TotalSeconds: r.total.Seconds(),
		WritesPerSecond: float64(writes*b.n) / r.total.Seconds(), RunP50Seconds: percentile(r.runs, 0.5).Seconds(), RunP99Seconds: b.res.floorRun.Seconds(),
	}
	b.printf("\n### API-server floor (N=%d, %d writers, no client limit)\n\n", b.n, b.writers)
	b.printf("| writes | total | per second | one run's %d writes p50 / p99 |\n|---|---|---|---|\n", writes)
	b.printf("| %d Job creates + %d status updates | %s | %.0f | %s / %s |\n", b.n, b.floorStatusWrites*b.n, secs(r.total),
		float64(writes*b.n)/r.total.Seconds(), ms(percentile(r.runs, 0.5)), ms(b.res.floorRun))
	return nil
}

// floorResult is one round of the floor's writes.
type floorResult struct {
	total  time.Duration   // all N runs' writes
	runs   []time.Duration // one run's writes, per run
	status []time.Duration // each status update
	apiCPU time.Duration   // kube-apiserver's CPU time over the writes (0 if unknown)
}

// floorRound creates N suspended GuardedJobs, makes each run's writes (statusWrites
// status updates, then its Job) and removes what it made.
func (b *bench) floorRound(ctx context.Context, statusWrites int) (floorResult, error) {
	n := b.n
	objs := make([]*batchv1alpha1.GuardedJob, n)
	if err := parallel(ctx, n, b.writers, func(ctx context.Context, i int) error {
		gj := guardedJob(nsFloor, fmt.Sprintf("floor-%d", i), "0 0 1 1 *")
		gj.Spec.Suspend = ptr.To(true)
		objs[i] = gj
		return b.w.client.Create(ctx, gj)
	}); err != nil {
		return floorResult{}, fmt.Errorf("create floor objects: %w", err)
	}
	sw := statusWrites
	r := floorResult{runs: make([]time.Duration, n), status: make([]time.Duration, sw*n)}
	cpu0, cpuErr := b.w.apiServerCPU()
	start := time.Now()
	if err := parallel(ctx, n, b.writers, func(ctx context.Context, i int) error {
		t0 := time.Now()
		gj := objs[i]
		now := metav1.NewTime(time.Now())
		jobName := fmt.Sprintf("%s-%d-abcdef", gj.Name, now.Unix()/60)
		gj.Status.Active = []batchv1alpha1.ActiveRun{{
			JobName: jobName, Phase: batchv1alpha1.RunPhaseAcquiring, ScheduledTime: now,
			Key: gj.Spec.Lock.Key, OccurrenceKey: gj.Spec.Lock.Key + ":done:1", FenceKey: gj.Spec.Lock.Key + ":fence",
			Store: "redis://127.0.0.1:6379/0", Holder: "bench/floor/" + jobName, Token: "bench/floor/" + jobName + "#0123456789abcdef",
			Cluster: "bench", OwnerUID: gj.UID,
			TTL: metav1.Duration{Duration: benchTTL}, RenewInterval: metav1.Duration{Duration: benchInterval},
			MaxHold: metav1.Duration{Duration: 24 * time.Hour}, StartDeadline: &now,
		}}
		// The intent alone first when the run's writes are two status updates;
		// the last one records the fence (phase Running).
		for w := range sw {
			t1 := time.Now()
			if w == sw-1 {
				gj.Status.Active[0].Phase = batchv1alpha1.RunPhaseRunning
				gj.Status.Active[0].Fence = int64(i + 1)
				gj.Status.Active[0].AcquiredAt = &now
				gj.Status.LastFence = int64(i + 1)
			}
			if err := b.w.client.Status().Update(ctx, gj); err != nil {
				return fmt.Errorf("floor status write %d: %w", w+1, err)
			}
			r.status[sw*i+w] = time.Since(t1)
		}
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{
				Name: jobName, Namespace: nsFloor,
				Labels:      map[string]string{batchv1alpha1.GuardedJobLabel: gj.Name},
				Annotations: map[string]string{batchv1alpha1.FenceAnnotation: fmt.Sprint(i + 1)},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "GuardedJob", Name: gj.Name, UID: gj.UID, Controller: ptr.To(true),
				}},
			},
			Spec: batchv1.JobSpec{Template: podTemplate(), Suspend: ptr.To(true)},
		}
		if err := b.w.client.Create(ctx, job); err != nil {
			return fmt.Errorf("floor job: %w", err)
		}
		r.runs[i] = time.Since(t0)
		return nil
	}); err != nil {
		return floorResult{}, err
	}
	r.total = time.Since(start)
	if cpu1, err := b.w.apiServerCPU(); err == nil && cpuErr == nil {
		r.apiCPU = cpu1 - cpu0
	}
	// Out of the way of the phases (and rounds) that follow.
	if err := b.w.client.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(nsFloor), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		return floorResult{}, err
	}
	if err := b.w.client.DeleteAllOf(ctx, &batchv1alpha1.GuardedJob{}, client.InNamespace(nsFloor)); err != nil {
		return floorResult{}, err
	}
	return r, poll(ctx, 2*time.Minute, 200*time.Millisecond, "the floor's GuardedJobs to be gone", func() (bool, error) {
		var list batchv1alpha1.GuardedJobList
		err := b.w.client.List(ctx, &list, client.InNamespace(nsFloor))
		return err == nil && len(list.Items) == 0, err
	})
}

// cronjob measures kube-controller-manager's CronJob controller once per variant:
// with its default flags, and with the manager's own client limits and workers
// (--kube-api-qps, --kube-api-burst, --concurrent-cron-job-syncs), so that the
// comparison is not one of client-side limiters.
func (b *bench) cronjob(ctx context.Context) error {
	for _, v := range b.cronVariants {
		var args []string
		limits := report.Limits{QPS: 20, Burst: 30, Workers: 5} // kube-controller-manager's defaults
		switch v {
		case report.CronDefaults:
		case report.CronEqualLimits:
			limits = b.rep.Manager.Limits
			qps, burst := limits.QPS, limits.Burst
			if qps <= 0 {
				// No client-side limit: client-go takes a negative QPS as none,
				// kube-controller-manager's flag does not; this is more than the
				// API server serves.
				qps, burst = 1e6, 1e6
			}
			args = []string{fmt.Sprintf("--kube-api-qps=%g", qps), fmt.Sprintf("--kube-api-burst=%d", burst),
				fmt.Sprintf("--concurrent-cron-job-syncs=%d", limits.Workers)}
		default:
			return fmt.Errorf("unknown CronJob variant %q", v)
		}
		if err := b.cronjobVariant(ctx, v, limits, args); err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
	}
	return nil
}

// cronjobVariant measures kube-controller-manager's CronJob controller started with
// args: N CronJobs due in the same minute; skew is the creation of each one's first
// Job at or after the due time, minus the due time.
func (b *bench) cronjobVariant(ctx context.Context, variant string, limits report.Limits, args []string) error {
	n := b.n
	if err := b.w.startKCM(ctx, args...); err != nil {
		return err
	}
	defer func() {
		b.w.kcm.Stop(10 * time.Second)
		b.w.kcm = nil
		_ = b.w.client.DeleteAllOf(ctx, &batchv1.CronJob{}, client.InNamespace(nsCron))
		_ = b.w.client.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(nsCron), client.PropagationPolicy(metav1.DeletePropagationBackground))
		// The next variant creates CronJobs of the same names.
		_ = poll(ctx, 2*time.Minute, 200*time.Millisecond, "the CronJobs to be gone", func() (bool, error) {
			var list batchv1.CronJobList
			err := b.w.client.List(ctx, &list, client.InNamespace(nsCron))
			return err == nil && len(list.Items) == 0, err
		})
	}()
	due := nextDue(15*time.Second + time.Duration(n)*10*time.Millisecond)
	if err := parallel(ctx, n, b.writers, func(ctx context.Context, i int) error {
		return b.w.client.Create(ctx, &batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cron-%d", i), Namespace: nsCron},
			Spec: batchv1.CronJobSpec{
				Schedule: cronSchedule(due), TimeZone: ptr.To("Etc/UTC"),
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: podTemplate()}},
			},
		})
	}); err != nil {
		return fmt.Errorf("create cronjobs: %w", err)
	}
	b.logf("CronJob: %d CronJobs due at %s", n, due.Format(time.TimeOnly))
	profiled := b.profileBurst(ctx, "cronjob-"+strings.ReplaceAll(variant, " ", "-"), due, false)
	time.Sleep(time.Until(due))
	cpu0, cpuErr := b.w.apiServerCPU()
	first, err := b.waitJobs(ctx, kcmUser, nsCron, 1, due, n, 10*time.Minute)
	if err != nil {
		return err
	}
	var last time.Time
	for _, t := range first {
		if t.After(last) {
			last = t
		}
	}
	// The status write of the last run follows its Job.
	settle := last.Add(2 * time.Second)
	time.Sleep(time.Until(settle))
	cpu1, cpuErr1 := b.w.apiServerCPU()
	profiled()
	if err := b.w.audit.refresh(); err != nil {
		return err
	}
	size := b.objectBytes(ctx, &batchv1.CronJob{}, nsCron, "cron-0")
	steps, _ := runSteps(b.w.audit.query(between(kcmUser, due.Add(-time.Second), settle)), due,
		runShape{ns: nsCron, jobSuffix: 1, status: "cronjobs/status", controller: "the rest of the sync"})
	skews := skewsOf(first, due)
	p50, p99 := percentile(skews, 0.5), percentile(skews, 0.99)
	if variant == report.CronDefaults {
		b.res.cronP50, b.res.cronP99, b.res.cronMissed = p50, p99, n-len(first)
	}
	b.rep.CronJob = append(b.rep.CronJob, report.CronJob{Variant: variant, Limits: limits, Due: n, Created: len(first),
		P50Seconds: p50.Seconds(), P99Seconds: p99.Seconds(), LastSeconds: percentile(skews, 1).Seconds(), Steps: steps})
	rep := &b.rep.CronJob[len(b.rep.CronJob)-1]
	rep.ObjectBytes = size
	if cpuErr == nil && cpuErr1 == nil {
		rep.APIServerCPUSeconds = (cpu1 - cpu0).Seconds()
	}
	b.printf("\n### CronJob (kube-controller-manager, cronjob controller only, %s: %s)\n\n", variant, limits)
	b.printf("| CronJobs due in one minute | Jobs created | skew p50 | skew p99 | last |\n|---|---|---|---|---|\n")
	b.printf("| %d | %d | %s | %s | %s |\n\n", n, len(first), secs(p50), secs(p99), secs(percentile(skews, 1)))
	b.printSteps(steps, rep.APIServerCPUSeconds, settle.Sub(due), n, size)
	return nil
}

// waitJobs waits until the audit log shows a Job created by user in ns at or after
// due for each of n owners (or timeout), and returns the first such creation per
// owner (when the API server answered it).
func (b *bench) waitJobs(ctx context.Context, user, ns string, suffixParts int, due time.Time, n int, timeout time.Duration) (map[string]time.Time, error) {
	first := map[string]time.Time{}
	err := poll(ctx, time.Until(due)+timeout, 500*time.Millisecond, "Jobs", func() (bool, error) {
		if err := b.w.audit.refresh(); err != nil {
			return false, err
		}
		for _, e := range b.w.audit.query(func(e *auditEvent) bool {
			return e.User.Username == user && e.Verb == "create" && e.resource() == "jobs" && e.namespace() == ns && e.ok() && !e.Done.Before(due)
		}) {
			owner := ownerOf(e.name(), suffixParts)
			if t, ok := first[owner]; !ok || e.Done.Before(t) {
				first[owner] = e.Done
			}
		}
		return len(first) >= n, nil
	})
	if err != nil && len(first) == 0 {
		return nil, err
	}
	if err != nil {
		b.logf("only %d of %d Jobs: %v", len(first), n, err)
	}
	return first, nil
}

// printSteps prints a burst's steps and the API server's CPU over it.
func (b *bench) printSteps(steps []report.Step, apiCPU float64, window time.Duration, n, size int) {
	if size > 0 {
		b.printf("One object after its run, as JSON (managedFields included): %d bytes.\n\n", size)
	}
	if apiCPU > 0 {
		b.printf("API server CPU from the due time over %s: %.2f s (%.1f ms per run, %.0f%% of its CPU).\n\n",
			secs(window), apiCPU, 1000*apiCPU/float64(max(1, n)), 100*apiCPU/window.Seconds())
	}
	b.printf("A run's steps, from the audit log:\n\n| step | runs | p50 | p99 |\n|---|---|---|---|\n")
	for _, st := range steps {
		b.printf("| %s | %d | %.3f s | %.3f s |\n", st.Name, st.Runs, st.P50Seconds, st.P99Seconds)
	}
	b.printf("\n")
}

// objectBytes is the size of one owner object as JSON, as the API server
// keeps it (managedFields included), or 0 when it cannot be read.
func (b *bench) objectBytes(ctx context.Context, obj client.Object, ns, name string) int {
	if err := b.w.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		b.logf("WARNING: size of %s/%s: %v", ns, name, err)
		return 0
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return 0
	}
	return len(data)
}

func skewsOf(first map[string]time.Time, due time.Time) []time.Duration {
	out := make([]time.Duration, 0, len(first))
	for _, t := range first {
		out = append(out, t.Sub(due))
	}
	return out
}

// guardedJobs measures the manager: N GuardedJobs due in the same minute.
func (b *bench) guardedJobs(ctx context.Context) error {
	n := b.n
	// Creating the objects and the manager's first pass over each (finalizer,
	// status) must end before the due time.
	due := nextDue(20*time.Second + time.Duration(n)*30*time.Millisecond)
	if err := parallel(ctx, n, b.writers, func(ctx context.Context, i int) error {
		return b.w.client.Create(ctx, guardedJob(nsGJ, fmt.Sprintf("gj-%d", i), cronSchedule(due)))
	}); err != nil {
		return fmt.Errorf("create guardedjobs: %w", err)
	}
	b.logf("GuardedJob: %d GuardedJobs due at %s", n, due.Format(time.TimeOnly))
	if err := b.waitIdle(ctx, nsGJ, n, time.Until(due)); err != nil {
		b.logf("WARNING: not every GuardedJob was reconciled before its due time: %v", err)
	}
	profiled := b.profileBurst(ctx, "guardedjob", due, true)
	time.Sleep(time.Until(due))
	before, err := procUsage(b.w.manager.PID())
	if err != nil {
		return err
	}
	cpu0, cpuErr := b.w.apiServerCPU()
	m0, err := b.w.scrape(ctx)
	if err != nil {
		return err
	}
	first, err := b.waitJobs(ctx, managerUser, nsGJ, 2, due, n, 5*time.Minute)
	if err != nil {
		return err
	}
	var last time.Time
	for _, t := range first {
		if t.After(last) {
			last = t
		}
	}
	skews := skewsOf(first, due)
	b.res.gjP50, b.res.gjP99, b.res.gjMissed, b.res.gjRuns = percentile(skews, 0.5), percentile(skews, 0.99), n-len(first), len(first)
	// The passes after the Job's creation (its UID into status) settle.
	settle := last.Add(5 * time.Second)
	time.Sleep(time.Until(settle))
	after, err := procUsage(b.w.manager.PID())
	if err != nil {
		return err
	}
	cpu1, cpuErr1 := b.w.apiServerCPU()
	m1, err := b.w.scrape(ctx)
	if err != nil {
		return err
	}
	if err := b.w.audit.refresh(); err != nil {
		return err
	}
	window := b.w.audit.query(between(managerUser, due.Add(-time.Second), settle))

	// Writes per run up to and including its Job's creation: the requests that
	// changed the GuardedJob (status or object) from its due time on, plus the Job.
	writesBefore := map[string]int{}
	for i := range window {
		e := &window[i]
		if !e.isWrite() || e.namespace() != nsGJ {
			continue
		}
		switch {
		case strings.HasPrefix(e.resource(), "guardedjobs"):
			if t, ok := first[e.name()]; ok && !e.Received.After(t) {
				writesBefore[e.name()]++
			}
		case e.resource() == "jobs" && e.Verb == "create":
			writesBefore[ownerOf(e.name(), 2)]++
		}
	}
	var counts []int
	for owner := range first {
		counts = append(counts, writesBefore[owner])
	}

	b.printf("\n### GuardedJob (the manager binary, N=%d due in one minute)\n\n", n)
	b.printf("| GuardedJobs due | Jobs created | skew p50 | skew p99 | last | floor (all N runs' writes) | p99 / floor | CronJob p99 / GuardedJob p99 |\n|---|---|---|---|---|---|---|---|\n")
	ratioCron := "-"
	if b.res.cronP99 > 0 && b.res.gjP99 > 0 {
		ratioCron = fmt.Sprintf("%.1fx", float64(b.res.cronP99)/float64(b.res.gjP99))
	}
	ratioFloor := "-"
	if b.res.floor > 0 {
		ratioFloor = fmt.Sprintf("%.2f", float64(b.res.gjP99)/float64(b.res.floor))
	}
	b.printf("| %d | %d | %s | %s | %s | %s | %s | %s |\n\n", n, len(first), secs(b.res.gjP50), secs(b.res.gjP99), secs(percentile(skews, 1)),
		secs(b.res.floor), ratioFloor, ratioCron)
	gjRep := &report.GuardedJob{Due: n, Created: len(first), P50Seconds: b.res.gjP50.Seconds(), P99Seconds: b.res.gjP99.Seconds(),
		LastSeconds: percentile(skews, 1).Seconds(), RequestsPerRun: map[string]float64{}, WindowSeconds: settle.Sub(due).Seconds()}
	b.rep.GuardedJob = gjRep
	if len(counts) > 0 {
		gjRep.WritesPerRun = spreadOf(counts)
		b.printf("API writes per run up to and including its Job's creation (events aside): min %d, median %d, max %d.\n\n",
			gjRep.WritesPerRun.Min, gjRep.WritesPerRun.Median, gjRep.WritesPerRun.Max)
	}
	profiled()
	steps, started := runSteps(window, due, runShape{ns: nsGJ, jobSuffix: 2, status: "guardedjobs/status", gated: true, controller: "the rest of the pass"})
	if len(started) > 0 {
		starts := skewsOf(started, due)
		gjRep.StartP50Seconds, gjRep.StartP99Seconds = percentile(starts, 0.5).Seconds(), percentile(starts, 0.99).Seconds()
		gjRep.StartLastSeconds = percentile(starts, 1).Seconds()
		b.printf("Each run's Job could start (its gate opened) at: p50 %s, p99 %s, last %s after the due time (%d runs).\n\n",
			secs(percentile(starts, 0.5)), secs(percentile(starts, 0.99)), secs(percentile(starts, 1)), len(started))
		// Writes to each run's GuardedJob from its due time until its Job could
		// start: the early gate makes none, the default order one (the record).
		crd := map[string]int{}
		for i := range window {
			e := &window[i]
			if t, ok := started[e.name()]; ok && e.isWrite() && e.namespace() == nsGJ && strings.HasPrefix(e.resource(), "guardedjobs") &&
				!e.Received.Before(due) && e.Received.Before(t) {
				crd[e.name()]++
			}
		}
		var before []int
		for owner := range started {
			before = append(before, crd[owner])
		}
		w := spreadOf(before)
		gjRep.CRDWritesBeforeStart = &w
		b.printf("Writes to a run's GuardedJob before its Job could start: min %d, median %d, max %d.\n\n", w.Min, w.Median, w.Max)
	}
	gjRep.Steps = steps
	if cpuErr == nil && cpuErr1 == nil {
		gjRep.APIServerCPUSeconds = (cpu1 - cpu0).Seconds()
	}
	passes := sumMetric(m1, "controller_runtime_reconcile_time_seconds_count", `controller="guardedjob"`) - sumMetric(m0, "controller_runtime_reconcile_time_seconds_count", `controller="guardedjob"`)
	if passes > 0 {
		gjRep.PassSeconds = (sumMetric(m1, "controller_runtime_reconcile_time_seconds_sum", `controller="guardedjob"`) -
			sumMetric(m0, "controller_runtime_reconcile_time_seconds_sum", `controller="guardedjob"`)) / passes
		b.printf("One pass of the manager in the burst took %.3f s on average (%0.f passes).\n\n", gjRep.PassSeconds, passes)
	}
	gjRep.ObjectBytes = b.objectBytes(ctx, &batchv1alpha1.GuardedJob{}, nsGJ, "gj-0")
	b.printSteps(steps, gjRep.APIServerCPUSeconds, settle.Sub(due), n, gjRep.ObjectBytes)
	b.printf("Manager requests from the due time to 5 s after the last Job, per run (%s):\n\n| verb resource | total | per run |\n|---|---|---|\n",
		secs(settle.Sub(due)))
	verbs := byVerb(window)
	keys := make([]string, 0, len(verbs))
	for k := range verbs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		perRun := float64(verbs[k]) / float64(max(1, len(first)))
		gjRep.RequestsPerRun[k] = perRun
		b.printf("| %s | %d | %.2f |\n", k, verbs[k], perRun)
	}
	reconciles := sumMetric(m1, "controller_runtime_reconcile_total", `controller="guardedjob"`) - sumMetric(m0, "controller_runtime_reconcile_total", `controller="guardedjob"`)
	b.printf("\nManager: %.2f CPU seconds from the due time to 5 s after the last Job, peak RSS %s (since start), %.0f reconciles (%.1f per run).\n",
		(after.CPU - before.CPU).Seconds(), mib(after.Peak), reconciles, reconciles/float64(max(1, len(first))))
	gjRep.CPUSeconds, gjRep.PeakRSSBytes, gjRep.ReconcilesPerRun = (after.CPU - before.CPU).Seconds(), after.Peak, reconciles/float64(max(1, len(first)))

	// Each run's Job UID is recorded in the pass after its creation, queued
	// behind the runs due at the same time: measure renewals once all are.
	recorded, err := b.waitRecorded(ctx, nsGJ, n, 2*time.Minute)
	if err != nil {
		return err
	}
	b.printf("\nEvery run's Job recorded in its status %s after the due time.\n", secs(recorded.Sub(due)))
	gjRep.RecordedAfterSeconds = recorded.Sub(due).Seconds()

	// No API request per renewal: two renew intervals with every run active,
	// once the events of the burst (paced by --event-qps) have all gone out.
	if err := b.waitEventsSent(ctx, 3*time.Minute); err != nil {
		b.logf("WARNING: %v", err)
	}
	r0, _ := b.w.scrape(ctx)
	from := time.Now()
	time.Sleep(2*benchInterval + time.Second)
	to := time.Now()
	r1, _ := b.w.scrape(ctx)
	_ = b.w.audit.refresh()
	quiet := b.w.audit.query(between(managerUser, from, to))
	writes := 0
	for i := range quiet {
		if quiet[i].isWrite() {
			writes++
		}
	}
	renewed := sumMetric(r1, "guardedjob_lease_renewals_total", `result="ok"`) - sumMetric(r0, "guardedjob_lease_renewals_total", `result="ok"`)
	b.printf("\nRenewals: %.0f leases renewed in %s with %d active runs; API requests meanwhile: %d (%d writes).\n",
		renewed, secs(to.Sub(from)), len(first), len(quiet), writes)
	gjRep.Renewals, gjRep.RenewWindowSeconds, gjRep.RequestsRenewing = int(renewed), to.Sub(from).Seconds(), len(quiet)
	return nil
}

// waitEventsSent waits until the audit log shows no event the manager sent in the
// last 3 s.
func (b *bench) waitEventsSent(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, timeout, time.Second, "the manager's events to be sent", func() (bool, error) {
		if err := b.w.audit.refresh(); err != nil {
			return false, err
		}
		recent := b.w.audit.query(func(e *auditEvent) bool {
			return e.User.Username == managerUser && e.resource() == "events" && time.Since(e.Received) < 3*time.Second
		})
		return len(recent) == 0, nil
	})
}

// waitIdle waits until the manager has written the status of n GuardedJobs in ns
// (its first pass over each sets the next schedule time). It reads the audit log,
// so waiting adds no load on the API server.
func (b *bench) waitIdle(ctx context.Context, ns string, n int, timeout time.Duration) error {
	return poll(ctx, timeout, time.Second, fmt.Sprintf("%d GuardedJobs reconciled", n), func() (bool, error) {
		if err := b.w.audit.refresh(); err != nil {
			return false, err
		}
		seen := map[string]bool{}
		for _, e := range b.w.audit.query(func(e *auditEvent) bool {
			return e.User.Username == managerUser && e.namespace() == ns && e.resource() == "guardedjobs/status" && e.isWrite() && e.ok()
		}) {
			seen[e.name()] = true
		}
		return len(seen) >= n, nil
	})
}

// idle adds M GuardedJobs due months from now to the active runs, and measures the
// manager at rest.
func (b *bench) idle(ctx context.Context) error {
	m := b.idleN
	if err := parallel(ctx, m, b.writers, func(ctx context.Context, i int) error {
		return b.w.client.Create(ctx, guardedJob(nsIdle, fmt.Sprintf("idle-%d", i), "0 0 1 1 *"))
	}); err != nil {
		return fmt.Errorf("create idle guardedjobs: %w", err)
	}
	if err := b.waitIdle(ctx, nsIdle, m, 10*time.Minute); err != nil {
		return err
	}
	time.Sleep(10 * time.Second)
	u0, _ := procUsage(b.w.manager.PID())
	m0, _ := b.w.scrape(ctx)
	from := time.Now()
	time.Sleep(b.idleWindow)
	to := time.Now()
	u1, _ := procUsage(b.w.manager.PID())
	m1, _ := b.w.scrape(ctx)
	_ = b.w.audit.refresh()
	reqs := b.w.audit.query(between(managerUser, from, to))
	writes := 0
	for i := range reqs {
		if reqs[i].isWrite() {
			writes++
		}
	}
	reconciles := sumMetric(m1, "controller_runtime_reconcile_total", `controller="guardedjob"`) - sumMetric(m0, "controller_runtime_reconcile_total", `controller="guardedjob"`)
	cpu := u1.CPU - u0.CPU
	b.printf("\n### At rest: %d idle GuardedJobs + %d active runs\n\n", m, b.res.gjRuns)
	b.printf("| window | manager CPU | CPU share of one core | reconciles | API requests (writes) | RSS | peak RSS |\n|---|---|---|---|---|---|---|\n")
	b.printf("| %s | %.2f s | %.1f%% | %.0f | %d (%d) | %s | %s |\n", secs(to.Sub(from)), cpu.Seconds(),
		100*cpu.Seconds()/to.Sub(from).Seconds(), reconciles, len(reqs), writes, mib(u1.RSS), mib(u1.Peak))
	b.rep.AtRest = &report.AtRest{Idle: m, Active: b.res.gjRuns, WindowSeconds: to.Sub(from).Seconds(), CPUSeconds: cpu.Seconds(),
		Reconciles: int(reconciles), Requests: len(reqs), Writes: writes, RSSBytes: u1.RSS, PeakRSSBytes: u1.Peak, Series: len(m1)}
	return nil
}

// stop kills Redis under the active runs and measures when the manager issues the
// deletes of every Job and Pod, against each lease's expiry as Redis had it.
func (b *bench) stop(ctx context.Context) error {
	jobs := &batchv1.JobList{}
	if err := b.w.client.List(ctx, jobs, client.InNamespace(nsGJ)); err != nil {
		return err
	}
	n := len(jobs.Items)
	// Play the Job controller: one Pod per Job, as it would label it.
	if err := parallel(ctx, n, b.writers, func(ctx context.Context, i int) error {
		job := &jobs.Items[i]
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: job.Name + "-pod", Namespace: nsGJ,
				Labels: map[string]string{
					batchv1.JobNameLabel:          job.Name,
					batchv1alpha1.GuardedJobLabel: job.Labels[batchv1alpha1.GuardedJobLabel],
				},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
			},
			Spec: *job.Spec.Template.Spec.DeepCopy(),
		}
		pod.Spec.NodeName = "bench-node"
		return b.w.client.Create(ctx, pod)
	}); err != nil {
		return fmt.Errorf("create pods: %w", err)
	}
	// Let the manager's cache see the Pods.
	time.Sleep(5 * time.Second)

	// Each lease's expiry as Redis has it, read just before the kill.
	rdb := redis.NewClient(&redis.Options{Addr: b.w.redis.addr})
	defer func() { _ = rdb.Close() }()
	read := time.Now()
	pipe := rdb.Pipeline()
	pttls := map[string]*redis.DurationCmd{}
	for i := range jobs.Items {
		owner := jobs.Items[i].Labels[batchv1alpha1.GuardedJobLabel]
		pttls[jobs.Items[i].Name] = pipe.PTTL(ctx, nsGJ+":"+owner)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("read lease expiries: %w", err)
	}
	expiry := map[string]time.Time{}
	for name, c := range pttls {
		if d := c.Val(); d > 0 {
			expiry[name] = read.Add(d)
		}
	}
	killed := time.Now()
	b.w.redis.Kill()
	b.logf("Stop: Redis killed with %d runs active (%d leases read)", n, len(expiry))

	podDel, jobDel := map[string]time.Time{}, map[string]time.Time{}
	err := poll(ctx, benchTTL+10*time.Second, 250*time.Millisecond, "every Job and Pod deleted", func() (bool, error) {
		if err := b.w.audit.refresh(); err != nil {
			return false, err
		}
		for _, e := range b.w.audit.query(between(managerUser, killed, killed.Add(time.Hour))) {
			if e.Verb != "delete" || e.namespace() != nsGJ {
				continue
			}
			var m map[string]time.Time
			name := e.name()
			switch e.resource() {
			case "pods":
				m, name = podDel, strings.TrimSuffix(name, "-pod")
			case "jobs":
				m = jobDel
			default:
				continue
			}
			if t, ok := m[name]; !ok || e.Received.Before(t) {
				m[name] = e.Received
			}
		}
		return len(podDel) >= n && len(jobDel) >= n, nil
	})
	if err != nil {
		b.logf("Stop: %v", err)
	}
	var lastPod, lastJob time.Time
	minMargin, maxLate := time.Duration(1<<62), time.Duration(-1<<62)
	var earliestExpiry time.Time
	for name, exp := range expiry {
		if earliestExpiry.IsZero() || exp.Before(earliestExpiry) {
			earliestExpiry = exp
		}
		p, okP := podDel[name]
		j, okJ := jobDel[name]
		if !okP || !okJ {
			continue
		}
		lastPod, lastJob = maxTime(lastPod, p), maxTime(lastJob, j)
		issued := maxTime(p, j)
		// The Pods get benchGrace to stop; the lease must outlive that.
		minMargin = min(minMargin, exp.Sub(issued)-benchGrace)
		// The self-fence deadline as the keeper computes it (from the renewal's
		// send time, which is no later than Redis' own expiry less the ttl).
		maxLate = max(maxLate, issued.Sub(exp.Add(-benchGrace-stopMargin)))
	}
	b.printf("\n### Mass stop: %d active runs, Redis killed (ttl %s, renewInterval %s, Pod grace %s)\n\n", n, benchTTL, benchInterval, benchGrace)
	b.printf("| runs | Jobs deleted | Pods deleted | last Job delete | last Pod delete | earliest lease expiry | latest delete after its self-fence deadline (budget %s) | smallest margin (lease expiry - delete - Pod grace) |\n|---|---|---|---|---|---|---|---|\n", stopMargin)
	since := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return "+" + secs(t.Sub(killed))
	}
	b.printf("| %d | %d | %d | %s | %s | %s | %s | %s |\n", n, len(jobDel), len(podDel), since(lastJob), since(lastPod), since(earliestExpiry),
		secs(maxLate), secs(minMargin))
	after := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return t.Sub(killed).Seconds()
	}
	b.rep.Stop = &report.Stop{Runs: n, JobsDeleted: len(jobDel), PodsDeleted: len(podDel),
		LastJobSeconds: after(lastJob), LastPodSeconds: after(lastPod), EarliestExpirySecs: after(earliestExpiry),
		LatestLateSeconds: maxLate.Seconds(), SmallestMarginSecs: minMargin.Seconds(), BudgetSeconds: stopMargin.Seconds(),
		TTLSeconds: benchTTL.Seconds(), RenewIntervalSecs: benchInterval.Seconds(), PodGraceSeconds: benchGrace.Seconds()}
	b.printf("\n(times after the kill; expiries from each key's PTTL read just before it)\n")
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// waitRecorded waits until n GuardedJobs in ns each have one active run whose
// Job UID is recorded, and returns when that was seen.
func (b *bench) waitRecorded(ctx context.Context, ns string, n int, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	for {
		list := &batchv1alpha1.GuardedJobList{}
		if err := b.w.client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return time.Time{}, err
		}
		recorded := 0
		for i := range list.Items {
			if a := list.Items[i].Status.Active; len(a) == 1 && a[0].JobUID != "" {
				recorded++
			}
		}
		if recorded >= n {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%d of %d runs recorded their Job within %s", recorded, n, within)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// spreadOf is the minimum, median and maximum of counts (not empty), which it
// sorts.
func spreadOf(counts []int) report.Spread {
	sort.Ints(counts)
	return report.Spread{Min: counts[0], Median: counts[len(counts)/2], Max: counts[len(counts)-1]}
}
