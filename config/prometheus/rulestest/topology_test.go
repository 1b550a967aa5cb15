package rulestest

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// The topology the README recommends: the same GuardedJob applied in every
// cluster that shares the lock store. payments/settle runs every 10 minutes in
// eu-1 and us-1; each occurrence runs in the cluster that takes its lock
// first, and the other finds the lock held by that run (Busy). The series are
// each manager's, as it serves them.

// wonByTheOther is eu-1's payments/settle when us-1 wins every race: its run of
// each occurrence ends Busy at the occurrence (minutes 0, 10, ...); us-1's run
// completes a minute later, and eu-1 finds its done-marker a minute after that
// (status.lastOccurrenceDone): the Busy run counts as done elsewhere and ends
// the busy streak. eu-1 never runs a Job: no success of its own.
const wonByTheOther = `
guardedjob_object_runs_total{namespace="payments", name="settle", result="Succeeded"} 0x60
guardedjob_object_runs_total{namespace="payments", name="settle", result="Busy"} 1x9 2x9 3x9 4x9 5x9 6x9 7
guardedjob_busy_runs_done_elsewhere_total{namespace="payments", name="settle"} 0 0 1x9 2x9 3x9 4x9 5x9 6x8
guardedjob_busy_runs_in_a_row{namespace="payments", name="settle"} 1 1 0x7 1 1 0x7 1 1 0x7 1 1 0x7 1 1 0x7 1 1 0x7 1
guardedjob_last_success_time_seconds{namespace="payments", name="settle"} _x60
guardedjob_last_occurrence_done_time_seconds{namespace="payments", name="settle"} -480 -480 120x9 720x9 1320x9 1920x9 2520x9 3120x8
guardedjob_status_active{namespace="payments", name="settle"} 0x60
guardedjob_fence{namespace="payments", name="settle"} 0x60
guardedjob_lock_state{namespace="payments", name="settle", state="Busy"} 1 1 0x7 1 1 0x7 1 1 0x7 1 1 0x7 1 1 0x7 1 1 0x7 1
guardedjob_lock_state{namespace="payments", name="settle", state="Free"} 0 0 1x7 0 0 1x7 0 0 1x7 0 0 1x7 0 0 1x7 0 0 1x7 0
`

// stuckHolder is us-1's payments/settle when its run of an occurrence an hour
// ago never ends: it holds the lock all hour, and every later occurrence is
// Skipped there (concurrencyPolicy Forbid). Nothing is done anywhere.
const stuckHolder = `
guardedjob_object_runs_total{namespace="payments", name="settle", result="Succeeded"} 0x60
guardedjob_object_runs_total{namespace="payments", name="settle", result="Skipped"} 1x9 2x9 3x9 4x9 5x9 6x9 7
guardedjob_last_success_time_seconds{namespace="payments", name="settle"} -3600x60
guardedjob_last_occurrence_done_time_seconds{namespace="payments", name="settle"} -3600x60
guardedjob_status_active{namespace="payments", name="settle"} 1x60
guardedjob_fence{namespace="payments", name="settle"} 7x60
guardedjob_lock_state{namespace="payments", name="settle", state="Held"} 1x60
guardedjob_lock_state{namespace="payments", name="settle", state="Free"} 0x60
`

// lockedOut is eu-1's payments/settle while us-1's stuck run holds the lock:
// every run ends Busy and no occurrence is found done.
const lockedOut = `
guardedjob_object_runs_total{namespace="payments", name="settle", result="Succeeded"} 0x60
guardedjob_object_runs_total{namespace="payments", name="settle", result="Busy"} 1x9 2x9 3x9 4x9 5x9 6x9 7
guardedjob_busy_runs_in_a_row{namespace="payments", name="settle"} 1x9 2x9 3x9 4x9 5x9 6x9 7
guardedjob_last_success_time_seconds{namespace="payments", name="settle"} _x60
guardedjob_last_occurrence_done_time_seconds{namespace="payments", name="settle"} -3600x60
guardedjob_status_active{namespace="payments", name="settle"} 0x60
guardedjob_fence{namespace="payments", name="settle"} 0x60
guardedjob_lock_state{namespace="payments", name="settle", state="Busy"} 1x60
guardedjob_lock_state{namespace="payments", name="settle", state="Free"} 0x60
`

// twoClusters returns eu-1's and us-1's series: the healthy ones overridden by
// each cluster's own.
func twoClusters(t *testing.T, clusterLabel, eu, us string) string {
	t.Helper()
	lines := append(decorate(t, override(t, healthy, eu), clusterLabel, "eu-1"), decorate(t, override(t, healthy, us), clusterLabel, "us-1")...)
	checkServed(t, lines, clusterLabel)
	return "load 1m\n" + strings.Join(lines, "\n")
}

// The alerts of the cluster that loses every race stay quiet while the other
// cluster does every occurrence; when neither does (the other's run is stuck
// holding the lock), they fire in the cluster locked out, and NoRecentSuccess in
// both.
func TestAlertsOfTwoClustersSharingAStoreFireOnlyWhenNoClusterDoesTheOccurrence(t *testing.T) {
	tests := []struct {
		name   string
		eu, us string
		// fires is when each alert first fires, by cluster (payments/settle);
		// every other alert stays quiet in both clusters.
		fires map[string]map[string]time.Duration
	}{
		{name: "us-1 does every occurrence, eu-1 loses every race to it", eu: wonByTheOther},
		{name: "neither does: us-1's run is stuck holding the lock", eu: lockedOut, us: stuckHolder, fires: map[string]map[string]time.Duration{
			"GuardedJobNoRecentSuccess": {"eu-1": 10 * time.Minute, "us-1": 10 * time.Minute},
			"GuardedJobLockBusy":        {"eu-1": 21 * time.Minute},
			"GuardedJobBusyInARow":      {"eu-1": 21 * time.Minute},
		}},
	}
	for _, set := range installs(t) {
		for _, tt := range tests {
			t.Run(set.source+": "+tt.name, func(t *testing.T) {
				series := twoClusters(t, set.clusterLabel, tt.eu, tt.us)
				for _, name := range slices.Sorted(maps.Keys(set.rules)) {
					g := NewWithT(t)
					firing := evaluate(t, series, set.rules[name])
					first := map[string]time.Duration{}
					for _, at := range slices.Sorted(maps.Keys(firing)) {
						for _, a := range firing[at] {
							g.Expect(a.Labels.Get("namespace")).To(Equal("payments"), "%s: %s", name, brief(firing))
							g.Expect(a.Labels.Get("name")).To(Equal("settle"), "%s: %s", name, brief(firing))
							if _, ok := first[a.Labels.Get(set.clusterLabel)]; !ok {
								first[a.Labels.Get(set.clusterLabel)] = at
							}
						}
					}
					want := tt.fires[name]
					if want == nil {
						want = map[string]time.Duration{}
					}
					g.Expect(first).To(Equal(want), "%s fires (cluster: first minute): %s", name, brief(firing))
				}
			})
		}
	}
}
