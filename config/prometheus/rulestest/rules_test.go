// Package rulestest checks the alerts in config/prometheus and the dashboard in
// config/grafana, as kustomize and the Helm chart ship them, with Prometheus' own
// rule parser, rules engine and query engine: every alert parses, keeps the cluster
// label, has a runbook of its release, fires per GuardedJob on the series of its
// trouble and stays quiet on a healthy manager's; every panel's query returns
// data from series the manager serves. It is a module of its own so that
// Prometheus' dependencies stay out of the manager's.
package rulestest

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"go.yaml.in/yaml/v3"
)

const (
	rulesFile      = "../guardedjob.rules.yaml"
	prometheusRule = "../alerts.yaml"
	operationsDoc  = "../../../docs/operations.md"
	runbookBase    = "https://github.com/guardedjob/guardedjob/blob/v"
	// The release the chart is rendered as: not "guardedjob", so that object names
	// differ from the kustomize install's.
	chartRelease = "guardedjob-prod"
)

// ruleSet is the alerts of one install, by name, and the cluster label they use.
type ruleSet struct {
	source       string
	clusterLabel string
	rules        map[string]rulefmt.Rule
}

func parseRules(t *testing.T, source string, content []byte) map[string]rulefmt.Rule {
	t.Helper()
	g := NewWithT(t)
	groups, errs := rulefmt.Parse(content, false, model.UTF8Validation, promParser, promslog.NewNopLogger())
	g.Expect(errs).To(BeEmpty(), source)
	out := map[string]rulefmt.Rule{}
	for _, grp := range groups.Groups {
		for _, r := range grp.Rules {
			g.Expect(r.Alert).NotTo(BeEmpty(), "only alerts here, got %q", r.Record)
			out[r.Alert] = r
		}
	}
	g.Expect(out).NotTo(BeEmpty(), source)
	return out
}

// fileRules are the alerts of config/prometheus, with the cluster label "cluster".
func fileRules(t *testing.T) ruleSet {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return ruleSet{source: rulesFile, clusterLabel: "cluster", rules: parseRules(t, rulesFile, b)}
}

// chartRules are the alerts of the PrometheusRule in a rendered chart.
func chartRules(t *testing.T, objs []object, clusterLabel string) ruleSet {
	t.Helper()
	rule := find(t, objs, "PrometheusRule")
	spec, _ := rule["spec"].(map[string]any)
	b, err := yaml.Marshal(map[string]any{"groups": spec["groups"]})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return ruleSet{source: "the chart's PrometheusRule", clusterLabel: clusterLabel, rules: parseRules(t, "chart", b)}
}

// installs are the rule sets the tests check: kustomize's, and the chart's
// rendered for a release named guardedjob-prod with another cluster label.
func installs(t *testing.T) []ruleSet {
	t.Helper()
	const label = "k8s_cluster"
	return []ruleSet{fileRules(t), chartRules(t, renderChart(t, chartDir, chartRelease, "metrics.clusterLabel="+label), label)}
}

func appVersion(t *testing.T, dir string) string {
	t.Helper()
	chart := readYAML(t, filepath.Join(dir, "Chart.yaml"))
	v, _ := chart["appVersion"].(string)
	NewWithT(t).Expect(v).NotTo(BeEmpty())
	return v
}

