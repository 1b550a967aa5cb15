package main_test

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/secrets"
)

// --redis-url with a hostile password, raw or percent-encoded: the manager
// either starts and logs in with exactly that password, or exits saying what to
// fix; its log (at debug level) holds no 3-character fragment of the password.
func TestHostilePasswordsInRedisURLNeverReachTheLog(t *testing.T) {
	t.Parallel()
	bin := buildManager(t)
	cp := startControlPlane(t)
	ctx := context.Background()
	srv := redisserver.Start(t, redisserver.WithPassword("Adm1n-pw"))
	admin := srv.Client(t)

	for i, pw := range secrets.Hostile {
		user := fmt.Sprintf("mgr%d", i)
		if pw.Value != "" {
			NewWithT(t).Expect(admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">"+pw.Value, "~*", "+@all").Err()).To(Succeed())
		}
		for _, enc := range []struct {
			name string
			fn   func(string) string
		}{{"raw", func(s string) string { return s }}, {"percent-encoded", secrets.Encode}} {
			forms := map[string]string{"redis": "redis://" + user + ":" + enc.fn(pw.Value) + "@" + srv.Addr() + "/0"}
			if pw.Name == "every delimiter" {
				forms["sentinel"] = "redis+sentinel://:" + enc.fn(pw.Value) + "@" + srv.Addr() + "/mymaster?sentinelPassword=" + enc.fn(pw.Value)
				forms["unix"] = "unix://" + user + ":" + enc.fn(pw.Value) + "@/nonexistent/redis.sock"
				forms["redlock"] = "redis+redlock://" + user + ":" + enc.fn(pw.Value) + "@" + srv.Addr() + "," + srv.Addr() + "," + srv.Addr() + "?minReplicaAcks=1"
			}
			for form, url := range forms {
				t.Run(pw.Name+" "+enc.name+" "+form, func(t *testing.T) {
					g := NewWithT(t)
					_, dialErr := lockclient.Dial(lockclient.Config{URL: url})
					probeAddr := freeAddr(t)
					mgr := startManager(t, bin, "--kubeconfig", cp.kubeconfig, "--redis-url", url, "--cluster-name", "cluster-secrets",
						"--metrics-bind-address", "0", "--health-probe-bind-address", probeAddr, "--leader-elect=false", "--zap-log-level=debug")
					switch {
					case dialErr != nil:
						g.Eventually(mgr.exited).WithTimeout(30*time.Second).Should(BeClosed(), "a URL the parser rejects stops the manager")
						g.Expect(mgr.logs.String()).To(ContainSubstring("percent-encode"))
					case form == "redis" && pw.Value != "":
						g.Eventually(func() int { return probe("http://" + probeAddr + "/readyz") }).WithTimeout(30*time.Second).
							Should(Equal(http.StatusOK), "the manager logs in with the password as written")
					default:
						// Started, but nothing answers there: let it try and log.
						g.Eventually(func() string { return mgr.logs.String() }).WithTimeout(30 * time.Second).Should(ContainSubstring("Starting manager"))
						time.Sleep(2 * time.Second)
					}
					_ = mgr.cmd.Process.Signal(syscall.SIGTERM)
					g.Eventually(mgr.exited).WithTimeout(30 * time.Second).Should(BeClosed())
					g.Expect(secrets.Leaks(mgr.logs.String(), pw.Value)).To(BeEmpty(), "logs:\n%s", mgr.logs)
				})
			}
		}
	}
}

// --store-allow: a malformed list stops the manager with a clear error; when
// it is unset while GuardedJobs name stores of their own, the manager warns.
func TestStoreAllowIsParsedAndItsAbsenceWarnedAbout(t *testing.T) {
	t.Parallel()
	bin := buildManager(t)
	cp := startControlPlane(t)
	srv := redisserver.Start(t)
	common := []string{"--kubeconfig", cp.kubeconfig, "--redis-url", srv.URL(), "--cluster-name", "cluster-allow",
		"--metrics-bind-address", "0", "--leader-elect=false"}

	t.Run("a malformed list", func(t *testing.T) {
		g := NewWithT(t)
		mgr := startManager(t, bin, append(common, "--health-probe-bind-address", "0", "--store-allow", "10.0.0.0/33")...)
		g.Eventually(mgr.exited).WithTimeout(30 * time.Second).Should(BeClosed())
		g.Expect(mgr.logs.String()).To(ContainSubstring(`--store-allow: \"10.0.0.0/33\" is not a CIDR`))
	})

	g := NewWithT(t)
	gj := haGuardedJob("tenant-store")
	gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "tenant-redis"}
	g.Expect(cp.client.Create(context.Background(), gj)).To(Succeed())
	for _, tc := range []struct {
		allow string
		warns bool
	}{{"", true}, {"*.svc.cluster.local,10.96.0.0/12", false}} {
		t.Run("store-allow="+tc.allow, func(t *testing.T) {
			g := NewWithT(t)
			probeAddr := freeAddr(t)
			mgr := startManager(t, bin, append(common, "--health-probe-bind-address", probeAddr, "--store-allow", tc.allow)...)
			g.Eventually(func() int { return probe("http://" + probeAddr + "/readyz") }).WithTimeout(30 * time.Second).Should(Equal(http.StatusOK))
			_ = mgr.cmd.Process.Signal(syscall.SIGTERM)
			g.Eventually(mgr.exited).WithTimeout(30 * time.Second).Should(BeClosed())
			if tc.warns {
				g.Expect(mgr.logs.String()).To(ContainSubstring("GuardedJobs use spec.lock.storeRef but --store-allow is not set"))
			} else {
				g.Expect(mgr.logs.String()).NotTo(ContainSubstring("--store-allow is not set"))
				g.Expect(mgr.logs.String()).To(ContainSubstring(`"storeAllow":"*.svc.cluster.local,10.96.0.0/12"`))
			}
		})
	}
}
