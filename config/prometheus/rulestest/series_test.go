package rulestest

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

const metricsList = "../metrics.txt"

// promParser parses expressions and series as Prometheus does.
var promParser = parser.NewParser(parser.Options{})

// family is a line of config/prometheus/metrics.txt: what the manager serves.
type family struct {
	kind   string
	labels []string
}

// exported returns the families of config/prometheus/metrics.txt, which
// controllers' tests keep equal to what the manager serves.
func exported(t *testing.T) map[string]family {
	t.Helper()
	f, err := os.Open(metricsList)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	out := map[string]family{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		out[fields[0]] = family{kind: fields[1], labels: fields[2:]}
	}
	NewWithT(t).Expect(sc.Err()).NotTo(HaveOccurred())
	NewWithT(t).Expect(out).NotTo(BeEmpty())
	return out
}

// familyOf returns the family a series name belongs to: itself, or for a
// histogram's _bucket, _sum and _count series the histogram. ok is false for a
// name the manager does not serve.
func familyOf(fams map[string]family, name string) (string, family, bool) {
	if f, ok := fams[name]; ok && f.kind != "histogram" {
		return name, f, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := fams[base]; ok && f.kind == "histogram" {
				if suffix == "_bucket" {
					f.labels = append(slices.Clone(f.labels), "le")
				}
				return base, f, true
			}
		}
	}
	return "", family{}, false
}

// targetLabels are the labels Prometheus adds to every series it scrapes from
// the manager (a per-GuardedJob series keeps its own namespace: honorLabels).
var targetLabels = []string{"job", "instance", "namespace", "pod", "service", "endpoint", "container"}