// Every alert says how bad it is and what happened, waits for its "for", and
// links to its runbook in the docs of the release it comes with: the chart's
// appVersion, and the same version for kustomize (config/ and the chart are
// released together).
func TestAlertsHaveRunbooks(t *testing.T) {
	g := NewWithT(t)
	doc, err := os.ReadFile(operationsDoc)
	g.Expect(err).NotTo(HaveOccurred())
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	version := appVersion(t, chartDir)
	for _, set := range installs(t) {
		for name, r := range set.rules {
			g.Expect(r.Labels).To(HaveKeyWithValue("severity", BeElementOf("critical", "warning")), name)
			g.Expect(r.Annotations).To(HaveKey("summary"), name)
			g.Expect(r.Annotations).To(HaveKey("description"), name)
			g.Expect(time.Duration(r.For)).To(BeNumerically(">", 0), "%s waits before it fires", name)
			url := r.Annotations["runbook_url"]
			g.Expect(url).To(HavePrefix(runbookBase+version+"/docs/operations.md#"), "%s in %s", name, set.source)
			anchor := url[strings.Index(url, "#")+1:]
			g.Expect(anchor).To(Equal(strings.ToLower(name)), "the runbook's heading is the alert's name")
			g.Expect(anchors).To(HaveKey(anchor), "docs/operations.md has a runbook for %s", name)
		}
	}
}

// The chart links every runbook to the docs of its own appVersion, which make
// release sets to the release's version.
func TestChartPinsRunbooksToItsAppVersion(t *testing.T) {
	g := NewWithT(t)
	dir := filepath.Join(t.TempDir(), "guardedjob")
	g.Expect(os.CopyFS(dir, os.DirFS(chartDir))).To(Succeed())
	chartYAML := filepath.Join(dir, "Chart.yaml")
	b, err := os.ReadFile(chartYAML)
	g.Expect(err).NotTo(HaveOccurred())
	b = regexp.MustCompile(`(?m)^appVersion: .*$`).ReplaceAll(b, []byte(`appVersion: "9.8.7"`))
	g.Expect(os.WriteFile(chartYAML, b, 0o600)).To(Succeed())
	set := chartRules(t, renderChart(t, dir, chartRelease), "cluster")
	for name, r := range set.rules {
		g.Expect(r.Annotations["runbook_url"]).To(HavePrefix(runbookBase+"9.8.7/docs/operations.md#"), name)
	}
}

func githubAnchor(heading string) string {
	h := strings.ToLower(strings.TrimSpace(heading))
	h = regexp.MustCompile("[^a-z0-9 _-]").ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// The PrometheusRule for the Prometheus Operator carries exactly the rule file's
// groups.
func TestPrometheusRuleCarriesTheRuleFile(t *testing.T) {
	g := NewWithT(t)
	var file, cr struct {
		Groups []any `yaml:"groups"`
		Spec   struct {
			Groups []any `yaml:"groups"`
		} `yaml:"spec"`
	}
	for path, into := range map[string]any{rulesFile: &file, prometheusRule: &cr} {
		b, err := os.ReadFile(path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(yaml.Unmarshal(b, into)).To(Succeed())
	}
	g.Expect(file.Groups).NotTo(BeEmpty())
	g.Expect(cr.Spec.Groups).To(Equal(file.Groups))
}

// Every aggregation and every vector match of every alert keeps the cluster
// label, as the kube-prometheus mixins do, so that one ruler over several
// clusters alerts per cluster; the chart's rules use the label it was given, and
// never "cluster" any more.
func TestAlertsKeepTheClusterLabel(t *testing.T) {
	for _, set := range installs(t) {
		for name, r := range set.rules {
			g := NewWithT(t)
			expr, err := promParser.ParseExpr(r.Expr)
			g.Expect(err).NotTo(HaveOccurred(), name)
			used := map[string]bool{}
			parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
				switch n := node.(type) {
				case *parser.AggregateExpr:
					g.Expect(n.Without).To(BeFalse(), "%s: %s", name, n)
					g.Expect(n.Grouping).To(ContainElement(set.clusterLabel), "%s in %s aggregates the cluster away: %s", name, set.source, n)
					for _, l := range n.Grouping {
						used[l] = true
					}
				case *parser.BinaryExpr:
					if m := n.VectorMatching; m != nil && m.On && len(m.MatchingLabels) > 0 {
						g.Expect(m.MatchingLabels).To(ContainElement(set.clusterLabel), "%s in %s matches across clusters: %s", name, set.source, n)
					}
					if m := n.VectorMatching; m != nil {
						for _, l := range append(slices.Clone(m.MatchingLabels), m.Include...) {
							used[l] = true
						}
					}
				case *parser.VectorSelector:
					for _, m := range n.LabelMatchers {
						used[m.Name] = true
					}
				}
				return nil
			})
			if set.clusterLabel != "cluster" {
				g.Expect(used).NotTo(HaveKey("cluster"), "%s in %s", name, set.source)
			}
		}
	}
}

