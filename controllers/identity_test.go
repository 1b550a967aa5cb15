package controllers

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/leadership"
	"github.com/guardedjob/guardedjob/internal/lockclient"
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

	for range identityStrikes {
		c.beat(ctx, logf)
	}
	g.Expect(c.Settled()).To(BeTrue(), "beats with only its own value")

	proxy.Cut()
	c.beat(ctx, logf)
	g.Expect(c.storeDown()).To(BeTrue())
	g.Expect(c.Settled()).To(BeFalse(), "no take-up on the strength of beats from before the outage")
	r := &GuardedJobReconciler{Identity: c}
	g.Expect(r.identitySettled(&scope{})).To(BeTrue(), "new runs are scheduled while the store does not answer")

	proxy.Restore(t)
	// A twin (same cluster name and election ID) beat while this one could not.
	g.Expect(srv.Client(t).Set(ctx, c.Key(), "host=twin pid=1 id=twin", time.Minute).Err()).To(Succeed())
	g.Expect(c.Settled()).To(BeFalse(), "take-up waits for a beat after the store answers again")
	c.beat(ctx, logf)
	g.Expect(c.storeDown()).To(BeFalse())
	g.Expect(c.Settled()).To(BeFalse(), "the beat found the twin's value")
	g.Expect(r.identitySettled(&scope{})).To(BeFalse())
	for range identityStrikes {
		c.beat(ctx, logf) // the twin has gone: only this manager's value
	}
	g.Expect(c.Settled()).To(BeTrue())
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
	for range identityStrikes {
		c.beat(ctx, logf)
	}
	g.Expect(c.Settled()).To(BeTrue())

	leading.Store(false)
	c.beat(ctx, logf)
	g.Expect(c.Settled()).To(BeFalse())
	g.Expect(c.storeDown()).To(BeFalse())
	r := &GuardedJobReconciler{Identity: c}
	g.Expect(r.identitySettled(&scope{})).To(BeFalse(), "no new run until the beats settle again")
	g.Expect(srv.Client(t).Exists(ctx, c.Key()).Val()).To(Equal(int64(1)), "the key from before is left as it was")

	leading.Store(true)
	for range identityStrikes {
		c.beat(ctx, logf)
	}
	g.Expect(c.Settled()).To(BeTrue())
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
	for range identityWindow {
		a.beat(ctx, logf)
		b.beat(ctx, logf)
	}
	other, dup := a.Duplicate()
	g.Expect(dup).To(BeTrue(), "no run starts while two managers write one heartbeat")
	r := &GuardedJobReconciler{ClusterName: "cluster-a", Identity: a}
	msg := r.duplicateMessage(other)
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
	g.Expect(r.duplicateMessage(clone.value)).To(ContainSubstring("Give each cluster its own --cluster-name"), "the same shard twice: a clone or a second replica")
}

// dialTestStore dials the redis-server at addr for a test, closed at its end.
func dialTestStore(t *testing.T, addr string, timeout time.Duration, opts ...lockclient.ClientOption) *lockclient.Client {
	t.Helper()
	store, err := lockclient.Dial(lockclient.Config{URL: "redis://" + addr, Timeout: timeout}, opts...)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}
