package controllers

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

var (
	runsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "guardedjob_runs_total",
		Help: "Runs that ended, by status.lastRun.result (Succeeded, Failed, LockLost, Busy, StoreUnavailable, MaxHoldExceeded, Skipped).",
	}, []string{"result"})

	leasesDesc    = prometheus.NewDesc("guardedjob_leases", "Leases the keeper tracks, by state (Held, Failing, Lost).", []string{"state"}, nil)
	renewalsDesc  = prometheus.NewDesc("guardedjob_lease_renewals_total", "Lease renewals by outcome (ok, lost, store_error).", []string{"result"}, nil)
	pipelinesDesc = prometheus.NewDesc("guardedjob_lease_renewal_pipelines_total", "Round trips the keeper made to renew leases.", nil, nil)
	// Per GuardedJob, and only while renewals fail: a healthy GuardedJob has no
	// series, so thousands of them cost nothing here.
	failingDesc = prometheus.NewDesc("guardedjob_failing_leases",
		"Leases of the GuardedJob whose renewals are failing (the lock store does not answer); absent while none is.", objectLabels, nil)

	keeperMetrics = &keeperCollector{}
	registerOnce  sync.Once
)

// keeperCollector reads the keeper's state at scrape time, so renewals cost no
// metric updates.
type keeperCollector struct {
	mu     sync.Mutex
	keeper *lockclient.Keeper
}

func (c *keeperCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- leasesDesc
	ch <- renewalsDesc
	ch <- pipelinesDesc
	ch <- failingDesc
}

func (c *keeperCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	k := c.keeper
	c.mu.Unlock()
	if k == nil {
		return
	}
	counts := map[lockclient.LeaseState]int{lockclient.StateHeld: 0, lockclient.StateFailing: 0, lockclient.StateLost: 0}
	failing := map[types.NamespacedName]int{}
	for _, st := range k.Snapshot() {
		counts[st.State]++
		if st.State == lockclient.StateFailing {
			if obj, _, ok := parseOwner(st.Owner); ok {
				failing[obj]++
			}
		}
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(leasesDesc, prometheus.GaugeValue, float64(n), string(state))
	}
	for obj, n := range failing {
		ch <- prometheus.MustNewConstMetric(failingDesc, prometheus.GaugeValue, float64(n), obj.Namespace, obj.Name)
	}
	s := k.Stats()
	ch <- prometheus.MustNewConstMetric(renewalsDesc, prometheus.CounterValue, float64(s.RenewalsOK), "ok")
	ch <- prometheus.MustNewConstMetric(renewalsDesc, prometheus.CounterValue, float64(s.RenewalsLost), "lost")
	ch <- prometheus.MustNewConstMetric(renewalsDesc, prometheus.CounterValue, float64(s.RenewalsFailed), "store_error")
	ch <- prometheus.MustNewConstMetric(pipelinesDesc, prometheus.CounterValue, float64(s.Pipelines))
}

// registerMetrics exposes the keeper's state and the GuardedJobs' status (read
// from cache, while this manager is the leader: elected) on the manager's metrics
// endpoint.
func registerMetrics(k *lockclient.Keeper, cache client.Reader, elected <-chan struct{}) error {
	keeperMetrics.mu.Lock()
	keeperMetrics.keeper = k
	keeperMetrics.mu.Unlock()
	if k != nil {
		k.OnRoundTrip(func(d time.Duration) { renewLatency.Observe(d.Seconds()) })
	}
	guardedJobMetrics.use(cache, elected)
	var err error
	registerOnce.Do(func() {
		for _, c := range managerCollectors() {
			if e := metrics.Registry.Register(c); e != nil && !errors.As(e, &prometheus.AlreadyRegisteredError{}) {
				err = e
			}
		}
	})
	return err
}

// managerCollectors are the collectors of every metric the manager adds to
// controller-runtime's (config/prometheus/metrics.txt lists them).
func managerCollectors() []prometheus.Collector {
	return []prometheus.Collector{runsTotal, keeperMetrics, guardedJobMetrics, scheduleSkew, renewLatency, stopLatency, lockWait}
}

// Per-GuardedJob metrics. Their only labels are the object's namespace and name
// (and a small enum: result, state): never a rendered key, a holder or a token.
// The histograms carry no per-object labels: a histogram per object would cost a
// dozen series per bucket set for each of thousands of objects, and the gauges
// below already say which object is late or failing.