// alertCase is an alert firing (or not) on the series of a trouble.
type alertCase struct {
	alert string
	// trouble overrides the healthy series of cluster eu-1 (of both clusters
	// with allClusters).
	trouble     string
	allClusters bool
	// firesAt is when the alert fires (0: never within the hour); quietAt a time
	// before it at which it must not.
	firesAt, quietAt time.Duration
	// labels are the firing alert's labels besides alertname and severity;
	// "cluster" stands for the install's cluster label.
	labels   map[string]string
	whenWhat string
}

var (
	settle  = map[string]string{"cluster": "eu-1", "namespace": "payments", "name": "settle"}
	daily   = map[string]string{"cluster": "eu-1", "namespace": "reports", "name": "daily", "store_ref": "reports-redis"}
	manager = map[string]string{"cluster": "eu-1", "namespace": "guardedjob-system"}
)

// Each alert fires on the series of its trouble, once per GuardedJob (or
// manager), with its namespace, name and cluster, and stays quiet on a healthy
// manager's series and in the healthy cluster. The series are in
// promqltest's load notation (series_test.go), evaluated every minute of an hour
// by Prometheus' rules engine.
func TestAlertsFire(t *testing.T) {
	tests := []alertCase{
		{alert: "GuardedJobLeaseLost", trouble: `guardedjob_object_runs_total{namespace="payments", name="settle", result="LockLost"} 0x30 1x30`,
			firesAt: 32 * time.Minute, quietAt: 31 * time.Minute, labels: settle, whenWhat: "a run lost its lease"},
		{alert: "GuardedJobLeaseLost", trouble: `guardedjob_object_runs_total{namespace="payments", name="settle", result="LockLost"} _x30 1x30`,
			firesAt: 31 * time.Minute, quietAt: 30 * time.Minute, labels: settle, whenWhat: "the first run that lost its lease (the manager serves no zero series)"},
		{alert: "GuardedJobRenewalsFailing", trouble: `guardedjob_failing_leases{namespace="payments", name="settle"} _x20 1x40`,
			firesAt: 21 * time.Minute, quietAt: 20 * time.Minute, labels: settle, whenWhat: "a lease in the manager's store fails to renew for over a minute"},
		{alert: "GuardedJobRenewalsFailing", trouble: `guardedjob_failing_leases{namespace="reports", name="daily"} _x20 1x40`,
			firesAt: 21 * time.Minute, quietAt: 20 * time.Minute, labels: daily, whenWhat: "a lease in a tenant's own store fails to renew for over a minute"},
		{alert: "GuardedJobRenewalsFailing", trouble: `guardedjob_failing_leases{namespace="payments", name="settle"} _x20 1 stale`,
			whenWhat: "one failed renewal that recovers at the next"},
		{alert: "GuardedJobStoreUnavailable", trouble: `guardedjob_object_runs_total{namespace="reports", name="daily", result="StoreUnavailable"} 0x10 1x50`,
			firesAt: 12 * time.Minute, quietAt: 11 * time.Minute, labels: daily, whenWhat: "a run in a tenant's own store ended StoreUnavailable"},
		{alert: "GuardedJobStoreUnavailable", trouble: `guardedjob_object_runs_total{namespace="payments", name="settle", result="StoreUnavailable"} 0x10 1x50`,
			firesAt: 12 * time.Minute, quietAt: 11 * time.Minute, labels: settle, whenWhat: "a run in the manager's store ended StoreUnavailable"},
		{alert: "GuardedJobOccurrenceAbandoned", trouble: `guardedjob_occurrences_abandoned_total{namespace="payments", name="settle"} _x20 1x40`,
			firesAt: 21 * time.Minute, quietAt: 20 * time.Minute, labels: settle, whenWhat: "the first occurrence given up (the manager serves no zero series)"},
		{alert: "GuardedJobRunsFailing", trouble: `guardedjob_object_runs_total{namespace="payments", name="settle", result="Failed"} 0x10 1x50`,
			firesAt: 12 * time.Minute, quietAt: 11 * time.Minute, labels: settle, whenWhat: "a run failed"},
		{alert: "GuardedJobStoreUnavailable", trouble: `guardedjob_object_runs_total{namespace="reports", name="daily", result="StoreUnavailable"} _x10 1x50`,
			firesAt: 11 * time.Minute, quietAt: 10 * time.Minute, labels: daily, whenWhat: "the first run that ended StoreUnavailable"},
		{alert: "GuardedJobRunsFailing", trouble: `guardedjob_object_runs_total{namespace="payments", name="settle", result="Failed"} _x10 1x50`,
			firesAt: 11 * time.Minute, quietAt: 10 * time.Minute, labels: settle, whenWhat: "the first run that failed"},
		{alert: "GuardedJobRunsFailing", trouble: `guardedjob_object_runs_total{namespace="payments", name="settle", result="MaxHoldExceeded"} 0x10 1x50`,
			firesAt: 12 * time.Minute, quietAt: 11 * time.Minute, labels: settle, whenWhat: "a run hit maxHold"},
		{alert: "GuardedJobLockBusy", trouble: `guardedjob_object_runs_total{namespace="payments", name="settle", result="Busy"} 0x9 1x9 2x9 3x30`,
			firesAt: 31 * time.Minute, quietAt: 30 * time.Minute, labels: settle, whenWhat: "the third Busy run"},
		{alert: "GuardedJobLockBusy", trouble: `guardedjob_object_runs_total{namespace="payments", name="settle", result="Busy"} _x9 1x9 2x9 3x30`,
			firesAt: 30 * time.Minute, quietAt: 29 * time.Minute, labels: settle, whenWhat: "the third Busy run, the first one's series new"},
		{alert: "GuardedJobLockBusy", trouble: `guardedjob_object_runs_total{namespace="payments", name="settle", result="Busy"} 0x5 1x10 2x45`,
			whenWhat: "two Busy runs are not yet a pattern"},
		{alert: "GuardedJobLockBusy", trouble: `guardedjob_object_runs_total{namespace="payments", name="settle", result="Busy"} 0x9 1x9 2x41
			guardedjob_object_runs_total{namespace="reports", name="daily", result="Busy"} 0x19 1x41`,
			whenWhat: "three Busy runs of two GuardedJobs are no GuardedJob's pattern"},
		{alert: "GuardedJobNoRecentSuccess", trouble: `guardedjob_last_success_time_seconds{namespace="payments", name="settle"} -540 60x59
			guardedjob_last_occurrence_done_time_seconds{namespace="payments", name="settle"} -540 60x59`,
			firesAt: 42 * time.Minute, quietAt: 41 * time.Minute, labels: map[string]string{"cluster": "eu-1", "namespace": "payments", "name": "settle"},
			whenWhat: "no success for three 10-minute intervals, for 10 minutes"},
		{alert: "GuardedJobNoRecentSuccess", trouble: `guardedjob_last_success_time_seconds{namespace="payments", name="settle"} _x60
			guardedjob_last_occurrence_done_time_seconds{namespace="payments", name="settle"} _x60
			guardedjob_created_time_seconds{namespace="payments", name="settle"} 0x60`,
			firesAt: 41 * time.Minute, quietAt: 40 * time.Minute, labels: settle, whenWhat: "a GuardedJob that never succeeded since it was created"},
		{alert: "GuardedJobNoRecentSuccess", trouble: `guardedjob_last_success_time_seconds{namespace="payments", name="settle"} -540 60x59
			guardedjob_last_occurrence_done_time_seconds{namespace="payments", name="settle"} _x60`,
			firesAt: 42 * time.Minute, quietAt: 41 * time.Minute, labels: settle,
			whenWhat: "no success for three intervals, served by a manager from before status.lastOccurrenceDone"},
		{alert: "GuardedJobNoRecentSuccess", trouble: `guardedjob_last_success_time_seconds{namespace="payments", name="settle"} -540 60x59
			guardedjob_last_occurrence_done_time_seconds{namespace="payments", name="settle"} -540 60x59
			guardedjob_next_schedule_time_seconds{namespace="payments", name="settle"} 600x9 stale`,
			whenWhat: "a suspended GuardedJob (no next schedule time)"},
		{alert: "GuardedJobBusyInARow", trouble: `guardedjob_busy_runs_in_a_row{namespace="payments", name="settle"} 0x9 1x9 2x9 3x30`,
			firesAt: 31 * time.Minute, quietAt: 30 * time.Minute, labels: settle, whenWhat: "the third Busy run in a row"},
		{alert: "GuardedJobBusyInARow", trouble: `guardedjob_busy_runs_in_a_row{namespace="payments", name="settle"} 0x9 1x9 2x9 0x30`,
			whenWhat: "two Busy runs and then one that ran"},
		{alert: "GuardedJobSuspendedAfterFailures", trouble: `guardedjob_suspended_after_failures{namespace="payments", name="settle"} _x20 1x40`,
			firesAt: 21 * time.Minute, quietAt: 20 * time.Minute, labels: settle, whenWhat: "the failure policy suspended a GuardedJob"},
		{alert: "GuardedJobSuspendedAfterFailures", trouble: `guardedjob_suspended_after_failures{namespace="payments", name="settle"} _x20 1 stale`,
			whenWhat: "a suspension resumed within a minute"},
		{alert: "GuardedJobScheduleSkewHigh", trouble: `guardedjob_schedule_skew_seconds_bucket{le="0.1"} 100+0.125x20 102.5x40
			guardedjob_schedule_skew_seconds_bucket{le="1"} 100+0.25x20 105x40
			guardedjob_schedule_skew_seconds_bucket{le="60"} 100+0.25x20 105x40`,
			firesAt: 28 * time.Minute, quietAt: 27 * time.Minute, labels: manager,
			whenWhat: "from minute 20 on, runs start 100s late (more than 10% of the hour's runs by minute 23)"},
		{alert: "GuardedJobScheduleSkewHigh", trouble: `guardedjob_schedule_skew_seconds_bucket{le="0.1"} 100+0.125x20 102.5x40
			guardedjob_schedule_skew_seconds_bucket{le="1"} 100+0.25x20 105x40`,
			whenWhat: "runs start seconds late, within a minute (a leader change)"},
		{alert: "GuardedJobReconcileErrors", trouble: `controller_runtime_reconcile_errors_total{controller="guardedjob"} 0x10 0+2x50`,
			firesAt: 27 * time.Minute, quietAt: 26 * time.Minute, labels: manager, whenWhat: "reconciles keep failing for 15 minutes"},
		{alert: "GuardedJobManagerDown", trouble: `up 1x10 0x50`,
			firesAt: 12 * time.Minute, quietAt: 11 * time.Minute, labels: manager, whenWhat: "the manager stops answering (second by second: timeline_test.go)"},
		{alert: "GuardedJobManagerDown", trouble: `up 1x10 stale`,
			firesAt: 12 * time.Minute, quietAt: 11 * time.Minute, labels: manager, whenWhat: "the manager's Pods are gone"},
		{alert: "GuardedJobManagerDown", trouble: `up _x60`, allClusters: true,
			whenWhat: "a Prometheus that never scraped a manager (the rules loaded where none runs)"},
	}
	for _, set := range installs(t) {
		covered := map[string]bool{}
		for _, tt := range tests {
			t.Run(set.source+": "+tt.alert+" on "+tt.whenWhat, func(t *testing.T) {
				g := NewWithT(t)
				rule, ok := set.rules[tt.alert]
				g.Expect(ok).To(BeTrue(), "alert %s exists", tt.alert)
				covered[tt.alert] = true
				firing := evaluate(t, world(t, set.clusterLabel, tt.trouble, tt.allClusters), rule)
				if tt.firesAt == 0 {
					g.Expect(brief(firing)).To(BeEmpty())
					return
				}
				times := slices.Sorted(maps.Keys(firing))
				g.Expect(times).To(ContainElement(tt.firesAt), "fires at %s: %s", tt.firesAt, brief(firing))
				// Nothing fires early: before the trouble the manager was healthy.
				g.Expect(times[0]).To(BeNumerically(">", tt.quietAt), "not yet at %s: %s", tt.quietAt, brief(firing))
				want := labels.NewBuilder(labels.EmptyLabels()).Set("alertname", tt.alert).Set("severity", rule.Labels["severity"])
				for k, v := range tt.labels {
					if k == "cluster" {
						k = set.clusterLabel
					}
					want.Set(k, v)
				}
				alerts := firing[tt.firesAt]
				g.Expect(alerts).To(HaveLen(1), "one alert, in the troubled cluster only")
				g.Expect(alerts[0].Labels).To(Equal(want.Labels()))
				alerts[0].Annotations.Range(func(a labels.Label) {
					g.Expect(a.Value).NotTo(ContainSubstring("<error expanding template"), "annotation %s expands", a.Name)
				})
				if ns := tt.labels["namespace"]; ns != "" {
					g.Expect(alerts[0].Annotations.Get("description")).To(ContainSubstring(ns), "the description names it")
				}
			})
		}
		t.Run(set.source+": a healthy manager raises no alert", func(t *testing.T) {
			for name, rule := range set.rules {
				firing := evaluate(t, world(t, set.clusterLabel, "", false), rule)
				NewWithT(t).Expect(brief(firing)).To(BeEmpty(), name)
			}
		})
		for name := range set.rules {
			NewWithT(t).Expect(covered).To(HaveKey(name), "alert %s has a test", name)
		}
	}
}

