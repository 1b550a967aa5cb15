package main_test

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/secrets"
)

// --redis-url with a hostile password, raw or percent-encoded: the manager
// either starts and logs in with exactly that password, or exits saying what to
// fix; its log (at debug level) holds no 3-character fragment of the password.
func TestHostilePasswordsInRedisURLNeverReachTheLog(t *testing.T) {
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
