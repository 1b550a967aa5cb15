package main_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/tcpproxy"
)

// leaderArgs are the flags of a manager in a leader-elected pair, with short
// election timings so that a takeover happens within seconds.
func leaderArgs(kubeconfig, redisURL string) []string {
	return []string{
		"--kubeconfig", kubeconfig, "--redis-url", redisURL, "--cluster-name", "cluster-ha",
		"--leader-elect", "--leader-election-namespace", "default",
		"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
	}
}

// haGuardedJob has a lease that passes the timing check for those elections:
// ttl - renewInterval (12s) > lease duration + retry period + 5s.
func haGuardedJob(name string) *batchv1alpha1.GuardedJob {
	return &batchv1alpha1.GuardedJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: batchv1alpha1.GuardedJobSpec{
			Schedule: "@daily",
			Lock: batchv1alpha1.LockSpec{Key: "default:" + name,
				TTL: &metav1.Duration{Duration: 15 * time.Second}, RenewInterval: &metav1.Duration{Duration: 3 * time.Second}},
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "w", Image: "busybox"}},
				TerminationGracePeriodSeconds: ptr.To(int64(1)),
			}}}},
		},
	}
}

// runningRun creates gj and waits until its run is recorded and its Job's start
// gate is open; it returns the run's token. A recorded Job alone is not a running
// run: the manager may not have had the reply to the write that recorded it, and
// until it has, it neither opens the gate nor counts the lease as the run's (a
// fault at that moment leaves the lease to expire, with no Pod started).
func runningRun(t *testing.T, k8s client.Client, gj *batchv1alpha1.GuardedJob) string {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(k8s.Create(ctx, gj)).To(Succeed())
	triggerNow(t, k8s, gj)
	var token string
	g.Eventually(func() string {
		cur := &batchv1alpha1.GuardedJob{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(gj), cur); err != nil || len(cur.Status.Active) != 1 || cur.Status.Active[0].JobUID == "" {
			return ""
		}
		job := &batchv1.Job{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: gj.Namespace, Name: cur.Status.Active[0].JobName}, job); err != nil ||
			ptr.Deref(job.Spec.Suspend, false) || job.Annotations[batchv1alpha1.StartGateAnnotation] != "" {
			return ""
		}
		token = cur.Status.Active[0].Token
		return token
	}).WithTimeout(60 * time.Second).ShouldNot(BeEmpty())
	return token
}

func jobCount(k8s client.Client) int {
	list := &batchv1.JobList{}
	_ = k8s.List(context.Background(), list, client.InNamespace("default"))
	return len(list.Items)
}

// watchPTTL samples the key's remaining life until stop is closed and returns the
// smallest value seen.
func watchPTTL(rdb *redis.Client, key string, stop <-chan struct{}) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		lowest := time.Hour
		for {
			select {
			case <-stop:
				out <- lowest
				return
			case <-time.After(50 * time.Millisecond):
			}
			if d, err := rdb.PTTL(context.Background(), key).Result(); err == nil && d < lowest {
				lowest = d
			}
		}
	}()
	return out
}

func TestWhenTheLeaderIsKilledTheOtherReplicaResumesBeforeTheLeaseLapses(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	bin := buildManager(t)
	cp := startControlPlane(t)
	srv := redisserver.Start(t)
	rdb := srv.Client(t)

	first := startManager(t, bin, leaderArgs(cp.kubeconfig, srv.URL())...)
	g.Eventually(first.logs.String).WithTimeout(30 * time.Second).Should(ContainSubstring("Successfully acquired lease"))
	second := startManager(t, bin, leaderArgs(cp.kubeconfig, srv.URL())...)

	gj := haGuardedJob("failover")
	token := runningRun(t, cp.client, gj)
	g.Expect(rdb.Get(context.Background(), "default:failover").Val()).To(Equal(token))

	stop := make(chan struct{})
	lowest := watchPTTL(rdb, "default:failover", stop)
	g.Expect(first.cmd.Process.Kill()).To(Succeed()) // SIGKILL: no goodbye
	g.Eventually(second.logs.String).WithTimeout(30*time.Second).Should(ContainSubstring(`"Resumed leases"`), "second:\n%s", second.logs)
	g.Eventually(func() time.Duration { return rdb.PTTL(context.Background(), "default:failover").Val() }).Should(BeNumerically(">", 12*time.Second))
	close(stop)
	low := <-lowest
	t.Logf("lowest PTTL during the takeover: %s (ttl 15s)", low)
	g.Expect(low).To(BeNumerically(">", 0), "the lease never lapsed")
	g.Expect(rdb.Get(context.Background(), "default:failover").Val()).To(Equal(token), "the same run keeps the key")
	g.Consistently(func() int { return jobCount(cp.client) }).WithTimeout(3*time.Second).Should(Equal(1), "no second Job")
}