// evaluate runs an alerting rule every minute of the hour, as a Prometheus
// server evaluates it, and returns the alerts firing at each minute.
func evaluate(t *testing.T, series string, rule rulefmt.Rule) map[time.Duration][]*rules.Alert {
	t.Helper()
	g := NewWithT(t)
	storage := promqltest.LoadedStorage(t, series)
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	expr, err := promParser.ParseExpr(rule.Expr)
	g.Expect(err).NotTo(HaveOccurred())
	ar := rules.NewAlertingRule(rule.Alert, expr, time.Duration(rule.For), time.Duration(rule.KeepFiringFor),
		labels.FromMap(rule.Labels), labels.FromMap(rule.Annotations), labels.EmptyLabels(), "", false, promslog.NewNopLogger())
	query := rules.EngineQueryFunc(engine, storage)
	firing := map[time.Duration][]*rules.Alert{}
	for at := time.Duration(0); at <= time.Hour; at += time.Minute {
		_, err := ar.Eval(context.Background(), 0, time.Unix(0, 0).Add(at), query, nil, 0)
		g.Expect(err).NotTo(HaveOccurred(), "%s at %s", rule.Alert, at)
		for _, a := range ar.ActiveAlerts() {
			if a.State == rules.StateFiring {
				firing[at] = append(firing[at], a)
			}
		}
	}
	return firing
}

