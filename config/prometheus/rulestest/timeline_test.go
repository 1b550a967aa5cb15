package rulestest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"go.yaml.in/yaml/v3"
)

// The alerts whose harm comes within a minute, against the fault they warn about,
// second by second: the manager scraped as the install's ServiceMonitor scrapes it
// (interval, scrapeTimeout), the alert evaluated at its group's interval, and the
// fault at every offset from the scrapes and every evaluation phase. The lease
// timing is the API's defaults (api/v1alpha1: ttl 60s, renewInterval a third of
// it, terminationGracePeriodSeconds 30s, --redis-timeout 3s) unless a case says
// otherwise.

// leaseTiming is a run's lease, as docs/failure-semantics.md has it.
type leaseTiming struct {
	ttl, renewInterval, podGrace, callTimeout time.Duration
}

var defaultLease = leaseTiming{ttl: 60 * time.Second, renewInterval: 20 * time.Second, podGrace: 30 * time.Second, callTimeout: 3 * time.Second}

// expiresAfterDeath is the earliest the lease of a run can expire once no manager
// renews it: its last renewal came up to renewInterval before.
func (l leaseTiming) expiresAfterDeath() time.Duration { return l.ttl - l.renewInterval }

// firstFailure is when, after the last good renewal, the keeper first reports the
// lease failing: the next renewal, after its call timeout (no answer).
func (l leaseTiming) firstFailure() time.Duration { return l.renewInterval + l.callTimeout }

// selfFence is when, after the last good renewal, the run's Pods are stopped.
func (l leaseTiming) selfFence() time.Duration { return l.ttl - l.podGrace - 5*time.Second }

// cadence is how an install scrapes the manager and evaluates an alert.
type cadence struct {
	scrape, timeout, eval time.Duration
}

// install is the rules and the scraping of one way to install.
type install struct {
	name     string
	rules    map[string]rulefmt.Rule
	interval map[string]time.Duration // the evaluation interval of each alert's group
	monitor  object
}

func (in install) cadence(t *testing.T, alert string) cadence {
	t.Helper()
	g := NewWithT(t)
	spec, _ := in.monitor["spec"].(map[string]any)
	endpoints, _ := spec["endpoints"].([]any)
	g.Expect(endpoints).To(HaveLen(1))
	ep, _ := endpoints[0].(map[string]any)
	duration := func(key string) time.Duration {
		s, _ := ep[key].(string)
		d, err := model.ParseDuration(s)
		g.Expect(err).NotTo(HaveOccurred(), "the ServiceMonitor of %s sets %s", in.name, key)
		return time.Duration(d)
	}
	c := cadence{scrape: duration("interval"), timeout: duration("scrapeTimeout"), eval: in.interval[alert]}
	g.Expect(c.eval).To(BeNumerically(">", 0), "%s's group in %s sets its evaluation interval", alert, in.name)
	g.Expect(c.timeout).To(BeNumerically("<=", c.scrape))
	return c
}

