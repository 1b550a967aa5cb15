package lockclient_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// connectionsReceived is how many connections srv has accepted so far.
func connectionsReceived(t *testing.T, rdb redis.UniversalClient) string {
	t.Helper()
	info := rdb.Info(context.Background(), "stats").Val()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
			return v
		}
	}
	t.Fatal("no total_connections_received in INFO")
	return ""
}

func allow(t *testing.T, s string) *lockclient.AllowList {
	t.Helper()
	a, err := lockclient.ParseAllowList(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAnAllowListDecidesWhichStoresATenantMayReach(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	_, port, _ := strings.Cut(srv.Addr(), ":")

	t.Run("an address outside the list gets no connection", func(t *testing.T) {
		g := NewWithT(t)
		before := connectionsReceived(t, admin)
		url := "redis://" + srv.Addr()
		g.Expect(allow(t, "10.0.0.0/8,*.redis.example.com").Check(ctx, url)).To(MatchError(lockclient.ErrNotAllowed))
		c := dialConfig(t, lockclient.Config{URL: url, Tenant: true, Allow: allow(t, "10.0.0.0/8,*.redis.example.com")})
		err := c.Ping(ctx)
		g.Expect(errors.Is(err, lockclient.ErrNotAllowed)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring("is not allowed by the manager's --store-allow"))
		// This test's INFO is one more connection; the refused client made none.
		g.Expect(connectionsReceived(t, admin)).To(Equal(before))

		for _, list := range []string{"localhost,10.0.0.0/8", "localhost", "127.0.0.0/8,*.example.com"} {
			err := allow(t, list).Check(ctx, "redis://"+srv.Addr())
			if list == "localhost,10.0.0.0/8" {
				err = allow(t, list).Check(ctx, "redis://localhost:"+port)
			}
			g.Expect(err).To(MatchError(lockclient.ErrNotAllowed), list)
		}
	})

	t.Run("an address in a CIDR or a name matching a pattern is reached", func(t *testing.T) {
		for _, tc := range []struct{ list, url string }{
			{"127.0.0.0/8", "redis://" + srv.Addr()},
			{"127.0.0.1", "redis://" + srv.Addr()},
			{"localhost", "redis://localhost:" + port},
			{"10.0.0.0/8,127.0.0.1/32,::1", "redis://localhost:" + port},
			{"localhost,127.0.0.1,::1", "redis://localhost:" + port},
		} {
			g := NewWithT(t)
			g.Expect(allow(t, tc.list).Check(ctx, tc.url)).To(Succeed(), tc.list)
			c := dialConfig(t, lockclient.Config{URL: tc.url, Tenant: true, Allow: allow(t, tc.list)})
			g.Expect(c.Ping(ctx)).To(Succeed(), tc.list)
		}
	})

	t.Run("TLS goes through the same check and still verifies the server", func(t *testing.T) {
		g := NewWithT(t)
		tlsSrv := redisserver.Start(t, redisserver.WithTLS())
		ca, err := os.ReadFile(tlsSrv.TLS().CAFile)
		g.Expect(err).NotTo(HaveOccurred())
		c := dialConfig(t, lockclient.Config{URL: "rediss://" + tlsSrv.Addr(), CACert: ca, Tenant: true, Allow: allow(t, "127.0.0.1")})
		g.Expect(c.Ping(ctx)).To(Succeed())
		unverified := dialConfig(t, lockclient.Config{URL: "rediss://" + tlsSrv.Addr(), Tenant: true, Allow: allow(t, "127.0.0.1")})
		g.Expect(unverified.Ping(ctx)).To(MatchError(ContainSubstring("certificate")))
		insecure := dialConfig(t, lockclient.Config{URL: "rediss://" + tlsSrv.Addr(), InsecureSkipVerify: true, Tenant: true, Allow: allow(t, "127.0.0.1")})
		g.Expect(insecure.Ping(ctx)).To(Succeed(), "only with the explicit opt-in")
		_, err = lockclient.Dial(lockclient.Config{URL: "redis://" + tlsSrv.Addr(), InsecureSkipVerify: true})
		g.Expect(err).To(MatchError(ContainSubstring("not rediss://")))
	})

	t.Run("unix sockets are never a tenant's with a list", func(t *testing.T) {
		NewWithT(t).Expect(allow(t, "127.0.0.0/8").Check(ctx, "unix:///var/run/redis.sock")).To(MatchError(lockclient.ErrNotAllowed))
	})

	t.Run("a tenant store that does not answer is only unreachable", func(t *testing.T) {
		g := NewWithT(t)
		addr := closedPort(t)
		c := dialConfig(t, lockclient.Config{URL: "redis://" + addr, Tenant: true, Timeout: time.Second})
		err := c.Ping(ctx)
		g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue())
		g.Expect(err.Error()).To(HaveSuffix(addr + ": unreachable"))
		g.Expect(err.Error()).NotTo(ContainSubstring("refused"))
	})

	t.Run("bad lists are rejected", func(t *testing.T) {
		for _, s := range []string{"10.0.0.0/33", "redis*.example.com", "bad name"} {
			_, err := lockclient.ParseAllowList(s)
			NewWithT(t).Expect(err).To(HaveOccurred(), s)
		}
		a, err := lockclient.ParseAllowList("")
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		NewWithT(t).Expect(a).To(BeNil())
	})
}

// The list is checked on every connection, not only on the URL's hosts: a
// Sentinel that announces a master outside it, or a Cluster whose slots live on
// nodes outside it, gets no connection to those.
func TestAnAllowListAppliesToAnnouncedMastersAndClusterNodes(t *testing.T) {
	ctx := context.Background()

	t.Run("sentinel", func(t *testing.T) {
		g := NewWithT(t)
		master := redisserver.Start(t)
		sentinel := redisserver.StartSentinel(t, master, "mymaster")
		_, port, _ := strings.Cut(sentinel.Addr(), ":")
		url := "redis+sentinel://localhost:" + port + "/mymaster"
		list := allow(t, "localhost") // the Sentinel by name; the master it announces is 127.0.0.1
		g.Expect(list.Check(ctx, url)).To(Succeed())
		masterRDB := master.Client(t)
		before := connectionsReceived(t, masterRDB)
		c := dialConfig(t, lockclient.Config{URL: url, Tenant: true, Allow: list, Timeout: 2 * time.Second})
		_, err := c.Acquire(ctx, acquireReq(keys("allow-sentinel"), token(t, "j"), 5*time.Second))
		g.Expect(errors.Is(err, lockclient.ErrNotAllowed)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring(master.Addr()))
		g.Expect(connectionsReceived(t, masterRDB)).To(Equal(before))
	})

	t.Run("cluster", func(t *testing.T) {
		g := NewWithT(t)
		cluster := redisserver.StartCluster(t, 3)
		_, port, _ := strings.Cut(cluster.Addrs()[0], ":")
		list := allow(t, "localhost") // the seed by name; the slots name 127.0.0.1 nodes
		c := dialConfig(t, lockclient.Config{URL: "redis+cluster://localhost:" + port, Tenant: true, Allow: list, Timeout: 2 * time.Second})
		k := lockclient.Keys{Lock: "{allow}:lock", Fence: "{allow}:fence"}
		_, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
		g.Expect(errors.Is(err, lockclient.ErrNotAllowed)).To(BeTrue(), "%v", err)
		g.Expect(cluster.Client(t).Exists(ctx, "{allow}:lock").Val()).To(BeZero())
	})
}

// cluster-ranges stands for the cluster's own Service and Pod ranges, which the
// manager finds and sets: an address in them is admitted as a bare IP (what a
// Sentinel or a Cluster inside the cluster announces) or behind a name that resolves
// into them; nothing else is, and nothing at all before the ranges are known.
func TestClusterRangesAdmitTheClustersOwnAddresses(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.Start(t)
	_, port, _ := strings.Cut(srv.Addr(), ":")
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

	t.Run("parsed, and refusing everything until the ranges are set", func(t *testing.T) {
		g := NewWithT(t)
		list := allow(t, "cluster-ranges")
		g.Expect(list.WantsClusterRanges()).To(BeTrue())
		g.Expect(allow(t, "10.0.0.0/8").WantsClusterRanges()).To(BeFalse())
		g.Expect(list.String()).To(Equal("cluster-ranges()"))
		for _, url := range []string{"redis://" + srv.Addr(), "redis://localhost:" + port, "redis://10.1.2.3:6379"} {
			g.Expect(list.Check(ctx, url)).To(MatchError(lockclient.ErrNotAllowed), url)
		}
	})

	t.Run("an address in the ranges, bare or behind a name, even with name patterns", func(t *testing.T) {
		for _, spec := range []string{"cluster-ranges", "Cluster-Ranges", "*.svc.cluster.local,cluster-ranges", "10.96.0.0/12,cluster-ranges"} {
			g := NewWithT(t)
			list := allow(t, spec)
			list.SetClusterRanges(loopback)
			g.Expect(list.String()).To(ContainSubstring("cluster-ranges(127.0.0.0/8,::1/128)"))
			g.Expect(list.Check(ctx, "redis://"+srv.Addr())).To(Succeed(), spec)
			c := dialConfig(t, lockclient.Config{URL: "redis://" + srv.Addr(), Tenant: true, Allow: list})
			g.Expect(c.Ping(ctx)).To(Succeed(), spec)
			g.Expect(list.Check(ctx, "redis://10.244.9.9:6379")).To(MatchError(lockclient.ErrNotAllowed), spec)
		}
		g := NewWithT(t)
		list := allow(t, "cluster-ranges")
		list.SetClusterRanges(loopback)
		g.Expect(list.Check(ctx, "redis://localhost:"+port)).To(Succeed(), "a name that resolves into the ranges")
		withPattern := allow(t, "*.svc.cluster.local,cluster-ranges")
		withPattern.SetClusterRanges(loopback)
		g.Expect(withPattern.Check(ctx, "redis://localhost:"+port)).To(MatchError(lockclient.ErrNotAllowed), "a name must still match the patterns")
	})

	t.Run("new ranges replace the old ones", func(t *testing.T) {
		g := NewWithT(t)
		list := allow(t, "cluster-ranges")
		list.SetClusterRanges(loopback)
		g.Expect(list.Check(ctx, "redis://"+srv.Addr())).To(Succeed())
		list.SetClusterRanges([]netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")})
		g.Expect(list.Check(ctx, "redis://"+srv.Addr())).To(MatchError(lockclient.ErrNotAllowed))
		g.Expect(list.Check(ctx, "redis://10.96.3.4:6379")).To(Succeed())
	})

	// The reason for the item: the default list admits the master a Sentinel in the
	// cluster announces by its Pod IP, which a list of names refuses.
	t.Run("the master a Sentinel announces by IP", func(t *testing.T) {
		g := NewWithT(t)
		master := redisserver.Start(t)
		sentinel := redisserver.StartSentinel(t, master, "mymaster")
		_, sport, _ := strings.Cut(sentinel.Addr(), ":")
		url := "redis+sentinel://localhost:" + sport + "/mymaster"
		list := allow(t, "cluster-ranges")
		list.SetClusterRanges(loopback)
		c := dialConfig(t, lockclient.Config{URL: url, Tenant: true, Allow: list, Timeout: 2 * time.Second})
		k := keys("allow-cluster-ranges")
		_, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(master.Client(t).Exists(ctx, k.Lock).Val()).To(BeEquivalentTo(1), "the lease is in the announced master")
	})
}
