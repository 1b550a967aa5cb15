package lockclient_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/tcpproxy"
)

// Confirm tells a held key (with a bound counted from the send time), another
// holder (by holder name only), an absent key, a key without expiry (held,
// no bound), a key of another type and a store that does not answer apart, in
// one MULTI GET PTTL EXEC.
func TestConfirm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redisserver.Start(t)
	admin := srv.Client(t)
	c := dial(t, srv)
	mine := token(t, "mine")
	sum := sha256.Sum256([]byte(mine))

	t.Run("held", func(t *testing.T) {
		g := NewWithT(t)
		key := keys("confirm-held").Lock
		g.Expect(admin.Set(ctx, key, mine, 10*time.Second).Err()).To(Succeed())
		rec := record(c)
		before := time.Now()
		cf, err := c.Confirm(ctx, key, sum)
		after := time.Now()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cf.Held).To(BeTrue())
		g.Expect(cf.Holder).To(Equal(leasetoken.HolderOf(mine)))
		g.Expect(cf.TTL).To(BeNumerically(">", 9*time.Second))
		g.Expect(cf.TTL).To(BeNumerically("<=", 10*time.Second))
		g.Expect(cf.SentAt).To(BeTemporally(">=", before))
		g.Expect(cf.SentAt).To(BeTemporally("<=", after))
		g.Expect(cf.ValidUntil()).To(Equal(cf.SentAt.Add(cf.TTL)))
		cmds, pipelines := rec.reset()
		g.Expect(cmds).To(Equal([]string{"multi", "get", "pttl", "exec"}))
		g.Expect(pipelines).To(Equal(1), "one round trip")
	})

	t.Run("another holder", func(t *testing.T) {
		g := NewWithT(t)
		key := keys("confirm-other").Lock
		other := token(t, "other")
		g.Expect(admin.Set(ctx, key, other, 10*time.Second).Err()).To(Succeed())
		cf, err := c.Confirm(ctx, key, sum)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cf.Held).To(BeFalse())
		g.Expect(cf.Holder).To(Equal(leasetoken.HolderOf(other)))
		g.Expect(cf.ValidUntil().IsZero()).To(BeTrue())
	})

	t.Run("absent", func(t *testing.T) {
		g := NewWithT(t)
		cf, err := c.Confirm(ctx, keys("confirm-absent").Lock, sum)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cf).To(And(HaveField("Held", false), HaveField("Holder", "")))
	})

	t.Run("held without expiry", func(t *testing.T) {
		g := NewWithT(t)
		key := keys("confirm-persist").Lock
		g.Expect(admin.Set(ctx, key, mine, 0).Err()).To(Succeed())
		cf, err := c.Confirm(ctx, key, sum)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cf.Held).To(BeTrue())
		g.Expect(cf.ValidUntil().IsZero()).To(BeTrue(), "no bound from a key without expiry")
	})

	t.Run("another type", func(t *testing.T) {
		g := NewWithT(t)
		key := keys("confirm-hash").Lock
		g.Expect(admin.HSet(ctx, key, "f", "v").Err()).To(Succeed())
		_, err := c.Confirm(ctx, key, sum)
		g.Expect(errors.Is(err, lockclient.ErrInvalid)).To(BeTrue(), "%v", err)
	})

	t.Run("bad key", func(t *testing.T) {
		_, err := c.Confirm(ctx, "a key", sum)
		NewWithT(t).Expect(errors.Is(err, lockclient.ErrInvalid)).To(BeTrue(), "%v", err)
	})

	t.Run("store down", func(t *testing.T) {
		g := NewWithT(t)
		down := dialConfig(t, lockclient.Config{URL: "redis://" + closedPort(t), Timeout: time.Second})
		_, err := down.Confirm(ctx, "ns:k", sum)
		g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue(), "%v", err)
	})
}

// docsGuardACL returns the arguments of the pod guard ACL line that
// docs/security.md gives, with the password filled in.
func docsGuardACL(t *testing.T, password string) []any {
	t.Helper()
	return docsACLOf(t, "guardedjob-guard-payments", password)
}