// groupIntervals returns each alert's group interval in a rule file's groups.
func groupIntervals(t *testing.T, content []byte) map[string]time.Duration {
	t.Helper()
	var f struct {
		Groups []struct {
			Interval string `yaml:"interval"`
			Rules    []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	NewWithT(t).Expect(yaml.Unmarshal(content, &f)).To(Succeed())
	out := map[string]time.Duration{}
	for _, g := range f.Groups {
		var d time.Duration
		if g.Interval != "" {
			md, err := model.ParseDuration(g.Interval)
			NewWithT(t).Expect(err).NotTo(HaveOccurred())
			d = time.Duration(md)
		}
		for _, r := range g.Rules {
			out[r.Alert] = d
		}
	}
	return out
}

// timelineInstalls are kustomize's install and the chart's (monitoring on).
func timelineInstalls(t *testing.T) []install {
	t.Helper()
	file, err := os.ReadFile(rulesFile)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	objs := renderChart(t, chartDir, chartRelease)
	rule := find(t, objs, "PrometheusRule")
	spec, _ := rule["spec"].(map[string]any)
	chartGroups, err := yaml.Marshal(map[string]any{"groups": spec["groups"]})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return []install{
		{name: "kustomize", rules: fileRules(t).rules, interval: groupIntervals(t, file), monitor: readYAML(t, "../monitor.yaml")},
		{name: "the chart", rules: chartRules(t, objs, "cluster").rules, interval: groupIntervals(t, chartGroups), monitor: find(t, objs, "ServiceMonitor")},
	}
}

// sample is what Prometheus holds for a series at one second: nothing, a value,
// or the staleness marker it writes when a series or target goes.
type sample struct {
	set   bool
	value float64
	stale bool
}

// timeline is series at one-second resolution, rendered in promqltest's load
// notation.
type timeline struct {
	seconds int
	series  map[string][]sample
	order   []string
}

func newTimeline(seconds int) *timeline {
	return &timeline{seconds: seconds, series: map[string][]sample{}}
}

func (tl *timeline) at(metric string, second int, s sample) {
	if _, ok := tl.series[metric]; !ok {
		tl.series[metric] = make([]sample, tl.seconds+1)
		tl.order = append(tl.order, metric)
	}
	if second >= 0 && second <= tl.seconds {
		tl.series[metric][second] = s
	}
}

func (tl *timeline) load() string {
	var b strings.Builder
	b.WriteString("load 1s\n")
	for _, m := range tl.order {
		b.WriteString(m)
		for _, s := range tl.series[m] {
			switch {
			case s.stale:
				b.WriteString(" stale")
			case s.set:
				fmt.Fprintf(&b, " %g", s.value)
			default:
				b.WriteString(" _")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// firstFiring evaluates rule every eval from phase on, as a Prometheus server does,
// and returns when it first fires, or -1.
func firstFiring(t *testing.T, tl *timeline, rule rulefmt.Rule, eval, phase time.Duration) time.Duration {
	t.Helper()
	g := NewWithT(t)
	storage := promqltest.LoadedStorage(t, tl.load())
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	expr, err := promParser.ParseExpr(rule.Expr)
	g.Expect(err).NotTo(HaveOccurred())
	ar := rules.NewAlertingRule(rule.Alert, expr, time.Duration(rule.For), time.Duration(rule.KeepFiringFor),
		labels.FromMap(rule.Labels), labels.FromMap(rule.Annotations), labels.EmptyLabels(), "", false, promslog.NewNopLogger())
	query := rules.EngineQueryFunc(engine, storage)
	for at := phase; at <= time.Duration(tl.seconds)*time.Second; at += eval {
		_, err := ar.Eval(context.Background(), 0, time.Unix(0, 0).Add(at), query, nil, 0)
		g.Expect(err).NotTo(HaveOccurred())
		for _, a := range ar.ActiveAlerts() {
			if a.State == rules.StateFiring {
				return at
			}
		}
	}
	return -1
}

// scrapes calls f at every scrape of a target scraped every interval from phase
// on, with the scrape's second.
func scrapes(seconds int, interval, phase time.Duration, f func(second int)) {
	for at := phase; at <= time.Duration(seconds)*time.Second; at += interval {
		f(int(at / time.Second))
	}
}

func secs(d time.Duration) int { return int(d / time.Second) }

// checked reports whether an alert with the same expression and for, scraped and
// evaluated alike, was checked already, and records this one.
func checked(seen map[string]bool, rule rulefmt.Rule, c cadence) bool {
	key := fmt.Sprintf("%s|%s|%+v", rule.Expr, rule.For, c)
	if seen[key] {
		return true
	}
	seen[key] = true
	return false
}

// GuardedJobManagerDown fires before a lease the dead manager held could expire:
// within ttl - renewInterval of the death (40s with the defaults), whatever the
// death's offset from the scrapes and the evaluations. It stays quiet while one
// replica answers, through a scrape that both replicas miss, and on a Prometheus
// that never scraped a manager.
func TestManagerDownFiresBeforeALeaseCouldExpire(t *testing.T) {
	const window = 300 // seconds
	const deathAt = 120
	healthyUntil := func(tl *timeline, c cadence, instance string, until int, after func(tl *timeline, metric string, second int)) {
		metric := `up{cluster="eu-1", job="guardedjob", namespace="guardedjob-system", instance="` + instance + `"}`
		scrapes(window, c.scrape, 0, func(s int) {
			if s < until {
				tl.at(metric, s, sample{set: true, value: 1})
			} else if after != nil {
				after(tl, metric, s)
			}
		})
	}
	faults := []struct {
		name string
		// after says what each scrape after the death gives.
		after func(c cadence) func(tl *timeline, metric string, second int)
	}{
		{"every replica's process exits (the scrape is refused)", func(cadence) func(*timeline, string, int) {
			return func(tl *timeline, m string, s int) { tl.at(m, s, sample{set: true, value: 0}) }
		}},
		{"the nodes of every replica are lost (the scrape times out)", func(c cadence) func(*timeline, string, int) {
			// Written when the timeout ends; counted from then, to be safe.
			return func(tl *timeline, m string, s int) { tl.at(m, s+secs(c.timeout), sample{set: true, value: 0}) }
		}},
		{"the manager's Pods are gone (its targets go)", func(cadence) func(*timeline, string, int) {
			first := true
			return func(tl *timeline, m string, s int) {
				if first {
					tl.at(m, s, sample{stale: true})
					first = false
				}
			}
		}},
	}
	seen := map[string]bool{}
	for _, in := range timelineInstalls(t) {
		rule := in.rules["GuardedJobManagerDown"]
		c := in.cadence(t, "GuardedJobManagerDown")
		if checked(seen, rule, c) {
			continue // the same alert, scraped and evaluated alike: the same timelines
		}
		harm := time.Duration(deathAt)*time.Second + defaultLease.expiresAfterDeath()
		for _, f := range faults {
			t.Run(in.name+": "+f.name, func(t *testing.T) {
				g := NewWithT(t)
				latest := time.Duration(0)
				for offset := range secs(c.scrape) {
					death := deathAt + offset
					for phase := time.Duration(0); phase < c.eval; phase += time.Second {
						tl := newTimeline(window)
						healthyUntil(tl, c, "10.0.0.1:8443", death, f.after(c))
						healthyUntil(tl, c, "10.0.0.2:8443", death, f.after(c))
						fired := firstFiring(t, tl, rule, c.eval, phase)
						g.Expect(fired).To(BeNumerically(">", time.Duration(death)*time.Second),
							"not before the death at %ds (evaluation phase %s)", death, phase)
						g.Expect(fired).To(BeNumerically("<", harm+time.Duration(offset)*time.Second),
							"death at %ds, evaluation phase %s: fires before a lease could expire at %s", death, phase, harm+time.Duration(offset)*time.Second)
						latest = max(latest, fired-time.Duration(death)*time.Second)
					}
				}
				t.Logf("fires at most %s after the death; a lease can expire %s after it", latest, defaultLease.expiresAfterDeath())
			})
		}
		t.Run(in.name+": quiet", func(t *testing.T) {
			for _, q := range []struct {
				name  string
				build func(tl *timeline)
			}{
				{"one of two replicas dies: the other takes over", func(tl *timeline) {
					healthyUntil(tl, c, "10.0.0.1:8443", deathAt, func(tl *timeline, m string, s int) { tl.at(m, s, sample{set: true, value: 0}) })
					healthyUntil(tl, c, "10.0.0.2:8443", window+1, nil)
				}},
				{"both replicas miss one scrape", func(tl *timeline) {
					for _, instance := range []string{"10.0.0.1:8443", "10.0.0.2:8443"} {
						healthyUntil(tl, c, instance, window+1, nil)
						tl.at(`up{cluster="eu-1", job="guardedjob", namespace="guardedjob-system", instance="`+instance+`"}`,
							deathAt/secs(c.scrape)*secs(c.scrape), sample{set: true, value: 0})
					}
				}},
				{"a Prometheus that never scraped a manager (the rules loaded where none runs)", func(tl *timeline) {
					scrapes(window, c.scrape, 0, func(s int) {
						tl.at(`up{cluster="eu-1", job="kubelet", namespace="kube-system", instance="10.0.0.9:10250"}`, s, sample{set: true, value: 1})
					})
				}},
			} {
				for phase := time.Duration(0); phase < c.eval; phase += time.Second {
					tl := newTimeline(window)
					q.build(tl)
					NewWithT(t).Expect(firstFiring(t, tl, rule, c.eval, phase)).To(BeNumerically("<", 0), "%s (evaluation phase %s)", q.name, phase)
				}
			}
		})
	}
}

// GuardedJobRenewalsFailing fires before the self-fence stop whenever the run's
// lease leaves room for one scrape, one evaluation and the alert's for: between
// its first failed renewal and its self-fence deadline; with the defaults (25s
// after the last good renewal, 2s after the first failure is known) nothing
// scraped can, and it fires within that much after the first failure, while the
// store is still down. A renewal that fails once and succeeds at its retry does
// not fire it.
func TestRenewalsFailingFiresBeforeTheSelfFenceStopWhenTheLeaseLeavesRoom(t *testing.T) {
	const window = 400
	const lastGood = 100
	info := `guardedjob_info{cluster="eu-1", job="guardedjob", namespace="payments", name="settle", schedule="@daily", timezone="UTC", concurrency_policy="Forbid"}`
	failing := `guardedjob_failing_leases{cluster="eu-1", job="guardedjob", namespace="payments", name="settle"}`
	// build is the manager's series: the GuardedJob's info at every scrape, and its
	// failing leases from failFrom until failUntil (-1: the end), stale at the
	// first scrape after.
	build := func(c cadence, scrapePhase time.Duration, failFrom, failUntil int) *timeline {
		tl := newTimeline(window)
		gone := false
		scrapes(window, c.scrape, scrapePhase, func(s int) {
			tl.at(info, s, sample{set: true, value: 1})
			switch {
			case s >= failFrom && (failUntil < 0 || s < failUntil):
				tl.at(failing, s, sample{set: true, value: 1})
			case s >= failFrom && !gone:
				tl.at(failing, s, sample{stale: true})
				gone = true
			}
		})
		return tl
	}
	seen := map[string]bool{}
	for _, in := range timelineInstalls(t) {
		rule := in.rules["GuardedJobRenewalsFailing"]
		c := in.cadence(t, "GuardedJobRenewalsFailing")
		if checked(seen, rule, c) {
			continue // the same alert, scraped and evaluated alike: the same timelines
		}
		// What a lease needs for a warning before its stop: its first failure
		// known, scraped, evaluated, and held for the alert's for.
		room := c.scrape + c.eval + time.Duration(rule.For)
		long := leaseTiming{ttl: 2 * time.Minute, renewInterval: 40 * time.Second, podGrace: 30 * time.Second, callTimeout: 3 * time.Second}
		for _, tc := range []struct {
			name  string
			lease leaseTiming
		}{
			{"a store outage during a run with lock.ttl 2m", long},
			{"a store outage during a run with the default lease", defaultLease},
		} {
			t.Run(in.name+": "+tc.name, func(t *testing.T) {
				g := NewWithT(t)
				failFrom := lastGood + secs(tc.lease.firstFailure())
				stop := time.Duration(lastGood)*time.Second + tc.lease.selfFence()
				hasRoom := tc.lease.selfFence()-tc.lease.firstFailure() > room
				latest := time.Duration(0)
				for scrapePhase := time.Duration(0); scrapePhase < c.scrape; scrapePhase += time.Second {
					for phase := time.Duration(0); phase < c.eval; phase += time.Second {
						fired := firstFiring(t, build(c, scrapePhase, failFrom, -1), rule, c.eval, phase)
						g.Expect(fired).To(BeNumerically(">=", time.Duration(failFrom)*time.Second), "not before the first failed renewal")
						g.Expect(fired).To(BeNumerically("<=", time.Duration(failFrom)*time.Second+room),
							"fires within one scrape, one evaluation and its for of the first failed renewal (scrape phase %s, evaluation phase %s)", scrapePhase, phase)
						if hasRoom {
							g.Expect(fired).To(BeNumerically("<", stop), "fires before the self-fence stop at %s (scrape phase %s, evaluation phase %s)", stop, scrapePhase, phase)
						}
						latest = max(latest, fired-time.Duration(lastGood)*time.Second)
					}
				}
				t.Logf("ttl %s, renewInterval %s, grace %s: fires at most %s after the last good renewal; the Pods are stopped %s after it",
					tc.lease.ttl, tc.lease.renewInterval, tc.lease.podGrace, latest, tc.lease.selfFence())
			})
		}
		g := NewWithT(t)
		g.Expect(long.selfFence()-long.firstFailure()).To(BeNumerically(">", room), "the long lease leaves room")
		t.Run(in.name+": a renewal that fails once and succeeds at its retry", func(t *testing.T) {
			for scrapePhase := time.Duration(0); scrapePhase < c.scrape; scrapePhase += time.Second {
				for phase := time.Duration(0); phase < c.eval; phase += time.Second {
					failFrom := lastGood + secs(defaultLease.firstFailure())
					NewWithT(t).Expect(firstFiring(t, build(c, scrapePhase, failFrom, failFrom+1), rule, c.eval, phase)).To(BeNumerically("<", 0),
						"scrape phase %s, evaluation phase %s", scrapePhase, phase)
				}
			}
		})
	}
}
