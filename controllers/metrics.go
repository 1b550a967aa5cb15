package controllers

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
}

func (c *keeperCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	k := c.keeper
	c.mu.Unlock()
	if k == nil {
		return
	}
	counts := map[lockclient.LeaseState]int{lockclient.StateHeld: 0, lockclient.StateFailing: 0, lockclient.StateLost: 0}
	for _, st := range k.Snapshot() {
		counts[st.State]++
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(leasesDesc, prometheus.GaugeValue, float64(n), string(state))
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
		for _, c := range []prometheus.Collector{runsTotal, keeperMetrics, guardedJobMetrics, scheduleSkew, renewLatency, stopLatency, lockWait} {
			if e := metrics.Registry.Register(c); e != nil && !errors.As(e, &prometheus.AlreadyRegisteredError{}) {
				err = e
			}
		}
	})
	return err
}