var (
	scheduleSkew = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "guardedjob_schedule_skew_seconds",
		Help:    "How long after a run was due (its scheduled time, or a run-now trigger's time) its Job was created.",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
	})
	renewLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "guardedjob_lease_renewal_duration_seconds",
		Help:    "Round-trip time of the keeper's renewal pipelines to the lock store (one observation per pipeline, which renews up to many leases).",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
	})
	stopLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "guardedjob_stop_latency_seconds",
		Help:    "Time from the keeper finding a lease lost (cause lost) or reaching a run's self-fence deadline (cause deadline) to the stop controller deleting the run's Job.",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
	}, []string{"cause"})
	lockWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "guardedjob_lock_wait_seconds",
		Help:    "onBusy Retry: how long a run that found its lock busy waited, from when it was due until it acquired the lock (outcome acquired) or gave up at its starting deadline (outcome gave_up).",
		Buckets: []float64{1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
	}, []string{"outcome"})
)

// lockWait outcomes.
const (
	lockWaitAcquired = "acquired"
	lockWaitGaveUp   = "gave_up"
)

func observeScheduleSkew(d time.Duration) { scheduleSkew.Observe(max(d, 0).Seconds()) }

func observeLockWait(outcome string, d time.Duration) {
	lockWait.WithLabelValues(outcome).Observe(max(d, 0).Seconds())
}

var (
	objectLabels = []string{"namespace", "name"}

	createdDesc = prometheus.NewDesc("guardedjob_created_time_seconds",
		"When the GuardedJob was created (Unix seconds): with no success yet, how long it has gone without one.", objectLabels, nil)
	lastScheduleDesc = prometheus.NewDesc("guardedjob_last_schedule_time_seconds",
		"status.lastScheduleTime: the scheduled time of the last run started or attempted (Unix seconds).", objectLabels, nil)
	nextScheduleDesc = prometheus.NewDesc("guardedjob_next_schedule_time_seconds",
		"status.nextScheduleTime: when the next run is due (Unix seconds); absent while suspended or invalid.", objectLabels, nil)
	lastSuccessDesc = prometheus.NewDesc("guardedjob_last_success_time_seconds",
		"status.lastSuccessfulTime: when the last successful run's Job completed (Unix seconds); absent before the first success.", objectLabels, nil)
	fenceDesc = prometheus.NewDesc("guardedjob_fence",
		"status.lastFence: the highest fence handed out to a run of the GuardedJob.", objectLabels, nil)
	lockStateDesc = prometheus.NewDesc("guardedjob_lock_state",
		"status.lock.state: 1 for the state last observed (Held, Free, Busy, Lost, StoreDown), 0 for the others.", append(objectLabels, "state"), nil)
	objectRunsDesc = prometheus.NewDesc("guardedjob_object_runs_total",
		"Runs of the GuardedJob that ended, by status.lastRun.result, counted by this manager since it became the leader; a result appears with its first run.", append(objectLabels, "result"), nil)
	busyInARowDesc = prometheus.NewDesc("guardedjob_busy_runs_in_a_row",
		"Runs of the GuardedJob that ended Busy since the last one that ran or failed to, or whose occurrence another cluster's run was then found to have done (Skipped runs leave it as it is), counted by this manager since it became the leader; absent while 0.", objectLabels, nil)
	abandonedDesc = prometheus.NewDesc("guardedjob_occurrences_abandoned_total",
		"Occurrences of the GuardedJob whose tries (spec.retryOccurrence) stopped with no cluster sharing the lock store having done them, since the manager started.", objectLabels, nil)
	busyDoneElsewhereDesc = prometheus.NewDesc("guardedjob_busy_runs_done_elsewhere_total",
		"Runs of the GuardedJob that ended Busy because a run of the GuardedJob of the same name in another cluster held the lock, and whose occurrence that run then completed (its done-marker found), counted by this manager since it became the leader; appears with the first.", objectLabels, nil)
	lastOccurrenceDoneDesc = prometheus.NewDesc("guardedjob_last_occurrence_done_time_seconds",
		"status.lastOccurrenceDone.at: when the latest occurrence known done in any cluster sharing the lock store was done (this cluster's Job's completion, or when this cluster found another's done-marker; Unix seconds); absent before the first.", objectLabels, nil)

	bufferedDesc = prometheus.NewDesc("guardedjob_buffered_runs",
		"len(status.buffered): runs waiting for an active run to end (concurrencyPolicy BufferOne, BufferAll).", objectLabels, nil)
	backfillRemainingDesc = prometheus.NewDesc("guardedjob_backfill_remaining",
		"status.backfill.remaining: occurrences the running backfill has still to run; absent while no backfill runs.", objectLabels, nil)

	failedInARowDesc = prometheus.NewDesc("guardedjob_failed_runs_in_a_row",
		"status.consecutiveFailures: runs of the GuardedJob in a row that failed on their own (the Job failed, MaxHoldExceeded, and the causes spec.failurePolicy.alsoCount adds); absent while 0.", objectLabels, nil)
	suspendedAfterFailuresDesc = prometheus.NewDesc("guardedjob_suspended_after_failures",
		"1 while the GuardedJob is paused by its failure policy (status.pause after spec.failurePolicy.suspendAfter failed runs in a row); absent otherwise.", objectLabels, nil)

	// As kube-state-metrics has them for CronJobs (kube_cronjob_info,
	// kube_cronjob_spec_suspend, kube_cronjob_status_active). The info labels are
	// spec fields that are no key: never the lock key template, which may be the
	// key itself.
	infoDesc = prometheus.NewDesc("guardedjob_info",
		"Always 1: the GuardedJob's schedule, time zone, concurrency policy and store (store_ref: the spec.lock.storeRef Secret; empty for the manager's store), to join on namespace and name.",
		append(objectLabels, "schedule", "timezone", "concurrency_policy", "store_ref"), nil)
	suspendDesc = prometheus.NewDesc("guardedjob_spec_suspend",
		"spec.suspend: 1 while the manifest suspends the GuardedJob, 0 otherwise (guardedjob_suspended also counts a pause in status).", objectLabels, nil)
	suspendedDesc = prometheus.NewDesc("guardedjob_suspended",
		"status.suspended: 1 while no new runs are scheduled (spec.suspend, or a pause in status.pause: the failure policy's or a request's), 0 otherwise.", objectLabels, nil)
	activeDesc = prometheus.NewDesc("guardedjob_status_active",
		"Runs of the GuardedJob in flight (status.active).", objectLabels, nil)

	lockStates = []batchv1alpha1.LockState{batchv1alpha1.LockStateHeld, batchv1alpha1.LockStateFree, batchv1alpha1.LockStateBusy,
		batchv1alpha1.LockStateLost, batchv1alpha1.LockStateStoreDown}
	runResults = []batchv1alpha1.RunResult{batchv1alpha1.RunResultSucceeded, batchv1alpha1.RunResultFailed, batchv1alpha1.RunResultLockLost,
		batchv1alpha1.RunResultBusy, batchv1alpha1.RunResultStoreUnavailable, batchv1alpha1.RunResultMaxHoldExceeded, batchv1alpha1.RunResultSkipped}

	guardedJobMetrics = &guardedJobCollector{runs: map[types.NamespacedName]*objectRuns{}}
)

