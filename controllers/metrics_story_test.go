package controllers_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/guardedjob/guardedjob/internal/testutil/metricscrape"
)

// scraper reads a harness manager's metrics endpoint as Prometheus would.
type scraper struct {
	h     *harness
	url   string
	token string
	// last is the body of the latest scrape, for failure messages and for
	// checks on what the endpoint must never show.
	last string
}

// serveMetrics makes the next start serve metrics (HTTPS, authn/authz) and
// returns a scraper holding a token that is allowed to read them.
func (h *harness) serveMetrics() *scraper {
	h.t.Helper()
	if !h.alone {
		h.t.Fatal("a story that reads metrics runs alone (newHarnessAlone): the per-object series come from the manager that started last")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	h.g.Expect(err).NotTo(HaveOccurred())
	h.metricsAddr = l.Addr().String()
	h.g.Expect(l.Close()).To(Succeed())
	return &scraper{h: h, url: "https://" + h.metricsAddr + "/metrics", token: metricscrape.Token(h.t, k8s, "scraper-"+h.ns, true)}
}

// scrape returns the parsed metrics, or nil while the endpoint does not answer.
func (s *scraper) scrape() metricscrape.Metrics {
	code, body := metricscrape.Get(s.url, s.token)
	if code != http.StatusOK {
		return nil
	}
	s.last = body
	m, err := metricscrape.Parse(body)
	s.h.g.Expect(err).NotTo(HaveOccurred())
	return m
}

// value returns a series' value in a fresh scrape, or -1 when it is absent.
func (s *scraper) value(name string, labels ...string) float64 {
	m := s.scrape()
	if m == nil {
		return -1
	}
	v, ok := m.Value(name, labels...)
	if !ok {
		return -1
	}
	return v
}

func unix(t *metav1.Time) float64 { return float64(t.UnixMilli()) / 1000 }

// A run seen through the metrics endpoint: the per-object gauges are the
// status, the run counter and the latency histograms move with the run, and
// every series of the object goes with it.
func TestMetricsFollowARunAndGoWithTheGuardedJob(t *testing.T) {
	h := newHarnessAlone(t)
	m := h.serveMetrics()
	h.start()
	g := h.g
	ctx := context.Background()
	key := h.ns + ":metered"
	gj := h.guardedJob("metered", key)
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 10 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	obj := []string{"namespace", h.ns, "name", "metered"}

	g.Eventually(m.scrape).ShouldNot(BeNil(), "the metrics endpoint answers")
	before := m.scrape()
	skewCount, _ := before.Value("guardedjob_schedule_skew_seconds")
	skewSum, _ := before.HistogramSum("guardedjob_schedule_skew_seconds")
	renewCount, _ := before.Value("guardedjob_lease_renewal_duration_seconds")
	lostStops, _ := before.Value("guardedjob_stop_latency_seconds", "cause", "lost")

	h.create(gj)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	st := h.get(gj).Status
	g.Expect(st.LastFence).To(BeNumerically(">", 0))

	// The gauges are the status kubectl shows.
	g.Eventually(func() float64 { return m.value("guardedjob_fence", obj...) }).Should(Equal(float64(st.LastFence)))
	g.Expect(m.value("guardedjob_lock_state", append(obj, "state", "Held")...)).To(Equal(1.0))
	g.Expect(m.value("guardedjob_lock_state", append(obj, "state", "Free")...)).To(Equal(0.0))
	g.Expect(m.value("guardedjob_last_schedule_time_seconds", obj...)).To(Equal(unix(st.LastScheduleTime)))
	g.Expect(m.value("guardedjob_next_schedule_time_seconds", obj...)).To(Equal(unix(st.NextScheduleTime)))
	g.Expect(m.value("guardedjob_created_time_seconds", obj...)).To(Equal(unix(&gj.CreationTimestamp)))
	g.Expect(m.value("guardedjob_last_success_time_seconds", obj...)).To(Equal(-1.0), "no success yet")
	g.Expect(m.value("guardedjob_object_runs_total", append(obj, "result", "Succeeded")...)).To(Equal(-1.0),
		"a result's counter appears with its first run: thousands of objects serve no zeros")
	g.Expect(m.value("guardedjob_busy_runs_in_a_row", obj...)).To(Equal(-1.0), "no busy streak")
	// As kube-state-metrics has them for a CronJob: info, suspend, active runs.
	g.Expect(m.value("guardedjob_info", append(obj, "schedule", gj.Spec.Schedule, "timezone", "UTC", "concurrency_policy", "Forbid", "store_ref", "")...)).To(Equal(1.0))
	g.Expect(m.value("guardedjob_spec_suspend", obj...)).To(Equal(0.0))
	g.Expect(m.value("guardedjob_status_active", obj...)).To(Equal(1.0))
	g.Expect(st.ActiveCount).To(BeEquivalentTo(1), "the ACTIVE column")
	g.Expect(m.value("guardedjob_failing_leases", obj...)).To(Equal(-1.0), "no series while renewals succeed")

	// One Job created, as late after the trigger as the manager took (the
	// harness clock stands still, so well under a second).
	now := m.scrape()
	count, _ := now.Value("guardedjob_schedule_skew_seconds")
	sum, _ := now.HistogramSum("guardedjob_schedule_skew_seconds")
	g.Expect(count).To(Equal(skewCount + 1))
	g.Expect(sum).To(BeNumerically("~", skewSum+0.5, 0.5))
	// The keeper renews every second: its round trips are timed.
	g.Eventually(func() float64 { return m.value("guardedjob_lease_renewal_duration_seconds") }).Should(BeNumerically(">", renewCount))

	// The Job completes: the last success is its completion time.
	completed := metav1.NewTime(time.Now().Add(-time.Second).Truncate(time.Second))
	started := metav1.NewTime(completed.Add(-7 * time.Second))
	h.setJobStatus(&job, batchv1.JobStatus{
		StartTime: &started, CompletionTime: &completed, Succeeded: 1,
		Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: completed},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: completed},
		},
	})
	g.Eventually(func() float64 { return m.value("guardedjob_last_success_time_seconds", obj...) }).Should(Equal(float64(completed.Unix())))
	g.Expect(h.get(gj).Status.LastSuccessfulTime.Time).To(BeTemporally("==", completed.Time))
	g.Expect(m.value("guardedjob_object_runs_total", append(obj, "result", "Succeeded")...)).To(Equal(1.0))
	g.Expect(m.value("guardedjob_object_runs_total", append(obj, "result", "LockLost")...)).To(Equal(-1.0))
	g.Expect(m.value("guardedjob_lock_state", append(obj, "state", "Free")...)).To(Equal(1.0))
	g.Expect(m.value("guardedjob_lock_state", append(obj, "state", "Held")...)).To(Equal(0.0))
	g.Expect(h.get(gj).Status.RunDurations).To(HaveField("Recent", ConsistOf(metav1.Duration{Duration: 7 * time.Second})))
	g.Expect(m.value("guardedjob_status_active", obj...)).To(Equal(0.0))
	g.Expect(h.get(gj).Status.ActiveCount).To(BeZero())

	// A second run loses its lease: the stop is timed from the loss to the
	// Job's deletion, and the run counted as LockLost.
	h.g.Expect(h.rdb.Del(ctx, h.rdb.Keys(ctx, key+":done:*").Val()...).Err()).To(Succeed())
	handled := h.get(gj).Status.LastRunNow
	g.Expect(h.trigger(gj)).NotTo(Equal(handled), "a new trigger (seconds have passed)")
	var second batchv1.Job
	g.Eventually(func() []batchv1.Job {
		var out []batchv1.Job
		for _, j := range h.jobs() {
			if j.Name != job.Name {
				out = append(out, j)
			}
		}
		if len(out) == 1 {
			second = out[0]
		}
		return out
	}).WithTimeout(20 * time.Second).Should(HaveLen(1))
	h.waitRecorded(gj)
	fence := h.get(gj).Status.LastFence
	_, secret, _ := strings.Cut(h.get(gj).Status.Active[0].Token, "#")
	g.Eventually(func() float64 { return m.value("guardedjob_fence", obj...) }).Should(Equal(float64(fence)))
	g.Expect(h.rdb.Set(ctx, key, "cluster-b/"+h.ns+"/thief-1-abcdef#0123", time.Minute).Err()).To(Succeed())
	g.Eventually(func() bool { return h.jobDeleted(&second) }).WithTimeout(10 * time.Second).Should(BeTrue())
	g.Eventually(func() float64 { return m.value("guardedjob_stop_latency_seconds", "cause", "lost") }).Should(Equal(lostStops + 1))
	g.Eventually(func() float64 { return m.value("guardedjob_object_runs_total", append(obj, "result", "LockLost")...) }).Should(Equal(1.0))
	g.Expect(m.value("guardedjob_lock_state", append(obj, "state", "Lost")...)).To(Equal(1.0))

	// Neither a key nor a token is ever a label.
	g.Expect(m.last).NotTo(ContainSubstring(key))
	g.Expect(secret).NotTo(BeEmpty())
	g.Expect(m.last).NotTo(ContainSubstring(secret))

	// The object goes, and every series of it with it.
	g.Expect(k8s.Delete(ctx, h.get(gj))).To(Succeed())
	families := []string{"guardedjob_created_time_seconds", "guardedjob_last_schedule_time_seconds", "guardedjob_next_schedule_time_seconds",
		"guardedjob_last_success_time_seconds", "guardedjob_fence", "guardedjob_lock_state", "guardedjob_object_runs_total", "guardedjob_busy_runs_in_a_row",
		"guardedjob_info", "guardedjob_spec_suspend", "guardedjob_status_active", "guardedjob_failing_leases"}
	g.Eventually(func() int {
		scraped := m.scrape()
		if scraped == nil {
			return -1
		}
		n := 0
		for _, f := range families {
			n += scraped.Series(f, obj...)
		}
		return n
	}).Should(BeZero(), "no series of a deleted GuardedJob is left: %s", func() string { return seriesOf(m.last, "metered") })
}

