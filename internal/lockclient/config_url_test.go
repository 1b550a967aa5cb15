package lockclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/secrets"
)

// storeURLs returns the documented URL forms carrying user and password as given
// (the caller encodes them or not).
func storeURLs(addr, user, pw string) map[string]string {
	return map[string]string{
		"redis":           "redis://" + user + ":" + pw + "@" + addr + "/0",
		"redis, no user":  "redis://:" + pw + "@" + addr,
		"rediss":          "rediss://" + user + ":" + pw + "@" + addr,
		"unix":            "unix://" + user + ":" + pw + "@/var/run/redis.sock?db=1",
		"sentinel":        "redis+sentinel://" + user + ":" + pw + "@" + addr + ",127.0.0.1:26379/mymaster/1?sentinelPassword=" + pw,
		"rediss+sentinel": "rediss+sentinel://:" + pw + "@" + addr + "/mymaster",
		"cluster":         "redis+cluster://" + user + ":" + pw + "@" + addr + ",127.0.0.1:7001",
		"replica acks":    "redis://" + user + ":" + pw + "@" + addr + "/0?minReplicaAcks=1&replicaAckTimeout=50ms",
		"redlock":         "redis+redlock://" + user + ":" + pw + "@" + addr + ",127.0.0.1:7001,127.0.0.1:7002/1",
		"sentinel acks":   "redis+sentinel://" + user + ":" + pw + "@" + addr + "/mymaster?sentinelPassword=" + pw + "&minReplicaAcks=2",
	}
}