// guardedJobCollector computes the per-GuardedJob series at scrape time from the
// manager's informer cache, instead of setting gauges from reconcile passes:
//   - a scrape costs one pass over the cached objects (no copies) every scrape
//     interval, whatever happens between scrapes; setting gauges would cost work
//     on every pass of every object, and 5,000 objects pass far more often than
//     Prometheus scrapes;
//   - the series are the status users see with kubectl, never a value a failed
//     status write left behind;
//   - a deleted GuardedJob leaves the cache, so its series go with it: nothing
//     must remember to delete them, and no series leaks.
//
// Only the run counters live in memory (status keeps the last result, not a
// count); they are emitted for the objects in the cache only, and forgotten
// with the object. Series come from the leader only: a standby replica's cache
// holds the same objects and would duplicate every series.
type guardedJobCollector struct {
	mu      sync.Mutex
	reader  client.Reader
	elected <-chan struct{}
	runs    map[types.NamespacedName]*objectRuns
}

// objectRuns counts the runs of one GuardedJob (of one UID: an object deleted
// and created again under its name starts from zero).
type objectRuns struct {
	uid    types.UID
	counts map[batchv1alpha1.RunResult]uint64
	// busyInARow counts Busy results since the last result that says the lock
	// was had or tried for real; Skipped (already done, Forbid, a stale trigger)
	// says nothing about the lock and leaves it alone. A Busy run whose
	// occurrence another cluster then completed ends the streak too.
	busyInARow uint64
	// busyDoneElsewhere counts Busy runs whose occurrence another cluster's run
	// completed.
	busyDoneElsewhere uint64
	// abandoned counts occurrences whose tries stopped with no cluster having
	// done them (spec.retryOccurrence).
	abandoned uint64
}