// A normal handover (SIGTERM, the API server reachable): the old leader gives up
// its leadership on the way out, and the new one resumes the leases at once.
func TestAGracefulHandoverResumesTheLeasesWithoutAGap(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	bin := buildManager(t)
	cp := startControlPlane(t)
	srv := redisserver.Start(t)
	rdb := srv.Client(t)

	first := startManager(t, bin, leaderArgs(cp.kubeconfig, srv.URL())...)
	g.Eventually(first.logs.String).WithTimeout(30 * time.Second).Should(ContainSubstring("Successfully acquired lease"))
	second := startManager(t, bin, leaderArgs(cp.kubeconfig, srv.URL())...)
	token := runningRun(t, cp.client, haGuardedJob("handover"))

	stop := make(chan struct{})
	lowest := watchPTTL(rdb, "default:handover", stop)
	g.Expect(first.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	g.Eventually(first.exited).WithTimeout(30 * time.Second).Should(BeClosed())
	g.Expect(first.logs.String()).NotTo(ContainSubstring("renewing the leases held"), "a reachable API server means a handover, not renew-only mode")
	g.Eventually(second.logs.String).WithTimeout(30*time.Second).Should(ContainSubstring(`"Resumed leases"`), "second:\n%s", second.logs)
	g.Eventually(func() time.Duration { return rdb.PTTL(context.Background(), "default:handover").Val() }).Should(BeNumerically(">", 12*time.Second))
	close(stop)
	g.Expect(<-lowest).To(BeNumerically(">", 0))
	g.Expect(rdb.Get(context.Background(), "default:handover").Val()).To(Equal(token))
	g.Consistently(func() int { return jobCount(cp.client) }).WithTimeout(2 * time.Second).Should(Equal(1))
}

func TestAManagerCutOffFromTheAPIServerKeepsRenewingItsLeases(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	bin := buildManager(t)
	cp := startControlPlane(t)
	srv := redisserver.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()

	proxy := tcpproxy.Start(t, cp.host)
	proxied := t.TempDir() + "/kubeconfig-proxied"
	g.Expect(string(cp.kubeconfigBytes)).To(ContainSubstring(cp.host))
	g.Expect(writeFile(proxied, strings.ReplaceAll(string(cp.kubeconfigBytes), cp.host, proxy.Addr()))).To(Succeed())

	mgr := startManager(t, bin, leaderArgs(proxied, srv.URL())...)
	g.Eventually(mgr.logs.String).WithTimeout(30 * time.Second).Should(ContainSubstring("Successfully acquired lease"))
	gj := haGuardedJob("cutoff")
	token := runningRun(t, cp.client, gj)

	proxy.Cut()
	g.Eventually(mgr.logs.String).WithTimeout(30*time.Second).Should(ContainSubstring("renewing the leases held until it answers again"), "logs:\n%s", mgr.logs)
	// Longer than the lease: without renewals the key would expire, and another
	// holder could take it while the Pods still run.
	g.Consistently(func() string { return rdb.Get(ctx, "default:cutoff").Val() }).WithTimeout(20*time.Second).WithPolling(200*time.Millisecond).
		Should(Equal(token), "logs:\n%s", mgr.logs)
	g.Expect(rdb.SetNX(ctx, "default:cutoff", "cluster-b/default/other#1", time.Minute).Val()).To(BeFalse(), "no other holder can take it")

	proxy.Restore(t)
	g.Eventually(mgr.exited).WithTimeout(30*time.Second).Should(BeClosed(), "the cut-off process exits once the API server answers")
	g.Expect(mgr.logs.String()).To(ContainSubstring("answers again"))

	next := startManager(t, bin, leaderArgs(cp.kubeconfig, srv.URL())...)
	g.Eventually(next.logs.String).WithTimeout(30*time.Second).Should(ContainSubstring(`"Resumed leases"`), "logs:\n%s", next.logs)
	g.Expect(rdb.Get(ctx, "default:cutoff").Val()).To(Equal(token))
	g.Consistently(func() int { return jobCount(cp.client) }).WithTimeout(3*time.Second).Should(Equal(1), "no second Job")
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }
