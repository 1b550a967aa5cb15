package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/leadership"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/tcpproxy"
)

// A store that stops answering the heartbeat lets new runs be scheduled (FailOpen
// must start unguarded), but the identity is not settled: a twin may have started
// unseen, so when the store answers again between two beats, a take-up at that
// moment is refused. Only answered beats that find no other manager's value
// settle it again.
func TestIdentityAStoreThatAnswersAgainBetweenBeatsIsNotSettled(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	srv := redisserver.Start(t)
	proxy := tcpproxy.Start(t, srv.Addr())
	store := dialTestStore(t, proxy.Addr(), 300*time.Millisecond)
	c := NewIdentityCheck(store, "cluster-a", "", time.Second)
	logf := func(string, ...any) {}

	for range runcore.IdentityStrikes {
		c.beat(ctx, logf)
	}
	g.Expect(c.Settled("")).To(BeTrue(), "beats with only its own value")

	proxy.Cut()
	c.beat(ctx, logf)
	g.Expect(c.storeDown("")).To(BeTrue())
	g.Expect(c.Settled("")).To(BeFalse(), "no take-up on the strength of beats from before the outage")
	r := &GuardedJobReconciler{Identity: c}
	g.Expect(r.identityHolds(&scope{})).To(BeFalse(), "new runs are scheduled while the store does not answer")

	proxy.Restore(t)
	// A twin (same cluster name and election ID) beat while this one could not.
	g.Expect(srv.Client(t).Set(ctx, c.Key(), "host=twin pid=1 id=twin", time.Minute).Err()).To(Succeed())
	g.Expect(c.Settled("")).To(BeFalse(), "take-up waits for a beat after the store answers again")
	c.beat(ctx, logf)
	g.Expect(c.storeDown("")).To(BeFalse())
	g.Expect(c.Settled("")).To(BeFalse(), "the beat found the twin's value")
	g.Expect(r.identityHolds(&scope{})).To(BeTrue())
	for range runcore.IdentityStrikes {
		c.beat(ctx, logf) // the twin has gone: only this manager's value
	}
	g.Expect(c.Settled("")).To(BeTrue())
}

// A manager that is not known to lead sends no heartbeat: the beats before do
// not settle its identity (a twin may have started meanwhile), and it does not
// take itself for cut off from the store, which would let new runs start
// before the beats settle again.
func TestIdentityABeatRefusedWhileNotLeadingUnsettlesWithoutTakingTheStoreForDown(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	srv := redisserver.Start(t)
	var leading atomic.Bool
	leading.Store(true)
	store := dialTestStore(t, srv.Addr(), time.Second, lockclient.WithWriteGate(func() error {
		if leading.Load() {
			return nil
		}
		return leadership.ErrNotLeading
	}))
	c := NewIdentityCheck(store, "cluster-a", "", time.Second)
	logf := func(string, ...any) {}
	for range runcore.IdentityStrikes {
		c.beat(ctx, logf)
	}
	g.Expect(c.Settled("")).To(BeTrue())

	leading.Store(false)
	c.beat(ctx, logf)
	g.Expect(c.Settled("")).To(BeFalse())
	g.Expect(c.storeDown("")).To(BeFalse())
	r := &GuardedJobReconciler{Identity: c}
	g.Expect(r.identityHolds(&scope{})).To(BeTrue(), "no new run until the beats settle again")
	g.Expect(srv.Client(t).Exists(ctx, c.Key()).Val()).To(Equal(int64(1)), "the key from before is left as it was")

	leading.Store(true)
	for range runcore.IdentityStrikes {
		c.beat(ctx, logf)
	}
	g.Expect(c.Settled("")).To(BeTrue())
}

// Two shards of one cluster started with the same --leader-election-id (or
// both without leader election and the default one) write the same heartbeat
// key. They are not a restored clone: the message names the other shard and
// the flag to set.
func TestIdentityAnotherShardOnTheSameElectionIDIsNamedAsSuch(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	srv := redisserver.Start(t)
	store := dialTestStore(t, srv.Addr(), time.Second)
	a := NewIdentityCheck(store, "cluster-a", "", time.Second).ForShard("shard=a")
	b := NewIdentityCheck(store, "cluster-a", "", time.Second).ForShard("shard=b")
	g.Expect(a.Key()).To(Equal(b.Key()))
	logf := func(string, ...any) {}
	for range runcore.IdentityWindow {
		a.beat(ctx, logf)
		b.beat(ctx, logf)
	}
	other, dup := a.Duplicate("")
	g.Expect(dup).To(BeTrue(), "no run starts while two managers write one heartbeat")
	r := &GuardedJobReconciler{ClusterName: "cluster-a", Identity: a}
	msg := r.duplicateMessage(other, "")
	g.Expect(msg).To(ContainSubstring(`another shard (--watch-label-selector "shard=b")`))
	g.Expect(msg).To(ContainSubstring("Give each shard its own --leader-election-id"))
	g.Expect(msg).NotTo(ContainSubstring("snapshot"), "not taken for a restored clone")

	// With leader election, a shard sharing the leader's Lease waits forever:
	// while it waits it reads the leader's heartbeat and names its shard.
	a.beat(ctx, logf)
	follower := NewIdentityCheck(store, "cluster-a", "", time.Second).ForShard("shard=c")
	shard, other2 := follower.leaderOfAnotherShard(ctx)
	g.Expect(other2).To(BeTrue())
	g.Expect(shard).To(Equal("shard=a"))
	replica := NewIdentityCheck(store, "cluster-a", "", time.Second).ForShard("shard=a")
	_, other2 = replica.leaderOfAnotherShard(ctx)
	g.Expect(other2).To(BeFalse(), "a replica of the leader's own shard waits as it should")

	clone := NewIdentityCheck(store, "cluster-a", "", time.Second).ForShard("shard=a")
	g.Expect(r.duplicateMessage(clone.value, "")).To(ContainSubstring("Give each cluster its own --cluster-name"), "the same shard twice: a clone or a second replica")
}

