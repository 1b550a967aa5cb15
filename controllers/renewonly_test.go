package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// TestRenewOnlyNeverTakesBackAKeyFoundAbsent: a manager that lost its
// leadership while cut off from the API server renews its leases alone. A
// FailOpen lease whose key it finds absent was released by the new leader (its
// run completed): writing it back would be a ghost lock that comes back after
// every unlock. The key stays absent and the lease is lost here. No API server:
// the keeper and the store are real.
func TestRenewOnlyNeverTakesBackAKeyFoundAbsent(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	rdb := srv.Client(t)
	store := dialTestStore(t, srv.Addr(), time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	key := "team:ghost"
	r, err := leasetoken.NewRandom()
	g.Expect(err).NotTo(HaveOccurred())
	token := leasetoken.Format(leasetoken.FormatHolder("cluster-a", "team", "ghost-1"), r)
	lease, err := store.Acquire(ctx, lockclient.AcquireRequest{Keys: lockclient.Keys{Lock: key}, Token: token, TTL: 10 * time.Second, Policy: lockclient.FenceNone})
	g.Expect(err).NotTo(HaveOccurred())

	keeper := lockclient.NewKeeper(store)
	g.Expect(keeper.Track(lockclient.TrackRequest{Lease: lease, RenewInterval: time.Second, ReacquireIfAbsent: true})).To(Succeed())
	kept, renewing := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(kept)
		_ = keeper.Run(ctx)
	}()
	go func() {
		defer close(renewing)
		_ = RenewOnly(ctx, keeper, func() bool { return false }, time.Hour, logr.Discard())
	}()
	t.Cleanup(func() {
		cancel()
		<-kept
		<-renewing
	})
	tracked := time.Now()
	g.Eventually(func() bool {
		return time.Since(tracked) > 1500*time.Millisecond && rdb.PTTL(ctx, key).Val() > 9*time.Second
	}).
		WithTimeout(5*time.Second).Should(BeTrue(), "it keeps renewing")

	g.Expect(rdb.Del(ctx, key).Err()).To(Succeed()) // the new leader's run completed and released it
	g.Consistently(func() (int64, error) { return rdb.Exists(ctx, key).Result() }).WithTimeout(3500*time.Millisecond).WithPolling(100*time.Millisecond).
		Should(BeZero(), "the released key is never written back")
	g.Eventually(func() bool { _, still := keeper.Get(lease.Token); return still }).WithTimeout(5*time.Second).
		Should(BeFalse(), "a key found absent is a lost lease: no longer renewed")
}