// Steps are binary fractions (0.25, not 0.2): "100+0.2x20 104x40" would step
// down from 104.00000000000001 to 104, a counter reset.
//
// Series in promqltest's load notation, one sample a minute from time 0: "0x9
// 1x5" is ten 0s (minutes 0 to 9), then six 1s; "_x20" is no sample for 20
// minutes (0 to 19); "stale" is the staleness marker Prometheus writes when a
// series ends.
//
// healthy is one cluster's manager on a good day, as its metrics endpoint
// serves it (without the target's labels, which decorate adds): renewals
// succeed, runs succeed. Two GuardedJobs: payments/settle in the manager's
// store and reports/daily in a store of its own (storeRef reports-redis); each
// runs every 10 minutes, its Job is created within a second, and it succeeds a
// minute later.
const healthy = `
up 1x60
controller_runtime_reconcile_errors_total{controller="guardedjob"} 0x60
controller_runtime_reconcile_total{controller="guardedjob", result="success"} 0+10x60
workqueue_depth{name="guardedjob", controller="guardedjob"} 0x60
guardedjob_lease_renewals_total{result="ok"} 0+3x60
guardedjob_lease_renewals_total{result="lost"} 0x60
guardedjob_lease_renewals_total{result="store_error"} 0x60
guardedjob_lease_renewal_pipelines_total 0+3x60
guardedjob_leases{state="Held"} 1x60
guardedjob_leases{state="Failing"} 0x60
guardedjob_leases{state="Lost"} 0x60
guardedjob_runs_total{result="Succeeded"} 0+0.2x60
guardedjob_runs_total{result="Busy"} 0x60
guardedjob_lease_renewal_duration_seconds_bucket{le="0.001"} 0+2x60
guardedjob_lease_renewal_duration_seconds_bucket{le="0.005"} 0+3x60
guardedjob_lease_renewal_duration_seconds_bucket{le="+Inf"} 0+3x60
guardedjob_lease_renewal_duration_seconds_sum 0+0.006x60
guardedjob_lease_renewal_duration_seconds_count 0+3x60
guardedjob_schedule_skew_seconds_bucket{le="0.1"} 100+0.125x60
guardedjob_schedule_skew_seconds_bucket{le="1"} 100+0.25x60
guardedjob_schedule_skew_seconds_bucket{le="60"} 100+0.25x60
guardedjob_schedule_skew_seconds_bucket{le="300"} 100+0.25x60
guardedjob_schedule_skew_seconds_bucket{le="+Inf"} 100+0.25x60
guardedjob_schedule_skew_seconds_sum 20+0.05x60
guardedjob_schedule_skew_seconds_count 100+0.25x60
guardedjob_stop_latency_seconds_bucket{cause="lost", le="0.1"} 2x60
guardedjob_stop_latency_seconds_bucket{cause="lost", le="1"} 2x60
guardedjob_stop_latency_seconds_bucket{cause="lost", le="+Inf"} 2x60
guardedjob_stop_latency_seconds_sum{cause="lost"} 0.3x60
guardedjob_stop_latency_seconds_count{cause="lost"} 2x60
guardedjob_lock_wait_seconds_bucket{outcome="acquired", le="10"} 1x60
guardedjob_lock_wait_seconds_bucket{outcome="acquired", le="60"} 1x60
guardedjob_lock_wait_seconds_bucket{outcome="acquired", le="+Inf"} 1x60
guardedjob_lock_wait_seconds_sum{outcome="acquired"} 8x60
guardedjob_lock_wait_seconds_count{outcome="acquired"} 1x60
guardedjob_info{namespace="payments", name="settle", schedule="*/10 * * * *", timezone="UTC", concurrency_policy="Forbid"} 1x60
guardedjob_info{namespace="reports", name="daily", schedule="*/10 * * * *", timezone="Asia/Taipei", concurrency_policy="Forbid", store_ref="reports-redis"} 1x60
guardedjob_spec_suspend{namespace="payments", name="settle"} 0x60
guardedjob_spec_suspend{namespace="reports", name="daily"} 0x60
guardedjob_suspended{namespace="payments", name="settle"} 0x60
guardedjob_suspended{namespace="reports", name="daily"} 0x60
guardedjob_status_active{namespace="payments", name="settle"} 0 1 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0
guardedjob_status_active{namespace="reports", name="daily"} 0x60
guardedjob_fence{namespace="payments", name="settle"} 1+1x60
guardedjob_fence{namespace="reports", name="daily"} 1+1x60
guardedjob_lock_state{namespace="payments", name="settle", state="Held"} 0x60
guardedjob_lock_state{namespace="payments", name="settle", state="Free"} 1x60
guardedjob_lock_state{namespace="payments", name="settle", state="Busy"} 0x60
guardedjob_lock_state{namespace="payments", name="settle", state="Lost"} 0x60
guardedjob_lock_state{namespace="payments", name="settle", state="StoreDown"} 0x60
guardedjob_lock_state{namespace="reports", name="daily", state="Held"} 0x60
guardedjob_lock_state{namespace="reports", name="daily", state="Free"} 1x60
guardedjob_lock_state{namespace="reports", name="daily", state="Busy"} 0x60
guardedjob_lock_state{namespace="reports", name="daily", state="Lost"} 0x60
guardedjob_lock_state{namespace="reports", name="daily", state="StoreDown"} 0x60
guardedjob_created_time_seconds{namespace="payments", name="settle"} -86400x60
guardedjob_created_time_seconds{namespace="reports", name="daily"} -86400x60
guardedjob_last_schedule_time_seconds{namespace="payments", name="settle"} 0x9 600x9 1200x9 1800x9 2400x9 3000x9 3600
guardedjob_next_schedule_time_seconds{namespace="payments", name="settle"} 600x9 1200x9 1800x9 2400x9 3000x9 3600x9 4200
guardedjob_last_success_time_seconds{namespace="payments", name="settle"} -540 60x9 660x9 1260x9 1860x9 2460x9 3060x9
guardedjob_last_occurrence_done_time_seconds{namespace="payments", name="settle"} -540 60x9 660x9 1260x9 1860x9 2460x9 3060x9
guardedjob_last_schedule_time_seconds{namespace="reports", name="daily"} 0x9 600x9 1200x9 1800x9 2400x9 3000x9 3600
guardedjob_next_schedule_time_seconds{namespace="reports", name="daily"} 600x9 1200x9 1800x9 2400x9 3000x9 3600x9 4200
guardedjob_last_success_time_seconds{namespace="reports", name="daily"} -540 60x9 660x9 1260x9 1860x9 2460x9 3060x9
guardedjob_last_occurrence_done_time_seconds{namespace="reports", name="daily"} -540 60x9 660x9 1260x9 1860x9 2460x9 3060x9
guardedjob_busy_runs_in_a_row{namespace="payments", name="settle"} 0x60
guardedjob_busy_runs_in_a_row{namespace="reports", name="daily"} 0x60
guardedjob_failed_runs_in_a_row{namespace="payments", name="settle"} 0x60
guardedjob_buffered_runs{namespace="payments", name="settle"} 0x60
guardedjob_buffered_runs{namespace="reports", name="daily"} 0x60
guardedjob_backfill_remaining{namespace="reports", name="daily"} _x30 3x10 2x10 1x10
guardedjob_suspended_after_failures{namespace="payments", name="settle"} 0x60
guardedjob_object_runs_total{namespace="payments", name="settle", result="Succeeded"} 0x9 1x9 2x9 3x9 4x9 5x9 6
guardedjob_object_runs_total{namespace="payments", name="settle", result="Failed"} 0x60
guardedjob_object_runs_total{namespace="payments", name="settle", result="LockLost"} 0x60
guardedjob_object_runs_total{namespace="payments", name="settle", result="Busy"} 0x60
guardedjob_object_runs_total{namespace="payments", name="settle", result="StoreUnavailable"} 0x60
guardedjob_object_runs_total{namespace="payments", name="settle", result="MaxHoldExceeded"} 0x60
guardedjob_object_runs_total{namespace="payments", name="settle", result="Skipped"} 0x60
guardedjob_object_runs_total{namespace="reports", name="daily", result="Succeeded"} 0x9 1x9 2x9 3x9 4x9 5x9 6
guardedjob_object_runs_total{namespace="reports", name="daily", result="Failed"} 0x60
guardedjob_object_runs_total{namespace="reports", name="daily", result="LockLost"} 0x60
guardedjob_object_runs_total{namespace="reports", name="daily", result="Busy"} 0x60
guardedjob_object_runs_total{namespace="reports", name="daily", result="StoreUnavailable"} 0x60
guardedjob_object_runs_total{namespace="reports", name="daily", result="MaxHoldExceeded"} 0x60
guardedjob_object_runs_total{namespace="reports", name="daily", result="Skipped"} 0x60
`

