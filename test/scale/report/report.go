// Package report is the scale benchmark's report: what bench-scale writes as JSON,
// the targets it is held to, and the Markdown tables docs/benchmarks.md shows
// (hack/benchtables writes them from the committed reports).
package report

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Report is one run of bench-scale. Durations are in seconds, sizes in bytes.
type Report struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Note says under what conditions the run was taken (a machine shared with
	// other work, say): bench-scale -note.
	Note         string   `json:"note,omitempty"`
	Phases       []string `json:"phases"`
	N            int      `json:"n"`
	Idle         int      `json:"idle"`
	KeeperLeases int      `json:"keeperLeases"`
	Machine      Machine  `json:"machine"`
	// Load is the machine's 1-minute load average, sampled every 5 s.
	Load    Load       `json:"load"`
	Manager ManagerRun `json:"manager"`

	Floor      *Floor      `json:"floor,omitempty"`
	CronJob    []CronJob   `json:"cronJob,omitempty"`
	GuardedJob *GuardedJob `json:"guardedJob,omitempty"`
	AtRest     *AtRest     `json:"atRest,omitempty"`
	Stop       *Stop       `json:"stop,omitempty"`
	Keeper     *Keeper     `json:"keeper,omitempty"`
}

// Machine is where the run was taken.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"goVersion"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	// ServerCPUs and ClientCPUs are the CPU lists etcd and kube-apiserver, and
	// everything else, were pinned to (taskset); empty: not pinned.
	ServerCPUs string `json:"serverCPUs,omitempty"`
	ClientCPUs string `json:"clientCPUs,omitempty"`
}

// Load is the 1-minute load average over the run.
type Load struct {
	Samples int     `json:"samples"`
	Min     float64 `json:"min"`
	Mean    float64 `json:"mean"`
	Max     float64 `json:"max"`
}

// Limits are a controller's client-side limits and workers; QPS 0 is no
// client-side limit.
type Limits struct {
	QPS     float64 `json:"qps"`
	Burst   int     `json:"burst"`
	Workers int     `json:"workers"`
}

func (l Limits) String() string {
	if l.QPS <= 0 {
		return fmt.Sprintf("no client limit, %d workers", l.Workers)
	}
	return fmt.Sprintf("%g QPS, burst %d, %d workers", l.QPS, l.Burst, l.Workers)
}

// ManagerRun is the manager binary as the run started it.
type ManagerRun struct {
	Build  string   `json:"build"`
	Args   []string `json:"args,omitempty"`
	Limits Limits   `json:"limits"`
}

// Floor is what the API server itself allows for the writes one run needs.
type Floor struct {
	Writers         int     `json:"writers"`
	StatusWrites    int     `json:"statusWritesPerRun"`
	JobCreates      int     `json:"jobCreatesPerRun"`
	TotalSeconds    float64 `json:"totalSeconds"`
	WritesPerSecond float64 `json:"writesPerSecond"`
	RunP50Seconds   float64 `json:"runP50Seconds"`
	RunP99Seconds   float64 `json:"runP99Seconds"`
}

// CronJob is kube-controller-manager's CronJob controller with N CronJobs due at
// one minute. Variant "defaults" runs it with its default flags, "equal limits"
// with the manager's client limits and workers.
type CronJob struct {
	Variant     string  `json:"variant"`
	Limits      Limits  `json:"limits"`
	Due         int     `json:"due"`
	Created     int     `json:"created"`
	P50Seconds  float64 `json:"p50Seconds"`
	P99Seconds  float64 `json:"p99Seconds"`
	LastSeconds float64 `json:"lastSeconds"`
	// Steps takes the runs apart (see GuardedJob.Steps).
	Steps []Step `json:"steps,omitempty"`
	// APIServerCPUSeconds is the API server's CPU from the due time until the
	// last Job was created.
	APIServerCPUSeconds float64 `json:"apiServerCPUSeconds,omitempty"`
	// ObjectBytes is one CronJob after its run, as JSON (managedFields included).
	ObjectBytes int `json:"objectBytes,omitempty"`
}

// The CronJob variants.
const (
	CronDefaults    = "defaults"
	CronEqualLimits = "equal limits"
)

