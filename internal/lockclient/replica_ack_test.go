package lockclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// With minReplicaAcks, a lease counts only once a replica has it: the acquire
// script and WAIT go out in one pipeline on one connection (WAIT counts only
// that connection's writes). A replica that does not answer makes the
// acquisition a store error, and the key is released, not left behind for the
// TTL; once the replica answers again, acquisitions succeed.
func TestReplicaAcknowledgementOfAnAcquisition(t *testing.T) {
	ctx := context.Background()
	master := redisserver.Start(t)
	replica := redisserver.Start(t, redisserver.WithReplicaOf(master))
	masterRDB, replicaRDB := master.Client(t), replica.Client(t)
	const ackTimeout = time.Second // a replica on a busy machine answers WAIT in well under a second
	c := dialConfig(t, lockclient.Config{URL: master.URL() + "?minReplicaAcks=1&replicaAckTimeout=1s", Timeout: 3 * time.Second})
	n, d := c.ReplicaAcks()
	NewWithT(t).Expect(n).To(Equal(1))
	NewWithT(t).Expect(d).To(Equal(ackTimeout))

	t.Run("a running replica acknowledges, and has the key when Acquire returns", func(t *testing.T) {
		g := NewWithT(t)
		k, tok := keys("acks-ok"), token(t, "j")
		rec := record(c)
		before := time.Now()
		l, err := c.Acquire(ctx, acquireReq(k, tok, 10*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(l.SentAt).To(BeTemporally(">=", before), "SentAt is taken before the call is sent")
		// Read from the replica at once: WAIT returned only after it had the write.
		g.Expect(replicaRDB.Get(ctx, k.Lock).Val()).To(Equal(tok))
		g.Expect(replicaRDB.Get(ctx, k.Fence).Val()).To(Equal("1"))
		cmds, pipelines := rec.reset()
		g.Expect(pipelines).To(Equal(1))
		g.Expect(cmds).To(Equal([]string{"eval", "wait"}))
		g.Expect(c.Release(ctx, l)).To(Succeed())
	})

	t.Run("a stopped replica makes it a store error and leaves no key behind", func(t *testing.T) {
		g := NewWithT(t)
		k, tok := keys("acks-stopped"), token(t, "j")
		replica.Pause()
		start := time.Now()
		_, err := c.Acquire(ctx, acquireReq(k, tok, 10*time.Second))
		elapsed := time.Since(start)
		replica.Resume()
		g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue(), "%v", err)
		g.Expect(errors.Is(err, lockclient.ErrTooFewReplicas)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring("0 of 1 within 1s; released it"))
		g.Expect(elapsed).To(BeNumerically(">=", ackTimeout))
		g.Expect(elapsed).To(BeNumerically("<", ackTimeout+time.Second))
		g.Expect(masterRDB.Exists(ctx, k.Lock).Val()).To(BeZero(), "the unacknowledged lease was released")

		// The replica catches up and the next acquisition succeeds, with a
		// higher fence: the released attempt's fence is never handed out again.
		l, err := c.Acquire(ctx, acquireReq(k, tok, 10*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(l.Fence).To(BeEquivalentTo(2))
		g.Expect(replicaRDB.Get(ctx, k.Lock).Val()).To(Equal(tok))
	})

	t.Run("busy and done answers are not store errors", func(t *testing.T) {
		g := NewWithT(t)
		k := keys("acks-busy")
		_, err := c.Acquire(ctx, acquireReq(k, token(t, "a"), 10*time.Second))
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.Acquire(ctx, acquireReq(k, token(t, "b"), 10*time.Second))
		g.Expect(errors.Is(err, lockclient.ErrBusy)).To(BeTrue(), "%v", err)
		g.Expect(masterRDB.Set(ctx, k.Occurrence, token(t, "c"), time.Minute).Err()).To(Succeed())
		_, err = c.Acquire(ctx, acquireReq(k, token(t, "b"), 10*time.Second))
		g.Expect(errors.Is(err, lockclient.ErrDone)).To(BeTrue(), "%v", err)
	})

	t.Run("more acknowledgements than replicas never succeeds", func(t *testing.T) {
		g := NewWithT(t)
		c2 := dialConfig(t, lockclient.Config{URL: master.URL() + "?minReplicaAcks=2&replicaAckTimeout=50ms"})
		k := keys("acks-two")
		_, err := c2.Acquire(ctx, acquireReq(k, token(t, "j"), 10*time.Second))
		g.Expect(errors.Is(err, lockclient.ErrTooFewReplicas)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring("1 of 2"))
		g.Expect(masterRDB.Exists(ctx, k.Lock).Val()).To(BeZero())
	})
}

// With minReplicaAcks a done-marker counts only once as many replicas as an
// acquisition needs have it, and the lease goes only then: a failover right
// after a completion can lose neither the marker nor, while the key is still
// held, let the occurrence run a second time.
func TestReplicaAcknowledgementOfADoneMarker(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	master := redisserver.Start(t)
	replica := redisserver.Start(t, redisserver.WithReplicaOf(master))
	masterRDB, replicaRDB := master.Client(t), replica.Client(t)
	// 3s: the replica must ack the acquisition while the whole suite runs under
	// the race detector beside it (1s was once too short there).
	c := dialConfig(t, lockclient.Config{URL: master.URL() + "?minReplicaAcks=1&replicaAckTimeout=3s", Timeout: 5 * time.Second})
	k, tok := keys("acks-done"), token(t, "j")
	l, err := c.Acquire(ctx, acquireReq(k, tok, 30*time.Second))
	g.Expect(err).NotTo(HaveOccurred())

	replica.Pause()
	released, err := c.Complete(ctx, l, time.Hour)
	replica.Resume()
	g.Expect(released).To(BeFalse())
	g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue(), "%v", err)
	g.Expect(errors.Is(err, lockclient.ErrTooFewReplicas)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("the lease is kept"))
	g.Expect(masterRDB.Get(ctx, k.Lock).Val()).To(Equal(tok), "the lease is kept while the marker may be lost in a failover")

	// The replica caught up: the completion goes through, and the replica has the
	// marker by the time the lease is gone.
	rec := record(c)
	released, err = c.Complete(ctx, l, time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(released).To(BeTrue())
	cmds, _ := rec.reset()
	g.Expect(len(cmds)).To(BeNumerically(">=", 3))
	g.Expect(cmds[:3]).To(Equal([]string{"eval", "wait", "evalsha"}), "marker and WAIT on one connection, then the release")
	g.Expect(replicaRDB.Get(ctx, k.Occurrence).Val()).To(Equal(tok))
	g.Expect(masterRDB.Exists(ctx, k.Lock).Val()).To(BeZero())
	_, err = c.Acquire(ctx, acquireReq(k, token(t, "again"), 30*time.Second))
	g.Expect(errors.Is(err, lockclient.ErrDone)).To(BeTrue(), "the occurrence is done: %v", err)
}