// collectTimeout bounds a scrape's read of the cache (it only waits while the
// cache has not synced yet).
const collectTimeout = 5 * time.Second

func (c *guardedJobCollector) use(reader client.Reader, elected <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reader, c.elected = reader, elected
	c.runs = map[types.NamespacedName]*objectRuns{}
}

// countRun counts a run of gj that ended with result.
func (c *guardedJobCollector) countRun(gj *batchv1alpha1.GuardedJob, result batchv1alpha1.RunResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(gj)
	e.counts[result]++
	switch result {
	case batchv1alpha1.RunResultBusy:
		e.busyInARow++
	case batchv1alpha1.RunResultSkipped:
	default:
		e.busyInARow = 0
	}
}

// busyRunDoneElsewhere counts a Busy run of gj whose occurrence a run of another
// cluster completed: the two clusters raced for it, and the lock is not out of
// reach, so the busy streak ends.
func (c *guardedJobCollector) busyRunDoneElsewhere(gj *batchv1alpha1.GuardedJob) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(gj)
	e.busyDoneElsewhere++
	e.busyInARow = 0
}

// occurrenceAbandoned counts an occurrence of gj whose tries stopped with no
// cluster having done it.
func (c *guardedJobCollector) occurrenceAbandoned(gj *batchv1alpha1.GuardedJob) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entry(gj).abandoned++
}

// entry returns the counters of gj, new for an object not counted yet (or
// created again under its name). c.mu is held.
func (c *guardedJobCollector) entry(gj *batchv1alpha1.GuardedJob) *objectRuns {
	key := types.NamespacedName{Namespace: gj.Namespace, Name: gj.Name}
	e := c.runs[key]
	if e == nil || e.uid != gj.UID {
		e = &objectRuns{uid: gj.UID, counts: map[batchv1alpha1.RunResult]uint64{}}
		c.runs[key] = e
	}
	return e
}

// forget drops the counters of a GuardedJob that is gone.
func (c *guardedJobCollector) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.runs, key)
}

func (c *guardedJobCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{createdDesc, lastScheduleDesc, nextScheduleDesc, lastSuccessDesc, fenceDesc, lockStateDesc, objectRunsDesc, busyInARowDesc,
		infoDesc, suspendDesc, suspendedDesc, activeDesc, bufferedDesc, backfillRemainingDesc, failedInARowDesc, suspendedAfterFailuresDesc, busyDoneElsewhereDesc, abandonedDesc, lastOccurrenceDoneDesc} {
		ch <- d
	}
}