// While the lock store does not answer, the GuardedJob whose renewals fail is
// named (so an alert can be routed to its namespace, and to the store it uses);
// once renewals succeed again its series goes. A suspended GuardedJob says so.
func TestMetricsNameTheGuardedJobWhoseRenewalsFail(t *testing.T) {
	h := newHarnessAlone(t)
	proxy := h.storeViaProxy()
	m := h.serveMetrics()
	h.start()
	g := h.g
	gj := h.guardedJob("failing", h.ns+":failing")
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 40 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: time.Second}
	obj := []string{"namespace", h.ns, "name", "failing"}
	h.create(gj)
	h.trigger(gj)
	h.waitJobs(1)
	h.waitRecorded(gj)
	g.Eventually(func() float64 { return m.value("guardedjob_leases", "state", "Held") }).WithTimeout(10 * time.Second).Should(BeNumerically(">=", 1))
	g.Expect(m.value("guardedjob_failing_leases", obj...)).To(Equal(-1.0))

	proxy.Blackhole()
	g.Eventually(func() float64 { return m.value("guardedjob_failing_leases", obj...) }).WithTimeout(10*time.Second).Should(Equal(1.0),
		"the keeper's failing renewals are the GuardedJob's: %s", func() string { return seriesOf(m.last, "failing") })
	proxy.Restore(t)
	g.Eventually(func() float64 { return m.value("guardedjob_failing_leases", obj...) }).WithTimeout(10*time.Second).Should(Equal(-1.0),
		"renewals succeed again before the self-fence deadline")
	g.Expect(h.get(gj).Status.Active).To(HaveLen(1), "the run was never stopped")

	cur := h.get(gj)
	cur.Spec.Suspend = ptr.To(true)
	g.Expect(k8s.Update(context.Background(), cur)).To(Succeed())
	g.Eventually(func() float64 { return m.value("guardedjob_spec_suspend", obj...) }).Should(Equal(1.0))
	g.Eventually(func() float64 { return m.value("guardedjob_suspended", obj...) }).Should(Equal(1.0))
}

