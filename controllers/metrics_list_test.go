package controllers

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
)

// metricsList is the list of metric families that dashboards and alerts may name
// (config/prometheus/rulestest reads it).
const metricsList = "../config/prometheus/metrics.txt"

var updateMetricsList = flag.Bool("update", false, "rewrite the guardedjob_* lines of "+metricsList+" from the manager's collectors")

// listedFamily is a line of the metrics list: name, type, labels.
type listedFamily struct {
	name, kind string
	labels     []string
}

func (f listedFamily) String() string {
	return strings.Join(append([]string{f.name, f.kind}, f.labels...), " ")
}

// readMetricsList returns the header comment and the families of the list.
func readMetricsList(t *testing.T) (string, []listedFamily) {
	t.Helper()
	b, err := os.ReadFile(metricsList)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	var header strings.Builder
	var out []listedFamily
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(line, "#") || line == "" {
			if out == nil {
				header.WriteString(line + "\n")
			}
			continue
		}
		f := strings.Fields(line)
		NewWithT(t).Expect(len(f)).To(BeNumerically(">=", 2), "line %q: name, type and labels", line)
		out = append(out, listedFamily{name: f[0], kind: f[1], labels: f[2:]})
	}
	return header.String(), out
}

// descLabels reads a family's name and variable labels from its Desc: client_golang
// has no accessor for them, and its String form is stable.
var descString = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)

// TestMetricsListIsTheCollectors keeps config/prometheus/metrics.txt equal to the
// families the manager's collectors describe, with their labels, so that a
// dashboard or an alert checked against the list names series the manager
// really serves. `go test ./controllers/ -run TestMetricsListIsTheCollectors -update`
// rewrites the list's guardedjob_* lines.
func TestMetricsListIsTheCollectors(t *testing.T) {
	g := NewWithT(t)
	// The custom collectors (and a plain Counter or Gauge, which Go cannot tell
	// apart) describe families whose type their Desc does not carry: each has its
	// type here, and a new one fails below until it is added.
	constKinds := map[string]string{
		"guardedjob_leases": "gauge", "guardedjob_lease_renewals_total": "counter", "guardedjob_lease_renewal_pipelines_total": "counter",
		"guardedjob_failing_leases": "gauge", "guardedjob_created_time_seconds": "gauge", "guardedjob_last_schedule_time_seconds": "gauge",
		"guardedjob_next_schedule_time_seconds": "gauge", "guardedjob_last_success_time_seconds": "gauge", "guardedjob_fence": "gauge",
		"guardedjob_lock_state": "gauge", "guardedjob_object_runs_total": "counter", "guardedjob_busy_runs_in_a_row": "gauge",
		"guardedjob_info": "gauge", "guardedjob_spec_suspend": "gauge", "guardedjob_suspended": "gauge", "guardedjob_status_active": "gauge",
		"guardedjob_failed_runs_in_a_row": "gauge", "guardedjob_suspended_after_failures": "gauge",
		"guardedjob_busy_runs_done_elsewhere_total": "counter", "guardedjob_last_occurrence_done_time_seconds": "gauge",
		"guardedjob_buffered_runs": "gauge", "guardedjob_backfill_remaining": "gauge", "guardedjob_occurrences_abandoned_total": "counter",
	}
	var want []listedFamily
	for _, c := range managerCollectors() {
		kind := ""
		switch c.(type) {
		case prometheus.Histogram, *prometheus.HistogramVec:
			kind = "histogram"
		case *prometheus.CounterVec:
			kind = "counter"
		case *prometheus.GaugeVec:
			kind = "gauge"
		}
		ch := make(chan *prometheus.Desc, 64)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			m := descString.FindStringSubmatch(d.String())
			g.Expect(m).NotTo(BeNil(), "unexpected Desc form %s", d)
			f := listedFamily{name: m[1], kind: kind}
			if f.kind == "" {
				f.kind = constKinds[f.name]
				g.Expect(f.kind).NotTo(BeEmpty(), "the type of %s: add it to constKinds", f.name)
			}
			if m[2] != "" {
				f.labels = strings.Split(m[2], ",")
			}
			want = append(want, f)
		}
	}
	slices.SortFunc(want, func(a, b listedFamily) int { return strings.Compare(a.name, b.name) })

	header, listed := readMetricsList(t)
	var ours, others []listedFamily
	for _, f := range listed {
		if strings.HasPrefix(f.name, "guardedjob_") {
			ours = append(ours, f)
		} else {
			others = append(others, f)
		}
	}
	if *updateMetricsList {
		var b strings.Builder
		b.WriteString(header)
		for _, f := range append(want, others...) {
			b.WriteString(f.String() + "\n")
		}
		g.Expect(os.WriteFile(metricsList, []byte(b.String()), 0o644)).To(Succeed()) //nolint:gosec // a file of the repository
		return
	}
	lines := func(fs []listedFamily) []string {
		out := make([]string, 0, len(fs))
		for _, f := range fs {
			out = append(out, f.String())
		}
		return out
	}
	g.Expect(lines(ours)).To(Equal(lines(want)), "%s is stale: go test ./controllers/ -run TestMetricsListIsTheCollectors -update", metricsList)
}