// seriesLine splits a load line into its metric ("name{...}") and its values.
var seriesLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(.*)$`)

// key identifies a series line by its metric, labels in any order.
func key(t *testing.T, line string) string {
	t.Helper()
	m := seriesLine.FindStringSubmatch(strings.TrimSpace(line))
	NewWithT(t).Expect(m).NotTo(BeNil(), "series line %q", line)
	lbls, err := promParser.ParseMetric(m[1])
	NewWithT(t).Expect(err).NotTo(HaveOccurred(), "series line %q", line)
	return lbls.String()
}

// override replaces the lines of series that have the same metric and labels
// as a line of extra, and adds the others.
func override(t *testing.T, base, extra string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(base), "\n")
	for x := range strings.SplitSeq(strings.TrimSpace(extra), "\n") {
		x = strings.TrimSpace(x)
		if x == "" {
			continue
		}
		replaced := false
		for i, l := range lines {
			if key(t, l) == key(t, x) {
				lines[i], replaced = x, true
			}
		}
		if !replaced {
			lines = append(lines, x)
		}
	}
	return lines
}

// decorate adds to each series the labels of the target Prometheus scraped it
// from, in the cluster given (as a Thanos or Mimir query over several clusters
// sees it), with clusterLabel as the name of the cluster label.
func decorate(t *testing.T, lines []string, clusterLabel, cluster string) []string {
	t.Helper()
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		m := seriesLine.FindStringSubmatch(strings.TrimSpace(l))
		NewWithT(t).Expect(m).NotTo(BeNil(), "series line %q", l)
		name, labels, _ := strings.Cut(m[1], "{")
		labels = strings.TrimSuffix(labels, "}")
		add := []string{clusterLabel + `="` + cluster + `"`, `job="guardedjob"`, `instance="10.0.0.1:8443"`,
			`pod="guardedjob-manager-5d4f7b9c8-x2x9q"`, `service="guardedjob-manager-metrics"`, `endpoint="metrics"`, `container="manager"`}
		if !strings.Contains(labels, "namespace=") {
			add = append(add, `namespace="guardedjob-system"`)
		}
		if labels != "" {
			add = append([]string{labels}, add...)
		}
		out = append(out, name+"{"+strings.Join(add, ", ")+"} "+m[2])
	}
	return out
}

// world returns the series of two clusters for promqltest: eu-1, whose
// manager's series are healthy overridden by trouble, and us-1, healthy.
// allClusters applies trouble to both.
func world(t *testing.T, clusterLabel, trouble string, allClusters bool) string {
	t.Helper()
	eu := decorate(t, override(t, healthy, trouble), clusterLabel, "eu-1")
	us := decorate(t, override(t, healthy, ""), clusterLabel, "us-1")
	if allClusters {
		us = decorate(t, override(t, healthy, trouble), clusterLabel, "us-1")
	}
	checkServed(t, append(slices.Clone(eu), us...), clusterLabel)
	return "load 1m\n" + strings.Join(append(eu, us...), "\n")
}

// checkServed fails for a test series the manager does not serve: a family
// missing from config/prometheus/metrics.txt, or a label it does not have.
func checkServed(t *testing.T, lines []string, clusterLabel string) {
	t.Helper()
	g := NewWithT(t)
	fams := exported(t)
	for _, l := range lines {
		m := seriesLine.FindStringSubmatch(strings.TrimSpace(l))
		g.Expect(m).NotTo(BeNil())
		lbls, err := promParser.ParseMetric(m[1])
		g.Expect(err).NotTo(HaveOccurred(), l)
		name := lbls.Get("__name__")
		if name == "up" {
			continue // Prometheus' own, per target
		}
		_, f, ok := familyOf(fams, name)
		g.Expect(ok).To(BeTrue(), "%s is not in %s: the manager does not serve it", name, metricsList)
		allowed := append(append(slices.Clone(f.labels), targetLabels...), clusterLabel, "__name__")
		lbls.Range(func(lb labels.Label) {
			g.Expect(allowed).To(ContainElement(lb.Name), "%s has no label %s", name, lb.Name)
		})
	}
}