// Spread is the minimum, median and maximum of a count over runs.
type Spread struct {
	Min    int `json:"min"`
	Median int `json:"median"`
	Max    int `json:"max"`
}

// GuardedJob is the manager with N GuardedJobs due at one minute.
type GuardedJob struct {
	Due         int     `json:"due"`
	Created     int     `json:"created"`
	P50Seconds  float64 `json:"p50Seconds"`
	P99Seconds  float64 `json:"p99Seconds"`
	LastSeconds float64 `json:"lastSeconds"`
	// StartP50Seconds, StartP99Seconds and StartLastSeconds are when each run's
	// Job could start, after the due time: the API server's answer to the
	// patch that opened its start gate. A CronJob's Job can start once created.
	StartP50Seconds  float64 `json:"startP50Seconds,omitempty"`
	StartP99Seconds  float64 `json:"startP99Seconds,omitempty"`
	StartLastSeconds float64 `json:"startLastSeconds,omitempty"`
	// Steps takes the runs apart: the API server's time on each request of a
	// run and the manager's time between them.
	Steps []Step `json:"steps,omitempty"`
	// APIServerCPUSeconds is the API server's CPU from the due time until the
	// last Job could start; PassSeconds is the mean time of one of the
	// manager's passes in the burst, its own work and its waits on the API
	// server and Redis together.
	APIServerCPUSeconds float64 `json:"apiServerCPUSeconds,omitempty"`
	PassSeconds         float64 `json:"passSeconds,omitempty"`
	// ObjectBytes is one GuardedJob after its run's record, as JSON
	// (managedFields included).
	ObjectBytes int `json:"objectBytes,omitempty"`
	// WritesPerRun counts the writes of each run up to and including its Job's
	// creation, events aside.
	WritesPerRun Spread `json:"writesPerRun"`
	// CRDWritesBeforeStart counts the writes to each run's GuardedJob (its
	// status or the object) from the due time until its Job could start; nil
	// in a report without the gates' times.
	CRDWritesBeforeStart *Spread `json:"crdWritesBeforeStart,omitempty"`
	// RequestsPerRun is the manager's requests by "verb resource", from the due
	// time to 5 s after the last Job (WindowSeconds), per run.
	RequestsPerRun   map[string]float64 `json:"requestsPerRun"`
	WindowSeconds    float64            `json:"windowSeconds"`
	CPUSeconds       float64            `json:"cpuSeconds"`
	PeakRSSBytes     int64              `json:"peakRSSBytes"`
	ReconcilesPerRun float64            `json:"reconcilesPerRun"`
	// RecordedAfterSeconds is when every run's Job UID was in its status, after
	// the due time.
	RecordedAfterSeconds float64 `json:"recordedAfterSeconds"`
	// Renewals over RenewWindowSeconds with every run active, and the API
	// requests meanwhile.
	Renewals           int     `json:"renewals"`
	RenewWindowSeconds float64 `json:"renewWindowSeconds"`
	RequestsRenewing   int     `json:"requestsWhileRenewing"`
}

// Step is one step of the GuardedJob runs of the burst, over Runs runs.
type Step struct {
	Name       string  `json:"name"`
	Runs       int     `json:"runs"`
	P50Seconds float64 `json:"p50Seconds"`
	P99Seconds float64 `json:"p99Seconds"`
}

// SkewP99 is the GuardedJob skew the targets hold: until the run's Job could
// start (its gate open) when the report has it, else until its creation.
func (g *GuardedJob) SkewP99() float64 {
	if g.StartP99Seconds > 0 {
		return g.StartP99Seconds
	}
	return g.P99Seconds
}

// AtRest is the manager with Idle GuardedJobs due months from now beside Active
// runs, over WindowSeconds.
type AtRest struct {
	Idle          int     `json:"idle"`
	Active        int     `json:"active"`
	WindowSeconds float64 `json:"windowSeconds"`
	CPUSeconds    float64 `json:"cpuSeconds"`
	Reconciles    int     `json:"reconciles"`
	Requests      int     `json:"requests"`
	Writes        int     `json:"writes"`
	RSSBytes      int64   `json:"rssBytes"`
	PeakRSSBytes  int64   `json:"peakRSSBytes"`
	// Series is the number of metric series one scrape served.
	Series int `json:"series"`
}

