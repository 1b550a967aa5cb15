package rulestest

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"
)

const dashboardFile = "../../grafana/guardedjob.json"

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// shippedDashboard is a dashboard as an install ships it, with the cluster label
// its queries use.
type shippedDashboard struct {
	source       string
	clusterLabel string
	dashboard    dashboard
}

// dashboards are config/grafana's, and the chart's ConfigMap rendered for a
// release named guardedjob-prod with another cluster label.
func dashboards(t *testing.T) []shippedDashboard {
	t.Helper()
	g := NewWithT(t)
	b, err := os.ReadFile(dashboardFile)
	g.Expect(err).NotTo(HaveOccurred())
	var file dashboard
	g.Expect(json.Unmarshal(b, &file)).To(Succeed())

	const label = "k8s_cluster"
	objs := renderChart(t, chartDir, chartRelease, "metrics.clusterLabel="+label, "metrics.grafanaDashboard.labelValue=guardedjob")
	cm := find(t, objs, "ConfigMap")
	md, _ := cm["metadata"].(map[string]any)
	g.Expect(md["labels"]).To(HaveKeyWithValue("grafana_dashboard", "guardedjob"), "the sidecar's label, with the value asked for")
	data, _ := cm["data"].(map[string]any)
	js, _ := data["guardedjob.json"].(string)
	var chart dashboard
	g.Expect(json.Unmarshal([]byte(js), &chart)).To(Succeed(), "the ConfigMap holds the dashboard's JSON")
	return []shippedDashboard{{source: dashboardFile, clusterLabel: "cluster", dashboard: file}, {source: "the chart's ConfigMap", clusterLabel: label, dashboard: chart}}
}

// busyDay is a day with something to show in every panel: on top of the healthy
// series, a lease of payments/settle fails to renew, both GuardedJobs find their
// lock busy and wait for it (reports/daily's first Busy run lost the race to
// another cluster's, which then completed the occurrence), runs fail and lose
// their leases, and stops are timed.
const busyDay = `
guardedjob_failing_leases{namespace="payments", name="settle"} _x50 1x10
guardedjob_leases{state="Failing"} 0x50 1x10
guardedjob_status_active{namespace="payments", name="settle"} 0x50 1x10
guardedjob_lock_state{namespace="reports", name="daily", state="Free"} 1x40 0x20
guardedjob_lock_state{namespace="reports", name="daily", state="Busy"} 0x40 1x20
guardedjob_busy_runs_in_a_row{namespace="reports", name="daily"} 0x40 1 1 0x7 1x10
guardedjob_busy_runs_done_elsewhere_total{namespace="reports", name="daily"} _x41 1x18
guardedjob_object_runs_total{namespace="reports", name="daily", result="Busy"} 0x40 1x9 2x10
guardedjob_busy_runs_in_a_row{namespace="payments", name="settle"} 0x57 1x3
guardedjob_object_runs_total{namespace="payments", name="settle", result="Busy"} 0x57 1x3
guardedjob_object_runs_total{namespace="payments", name="settle", result="Failed"} 0x30 1x30
guardedjob_object_runs_total{namespace="payments", name="settle", result="LockLost"} 0x55 1x5
guardedjob_occurrences_abandoned_total{namespace="payments", name="settle"} _x58 1x2
guardedjob_lock_state{namespace="payments", name="settle", state="Free"} 1x54 0x6
guardedjob_lock_state{namespace="payments", name="settle", state="Lost"} 0x54 1x6
guardedjob_lease_renewals_total{result="store_error"} 0x50 0+2x10
guardedjob_stop_latency_seconds_bucket{cause="lost", le="0.1"} 2x57 3x3
guardedjob_stop_latency_seconds_bucket{cause="lost", le="1"} 2x57 3x3
guardedjob_stop_latency_seconds_bucket{cause="lost", le="+Inf"} 2x57 3x3
guardedjob_stop_latency_seconds_sum{cause="lost"} 0.25x57 0.375x3
guardedjob_stop_latency_seconds_count{cause="lost"} 2x57 3x3
guardedjob_lock_wait_seconds_bucket{outcome="acquired", le="10"} 1x57 2x3
guardedjob_lock_wait_seconds_bucket{outcome="acquired", le="60"} 1x57 2x3
guardedjob_lock_wait_seconds_bucket{outcome="acquired", le="+Inf"} 1x57 2x3
guardedjob_lock_wait_seconds_sum{outcome="acquired"} 8x57 16x3
guardedjob_lock_wait_seconds_count{outcome="acquired"} 1x57 2x3
workqueue_depth{name="guardedjob", controller="guardedjob"} 0x58 3x2
`

// The variables Grafana fills in: each substitution is a choice a user makes.
var substitutions = []map[string]string{
	{"$cluster": "eu-1", "$namespace": "payments"},
	{"$cluster": "(eu-1|us-1)", "$namespace": "(payments|reports)"},
	{"$cluster": ".*", "$namespace": ".*"},
}

var grafanaIntervals = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

func substitute(expr string, vars map[string]string) string {
	// Longest names first: $cluster before a hypothetical $c.
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range vars {
			if !yield(k) {
				return
			}
		}
	})
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	for _, n := range names {
		expr = strings.ReplaceAll(expr, n, vars[n])
	}
	return grafanaIntervals.Replace(expr)
}

