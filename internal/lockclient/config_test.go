package lockclient_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

func TestBadInputGetsAClearErrorAndNoRedisCall(t *testing.T) {
	srv := redisserver.Start(t)
	c := dial(t, srv)
	rec := record(c)
	ctx := context.Background()
	good := keys("bad")
	tok := token(t, "job")

	cases := []struct {
		name string
		req  lockclient.AcquireRequest
		want string
	}{
		{"an empty lock key", lockclient.AcquireRequest{Keys: lockclient.Keys{Fence: "f"}, Token: tok, TTL: time.Minute, Policy: lockclient.FenceInject}, "lock key: key is empty"},
		{"a lock key over 512 bytes", lockclient.AcquireRequest{Keys: lockclient.Keys{Lock: strings.Repeat("k", 513), Fence: "f"}, Token: tok, TTL: time.Minute, Policy: lockclient.FenceInject}, "513 bytes long, more than the 512 allowed"},
		{"a key with a space", acquireReq(lockclient.Keys{Lock: "lock settlement", Fence: "f"}, tok, time.Minute), "whitespace, control or invalid character"},
		{"a key with a newline", acquireReq(lockclient.Keys{Lock: "lock\nsettlement", Fence: "f"}, tok, time.Minute), "whitespace, control or invalid character"},
		{"a missing fence key under Inject", acquireReq(lockclient.Keys{Lock: "a"}, tok, time.Minute), "fence key: key is empty"},
		{"the same key twice", acquireReq(lockclient.Keys{Lock: "a", Fence: "a"}, tok, time.Minute), "must differ"},
		{"a zero TTL", acquireReq(good, tok, 0), "lease ttl 0s is shorter than 1s"},
		{"a negative TTL", acquireReq(good, tok, -time.Second), "shorter than 1s"},
		{"an empty token", acquireReq(good, "", time.Minute), "token is empty"},
		{"an unknown policy", lockclient.AcquireRequest{Keys: good, Token: tok, TTL: time.Minute, Policy: "Sometimes"}, `unknown fence policy "Sometimes"`},
		{"a negative floor", lockclient.AcquireRequest{Keys: good, Token: tok, TTL: time.Minute, Policy: lockclient.FenceStrict, Floor: -1}, "negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := c.Acquire(ctx, tc.req)
			g.Expect(errors.Is(err, lockclient.ErrInvalid)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}
	t.Run("renew and release check the lease too", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(c.Renew(ctx, lockclient.Lease{Keys: good, Token: tok})).To(MatchError(ContainSubstring("shorter than 1s")))
		g.Expect(c.Release(ctx, lockclient.Lease{Keys: lockclient.Keys{Lock: "x"}, TTL: time.Second})).To(MatchError(ContainSubstring("token is empty")))
	})
	cmds, _ := rec.reset()
	NewWithT(t).Expect(cmds).To(BeEmpty(), "bad input never reaches Redis")
}

func TestURLsAreParsedIntoTheRightModeAndNeverLeakThePassword(t *testing.T) {
	const secret = "s3cr3t-pa55"
	good := []struct{ url, identity string }{
		{"redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
		{"redis://:" + secret + "@10.0.0.5:6380/2", "redis://10.0.0.5:6380/2"},
		{"rediss://app:" + secret + "@redis.example:6379", "rediss://redis.example:6379"},
		{"redis://redis.example", "redis://redis.example:6379"},
		{"unix:///var/run/redis.sock?db=1", "unix:///var/run/redis.sock"},
		{"redis+sentinel://:" + secret + "@s-0:26379,s-1:26379/mymaster/1?sentinelPassword=" + secret, "redis+sentinel://s-0:26379,s-1:26379/mymaster/1"},
		{"redis+sentinel://s-0/mymaster", "redis+sentinel://s-0:26379/mymaster"},
		{"rediss+cluster://app:" + secret + "@n-0:6379,n-1:6379", "rediss+cluster://n-0:6379,n-1:6379"},
	}
	for _, tc := range good {
		t.Run(tc.identity, func(t *testing.T) {
			g := NewWithT(t)
			c, err := lockclient.Dial(lockclient.Config{URL: tc.url})
			g.Expect(err).NotTo(HaveOccurred())
			defer func() { _ = c.Close() }()
			g.Expect(c.Identity()).To(Equal(tc.identity))
			g.Expect(lockclient.Redact(tc.url)).To(Equal(tc.identity))
		})
	}

	bad := []struct{ name, url, want string }{
		{"no scheme", "127.0.0.1:6379", "must start with"},
		{"unknown scheme", "http://" + secret + "@x:1", "the scheme is not one of"},
		{"bad port", "redis://u:" + secret + "@host:port", "not host or host:port"},
		{"no host", "redis://:" + secret + "@", "no host"},
		{"several hosts without a mode", "redis://:" + secret + "@a:1,b:2", "use redis+sentinel://, redis+cluster:// or redis+redlock://"},
		{"sentinel without master", "redis+sentinel://:" + secret + "@a:1", "needs the master name"},
		{"bad database", "redis://:" + secret + "@a:1/x", "the database is not a number"},
		{"cluster with a database", "redis+cluster://a:1/2", "cannot select a database"},
		{"unix with a host", "unix://host/sock", "unix:///path"},
		{"malformed escape in the password", "redis://u:%zz" + secret + "@a:1", "the password must be percent-encoded"},
		{"certificates without TLS", "redis://a:1", "not rediss://"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cfg := lockclient.Config{URL: tc.url}
			if tc.name == "certificates without TLS" {
				cfg.CACert = []byte("x")
			}
			_, err := lockclient.Dial(cfg)
			g.Expect(errors.Is(err, lockclient.ErrInvalid)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
			g.Expect(err.Error()).NotTo(ContainSubstring(secret))
		})
	}
}

func TestPasswordsAndACLUsers(t *testing.T) {
	ctx := context.Background()
	const secret = "correct-horse-battery"

	t.Run("an ACL user logs in with the URL's credentials", func(t *testing.T) {
		g := NewWithT(t)
		srv := redisserver.Start(t, redisserver.WithACLUser("guardedjob", secret))
		c := dialConfig(t, lockclient.Config{URL: srv.URL()})
		_, err := c.Acquire(ctx, acquireReq(keys("acl"), token(t, "j"), 5*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
	})

	t.Run("credentials from a Secret override the URL's", func(t *testing.T) {
		g := NewWithT(t)
		srv := redisserver.Start(t, redisserver.WithACLUser("guardedjob", secret))
		c := dialConfig(t, lockclient.Config{URL: "redis://" + srv.Addr(), Username: "guardedjob", Password: secret})
		g.Expect(c.Ping(ctx)).To(Succeed())
	})

	t.Run("a wrong password is a store error that does not contain the password", func(t *testing.T) {
		g := NewWithT(t)
		srv := redisserver.Start(t, redisserver.WithPassword(secret))
		wrong := "wrong-" + secret
		c := dialConfig(t, lockclient.Config{URL: "redis://:" + wrong + "@" + srv.Addr()})
		_, err := c.Acquire(ctx, acquireReq(keys("pw"), token(t, "j"), 5*time.Second))
		g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring("WRONGPASS"))
		g.Expect(err.Error()).NotTo(ContainSubstring(secret))
	})

	t.Run("an unreachable host is a store error naming the address only", func(t *testing.T) {
		g := NewWithT(t)
		addr := closedPort(t)
		c := dialConfig(t, lockclient.Config{URL: "redis://:" + secret + "@" + addr})
		err := c.Ping(ctx)
		g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue())
		g.Expect(err.Error()).To(ContainSubstring(addr))
		g.Expect(err.Error()).NotTo(ContainSubstring(secret))
	})
}

func TestTLS(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.Start(t, redisserver.WithTLS())
	files := srv.TLS()
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	t.Run("rediss with the CA bundle and a client certificate", func(t *testing.T) {
		g := NewWithT(t)
		c := dialConfig(t, lockclient.Config{
			URL: "rediss://" + srv.Addr(), CACert: read(files.CAFile),
			ClientCert: read(files.ClientCertFile), ClientKey: read(files.ClientKeyFile),
		})
		l, err := c.Acquire(ctx, acquireReq(keys("tls"), token(t, "j"), 5*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.Release(ctx, l)).To(Succeed())
	})

	t.Run("the server certificate is verified by default", func(t *testing.T) {
		g := NewWithT(t)
		c := dialConfig(t, lockclient.Config{URL: "rediss://" + srv.Addr(), Timeout: time.Second})
		err := c.Ping(ctx)
		g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue())
		g.Expect(err.Error()).To(ContainSubstring("certificate"))
	})

	t.Run("a CA bundle without certificates is rejected up front", func(t *testing.T) {
		g := NewWithT(t)
		_, err := lockclient.Dial(lockclient.Config{URL: "rediss://" + srv.Addr(), CACert: []byte("not pem")})
		g.Expect(err).To(MatchError(ContainSubstring("holds no PEM certificate")))
	})
}

func TestSentinelURLFollowsTheMaster(t *testing.T) {
	g := NewWithT(t)
	master := redisserver.Start(t)
	sentinel := redisserver.StartSentinel(t, master, "mymaster")
	c := dialConfig(t, lockclient.Config{URL: "redis+sentinel://" + sentinel.Addr() + "/mymaster"})
	l, err := c.Acquire(context.Background(), acquireReq(keys("sentinel"), token(t, "j"), 5*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(master.Client(t).Get(context.Background(), l.Keys.Lock).Val()).To(Equal(l.Token))
}

func TestClusterNeedsAllKeysOfARunInOneSlot(t *testing.T) {
	cluster := redisserver.StartCluster(t, 3)
	c := dialConfig(t, lockclient.Config{URL: "redis+cluster://" + strings.Join(cluster.Addrs(), ",")})
	ctx := context.Background()

	t.Run("keys with a hash tag work", func(t *testing.T) {
		g := NewWithT(t)
		k := lockclient.Keys{Lock: "{settlement}:lock", Occurrence: "{settlement}:done:1", Fence: "{settlement}:fence"}
		l, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.Complete(ctx, l, time.Minute)
		g.Expect(err).NotTo(HaveOccurred())
	})

	t.Run("keys in different slots are refused before any call", func(t *testing.T) {
		g := NewWithT(t)
		_, err := c.Acquire(ctx, acquireReq(keys("noslot"), token(t, "j"), 5*time.Second))
		g.Expect(errors.Is(err, lockclient.ErrInvalid)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring("use a {hash tag} in lock.key"))
	})
}

func TestSlotMatchesRedisCluster(t *testing.T) {
	// Expected slots from the Redis Cluster specification (key hash tags), the CRC16
	// (XMODEM) check value 0x31C3 of "123456789", and CLUSTER KEYSLOT of Redis 7.
	cases := []struct {
		key  string
		slot int
		why  string
	}{
		{"123456789", 12739, "the CRC16/XMODEM check value, 0x31C3"},
		{"foo", 12182, "no hash tag"},
		{"somekey", 11058, "no hash tag"},
		{"foo{hash_tag}", 2515, "only the tag is hashed"},
		{"{user1000}.following", 3443, "only the tag is hashed"},
		{"{user1000}.followers", 3443, "the same tag, the same slot"},
		{"user1000", 3443, "a tag hashes like the bare key"},
		{"foo{}{bar}", 8363, "an empty tag: the whole key is hashed"},
		{"{}", 15257, "an empty tag: the whole key is hashed"},
		{"foo{{bar}}zap", 4015, "the tag is what lies between the first { and the next }: \"{bar\""},
		{"foo{bar}{zap}", 5061, "only the first tag counts: \"bar\""},
		{"foo{bar", 15278, "an unclosed brace: the whole key is hashed"},
		{"", 0, "the empty key"},
	}
	for _, tc := range cases {
		NewWithT(t).Expect(lockclient.Slot(tc.key)).To(Equal(tc.slot), "Slot(%q): %s", tc.key, tc.why)
	}

	// The same keys, asked of a real cluster-enabled node.
	node := redisserver.Start(t, redisserver.WithArgs("--cluster-enabled", "yes", "--cluster-port", portOf(t, closedPort(t))))
	rdb := node.Client(t)
	for _, tc := range cases {
		g := NewWithT(t)
		slot, err := rdb.ClusterKeySlot(context.Background(), tc.key).Result()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(lockclient.Slot(tc.key)).To(Equal(int(slot)), "CLUSTER KEYSLOT %q", tc.key)
	}
}

// portOf returns the port of a "host:port" address.
func portOf(t testing.TB, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func TestStoreInfoJudgesWhetherRedisCanLoseLeases(t *testing.T) {
	ctx := context.Background()

	t.Run("the test server: noeviction but no persistence", func(t *testing.T) {
		g := NewWithT(t)
		c := dial(t, redisserver.Start(t))
		si, err := c.StoreInfo(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(si.Role).To(Equal("master"))
		g.Expect(si.MaxMemoryPolicy).To(Equal("noeviction"))
		g.Expect(si.AOF).To(Equal(lockclient.No))
		g.Expect(si.RDB).To(Equal(lockclient.No))
		safe, _ := si.Safety(false)
		g.Expect(safe).To(Equal(lockclient.Yes))
		safe, reason := si.Safety(true)
		g.Expect(safe).To(Equal(lockclient.No))
		g.Expect(reason).To(ContainSubstring("persistence is off"))
	})

	t.Run("an evicting policy is unsafe", func(t *testing.T) {
		g := NewWithT(t)
		c := dial(t, redisserver.Start(t, redisserver.WithArgs("--maxmemory-policy", "allkeys-lru")))
		si, err := c.StoreInfo(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		safe, reason := si.Safety(false)
		g.Expect(safe).To(Equal(lockclient.No))
		g.Expect(reason).To(ContainSubstring("maxmemory-policy is allkeys-lru"))
	})

	t.Run("CONFIG forbidden by an ACL gives Unknown, not an error", func(t *testing.T) {
		g := NewWithT(t)
		srv := redisserver.Start(t, redisserver.WithACLUser("admin", "pw"))
		admin := srv.Client(t)
		g.Expect(admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">app-pw", "~*", "+@all", "-config").Err()).To(Succeed())
		c := dialConfig(t, lockclient.Config{URL: "redis://app:app-pw@" + srv.Addr()})
		si, err := c.StoreInfo(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(si.RDB).To(Equal(lockclient.Unknown))
		safe, reason := si.Safety(true)
		g.Expect(safe).To(Equal(lockclient.Unknown))
		g.Expect(reason).To(ContainSubstring("could not be checked"))
	})
}

func TestTokensAndHolders(t *testing.T) {
	g := NewWithT(t)
	r, err := leasetoken.NewRandom()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r).To(MatchRegexp(`^[0-9a-f]{32}$`))
	other, _ := leasetoken.NewRandom()
	g.Expect(other).NotTo(Equal(r))
	tok := leasetoken.Format(leasetoken.FormatHolder("cluster-a", "payments", "daily-settlement-29123456-5f3a9c"), r)
	g.Expect(tok).To(Equal("cluster-a/payments/daily-settlement-29123456-5f3a9c#" + r))
	g.Expect(leasetoken.HolderOf(tok)).To(Equal("cluster-a/payments/daily-settlement-29123456-5f3a9c"))
	g.Expect(leasetoken.HolderOf("billing-service")).To(Equal("billing-service"), "foreign values are shown whole")
}