// Stop is Redis killed under the active runs.
type Stop struct {
	Runs               int     `json:"runs"`
	JobsDeleted        int     `json:"jobsDeleted"`
	PodsDeleted        int     `json:"podsDeleted"`
	LastJobSeconds     float64 `json:"lastJobDeleteSeconds"`
	LastPodSeconds     float64 `json:"lastPodDeleteSeconds"`
	EarliestExpirySecs float64 `json:"earliestExpirySeconds"`
	LatestLateSeconds  float64 `json:"latestAfterDeadlineSeconds"`
	SmallestMarginSecs float64 `json:"smallestMarginSeconds"`
	BudgetSeconds      float64 `json:"budgetSeconds"`
	TTLSeconds         float64 `json:"ttlSeconds"`
	RenewIntervalSecs  float64 `json:"renewIntervalSeconds"`
	PodGraceSeconds    float64 `json:"podGraceSeconds"`
}

// Keeper is one keeper holding many leases for a while.
type Keeper struct {
	Leases            int     `json:"leases"`
	Seconds           float64 `json:"seconds"`
	RenewalsOK        int     `json:"renewalsOK"`
	RenewalsExpected  float64 `json:"renewalsExpected"`
	Failed            int     `json:"failed"`
	Lost              int     `json:"lost"`
	Pipelines         int     `json:"pipelines"`
	Late              int     `json:"late"`
	NotHeld           int     `json:"notHeld"`
	OldestSeconds     float64 `json:"oldestRenewalSeconds"`
	LowestPTTLSeconds float64 `json:"lowestPTTLSeconds"`
	KeysAtEnd         int     `json:"keysAtEnd"`
	CPUSeconds        float64 `json:"cpuSeconds"`
	HeapPerLease      float64 `json:"heapBytesPerLease"`
}

// CronJobVariant returns the CronJob run of a variant, or nil.
func (r *Report) CronJobVariant(v string) *CronJob {
	for i := range r.CronJob {
		if r.CronJob[i].Variant == v {
			return &r.CronJob[i]
		}
	}
	return nil
}

// Target is one figure the issue holds the manager to.
type Target struct {
	Name   string
	Result string
	// Met is nil when the run does not have the figures to tell.
	Met *bool
}

// The targets.
const (
	TargetFloorRatio  = 1.3
	TargetCronFactor  = 5.0
	TargetCronEqual   = 1.25
	TargetCPUPerRun   = 1.5
	TargetRestObjects = 10000
	TargetRestRSS     = 256 << 20
	TargetWritesRun   = 1
)