func (c *guardedJobCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	reader, elected := c.reader, c.elected
	c.mu.Unlock()
	if reader == nil || !closed(elected) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	list := &batchv1alpha1.GuardedJobList{}
	if err := reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return // the scrape goes on with the manager's other metrics
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Counters of objects that are gone (or are another object now) go.
	live := make(map[types.NamespacedName]bool, len(c.runs))
	for i := range list.Items {
		gj := &list.Items[i]
		key := types.NamespacedName{Namespace: gj.Namespace, Name: gj.Name}
		if e := c.runs[key]; e != nil && e.uid == gj.UID {
			live[key] = true
		}
	}
	for key := range c.runs {
		if !live[key] {
			delete(c.runs, key)
		}
	}
	for i := range list.Items {
		gj := &list.Items[i] // shared with the cache: read only
		// The object's two label pairs, shared by all its series (labels sort
		// by name: name, namespace, then result or state).
		obj := []*dto.LabelPair{{Name: ptr.To("name"), Value: ptr.To(gj.Name)}, {Name: ptr.To("namespace"), Value: ptr.To(gj.Namespace)}}
		st := &gj.Status
		ch <- gaugeOf(createdDesc, unixSeconds(gj.CreationTimestamp.Time), obj)
		var storeRef string
		if gj.Spec.Lock.StoreRef != nil {
			storeRef = gj.Spec.Lock.StoreRef.Name
		}
		ch <- gaugeOf(infoDesc, 1, []*dto.LabelPair{ // sorted by name
			{Name: ptr.To("concurrency_policy"), Value: ptr.To(string(gj.Spec.ConcurrencyPolicyOrDefault()))},
			obj[0], obj[1],
			{Name: ptr.To("schedule"), Value: ptr.To(gj.Spec.Schedule)},
			{Name: ptr.To("store_ref"), Value: ptr.To(storeRef)},
			{Name: ptr.To("timezone"), Value: ptr.To(gj.Spec.TimeZoneOrDefault())},
		})
		ch <- gaugeOf(suspendDesc, boolFloat(gj.Spec.Suspended()), obj)
		ch <- gaugeOf(suspendedDesc, boolFloat(st.Suspended), obj)
		ch <- gaugeOf(activeDesc, float64(len(st.Active)), obj)
		ch <- gaugeOf(bufferedDesc, float64(len(st.Buffered)), obj)
		if b := st.Backfill; b != nil && b.State == batchv1alpha1.BackfillRunning {
			ch <- gaugeOf(backfillRemainingDesc, float64(b.Remaining), obj)
		}
		if st.LastScheduleTime != nil {
			ch <- gaugeOf(lastScheduleDesc, unixSeconds(st.LastScheduleTime.Time), obj)
		}
		if st.NextScheduleTime != nil {
			ch <- gaugeOf(nextScheduleDesc, unixSeconds(st.NextScheduleTime.Time), obj)
		}
		if st.LastSuccessfulTime != nil {
			ch <- gaugeOf(lastSuccessDesc, unixSeconds(st.LastSuccessfulTime.Time), obj)
		}
		if st.LastOccurrenceDone != nil {
			ch <- gaugeOf(lastOccurrenceDoneDesc, unixSeconds(st.LastOccurrenceDone.At.Time), obj)
		}
		ch <- gaugeOf(fenceDesc, float64(st.LastFence), obj)
		if st.ConsecutiveFailures > 0 {
			ch <- gaugeOf(failedInARowDesc, float64(st.ConsecutiveFailures), obj)
		}
		if p := st.Pause; p != nil && runcore.PauseReason(p) == batchv1alpha1.TooManyFailuresReason {
			ch <- gaugeOf(suspendedAfterFailuresDesc, 1, obj)
		}
		var state batchv1alpha1.LockState
		if st.Lock != nil {
			state = st.Lock.State
		}
		for j, s := range lockStates {
			ch <- gaugeOf(lockStateDesc, boolFloat(s == state), append(obj[:2:2], statePairs[j]))
		}
		// Counters only once they count: a run's result appears with its first
		// run, a busy streak while it lasts.
		e := c.runs[types.NamespacedName{Namespace: gj.Namespace, Name: gj.Name}]
		if e == nil || e.uid != gj.UID {
			continue
		}
		for j, res := range runResults {
			if n := e.counts[res]; n > 0 {
				ch <- &seriesMetric{desc: objectRunsDesc, labels: append(obj[:2:2], resultPairs[j]), value: float64(n), counter: true}
			}
		}
		if e.busyInARow > 0 {
			ch <- gaugeOf(busyInARowDesc, float64(e.busyInARow), obj)
		}
		if e.busyDoneElsewhere > 0 {
			ch <- &seriesMetric{desc: busyDoneElsewhereDesc, labels: obj, value: float64(e.busyDoneElsewhere), counter: true}
		}
		if e.abandoned > 0 {
			ch <- &seriesMetric{desc: abandonedDesc, labels: obj, value: float64(e.abandoned), counter: true}
		}
	}
}

// statePairs and resultPairs are the state and result label pairs, shared by
// every object's series.
var (
	statePairs  = labelPairs("state", lockStates)
	resultPairs = labelPairs("result", runResults)
)

func labelPairs[T ~string](name string, values []T) []*dto.LabelPair {
	out := make([]*dto.LabelPair, len(values))
	for i, v := range values {
		out[i] = &dto.LabelPair{Name: ptr.To(name), Value: ptr.To(string(v))}
	}
	return out
}

// seriesMetric is one per-GuardedJob series. A scrape makes one for each of tens
// of thousands of series: its label pairs are built once per object and shared,
// where prometheus.MustNewConstMetric would check and build them for each
// series. The label values are the object's namespace and name (valid UTF-8,
// as the API server only stores such) and the fixed states and results.
type seriesMetric struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair // sorted by name; shared, never changed
	value   float64
	counter bool
}

func gaugeOf(d *prometheus.Desc, v float64, labels []*dto.LabelPair) *seriesMetric {
	return &seriesMetric{desc: d, labels: labels, value: v}
}

func (m *seriesMetric) Desc() *prometheus.Desc { return m.desc }

func (m *seriesMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	if m.counter {
		out.Counter = &dto.Counter{Value: &m.value}
	} else {
		out.Gauge = &dto.Gauge{Value: &m.value}
	}
	return nil
}

func closed(ch <-chan struct{}) bool {
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixMilli()) / 1000 }

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
