package controllers

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/guardedjob/guardedjob/internal/lockclient"
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
