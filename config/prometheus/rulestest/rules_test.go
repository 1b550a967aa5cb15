// Package rulestest checks the alerts in config/prometheus with Prometheus' own
// rule parser and query engine: every alert parses, has a runbook, and fires on
// the series that describe its trouble, not on a healthy manager's. It is a
// module of its own so that Prometheus' dependencies stay out of the manager's.
package rulestest

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"go.yaml.in/yaml/v3"
)

const (
	rulesFile      = "../guardedjob.rules.yaml"
	prometheusRule = "../alerts.yaml"
	operationsDoc  = "../../../docs/operations.md"
)

func loadRules(t *testing.T) map[string]rulefmt.Rule {
	t.Helper()
	g := NewWithT(t)
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, parser.NewParser(parser.Options{}), promslog.NewNopLogger())
	g.Expect(errs).To(BeEmpty())
	out := map[string]rulefmt.Rule{}
	for _, grp := range groups.Groups {
		for _, r := range grp.Rules {
			g.Expect(r.Alert).NotTo(BeEmpty(), "only alerts here, got %q", r.Record)
			out[r.Alert] = r
		}
	}
	return out
}

// Every alert says how bad it is and what happened, and its runbook exists.
func TestAlertsHaveRunbooks(t *testing.T) {
	g := NewWithT(t)
	doc, err := os.ReadFile(operationsDoc)
	g.Expect(err).NotTo(HaveOccurred())
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	for name, r := range loadRules(t) {
		g.Expect(r.Labels).To(HaveKeyWithValue("severity", BeElementOf("critical", "warning")), name)
		g.Expect(r.Annotations).To(HaveKey("summary"), name)
		g.Expect(r.Annotations).To(HaveKey("description"), name)
		url := r.Annotations["runbook_url"]
		g.Expect(url).To(HavePrefix("https://github.com/guardedjob/guardedjob/blob/main/docs/operations.md#"), name)
		anchor := url[strings.Index(url, "#")+1:]
		g.Expect(anchor).To(Equal(strings.ToLower(name)), "the runbook's heading is the alert's name")
		g.Expect(anchors).To(HaveKey(anchor), "docs/operations.md has a runbook for %s", name)
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
		g.Expect(yaml.NewDecoder(bytes.NewReader(b)).Decode(into)).To(Succeed())
	}
	g.Expect(file.Groups).NotTo(BeEmpty())
	g.Expect(cr.Spec.Groups).To(Equal(file.Groups))
}