// brief says when which alerts fired, for failure messages.
func brief(firing map[time.Duration][]*rules.Alert) string {
	var out []string
	for _, at := range slices.Sorted(maps.Keys(firing)) {
		for _, a := range firing[at] {
			out = append(out, at.String()+" "+a.Labels.String())
		}
	}
	return strings.Join(out, "\n")
}

// GuardedJobManagerDown finds the manager of every install, whatever its object
// names: the chart as release guardedjob-prod, with a fullnameOverride, or as a
// release whose name lacks "guardedjob", and kustomize's. For each, the series are
// labelled as the Prometheus Operator labels the targets of the install's own
// ServiceMonitor and metrics Service (job from the monitor's jobLabel, else the
// Service's name), and the install's own rule is evaluated on them: quiet while
// the manager answers, firing once it has not.
func TestManagerDownFindsEveryInstall(t *testing.T) {
	type install struct {
		name    string
		rule    rulefmt.Rule
		monitor object
		service object
	}
	chartInstall := func(name, release string, set ...string) install {
		objs := renderChart(t, chartDir, release, set...)
		return install{name: name, rule: chartRules(t, objs, "cluster").rules["GuardedJobManagerDown"],
			monitor: find(t, objs, "ServiceMonitor"), service: find(t, objs, "Service")}
	}
	installs := []install{
		chartInstall("chart release guardedjob-prod", chartRelease),
		chartInstall("chart with fullnameOverride", chartRelease, "fullnameOverride=payments-locks"),
		chartInstall("chart release ops", "ops"),
		{name: "kustomize", rule: fileRules(t).rules["GuardedJobManagerDown"],
			monitor: readYAML(t, "../monitor.yaml"), service: readYAML(t, "../../manager/metrics_service.yaml")},
	}
	for _, in := range installs {
		t.Run(in.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(in.rule.Expr).NotTo(BeEmpty())
			up := scrapedUp(t, in.monitor, in.service)
			other := `up{job="other", namespace="guardedjob-system", instance="10.0.0.9:8080"} 0x60`
			healthyUp := "load 1m\n" + up + " 1x60\n" + other
			g.Expect(brief(evaluate(t, healthyUp, in.rule))).To(BeEmpty(), "quiet while %s answers", up)
			downUp := "load 1m\n" + up + " 1x10 0x50\n" + other
			firing := evaluate(t, downUp, in.rule)
			g.Expect(slices.Sorted(maps.Keys(firing))).To(HaveExactElements(minutesFrom(12)), "%s: %s", up, brief(firing))
			g.Expect(firing[12*time.Minute][0].Labels.Get("namespace")).To(Equal(installNamespace))
		})
	}
}

