package main_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// A manager upgraded before the request CRDs were installed (only the GuardedJob
// CRD is served): it starts, becomes ready, says in its log that request objects
// are off and how to turn them on, and runs GuardedJobs, triggered by the
// annotation.
func TestAManagerWithoutTheRequestCRDsRunsGuardedJobsAndSaysSo(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	bin := buildManager(t)
	cp := startControlPlaneWith(t, func(env *envtest.Environment) {
		env.CRDDirectoryPaths = []string{filepath.Join("..", "..", "config", "crd", "bases", "batch.guardedjob.dev_guardedjobs.yaml")}
	})
	srv := redisserver.Start(t)
	probeAddr := freeAddr(t)
	mgr := startManager(t, bin, "--kubeconfig", cp.kubeconfig, "--redis-url", srv.URL(), "--cluster-name", "cluster-old",
		"--key-grants", "default=lock:old", "--metrics-bind-address", "0", "--health-probe-bind-address", probeAddr, "--leader-elect=false")
	g.Eventually(func() int { return probe("http://" + probeAddr + "/readyz") }).WithTimeout(30*time.Second).Should(Equal(http.StatusOK), "logs:\n%s", mgr.logs)
	g.Expect(mgr.logs.String()).To(And(ContainSubstring("Request objects are off: the API server does not serve them"),
		ContainSubstring("install the CRDs in config/crd (or the chart's) and restart the manager")))

	ctx := context.Background()
	k8s := cp.client
	err := k8s.Create(ctx, &batchv1alpha1.GuardedJobRun{
		ObjectMeta: metav1.ObjectMeta{Name: "now", Namespace: "default"},
		Spec:       batchv1alpha1.GuardedJobRunSpec{GuardedJobName: "old"},
	})
	g.Expect(err).To(HaveOccurred(), "the API server does not serve GuardedJobRuns")
	gj := dailyGuardedJob("old", "lock:old")
	g.Expect(k8s.Create(ctx, gj)).To(Succeed())
	triggerNow(t, k8s, gj)
	g.Eventually(func() []batchv1.Job {
		list := &batchv1.JobList{}
		g.Expect(k8s.List(ctx, list, client.InNamespace("default"))).To(Succeed())
		return list.Items
	}).WithTimeout(60*time.Second).Should(HaveLen(1), "logs:\n%s", mgr.logs)
	g.Expect(srv.Client(t).Get(ctx, "lock:old").Val()).To(HavePrefix("cluster-old/default/old-"))
}