// The pod guard's user, exactly as docs/security.md gives it, can confirm a
// lease of its namespace and nothing else: it cannot write, delete, run
// scripts or read a key outside its namespace, and the only commands Redis
// denied it are the ones tried here on purpose.
func TestTheDocumentedGuardACLConfirmsAndCannotWrite(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	srv := redisserver.Start(t, redisserver.WithPassword("Adm1n-pw"))
	admin := srv.Client(t)
	g.Expect(admin.Do(ctx, docsGuardACL(t, "guard-Pw7")...).Err()).To(Succeed())
	tok := token(t, "guarded")
	g.Expect(admin.Set(ctx, "payments:settlement", tok, 10*time.Second).Err()).To(Succeed())
	g.Expect(admin.Set(ctx, "reports:daily", tok, 10*time.Second).Err()).To(Succeed())

	c := dialConfig(t, lockclient.Config{URL: "redis://guardedjob-guard-payments:guard-Pw7@" + srv.Addr()})
	cf, err := c.Confirm(ctx, "payments:settlement", sha256.Sum256([]byte(tok)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cf.Held).To(BeTrue())
	g.Expect(cf.TTL).To(BeNumerically(">", 5*time.Second))

	_, err = c.Confirm(ctx, "reports:daily", sha256.Sum256([]byte(tok)))
	g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("NOPERM"))

	rdb := c.Redis()
	for name, cmd := range map[string][]any{
		"SET":     {"SET", "payments:settlement", "mine"},
		"DEL":     {"DEL", "payments:settlement"},
		"PEXPIRE": {"PEXPIRE", "payments:settlement", "1"},
		"EVAL":    {"EVAL", "return 1", "0"},
		"GET":     {"GET", "reports:daily"},
	} {
		err := rdb.Do(ctx, cmd...).Err()
		g.Expect(err).To(HaveOccurred(), name)
		g.Expect(err.Error()).To(ContainSubstring("NOPERM"), name)
	}
	g.Expect(admin.Get(ctx, "payments:settlement").Val()).To(Equal(tok), "the lease is untouched")
	g.Expect(admin.PTTL(ctx, "payments:settlement").Val()).To(BeNumerically(">", time.Second), "and keeps its expiry")

	denied := map[any]bool{}
	for _, entry := range admin.Do(ctx, "ACL", "LOG").Val().([]any) {
		denied[entry.(map[any]any)["object"]] = true
	}
	// Denied commands are logged by name, denied keys by key.
	g.Expect(denied).To(Equal(map[any]bool{"set": true, "del": true, "pexpire": true, "eval": true, "reports:daily": true}),
		"only what was tried on purpose was denied: the login and Confirm need nothing more")
}

