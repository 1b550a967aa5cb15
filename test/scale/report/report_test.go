package report

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestTargets(t *testing.T) {
	g := NewWithT(t)
	met := func(r *Report, name string) *bool {
		for _, x := range r.Targets() {
			if strings.HasPrefix(x.Name, name) {
				return x.Met
			}
		}
		t.Fatalf("no target %q in %+v", name, r.Targets())
		return nil
	}
	r := &Report{
		Floor: &Floor{TotalSeconds: 5},
		CronJob: []CronJob{
			{Variant: CronDefaults, Due: 1000, Created: 1000, P99Seconds: 120},
			{Variant: CronEqualLimits, Due: 1000, Created: 1000, P99Seconds: 5.5, APIServerCPUSeconds: 4},
		},
		GuardedJob: &GuardedJob{Due: 1000, Created: 1000, P99Seconds: 6, WritesPerRun: Spread{1, 1, 1}, Renewals: 2000,
			APIServerCPUSeconds: 6, CRDWritesBeforeStart: &Spread{}},
		AtRest: &AtRest{Idle: 9000, Active: 1000, PeakRSSBytes: 200 << 20, WindowSeconds: 60},
	}
	g.Expect(*met(r, "skew p99 ≤ 1.3×")).To(BeTrue(), "6 s against a 5 s floor")
	g.Expect(*met(r, "skew p99 ≥ 5× better")).To(BeTrue())
	g.Expect(*met(r, "skew p99 ≤ 1.25× CronJob")).To(BeTrue())
	g.Expect(*met(r, "API server CPU per run ≤ 1.5×")).To(BeTrue(), "6 ms against 4 ms")
	g.Expect(*met(r, "0 writes to a run's GuardedJob")).To(BeTrue())
	g.Expect(*met(r, "1 API write")).To(BeTrue())
	g.Expect(*met(r, "no API request per renewal")).To(BeTrue())
	g.Expect(*met(r, "10000 GuardedJobs at rest")).To(BeTrue())
	g.Expect(*met(r, "0 API requests at rest")).To(BeTrue())

	r.GuardedJob.P99Seconds = 7
	r.GuardedJob.APIServerCPUSeconds = 6.1
	r.GuardedJob.CRDWritesBeforeStart.Max = 1
	r.GuardedJob.WritesPerRun.Max = 2
	r.GuardedJob.RequestsRenewing = 1
	r.AtRest.PeakRSSBytes = 257 << 20
	r.AtRest.Requests = 2
	r.CronJob[0].Created = 999
	for _, name := range []string{"skew p99 ≤ 1.3×", "skew p99 ≥ 5× better", "skew p99 ≤ 1.25× CronJob", "API server CPU per run ≤ 1.5×", "0 writes to a run's GuardedJob", "1 API write", "no API request per renewal", "10000 GuardedJobs at rest", "0 API requests at rest"} {
		g.Expect(*met(r, name)).To(BeFalse(), name)
	}

	r.AtRest.Idle = 4000
	g.Expect(met(r, "10000 GuardedJobs at rest")).To(BeNil(), "a run with fewer objects says nothing about 10,000")
	g.Expect((&Report{}).Targets()).To(BeEmpty())
	g.Expect(r.Markdown()).To(ContainSubstring("| **no** |"))

	g.Expect(r.Markdown()).NotTo(ContainSubstring("pinned"), "a run that pinned nothing says nothing of a split")
	r.Machine = Machine{CPUs: 2, ServerCPUs: "0", ClientCPUs: "1"}
	g.Expect(r.Markdown()).To(ContainSubstring("2 CPUs (etcd and kube-apiserver pinned to CPU 0, every client and the benchmark to CPU 1)"))
}