// The controller-runtime families that the dashboard and the alerts use
// (config/prometheus/metrics.txt lists them) are in a running manager's scrape,
// with the labels listed.
func TestMetricsListedFromControllerRuntimeAreServed(t *testing.T) {
	h := newHarnessAlone(t)
	m := h.serveMetrics()
	h.start()
	g := h.g
	list, err := os.ReadFile("../config/prometheus/metrics.txt")
	g.Expect(err).NotTo(HaveOccurred())
	var families [][]string // name, type, labels...
	for line := range strings.SplitSeq(string(list), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && !strings.HasPrefix(f[0], "#") && !strings.HasPrefix(f[0], "guardedjob_") {
			families = append(families, f)
		}
	}
	g.Expect(families).NotTo(BeEmpty())
	var scraped metricscrape.Metrics
	g.Eventually(func() metricscrape.Metrics { scraped = m.scrape(); return scraped }).ShouldNot(BeNil())
	for _, f := range families {
		fam := scraped[f[0]]
		g.Expect(fam).NotTo(BeNil(), "%s is served", f[0])
		g.Expect(strings.ToLower(fam.GetType().String())).To(Equal(f[1]), f[0])
		g.Expect(fam.GetMetric()).NotTo(BeEmpty(), f[0])
		var labels []string
		for _, l := range fam.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		g.Expect(labels).To(ConsistOf(f[2:]), "%s's labels", f[0])
	}
}

// seriesOf returns the lines of a scrape that mention name.
func seriesOf(body, name string) string {
	var out []string
	for l := range strings.SplitSeq(body, "\n") {
		if strings.Contains(l, name) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
