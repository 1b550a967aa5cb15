package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"

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
	store, err := lockclient.Dial(lockclient.Config{URL: "redis://" + proxy.Addr(), Timeout: 300 * time.Millisecond})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = store.Close() })
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