// dialTestStore dials the redis-server at addr for a test, closed at its end.
// A twin seen only in a tenant store (clones whose managers have stores of their
// own) holds back the runs in that store; the tenant can write its store, so
// what the key holds there never holds back the manager's own store or another
// tenant's. A tenant store the heartbeat has not beaten in yet is not settled.
func TestIdentityATwinInATenantStoreHoldsBackOnlyThatStore(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	own := dialTestStore(t, redisserver.Start(t).Addr(), time.Second, lockclient.WithIdentity("own"))
	tenantSrv := redisserver.Start(t)
	tenant := dialTestStore(t, tenantSrv.Addr(), time.Second, lockclient.WithIdentity("secret:payments/shared:redis://tenant"))
	other := dialTestStore(t, redisserver.Start(t).Addr(), time.Second, lockclient.WithIdentity("secret:reports/own:redis://other"))
	stores := []*lockclient.Client{other}
	c := NewIdentityCheck(own, "cluster-a", "", time.Second).WithTenantStores(func() []*lockclient.Client { return stores })
	var logged []string
	logf := func(msg string, _ ...any) { logged = append(logged, msg) }
	for range runcore.IdentityStrikes {
		c.beat(ctx, logf)
	}
	g.Expect(c.Settled("")).To(BeTrue())
	g.Expect(c.Settled(other.Identity())).To(BeTrue())
	g.Expect(c.Settled(tenant.Identity())).To(BeFalse(), "a store not beaten in yet: a twin there could not have been seen")

	stores = append(stores, tenant)
	for range runcore.IdentityWindow {
		g.Expect(tenantSrv.Client(t).Set(ctx, c.Key(), "host=clone pid=1 id=clone", time.Minute).Err()).To(Succeed())
		c.beat(ctx, logf)
	}
	value, dup := c.Duplicate(tenant.Identity())
	g.Expect(dup).To(BeTrue(), "the twin is seen in the tenant store")
	g.Expect(value).To(Equal("host=clone pid=1 id=clone"))
	g.Expect(c.Settled(tenant.Identity())).To(BeFalse())
	g.Expect(logged).To(ContainElement(ContainSubstring("ANOTHER MANAGER CLAIMS")))
	for _, store := range []string{"", own.Identity(), other.Identity()} {
		_, dup := c.Duplicate(store)
		g.Expect(dup).To(BeFalse(), store)
		g.Expect(c.Settled(store)).To(BeTrue(), store)
	}
	r := &GuardedJobReconciler{ClusterName: "cluster-a", Identity: c}
	msg := r.duplicateMessage(strings.Repeat("x", 10_000), tenant.Identity())
	g.Expect(msg).To(ContainSubstring("the tenant store " + tenant.Identity()))
	g.Expect(len(msg)).To(BeNumerically("<", 1500), "a tenant's value is quoted, bounded")

	stores = stores[:1] // its client closed: no run uses the store any more
	c.beat(ctx, logf)
	_, dup = c.Duplicate(tenant.Identity())
	g.Expect(dup).To(BeFalse())
}

// A tenant store whose ACL refuses the heartbeat key cannot show a twin: it
// holds nothing back (its runs would otherwise never start), and the manager
// says once what to allow.
func TestIdentityATenantStoreWhoseACLRefusesTheHeartbeatHoldsNothingBack(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	own := dialTestStore(t, redisserver.Start(t).Addr(), time.Second)
	srv := redisserver.Start(t, redisserver.WithPassword("Adm1n-pw"))
	g.Expect(srv.Client(t).Do(ctx, "ACL", "SETUSER", "tenant", "on", ">Tenant-pw1", "resetkeys", "~payments:*", "+@all").Err()).To(Succeed())
	tenant, err := lockclient.Dial(lockclient.Config{URL: "redis://tenant:Tenant-pw1@" + srv.Addr(), Timeout: time.Second}, lockclient.WithIdentity("secret:payments/store:redis://tenant"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = tenant.Close() })
	c := NewIdentityCheck(own, "cluster-a", "", time.Second).WithTenantStores(func() []*lockclient.Client { return []*lockclient.Client{tenant} })
	var logged []string
	logf := func(msg string, kv ...any) { logged = append(logged, fmt.Sprint(append([]any{msg}, kv...)...)) }
	for range runcore.IdentityStrikes {
		c.beat(ctx, logf)
	}
	g.Expect(c.Settled(tenant.Identity())).To(BeTrue(), "nothing to wait for")
	g.Expect(c.storeDown(tenant.Identity())).To(BeFalse(), "refused is not down")
	g.Expect(logged).To(HaveLen(1))
	g.Expect(logged[0]).To(ContainSubstring("~_guardedjob:identity:*"))
	g.Expect(logged[0]).To(ContainSubstring(tenant.Identity()), "names the store")
	g.Expect(logged[0]).NotTo(ContainSubstring("Tenant-pw1"), "with its message and every value logged beside it")
}

func dialTestStore(t *testing.T, addr string, timeout time.Duration, opts ...lockclient.ClientOption) *lockclient.Client {
	t.Helper()
	store, err := lockclient.Dial(lockclient.Config{URL: "redis://" + addr, Timeout: timeout}, opts...)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}