// Targets checks the run against the targets: skew p99 within 1.3x the API
// server's floor for the same writes, at least 5x better than CronJob at its
// defaults and within 1.25x CronJob at the manager's own limits, the API
// server's CPU per run within 1.5x CronJob's, 10,000 GuardedJobs at rest in
// 256 MiB with no API request, no request per renewal, one write per run up to
// its Job (the Job: status follows it) and no write to the GuardedJob before
// the Job may start.
func (r *Report) Targets() []Target {
	var out []Target
	add := func(name, result string, met *bool) { out = append(out, Target{Name: name, Result: result, Met: met}) }
	is := func(b bool) *bool { return &b }
	gj := r.GuardedJob
	if gj != nil && r.Floor != nil && r.Floor.TotalSeconds > 0 {
		ratio := gj.SkewP99() / r.Floor.TotalSeconds
		add(fmt.Sprintf("skew p99 ≤ %.1f× the API server's floor for the same writes", TargetFloorRatio),
			fmt.Sprintf("%.2f× (%s / %s)", ratio, Secs(gj.SkewP99()), Secs(r.Floor.TotalSeconds)), is(ratio <= TargetFloorRatio))
	}
	if c := r.CronJobVariant(CronDefaults); gj != nil && c != nil && gj.SkewP99() > 0 {
		f := c.P99Seconds / gj.SkewP99()
		add(fmt.Sprintf("skew p99 ≥ %.0f× better than CronJob at kube-controller-manager's defaults", TargetCronFactor),
			fmt.Sprintf("%.1f× (%s / %s)", f, Secs(c.P99Seconds), Secs(gj.SkewP99())), is(f >= TargetCronFactor && c.Created == c.Due))
	}
	if c := r.CronJobVariant(CronEqualLimits); gj != nil && c != nil {
		add(fmt.Sprintf("skew p99 ≤ %.2f× CronJob's at the manager's own limits and workers", TargetCronEqual),
			fmt.Sprintf("%.2f× (%s / %s; %s)", gj.SkewP99()/c.P99Seconds, Secs(gj.SkewP99()), Secs(c.P99Seconds), c.Limits),
			is(gj.SkewP99() <= TargetCronEqual*c.P99Seconds && gj.Created == gj.Due))
		if gj.APIServerCPUSeconds > 0 && c.APIServerCPUSeconds > 0 && gj.Created > 0 && c.Created > 0 {
			g, cj := gj.APIServerCPUSeconds/float64(gj.Created), c.APIServerCPUSeconds/float64(c.Created)
			add(fmt.Sprintf("API server CPU per run ≤ %.1f× CronJob's at the manager's own limits", TargetCPUPerRun),
				fmt.Sprintf("%.2f× (%.1f ms / %.1f ms; windows: until 5 s and 2 s after the last Job)", g/cj, 1000*g, 1000*cj), is(g <= TargetCPUPerRun*cj))
		}
	}
	if gj != nil {
		add(fmt.Sprintf("%d API write per run up to and including its Job, events aside", TargetWritesRun),
			fmt.Sprintf("%d (min %d, max %d)", gj.WritesPerRun.Median, gj.WritesPerRun.Min, gj.WritesPerRun.Max), is(gj.WritesPerRun.Max <= TargetWritesRun))
		if w := gj.CRDWritesBeforeStart; w != nil {
			add("0 writes to a run's GuardedJob before its Job may start",
				fmt.Sprintf("%d (min %d, max %d)", w.Median, w.Min, w.Max), is(w.Max == 0))
		}
		add("no API request per renewal", fmt.Sprintf("%d requests while %d leases were renewed", gj.RequestsRenewing, gj.Renewals),
			is(gj.RequestsRenewing == 0 && gj.Renewals > 0))
	}
	if a := r.AtRest; a != nil {
		total := a.Idle + a.Active
		var met *bool
		if total >= TargetRestObjects {
			met = is(a.PeakRSSBytes <= TargetRestRSS)
		}
		add(fmt.Sprintf("%d GuardedJobs at rest with %d active runs: peak RSS ≤ %s, per-object metrics on", TargetRestObjects, TargetRestObjects/10, MiB(TargetRestRSS)),
			fmt.Sprintf("%s peak (%s at the end) with %d GuardedJobs, %d active", MiB(a.PeakRSSBytes), MiB(a.RSSBytes), total, a.Active), met)
		add("0 API requests at rest", fmt.Sprintf("%d in %s", a.Requests, Secs(a.WindowSeconds)), is(a.Requests == 0))
	}
	return out
}

// burstRows writes the rows that take a burst's runs apart: one object's size,
// the API server's CPU from the due time until settle after the last Job, and
// the runs' steps.
func burstRows(p func(string, ...any), kind, settle string, size int, apiCPU float64, runs int, steps []Step) {
	if size > 0 {
		p("| one %s after its run, JSON with managedFields | %d bytes |\n", kind, size)
	}
	if apiCPU > 0 {
		p("| API server CPU, due time to %s after the last Job | %s (%.1f ms per run) |\n", settle, Secs(apiCPU), 1000*apiCPU/float64(max(1, runs)))
	}
	for _, st := range steps {
		if st.Runs == 0 {
			continue // a step of the other run order
		}
		p("| %s, p50 / p99 over %d runs | %s / %s |\n", st.Name, st.Runs, Short(st.P50Seconds), Short(st.P99Seconds))
	}
}

// Secs formats seconds as "12.34 s".
func Secs(s float64) string { return fmt.Sprintf("%.2f s", s) }

// Short formats seconds as "12 ms" below a second, else as Secs does.
func Short(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0f ms", 1000*s)
	}
	return Secs(s)
}