// Each alert fires on the series of its trouble and stays quiet on a healthy
// manager's. Series are in promqltest's load notation, one sample a minute from
// time 0 ("0x9 1x5" is ten 0s, minutes 0 to 9, then six 1s); an alert fires at a minute when its expression has returned something at
// every evaluation (each minute) of its "for" period up to then.
func TestAlertsFire(t *testing.T) {
	// A healthy manager: renewals succeed, runs succeed, nothing lost. One
	// GuardedJob runs every 10 minutes, its Job is created within a second, and it
	// succeeds a minute later.
	healthy := `
		up{job="guardedjob-manager-metrics", instance="10.0.0.1:8443"} 1x60
		guardedjob_lease_renewals_total{result="ok"} 0+3x60
		guardedjob_lease_renewals_total{result="lost"} 0x60
		guardedjob_lease_renewals_total{result="store_error"} 0x60
		guardedjob_leases{state="Held"} 1x60
		guardedjob_leases{state="Failing"} 0x60
		guardedjob_runs_total{result="Succeeded"} 0+1x60
		guardedjob_runs_total{result="Busy"} 0x60
		controller_runtime_reconcile_errors_total{controller="guardedjob"} 0x60
		guardedjob_created_time_seconds{namespace="payments", name="settle"} -86400x60
		guardedjob_last_schedule_time_seconds{namespace="payments", name="settle"} 0x9 600x9 1200x9 1800x9 2400x9 3000x9 3600
		guardedjob_next_schedule_time_seconds{namespace="payments", name="settle"} 600x9 1200x9 1800x9 2400x9 3000x9 3600x9 4200
		guardedjob_last_success_time_seconds{namespace="payments", name="settle"} -540 60x9 660x9 1260x9 1860x9 2460x9 3060x9
		guardedjob_busy_runs_in_a_row{namespace="payments", name="settle"} 0x60
		guardedjob_schedule_skew_seconds_bucket{le="1"} 100+0.1x60
		guardedjob_schedule_skew_seconds_bucket{le="60"} 100+0.1x60
		guardedjob_schedule_skew_seconds_bucket{le="300"} 100+0.1x60
		guardedjob_schedule_skew_seconds_bucket{le="+Inf"} 100+0.1x60
	`
	tests := []struct {
		alert    string
		series   string
		firesAt  time.Duration // 0: never within the hour
		quietAt  time.Duration // a time at which it must not fire (0: the whole hour)
		whenWhat string
	}{
		{alert: "GuardedJobLeaseLost", series: `guardedjob_lease_renewals_total{result="lost"} 0x30 1x30`,
			firesAt: 31 * time.Minute, quietAt: 30 * time.Minute, whenWhat: "a renewal found the lease lost"},
		{alert: "GuardedJobRenewalsFailing", series: `guardedjob_leases{state="Failing"} 0x20 1x40`,
			firesAt: 22 * time.Minute, quietAt: 21 * time.Minute, whenWhat: "a lease fails to renew for over a minute"},
		{alert: "GuardedJobRenewalsFailing", series: `guardedjob_leases{state="Failing"} 0x20 1 0x39`,
			whenWhat: "one failed renewal that recovers at the next"},
		{alert: "GuardedJobStoreUnavailable", series: `guardedjob_runs_total{result="StoreUnavailable"} 0x10 1x50`,
			firesAt: 11 * time.Minute, quietAt: 10 * time.Minute, whenWhat: "a run ended StoreUnavailable"},
		{alert: "GuardedJobRunsFailing", series: `guardedjob_runs_total{result="Failed"} 0x10 1x50`,
			firesAt: 11 * time.Minute, quietAt: 10 * time.Minute, whenWhat: "a run failed"},
		{alert: "GuardedJobRunsFailing", series: `guardedjob_runs_total{result="MaxHoldExceeded"} 0x10 1x50`,
			firesAt: 11 * time.Minute, whenWhat: "a run hit maxHold"},
		{alert: "GuardedJobLockBusy", series: `guardedjob_runs_total{result="Busy"} 0x9 1x9 2x9 3x30`,
			firesAt: 30 * time.Minute, quietAt: 29 * time.Minute, whenWhat: "the third Busy run"},
		{alert: "GuardedJobLockBusy", series: `guardedjob_runs_total{result="Busy"} 0x5 1x10 2x45`,
			whenWhat: "two Busy runs are not yet a pattern"},
		{alert: "GuardedJobNoRecentSuccess", series: `guardedjob_last_success_time_seconds{namespace="payments", name="settle"} -540 60x59`,
			firesAt: 42 * time.Minute, quietAt: 41 * time.Minute, whenWhat: "no success for three 10-minute intervals, for 10 minutes"},
		{alert: "GuardedJobNoRecentSuccess", series: `guardedjob_last_success_time_seconds{namespace="payments", name="settle"} _x60
			guardedjob_created_time_seconds{namespace="payments", name="settle"} 0x60`,
			firesAt: 41 * time.Minute, quietAt: 40 * time.Minute, whenWhat: "a GuardedJob that never succeeded since it was created"},
		{alert: "GuardedJobNoRecentSuccess", series: `guardedjob_last_success_time_seconds{namespace="payments", name="settle"} -540 60x59
			guardedjob_next_schedule_time_seconds{namespace="payments", name="settle"} 600x9 _x50`,
			whenWhat: "a suspended GuardedJob (no next schedule time)"},
		{alert: "GuardedJobBusyInARow", series: `guardedjob_busy_runs_in_a_row{namespace="payments", name="settle"} 0x9 1x9 2x9 3x30`,
			firesAt: 30 * time.Minute, quietAt: 29 * time.Minute, whenWhat: "the third Busy run in a row"},
		{alert: "GuardedJobBusyInARow", series: `guardedjob_busy_runs_in_a_row{namespace="payments", name="settle"} 0x9 1x9 2x9 0x30`,
			whenWhat: "two Busy runs and then one that ran"},
		{alert: "GuardedJobScheduleSkewHigh", series: `guardedjob_schedule_skew_seconds_bucket{le="1"} 100+0.1x20 102x40
			guardedjob_schedule_skew_seconds_bucket{le="60"} 100+0.1x20 102x40`,
			firesAt: 23 * time.Minute, quietAt: 22 * time.Minute, whenWhat: "from minute 20 on, runs start 100s late (more than 10% of the hour's runs by minute 23)"},
		{alert: "GuardedJobScheduleSkewHigh", series: `guardedjob_schedule_skew_seconds_bucket{le="1"} 100+0.1x20 102x40`,
			whenWhat: "runs start seconds late, within a minute (a leader change)"},
		{alert: "GuardedJobReconcileErrors", series: `controller_runtime_reconcile_errors_total{controller="guardedjob"} 0x10 0+2x50`,
			firesAt: 27 * time.Minute, quietAt: 26 * time.Minute, whenWhat: "reconciles keep failing for 15 minutes"},
		{alert: "GuardedJobManagerDown", series: `up{job="guardedjob-manager-metrics", instance="10.0.0.1:8443"} 1x10 0x50`,
			firesAt: 16 * time.Minute, quietAt: 15 * time.Minute, whenWhat: "the manager stops answering for 5 minutes"},
		{alert: "GuardedJobManagerDown", series: `up{job="guardedjob-manager-metrics", instance="10.0.0.1:8443"} 0x60
			up{job="gj-guardedjob-manager-metrics", instance="10.0.0.2:8443"} 1x60`,
			whenWhat: "a Helm release's manager answers"},
	}
	rules := loadRules(t)
	covered := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.alert+" on "+tt.whenWhat, func(t *testing.T) {
			g := NewWithT(t)
			rule, ok := rules[tt.alert]
			g.Expect(ok).To(BeTrue(), "alert %s exists", tt.alert)
			covered[tt.alert] = true
			series := override(healthy, tt.series)
			firing := firingMinutes(t, series, rule)
			if tt.firesAt == 0 {
				g.Expect(firing).To(BeEmpty())
				return
			}
			g.Expect(firing).To(ContainElement(tt.firesAt), "fires at %s", tt.firesAt)
			if tt.quietAt != 0 {
				g.Expect(firing).NotTo(ContainElement(tt.quietAt), "not yet at %s", tt.quietAt)
			}
			// Nothing fires early: before the trouble the manager was healthy.
			g.Expect(slices.Min(firing)).To(BeNumerically(">", tt.quietAt))
		})
	}
	t.Run("a healthy manager raises no alert", func(t *testing.T) {
		for name, rule := range rules {
			NewWithT(t).Expect(firingMinutes(t, override(healthy, ""), rule)).To(BeEmpty(), name)
		}
	})
	for name := range rules {
		NewWithT(t).Expect(covered).To(HaveKey(name), "alert %s has a test", name)
	}
}

