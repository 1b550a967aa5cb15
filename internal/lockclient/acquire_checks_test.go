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

func TestAcquireWritesNothingWhenAKeyHoldsTheWrongType(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.Start(t)
	c := dial(t, srv)
	rdb := srv.Client(t)
	for _, tc := range []struct {
		name  string
		plant func(k lockclient.Keys) string // returns the key it spoiled
	}{
		{"a hash at the lock key", func(k lockclient.Keys) string { rdb.HSet(ctx, k.Lock, "f", "v"); return k.Lock }},
		{"a list at the done-marker key", func(k lockclient.Keys) string { rdb.RPush(ctx, k.Occurrence, "x"); return k.Occurrence }},
		{"a set at the fence key", func(k lockclient.Keys) string { rdb.SAdd(ctx, k.Fence, "x"); return k.Fence }},
		{"a fence key that is not a number", func(k lockclient.Keys) string { rdb.Set(ctx, k.Fence, "seven", 0); return k.Fence }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			k := keys("wrongtype")
			spoiled := tc.plant(k)
			before := rdb.Keys(ctx, "*").Val()
			_, err := c.Acquire(ctx, acquireReq(k, token(t, "j"), 5*time.Second))
			g.Expect(errors.Is(err, lockclient.ErrInvalid)).To(BeTrue(), "%v", err)
			var wt *lockclient.WrongTypeError
			g.Expect(errors.As(err, &wt)).To(BeTrue(), "%v", err)
			g.Expect(wt.Key).To(Equal(spoiled))
			g.Expect(err.Error()).To(ContainSubstring(spoiled))
			g.Expect(rdb.Keys(ctx, "*").Val()).To(ConsistOf(before), "nothing was written")
		})
	}
}

func TestAcquireReleasesTheCallersOwnKeyWhenTheOccurrenceIsAlreadyDone(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	srv := redisserver.Start(t)
	c := dial(t, srv)
	rdb := srv.Client(t)
	k := keys("done-held")
	tok := token(t, "j")
	// The caller took the key, then (a retried call after a crash) finds the
	// occurrence marked done by someone else meanwhile.
	_, err := c.Acquire(ctx, acquireReq(k, tok, time.Minute))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rdb.Set(ctx, k.Occurrence, "other/ns/x#1", time.Hour).Err()).To(Succeed())

	_, err = c.Acquire(ctx, acquireReq(k, tok, time.Minute))
	g.Expect(errors.Is(err, lockclient.ErrDone)).To(BeTrue(), "%v", err)
	g.Expect(rdb.Exists(ctx, k.Lock).Val()).To(BeZero(), "a Done answer leaves no key of the caller's behind")

	// Another holder's key is never touched by a Done answer.
	g.Expect(rdb.Set(ctx, k.Lock, "other/ns/y#2", time.Minute).Err()).To(Succeed())
	_, err = c.Acquire(ctx, acquireReq(k, token(t, "z"), time.Minute))
	g.Expect(errors.Is(err, lockclient.ErrDone)).To(BeTrue(), "%v", err)
	g.Expect(rdb.Get(ctx, k.Lock).Val()).To(Equal("other/ns/y#2"))
}