// Every hostile password, raw and percent-encoded, in every URL form: the URL
// is either accepted and logs in with exactly that password, or rejected with
// an error saying what to fix; no error, identity or redaction holds any
// 3-character fragment of the password.
func TestHostilePasswordsNeverLeakFromStoreURLs(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.Start(t, redisserver.WithPassword("admin-Pw0"))
	admin := srv.Client(t)

	for _, pw := range secrets.Hostile {
		t.Run(pw.Name, func(t *testing.T) {
			// A user whose password is exactly pw.Value: a URL parsed wrongly cannot log in.
			user := "u" + strings.ReplaceAll(strings.ToLower(pw.Name), " ", "-")
			rule := ">" + pw.Value
			if pw.Value == "" {
				rule = "nopass"
			}
			NewWithT(t).Expect(admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", rule, "~*", "+@all").Err()).To(Succeed())

			for encName, enc := range map[string]func(string) string{"raw": func(s string) string { return s }, "percent-encoded": secrets.Encode} {
				for form, u := range storeURLs(srv.Addr(), user, enc(pw.Value)) {
					t.Run(encName+" "+form, func(t *testing.T) {
						g := NewWithT(t)
						redacted := lockclient.Redact(u)
						g.Expect(secrets.Leaks(redacted, pw.Value)).To(BeEmpty(), "Redact: %s", redacted)
						c, err := lockclient.Dial(lockclient.Config{URL: u})
						if err != nil {
							g.Expect(secrets.Leaks(err.Error(), pw.Value)).To(BeEmpty(), "error: %v", err)
							g.Expect(errors.Is(err, lockclient.ErrInvalid)).To(BeTrue())
							g.Expect(redacted).To(Equal("<invalid URL>"))
							if encName == "percent-encoded" {
								t.Fatalf("a percent-encoded password must be accepted: %v", err)
							}
							g.Expect(err.Error()).To(Or(ContainSubstring("must be percent-encoded"), ContainSubstring("percent-encode")))
							return
						}
						defer func() { _ = c.Close() }()
						g.Expect(c.Identity()).To(Equal(redacted))
						g.Expect(secrets.Leaks(c.Identity(), pw.Value)).To(BeEmpty())
						// go-redis sends no AUTH for an empty password.
						if form == "redis" && pw.Value != "" {
							g.Expect(c.Ping(ctx)).To(Succeed(), "the URL logs in with the password as written")
						}
					})
				}
			}
		})
	}
}

func TestStoreURLErrorsSayWhatIsWrongWithoutQuotingTheURL(t *testing.T) {
	const secret = "Zk9Wq7Vx"
	cases := []struct{ name, url, want string }{
		{"a slash in the password", "redis://u:ab/" + secret + "@h:6379", "the password must be percent-encoded: it contains '/'"},
		{"a question mark in the password", "redis://u:ab?" + secret + "@h:6379", "the password must be percent-encoded: it contains '?'"},
		{"a hash in the password", "redis://u:ab#" + secret + "@h:6379", "the password must be percent-encoded: it contains '#'"},
		{"a bad escape in the password", "redis://u:%zz" + secret + "@h:6379", "it contains '%' not followed by two hex digits"},
		{"a slash in the user name", "redis://a/" + secret + ":pw@h:6379", "the user name must be percent-encoded: it contains '/'"},
		{"a password without a host", "redis://:" + secret + "@", "no host"},
		{"a password and a forgotten '@'", "redis://:" + secret + "h:6379", "the host is not host or host:port"},
		{"no host at all", "redis://", "no host"},
		{"a scheme-less URL with a password", "u:" + secret + "://x@h", "the scheme is not one of"},
		{"no scheme", secret + "@h:6379", "must start with redis://"},
		{"a port that is not a number", "redis://u:" + secret + "@h:" + secret, "not host or host:port"},
		{"a port out of range", "redis://h:70000", "a port from 1 to 65535"},
		{"several hosts without a mode", "redis://a:1,b:2", "use redis+sentinel://, redis+cluster:// or redis+redlock://"},
		{"the second host is bad", "redis+cluster://a:1,b:x" + secret, "host 2 is not host or host:port"},
		{"a database that is not a number", "redis://h:1/" + secret, "the database is not a number"},
		{"sentinel without a master", "redis+sentinel://:" + secret + "@a:1", "needs the master name"},
		{"cluster with a database", "redis+cluster://a:1/2", "cannot select a database"},
		{"unix with a host", "unix://host/sock", "unix:///path"},
		{"a line break", "redis://:" + secret + "\n@h:1", "control character"},
		{"a very long URL", "redis://:" + strings.Repeat(secret, 3000) + "@h:1", "longer than 16384 bytes"},
		{"a malformed query", "redis+sentinel://h:1/m?sentinelPassword=%zz" + secret, "the query is malformed"},
		{"replica acks that are not a number", "redis://:" + secret + "@h:1?minReplicaAcks=" + secret, "minReplicaAcks must be given once, as a whole number from 1 to 16"},
		{"no replica acks", "redis://:" + secret + "@h:1?minReplicaAcks=0", "a whole number from 1 to 16"},
		{"replica acks given twice", "redis://h:1?minReplicaAcks=1&minReplicaAcks=2", "must be given once"},
		{"an ack timeout that is not a duration", "redis://:" + secret + "@h:1?minReplicaAcks=1&replicaAckTimeout=" + secret, "replicaAckTimeout must be given once, as a duration from 1ms to 10s"},
		{"an ack timeout without a number of acks", "redis://h:1?replicaAckTimeout=1s", "replicaAckTimeout needs minReplicaAcks"},
		{"an ack timeout too long", "redis://h:1?minReplicaAcks=1&replicaAckTimeout=1m", "a duration from 1ms to 10s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := lockclient.Dial(lockclient.Config{URL: tc.url})
			g.Expect(errors.Is(err, lockclient.ErrInvalid)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
			g.Expect(secrets.Leaks(err.Error(), secret)).To(BeEmpty(), "%v", err)
			g.Expect(lockclient.Redact(tc.url)).To(Equal("<invalid URL>"))
		})
	}
}

func TestStoreURLFormsAreReadAsTheUserMeantThem(t *testing.T) {
	cases := []struct{ url, identity string }{
		{"REDIS://h", "redis://h:6379"},
		{"redis://[::1]:6380/3", "redis://[::1]:6380/3"},
		{"redis://[::1]", "redis://[::1]:6379"},
		{"redis://u@h:1", "redis://h:1"},
		{"redis://h:1/", "redis://h:1/"},
		{"unix://:p@ss@/run/redis.sock?db=2", "unix:///run/redis.sock"},
		{"unix:///run/a@b.sock", "unix:///run/a@b.sock"},
		{"redis+sentinel://:p@ss@s-0,s-1:26380/mymaster?sentinelPassword=q@r/s", "redis+sentinel://s-0:26379,s-1:26380/mymaster"},
		{"rediss+cluster://n-0:7000,n-1:7001", "rediss+cluster://n-0:7000,n-1:7001"},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			g := NewWithT(t)
			c, err := lockclient.Dial(lockclient.Config{URL: tc.url})
			g.Expect(err).NotTo(HaveOccurred())
			defer func() { _ = c.Close() }()
			g.Expect(c.Identity()).To(Equal(tc.identity))
		})
	}
}

// A tenant controls the URL: the longest one the parser takes, built to make a
// naive search for the userinfo quadratic, is still parsed at once.
func TestTheLongestHostileURLParsesQuickly(t *testing.T) {
	g := NewWithT(t)
	half := strings.Repeat("@", 8000)
	url := "redis+sentinel://" + half + "?sentinelPassword=" + half
	start := time.Now()
	_, err := lockclient.Dial(lockclient.Config{URL: url})
	g.Expect(err).To(HaveOccurred())
	g.Expect(time.Since(start)).To(BeNumerically("<", 100*time.Millisecond))
}