// In Redis Cluster the guard's user needs the documented Cluster addition,
// and Confirm's transaction runs on the key's node.
func TestTheDocumentedGuardACLWithItsClusterAddition(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	cluster := redisserver.StartCluster(t, 3)
	for _, node := range cluster.Nodes() {
		g.Expect(node.Client(t).Do(ctx, append(docsGuardACL(t, "guard-Pw7"), "+cluster|slots", "+command")...).Err()).To(Succeed())
	}
	tok := token(t, "guarded")
	g.Expect(cluster.Client(t).Set(ctx, "payments:{settlement}", tok, 10*time.Second).Err()).To(Succeed())
	c := dialConfig(t, lockclient.Config{URL: "redis+cluster://guardedjob-guard-payments:guard-Pw7@" + strings.Join(cluster.Addrs(), ",")})
	cf, err := c.Confirm(ctx, "payments:{settlement}", sha256.Sum256([]byte(tok)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cf.Held).To(BeTrue())
}

// A Redlock store confirms a lease only on a majority; its bound is when
// enough copies could expire for another holder to reach a majority, less the
// drift allowance; "not held" needs a majority of answers that rule it out.
func TestRedlockConfirm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nodes, c := startRedlock(t, 3)
	tok := token(t, "mine")
	sum := sha256.Sum256([]byte(tok))
	set := func(t *testing.T, key string, values []string, ttls []time.Duration) {
		t.Helper()
		for i, v := range values {
			rdb := nodes[i].Client(t)
			if v == "" {
				NewWithT(t).Expect(rdb.Del(ctx, key).Err()).To(Succeed())
				continue
			}
			NewWithT(t).Expect(rdb.Set(ctx, key, v, ttls[i]).Err()).To(Succeed())
		}
	}
	other := token(t, "other")
	s := time.Second

	t.Run("on all three: the second shortest copy bounds it", func(t *testing.T) {
		g := NewWithT(t)
		key := keys("rl-confirm-all").Lock
		set(t, key, []string{tok, tok, tok}, []time.Duration{5 * s, 20 * s, 10 * s})
		cf, err := c.Confirm(ctx, key, sum)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cf.Held).To(BeTrue())
		g.Expect(cf.Holder).To(Equal(leasetoken.HolderOf(tok)))
		g.Expect(cf.TTL).To(BeNumerically("<=", 10*s-100*time.Millisecond), "drift allowance taken off")
		g.Expect(cf.TTL).To(BeNumerically(">", 9*s))
	})

	t.Run("on two of three: the shorter copy bounds it", func(t *testing.T) {
		g := NewWithT(t)
		key := keys("rl-confirm-two").Lock
		set(t, key, []string{other, tok, tok}, []time.Duration{30 * s, 20 * s, 10 * s})
		cf, err := c.Confirm(ctx, key, sum)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cf.Held).To(BeTrue())
		g.Expect(cf.TTL).To(BeNumerically("<=", 10*s-100*time.Millisecond))
		g.Expect(cf.TTL).To(BeNumerically(">", 9*s))
	})

	t.Run("on one of three: lost, held by the majority's holder", func(t *testing.T) {
		g := NewWithT(t)
		key := keys("rl-confirm-one").Lock
		set(t, key, []string{other, other, tok}, []time.Duration{30 * s, 30 * s, 30 * s})
		cf, err := c.Confirm(ctx, key, sum)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cf.Held).To(BeFalse())
		g.Expect(cf.Holder).To(Equal(leasetoken.HolderOf(other)))
	})

	t.Run("gone everywhere", func(t *testing.T) {
		g := NewWithT(t)
		cf, err := c.Confirm(ctx, keys("rl-confirm-none").Lock, sum)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cf).To(And(HaveField("Held", false), HaveField("Holder", "")))
	})

	t.Run("a node down", func(t *testing.T) {
		g := NewWithT(t)
		undecided, confirmed := keys("rl-confirm-undecided").Lock, keys("rl-confirm-down").Lock
		set(t, undecided, []string{tok, other, tok}, []time.Duration{30 * s, 30 * s, 30 * s})
		set(t, confirmed, []string{tok, tok, other}, []time.Duration{30 * s, 30 * s, 30 * s})
		nodes[2].Kill()
		_, err := c.Confirm(ctx, undecided, sum)
		g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue(), "one copy, one other, one unknown: neither confirmed nor lost: %v", err)
		g.Expect(err.Error()).To(ContainSubstring("can be neither confirmed nor ruled out"))
		cf, err := c.Confirm(ctx, confirmed, sum)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cf.Held).To(BeTrue(), "two of three still hold it")
		nodes[1].Kill()
		_, err = c.Confirm(ctx, confirmed, sum)
		g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring("1 of 3 Redlock nodes answered, 2 needed"))
	})
}

// A confirmation's bound counts from when the read was sent, never from when its
// answer came: Redis starts counting the PTTL it reports when it runs the read,
// which a slow network puts after the send. Counting from the reply would place
// the lease's end up to a round trip after the real one.
func TestConfirmCountsTheLeaseFromTheSendTimeNotTheReply(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	srv := redisserver.Start(t)
	px := tcpproxy.Start(t, srv.Addr())
	c := dialConfig(t, lockclient.Config{URL: "redis://" + px.Addr(), Timeout: 5 * time.Second})
	mine := token(t, "slow")
	key := keys("confirm-slow").Lock
	g.Expect(srv.Client(t).Set(ctx, key, mine, 10*time.Second).Err()).To(Succeed())
	_, err := c.Confirm(ctx, key, sha256.Sum256([]byte(mine))) // connect before the delay
	g.Expect(err).NotTo(HaveOccurred())

	px.Delay(400 * time.Millisecond)
	before := time.Now()
	cf, err := c.Confirm(ctx, key, sha256.Sum256([]byte(mine)))
	replied := time.Now()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(replied.Sub(before)).To(BeNumerically(">=", 400*time.Millisecond), "the proxy delayed the read")
	g.Expect(cf.SentAt.Sub(before)).To(BeNumerically("<", 100*time.Millisecond), "SentAt is the send time")
	g.Expect(cf.ValidUntil()).To(BeTemporally("<=", before.Add(10*time.Second).Add(50*time.Millisecond)),
		"the bound never lies past the key's real expiry, set by the SET before the read")
}