// scrapedUp returns the up series (without values) of a target of service, as
// the Prometheus Operator labels it for monitor.
func scrapedUp(t *testing.T, monitor, service object) string {
	t.Helper()
	g := NewWithT(t)
	svcMeta, _ := service["metadata"].(map[string]any)
	svcLabels, _ := svcMeta["labels"].(map[string]any)
	spec, _ := monitor["spec"].(map[string]any)
	selector, _ := spec["selector"].(map[string]any)
	matchLabels, _ := selector["matchLabels"].(map[string]any)
	g.Expect(matchLabels).NotTo(BeEmpty())
	for k, v := range matchLabels {
		g.Expect(svcLabels).To(HaveKeyWithValue(k, v), "the ServiceMonitor selects the metrics Service")
	}
	job := service.name()
	if jl, _ := spec["jobLabel"].(string); jl != "" {
		if v, ok := svcLabels[jl].(string); ok {
			job = v
		}
	}
	return `up{cluster="eu-1", job="` + job + `", namespace="` + installNamespace + `", service="` + service.name() +
		`", endpoint="metrics", instance="10.0.0.1:8443", pod="manager-0"}`
}

// minutesFrom returns the minutes from m to the end of the hour.
func minutesFrom(m int) []time.Duration {
	var out []time.Duration
	for ; m <= 60; m++ {
		out = append(out, time.Duration(m)*time.Minute)
	}
	return out
}