// MiB formats bytes as "123 MiB".
func MiB(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

// Markdown renders the report's tables as docs/benchmarks.md shows them.
func (r *Report) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("Run of %s to %s UTC (phases %s), N = %d", r.Started.UTC().Format("2006-01-02 15:04"), r.Finished.UTC().Format("15:04"),
		strings.Join(r.Phases, ","), r.N)
	if r.AtRest != nil {
		p(", %d idle", r.Idle)
	}
	p("; %d CPUs", r.Machine.CPUs)
	if r.Machine.ServerCPUs != "" {
		p(" (etcd and kube-apiserver pinned to CPU %s, every client and the benchmark to CPU %s)", r.Machine.ServerCPUs, r.Machine.ClientCPUs)
	}
	p(", %s; manager %s", r.Machine.GoVersion, r.Manager.Build)
	if len(r.Manager.Args) > 0 {
		p(" with `%s`", strings.Join(r.Manager.Args, " "))
	}
	p(" (%s). Load average (1 min) over the run: min %.1f, mean %.1f, max %.1f.", r.Manager.Limits, r.Load.Min, r.Load.Mean, r.Load.Max)
	if r.Note != "" {
		p(" %s", r.Note)
	}
	p("\n\n")

	if t := r.Targets(); len(t) > 0 {
		p("| target | result | met? |\n| --- | --- | --- |\n")
		for _, x := range t {
			met := "not measured at this size"
			if x.Met != nil {
				met = map[bool]string{true: "yes", false: "**no**"}[*x.Met]
			}
			p("| %s | %s | %s |\n", x.Name, x.Result, met)
		}
		p("\n")
	}
	if f := r.Floor; f != nil {
		p("| API-server floor: %d runs' writes (%d status update%s + %d Job create each) from %d writers, no client limit | figure |\n| --- | --- |\n",
			r.N, f.StatusWrites, map[bool]string{true: "s"}[f.StatusWrites != 1], f.JobCreates, f.Writers)
		p("| all runs' writes | %s (%.0f writes/s) |\n| one run's writes p50 / p99 | %s / %s |\n\n", Secs(f.TotalSeconds), f.WritesPerSecond, Secs(f.RunP50Seconds), Secs(f.RunP99Seconds))
	}
	if len(r.CronJob) > 0 || r.GuardedJob != nil {
		p("| %d due in one minute | client limits | created | skew p50 | skew p99 | last |\n| --- | --- | --- | --- | --- | --- |\n", r.N)
		for _, c := range r.CronJob {
			p("| CronJob, kube-controller-manager %s | %s | %d | %s | %s | %s |\n", c.Variant, c.Limits, c.Created, Secs(c.P50Seconds), Secs(c.P99Seconds), Secs(c.LastSeconds))
		}
		if g := r.GuardedJob; g != nil {
			p("| GuardedJob, the manager: Job created | %s | %d | %s | %s | %s |\n", r.Manager.Limits, g.Created, Secs(g.P50Seconds), Secs(g.P99Seconds), Secs(g.LastSeconds))
			if g.StartP99Seconds > 0 {
				p("| GuardedJob, the manager: Job's gate open (may start) | %s | %d | %s | %s | %s |\n", r.Manager.Limits, g.Created,
					Secs(g.StartP50Seconds), Secs(g.StartP99Seconds), Secs(g.StartLastSeconds))
			}
		}
		p("\n")
	}
	for _, c := range r.CronJob {
		// The default limits pace the runs over two minutes: their API server
		// CPU is mostly its background, and their steps are the client's pacing.
		if len(c.Steps) == 0 || c.Variant != CronEqualLimits {
			continue
		}
		p("| CronJob run of %d, %s | figure |\n| --- | --- |\n", c.Due, c.Variant)
		burstRows(p, "CronJob", "2 s", c.ObjectBytes, c.APIServerCPUSeconds, c.Created, c.Steps)
		p("\n")
	}
	if g := r.GuardedJob; g != nil {
		keys := make([]string, 0, len(g.RequestsPerRun))
		for k := range g.RequestsPerRun {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var reqs []string
		for _, k := range keys {
			reqs = append(reqs, fmt.Sprintf("%s %.2f", k, g.RequestsPerRun[k]))
		}
		p("| GuardedJob run of %d | figure |\n| --- | --- |\n", g.Due)
		p("| API writes per run up to and including its Job (events aside) | %d (min %d, max %d) |\n", g.WritesPerRun.Median, g.WritesPerRun.Min, g.WritesPerRun.Max)
		p("| manager requests per run, due time to 5 s after the last Job (%s) | %s |\n", Secs(g.WindowSeconds), strings.Join(reqs, "; "))
		p("| reconciles per run | %.1f |\n", g.ReconcilesPerRun)
		p("| manager CPU in that window; peak RSS | %s; %s |\n", Secs(g.CPUSeconds), MiB(g.PeakRSSBytes))
		p("| every run's Job UID in its status | %s after the due time |\n", Secs(g.RecordedAfterSeconds))
		if g.PassSeconds > 0 {
			p("| one pass of the manager in the burst, mean | %s |\n", Secs(g.PassSeconds))
		}
		burstRows(p, "GuardedJob", "5 s", g.ObjectBytes, g.APIServerCPUSeconds, g.Created, g.Steps)
		p("| renewals with every run active | %d in %s, %d API requests meanwhile |\n\n", g.Renewals, Secs(g.RenewWindowSeconds), g.RequestsRenewing)
	}
	if a := r.AtRest; a != nil {
		p("| at rest: %d idle GuardedJobs + %d active runs, %s | figure |\n| --- | --- |\n", a.Idle, a.Active, Secs(a.WindowSeconds))
		p("| manager CPU | %s (%.1f%% of one core) |\n| reconciles | %d |\n| API requests (writes) | %d (%d) |\n", Secs(a.CPUSeconds),
			100*a.CPUSeconds/max(a.WindowSeconds, 1e-9), a.Reconciles, a.Requests, a.Writes)
		p("| RSS at the end; peak | %s; %s |\n| metric series in one scrape | %d |\n\n", MiB(a.RSSBytes), MiB(a.PeakRSSBytes), a.Series)
	}
	if s := r.Stop; s != nil {
		p("| mass stop: %d active runs, Redis killed (ttl %s, renew %s, Pod grace %s) | figure |\n| --- | --- |\n", s.Runs,
			Secs(s.TTLSeconds), Secs(s.RenewIntervalSecs), Secs(s.PodGraceSeconds))
		p("| Jobs / Pods deleted | %d / %d |\n| last Job delete; last Pod delete (after the kill) | +%s; +%s |\n", s.JobsDeleted, s.PodsDeleted, Secs(s.LastJobSeconds), Secs(s.LastPodSeconds))
		p("| earliest lease expiry | +%s |\n| latest delete after its self-fence deadline (budget %s) | %s |\n", Secs(s.EarliestExpirySecs), Secs(s.BudgetSeconds), Secs(s.LatestLateSeconds))
		p("| smallest margin (expiry − delete − Pod grace) | %s |\n\n", Secs(s.SmallestMarginSecs))
	}
	if k := r.Keeper; k != nil {
		p("| keeper: %d leases for %s | figure |\n| --- | --- |\n", k.Leases, Secs(k.Seconds))
		p("| renewals ok (expected) | %d (%.0f) |\n| failed / lost | %d / %d |\n| pipelines (renewals each) | %d (%.0f) |\n", k.RenewalsOK, k.RenewalsExpected, k.Failed, k.Lost, k.Pipelines,
			float64(k.RenewalsOK)/float64(max(1, k.Pipelines)))
		p("| leases late / not held in samples | %d / %d |\n| oldest last renewal; lowest PTTL sampled | %s; %s |\n", k.Late, k.NotHeld, Secs(k.OldestSeconds), Secs(k.LowestPTTLSeconds))
		p("| keys at the end | %d |\n| CPU (%.1f%% of one core); heap per lease | %s; %.0f B |\n\n", k.KeysAtEnd, 100*k.CPUSeconds/max(k.Seconds, 1e-9), Secs(k.CPUSeconds), k.HeapPerLease)
	}
	return b.String()
}
