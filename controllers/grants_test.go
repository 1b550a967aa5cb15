package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/keys"
	"github.com/guardedjob/guardedjob/internal/specerror"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// Cluster A grants lock:settlement to namespace payments; cluster B shares the
// store without that grant, so by default its namespace "lock" may use
// lock:settlement:... Two tenants would then hold one key. B reads A's
// published grants and refuses exactly the keys the two sets judge
// differently; A, whose set stands in the store, refuses nothing of its own.
func TestGrantsAManagerWithOtherKeyGrantsRefusesTheKeysTheyGiveToAnotherNamespace(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	srv := redisserver.Start(t)
	store := dialTestStore(t, srv.Addr(), time.Second)
	grantsA, err := keys.ParseGrants("payments=lock:settlement")
	g.Expect(err).NotTo(HaveOccurred())
	a := NewGrantsCheck(store, grantsA, time.Second)
	b := NewGrantsCheck(store, keys.Grants{}, time.Second)
	var logged []string
	logErr := func(_ error, msg string, _ ...any) { logged = append(logged, msg) }

	g.Expect(b.Agree("lock", "lock:settlement:2026-12-05")).To(Succeed(), "nothing published yet")
	a.publish(ctx, logErr)
	b.publish(ctx, logErr)
	g.Expect(logged).To(HaveLen(1), "B says once that the sets differ")

	err = b.Agree("lock", "lock:settlement:2026-12-05")
	g.Expect(specerror.As(err)).To(HaveField("Reason", specerror.KeyNotAllowedReason))
	g.Expect(err.Error()).To(ContainSubstring("same --key-grants"))
	g.Expect(b.Agree("lock", "lock:other")).To(Succeed(), "a key both sets give to the same namespace")
	g.Expect(b.Agree("reports", "reports:daily")).To(Succeed())
	g.Expect(a.Agree("payments", "lock:settlement:2026-12-05")).To(Succeed(), "A's set stands in the store")

	b.publish(ctx, logErr)
	g.Expect(logged).To(HaveLen(1), "not again for the same set")
	g.Expect(srv.Client(t).Get(ctx, grantsKey).Val()).To(Equal("grants=payments=lock:settlement"), "B never writes over A's set")
	g.Expect(srv.Client(t).PTTL(ctx, grantsKey).Val()).To(BeNumerically(">", 10*24*time.Hour),
		"the set outlives every done-marker of a key it grants, so no other set replaces it under a tenant's marker")

	// B restarted with A's grants: they agree.
	b = NewGrantsCheck(store, grantsA, time.Second)
	b.publish(ctx, logErr)
	g.Expect(b.Agree("lock", "lock:settlement:2026-12-05")).To(Succeed(), "refused by --key-grants itself, not by a disagreement")
	g.Expect(b.ours.CheckKeys("lock", "lock:settlement:2026-12-05")).NotTo(Succeed())
}