// Every query of the dashboard, as kustomize and the chart ship it, parses, names
// only series the manager serves (config/prometheus/metrics.txt) and only their
// labels, follows the cluster variable, and returns data from a cluster's series
// for every choice of cluster and namespace a user can make.
func TestDashboardQueriesReturnData(t *testing.T) {
	fams := exported(t)
	for _, d := range dashboards(t) {
		t.Run(d.source, func(t *testing.T) {
			series := world(t, d.clusterLabel, busyDay, false)
			// The test series are all the manager serves, not a convenient part of it.
			for name := range fams {
				NewWithT(t).Expect(series).To(MatchRegexp(`(?m)^`+regexp.QuoteMeta(name)+`(_bucket)?\{`), "a test series of %s", name)
			}
			storage := promqltest.LoadedStorage(t, series)
			engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
			at := time.Unix(0, 0).Add(time.Hour)
			queries := 0
			for _, p := range d.dashboard.Panels {
				if p.Type == "row" {
					continue
				}
				NewWithT(t).Expect(p.Targets).NotTo(BeEmpty(), "panel %q has a query", p.Title)
				for _, target := range p.Targets {
					queries++
					for _, vars := range substitutions {
						g := NewWithT(t)
						q := substitute(target.Expr, vars)
						expr, err := promParser.ParseExpr(q)
						g.Expect(err).NotTo(HaveOccurred(), "panel %q: %s", p.Title, q)
						checkSelectors(g, expr, fams, d.clusterLabel, vars["$cluster"], p.Title)
						vec := instant(t, engine, storage, q, at)
						g.Expect(vec).NotTo(BeEmpty(), "panel %q returns nothing for %v: %s", p.Title, vars, q)
						g.Expect(slices.ContainsFunc(vec, func(s promql.Sample) bool { return !math.IsNaN(s.F) })).To(BeTrue(),
							"panel %q returns only NaN for %v: %s", p.Title, vars, q)
					}
				}
			}
			NewWithT(t).Expect(queries).To(BeNumerically(">=", 20))
		})
	}
}

// checkSelectors fails for a series selector the manager's series cannot match:
// a family it does not serve, a label it does not have, or no matcher on the
// cluster variable.
func checkSelectors(g Gomega, expr parser.Expr, fams map[string]family, clusterLabel, clusterValue, panel string) {
	var grouping []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			name := n.Name
			var allowed []string
			if name == "up" {
				allowed = targetLabels
			} else {
				_, f, ok := familyOf(fams, name)
				g.Expect(ok).To(BeTrue(), "panel %q names %s, which the manager does not serve (%s)", panel, name, metricsList)
				allowed = append(slices.Clone(f.labels), targetLabels...)
			}
			allowed = append(allowed, clusterLabel, "__name__")
			cluster := false
			for _, m := range n.LabelMatchers {
				g.Expect(allowed).To(ContainElement(m.Name), "panel %q: %s has no label %s", panel, name, m.Name)
				if m.Name == clusterLabel && m.Value == clusterValue {
					cluster = true
				}
			}
			g.Expect(cluster).To(BeTrue(), "panel %q: %s follows the cluster variable (label %s)", panel, name, clusterLabel)
		case *parser.AggregateExpr:
			grouping = append(grouping, n.Grouping...)
		}
		return nil
	})
	if clusterLabel != "cluster" {
		g.Expect(grouping).NotTo(ContainElement("cluster"), "panel %q groups by \"cluster\", not the install's cluster label", panel)
	}
}

// The cluster and namespace variables list the clusters and namespaces that have
// GuardedJobs, with the install's cluster label.
func TestDashboardVariablesListClustersAndNamespaces(t *testing.T) {
	labelValues := regexp.MustCompile(`^label_values\((.+), *([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	for _, d := range dashboards(t) {
		t.Run(d.source, func(t *testing.T) {
			g := NewWithT(t)
			storage := promqltest.LoadedStorage(t, world(t, d.clusterLabel, "", false))
			engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
			got := map[string][]string{}
			for _, v := range d.dashboard.Templating.List {
				if v.Type != "query" {
					continue
				}
				q, _ := v.Query.(string)
				m := labelValues.FindStringSubmatch(q)
				g.Expect(m).NotTo(BeNil(), "variable %s: %q is label_values(selector, label)", v.Name, q)
				promQL := "group by (" + m[2] + ") (" + substitute(m[1], map[string]string{"$cluster": ".*", "$namespace": ".*"}) + ")"
				for _, s := range instant(t, engine, storage, promQL, time.Unix(0, 0).Add(time.Hour)) {
					got[v.Name] = append(got[v.Name], s.Metric.Get(m[2]))
				}
			}
			g.Expect(got).To(HaveKeyWithValue("cluster", ConsistOf("eu-1", "us-1")))
			g.Expect(got).To(HaveKeyWithValue("namespace", ConsistOf("payments", "reports")))
		})
	}
}

func instant(t *testing.T, engine promql.QueryEngine, storage storage.Queryable, q string, at time.Time) promql.Vector {
	t.Helper()
	g := NewWithT(t)
	query, err := engine.NewInstantQuery(context.Background(), storage, nil, q, at)
	g.Expect(err).NotTo(HaveOccurred(), q)
	defer query.Close()
	res := query.Exec(context.Background())
	g.Expect(res.Err).NotTo(HaveOccurred(), q)
	switch v := res.Value.(type) {
	case promql.Vector:
		return v
	case promql.Scalar:
		return promql.Vector{{F: v.V}}
	}
	t.Fatalf("%s: a %T", q, res.Value)
	return nil
}
