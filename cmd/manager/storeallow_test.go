package main_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// A tenant's Redis behind a Sentinel inside the cluster: the Sentinel announces its
// master by Pod IP. The default --store-allow, cluster-ranges, reads the cluster's
// Service ranges (ServiceCIDR objects) and Pod ranges (the Nodes' spec.podCIDRs)
// from the API server at start and admits that master; the former default, Service
// names and kubeadm's Service CIDR, refused it. Here the tenant's Pods are on a Node
// whose Pod range is 127.0.0.0/24, where the test's Redis and Sentinel listen.
func TestClusterRangesAdmitATenantsSentinelInTheCluster(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	bin := buildManager(t)
	cp := startControlPlane(t)
	k8s := cp.client

	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: corev1.NodeSpec{PodCIDR: "127.0.0.0/24", PodCIDRs: []string{"127.0.0.0/24", "fd00:10:244::/64"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}}},
		// Its network plugin assigns Pod addresses itself: the manager says so.
		{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}},
	} {
		g.Expect(k8s.Create(ctx, n)).To(Succeed())
	}
	g.Expect(k8s.Create(ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.200.0.0/16"}}})).To(Succeed())
	var serviceRanges []string
	g.Eventually(func() []string {
		list := &networkingv1.ServiceCIDRList{}
		_ = k8s.List(ctx, list)
		serviceRanges = nil
		for _, sc := range list.Items {
			serviceRanges = append(serviceRanges, sc.Spec.CIDRs...)
		}
		return serviceRanges
	}).Should(ContainElement("10.200.0.0/16"), "the API server serves ServiceCIDRs, its own default one among them")
	g.Expect(len(serviceRanges)).To(BeNumerically(">=", 2))

	manager := redisserver.Start(t)
	master := redisserver.Start(t)
	sentinel := redisserver.StartSentinel(t, master, "mymaster")
	g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-redis", Namespace: "default"},
		StringData: map[string]string{"url": "redis+sentinel://" + sentinel.Addr() + "/mymaster"},
	})).To(Succeed())

	run := func(t *testing.T, storeAllow, name string) (*managerProc, *batchv1alpha1.GuardedJob) {
		t.Helper()
		mgr := startManager(t, bin, "--kubeconfig", cp.kubeconfig, "--redis-url", manager.URL(), "--cluster-name", "cluster-ranges",
			"--store-allow", storeAllow, "--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--leader-elect=false")
		gj := haGuardedJob(name)
		gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "tenant-redis"}
		NewWithT(t).Expect(k8s.Create(ctx, gj)).To(Succeed())
		triggerNow(t, k8s, gj)
		return mgr, gj
	}
	ready := func(gj *batchv1alpha1.GuardedJob) func() *metav1.Condition {
		return func() *metav1.Condition {
			cur := &batchv1alpha1.GuardedJob{}
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(gj), cur)
			for i, c := range cur.Status.Conditions {
				if c.Type == batchv1alpha1.ReadyCondition {
					return &cur.Status.Conditions[i]
				}
			}
			return nil
		}
	}
	stop := func(t *testing.T, mgr *managerProc) {
		t.Helper()
		_ = mgr.cmd.Process.Signal(syscall.SIGTERM)
		NewWithT(t).Eventually(mgr.exited).WithTimeout(30 * time.Second).Should(BeClosed())
	}

	t.Run("the former default admits no Pod IP at all", func(t *testing.T) {
		g := NewWithT(t)
		mgr, gj := run(t, "*.svc.cluster.local,10.96.0.0/12", "former-default")
		// With name patterns no bare IP passes: neither a Sentinel named by IP, as
		// here, nor the master a Sentinel announces (lockclient's tests).
		g.Eventually(ready(gj)).WithTimeout(60*time.Second).Should(And(Not(BeNil()),
			HaveField("Reason", batchv1alpha1.StoreNotAllowedReason)), "logs:\n%s", mgr.logs)
		g.Expect(master.Client(t).Exists(ctx, gj.Spec.Lock.Key).Val()).To(BeZero())
		stop(t, mgr)
	})

	t.Run("cluster-ranges admits it, and says which ranges it found", func(t *testing.T) {
		g := NewWithT(t)
		mgr, gj := run(t, "cluster-ranges", "cluster-ranges")
		g.Eventually(func() string { return master.Client(t).Get(ctx, gj.Spec.Lock.Key).Val() }).WithTimeout(60*time.Second).Should(
			HavePrefix("cluster-ranges/default/cluster-ranges-"), "the run's lease is in the master the Sentinel announced; logs:\n%s", mgr.logs)
		g.Eventually(ready(gj)).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		logs := mgr.logs.String()
		g.Expect(logs).To(ContainSubstring(`"podRanges":"10.244.1.0/24,127.0.0.0/24,fd00:10:244::/64"`))
		for _, r := range serviceRanges {
			g.Expect(logs).To(MatchRegexp(`"serviceRanges":"[^"]*`+strings.ReplaceAll(r, ".", `\.`)), "the Service range %s", r)
		}
		g.Expect(logs).To(ContainSubstring(`Nodes without spec.podCIDRs`))
		g.Expect(logs).To(ContainSubstring(`"withoutPodCIDRs":1`))
		g.Expect(logs).To(MatchRegexp(`"Starting manager".*"storeAllow":"cluster-ranges\([^)]*127\.0\.0\.0/24`))
		stop(t, mgr)
	})
}