// override replaces the healthy series that have the same metric name and labels
// as a line of extra (or adds the line).
func override(healthy, extra string) string {
	key := func(line string) string { return strings.Fields(strings.ReplaceAll(line, ", ", ","))[0] }
	lines := strings.Split(strings.TrimSpace(healthy), "\n")
	for x := range strings.SplitSeq(strings.TrimSpace(extra), "\n") {
		x = strings.TrimSpace(x)
		if x == "" {
			continue
		}
		replaced := false
		for i, l := range lines {
			if key(strings.TrimSpace(l)) == key(x) {
				lines[i], replaced = x, true
			}
		}
		if !replaced {
			lines = append(lines, x)
		}
	}
	return "load 1m\n" + strings.Join(lines, "\n")
}

// firingMinutes evaluates the alert's expression every minute of the hour and
// returns the minutes at which the alert fires, honouring its "for".
func firingMinutes(t *testing.T, series string, rule rulefmt.Rule) []time.Duration {
	t.Helper()
	g := NewWithT(t)
	storage := promqltest.LoadedStorage(t, series)
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	hold := time.Duration(rule.For)
	var active time.Duration = -1 // since when the expression returns something
	var firing []time.Duration
	for at := time.Duration(0); at <= time.Hour; at += time.Minute {
		q, err := engine.NewInstantQuery(context.Background(), storage, nil, rule.Expr, time.Unix(0, 0).Add(at))
		g.Expect(err).NotTo(HaveOccurred())
		res := q.Exec(context.Background())
		g.Expect(res.Err).NotTo(HaveOccurred())
		vec, err := res.Vector()
		g.Expect(err).NotTo(HaveOccurred())
		q.Close()
		if len(vec) == 0 {
			active = -1
			continue
		}
		if active < 0 {
			active = at
		}
		if at-active >= hold {
			firing = append(firing, at)
		}
	}
	return firing
}
