package lockclient_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// docsACL returns the arguments of the manager's ACL line docs/security.md gives,
// with the password filled in.
func docsACL(t *testing.T, password string) []any {
	t.Helper()
	return docsACLOf(t, "guardedjob", password)
}

// docsACLOf returns the arguments of the line of docs/security.md that sets up
// the ACL user, with the password filled in.
func docsACLOf(t *testing.T, user, password string) []any {
	t.Helper()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "ACL SETUSER "+user+" ") {
			var args []any
			for _, f := range strings.Fields(line) {
				if f == ">PASSWORD" {
					f = ">" + password
				}
				args = append(args, f)
			}
			return args
		}
	}
	t.Fatalf("docs/security.md has no line starting with ACL SETUSER %s", user)
	return nil
}

// The ACL line docs/security.md gives is enough for the whole lease cycle, and
// nothing more is needed: scripts loaded, evaluated by hash and (after a script
// cache flush) by source, Strict fences from the Redis clock, a database other
// than 0, a manual unlock, the readiness ping and the StoreSafe check, which reads Unknown, not
// unsafe, when CONFIG GET is denied.
func TestTheDocumentedACLIsEnoughForTheLeaseCycle(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	srv := redisserver.Start(t, redisserver.WithPassword("Adm1n-pw"))
	admin := srv.Client(t)
	g.Expect(admin.Do(ctx, docsACL(t, "acl-Pw7")...).Err()).To(Succeed())
	c := dialConfig(t, lockclient.Config{URL: "redis://guardedjob:acl-Pw7@" + srv.Addr() + "/1"})

	g.Expect(c.Ping(ctx)).To(Succeed())
	g.Expect(c.LoadScripts(ctx)).To(Succeed())
	k := keys("acl")
	l, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Renew(ctx, l)).To(Succeed())
	g.Expect(admin.Do(ctx, "SCRIPT", "FLUSH").Err()).To(Succeed())
	g.Expect(c.Renew(ctx, l)).To(Succeed(), "EVAL after NOSCRIPT")
	released, err := c.Complete(ctx, l, time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(released).To(BeTrue())
	_, err = c.Acquire(ctx, acquireReq(k, token(t, "j2"), 5*time.Second))
	g.Expect(err).To(MatchError(lockclient.ErrDone))

	strict, err := c.Acquire(ctx, lockclient.AcquireRequest{Keys: keys("acl-strict"), Token: token(t, "s"), TTL: 5 * time.Second, Policy: lockclient.FenceStrict})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strict.Fence).To(BeNumerically(">", 1<<40), "a fence derived from TIME")
	g.Expect(c.Release(ctx, strict)).To(Succeed())
	stale := keys("acl-unlock")
	g.Expect(c.Redis().Set(ctx, stale.Lock, "batch-host-7", 0).Err()).To(Succeed())
	g.Expect(c.Unlock(ctx, stale.Lock, "batch-host-7", lockclient.UnlockLock)).To(Succeed(), "a manual unlock")

	si, err := c.StoreInfo(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(si.MaxMemoryPolicy).To(Equal("noeviction"))
	g.Expect(si.RDB).To(Equal(lockclient.Unknown))
	safe, reason := si.Safety(true)
	g.Expect(safe).To(Equal(lockclient.Unknown))
	g.Expect(reason).To(ContainSubstring("could not be checked"))

	var denied []any
	for _, entry := range admin.Do(ctx, "ACL", "LOG").Val().([]any) {
		denied = append(denied, entry.(map[any]any)["object"])
	}
	g.Expect(denied).To(ConsistOf("config|get"), "the only command denied is the optional CONFIG GET")
}

// In Redis Cluster the client also reads the slot map and the command table:
// the documented line plus its Cluster addition is enough.
func TestTheDocumentedACLWithItsClusterAddition(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cluster := redisserver.StartCluster(t, 3)
	addition := []any{"+cluster|slots", "+command"}
	for _, node := range cluster.Nodes() {
		g.Expect(node.Client(t).Do(ctx, append(docsACL(t, "acl-Pw7"), addition...)...).Err()).To(Succeed())
	}
	c := dialConfig(t, lockclient.Config{URL: "redis+cluster://guardedjob:acl-Pw7@" + strings.Join(cluster.Addrs(), ",")})
	k := lockclient.Keys{Lock: "{acl}:lock", Occurrence: "{acl}:done:1", Fence: "{acl}:fence"}
	g.Expect(c.LoadScripts(ctx)).To(Succeed())
	l, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Renew(ctx, l)).To(Succeed())
	_, err = c.Complete(ctx, l, time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Ping(ctx)).To(Succeed())
}

// With minReplicaAcks the client also sends WAIT: the documented line plus
// +wait is enough, and without it the acquisition fails as a store error and
// leaves no key behind.
func TestTheDocumentedACLWithReplicaAcknowledgement(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	master := redisserver.Start(t, redisserver.WithPassword("Adm1n-pw"))
	redisserver.Start(t, redisserver.WithReplicaOf(master))
	admin := master.Client(t)
	url := "redis://guardedjob:acl-Pw7@" + master.Addr() + "?minReplicaAcks=1&replicaAckTimeout=2s"

	g.Expect(admin.Do(ctx, docsACL(t, "acl-Pw7")...).Err()).To(Succeed())
	c := dialConfig(t, lockclient.Config{URL: url})
	k := keys("acl-wait")
	_, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
	g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("NOPERM"))
	g.Expect(admin.Exists(ctx, k.Lock).Val()).To(BeZero())

	g.Expect(admin.Do(ctx, append(docsACL(t, "acl-Pw7"), "+wait")...).Err()).To(Succeed())
	l, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Release(ctx, l)).To(Succeed())
}
