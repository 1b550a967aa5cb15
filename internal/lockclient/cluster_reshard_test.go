package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// clusterNode is one master of a test cluster with its node id.
type clusterNode struct {
	srv *redisserver.Server
	rdb *redis.Client
	id  string
}

func clusterNodes(t *testing.T, cl *redisserver.Cluster) []clusterNode {
	t.Helper()
	var out []clusterNode
	for _, srv := range cl.Nodes() {
		rdb := srv.Client(t)
		id, err := rdb.Do(context.Background(), "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, clusterNode{srv: srv, rdb: rdb, id: id})
	}
	return out
}

// slotOwner returns the node that serves slot, as nodes[0] sees it.
func slotOwner(t *testing.T, nodes []clusterNode, slot int) clusterNode {
	t.Helper()
	shards, err := nodes[0].rdb.ClusterShards(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if slot < int(r.Start) || slot > int(r.End) {
				continue
			}
			for _, sn := range sh.Nodes {
				for _, n := range nodes {
					if sn.Role == "master" && n.id == sn.ID {
						return n
					}
				}
			}
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return clusterNode{}
}

// A slot that moves between masters under a held lease loses nothing: while the
// slot is half-migrated the renewals follow ASK to the node that already has
// the key, once it has moved they follow MOVED, and `redis-cli --cluster
// reshard` moving it back while renewals run every 50 ms is invisible too.
func TestClusterReshardingUnderAHeldLeaseLosesNothing(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	cl := redisserver.StartCluster(t, 3)
	nodes := clusterNodes(t, cl)
	c := dialConfig(t, lockclient.Config{URL: "redis+cluster://" + strings.Join(cl.Addrs(), ","), Timeout: time.Second})
	k := lockclient.NewKeeper(c)
	startKeeper(t, k)

	// A hash tag whose slot lies below every slot of another master, so that
	// redis-cli (which moves a node's lowest slots first) can later move it back.
	tag := ""
	for i := 0; tag == "" || lockclient.Slot(tag) > 5000; i++ {
		tag = fmt.Sprintf("reshard-%d", i)
	}
	slot := lockclient.Slot(tag)
	src, dst := slotOwner(t, nodes, slot), slotOwner(t, nodes, 10000)
	g.Expect(src.id).NotTo(Equal(dst.id))
	lk := lockclient.Keys{Lock: "{" + tag + "}:lock", Fence: "{" + tag + "}:fence"}
	lease, err := c.Acquire(ctx, acquireReq(lk, token(t, "j"), 10*time.Second))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k.Track(lockclient.TrackRequest{Lease: lease, RenewInterval: 50 * time.Millisecond, SelfFence: true, StopBudget: 2 * time.Second})).To(Succeed())
	// A renewal that succeeds after the key left a node proves it ran where the
	// key is: the script on a node without the key answers "not held".
	renewedOn := func(n clusterNode, since time.Time) {
		t.Helper()
		heldAndRenewedSince(t, k, lease.Token, since)
		// ASKING before each command, on the same connection: an importing
		// node answers MOVED otherwise.
		pipe := n.rdb.Pipeline()
		pipe.Do(ctx, "ASKING")
		get := pipe.Get(ctx, lk.Lock)
		pipe.Do(ctx, "ASKING")
		pttl := pipe.PTTL(ctx, lk.Lock)
		_, _ = pipe.Exec(ctx)
		g.Expect(get.Val()).To(Equal(lease.Token), "%v", get.Err())
		g.Expect(pttl.Val()).To(BeNumerically(">", 9*time.Second), "renewed there")
	}
	renewedOn(src, time.Now())

	// 1. Half-migrated: the lock key already on dst, the fence still on src.
	// src answers ASK for the lock key; the renewals follow it.
	g.Expect(dst.rdb.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id).Err()).To(Succeed())
	g.Expect(src.rdb.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id).Err()).To(Succeed())
	g.Expect(src.rdb.Migrate(ctx, "127.0.0.1", fmt.Sprint(dst.srv.Port()), lk.Lock, 0, 5*time.Second).Err()).To(Succeed())
	g.Expect(src.rdb.Exists(ctx, lk.Lock).Val()).To(BeZero())
	renewedOn(dst, time.Now())
	// An acquisition meanwhile touches keys on both nodes: Redis says TRYAGAIN,
	// a store error to retry, never a verdict.
	_, err = c.Acquire(ctx, acquireReq(lk, token(t, "other"), 10*time.Second))
	g.Expect(errors.Is(err, lockclient.ErrStore)).To(BeTrue(), "%v", err)

	// 2. The slot has moved: src answers MOVED; the renewals follow it.
	g.Expect(src.rdb.Migrate(ctx, "127.0.0.1", fmt.Sprint(dst.srv.Port()), lk.Fence, 0, 5*time.Second).Err()).To(Succeed())
	for _, n := range nodes {
		g.Expect(n.rdb.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err()).To(Succeed())
	}
	renewedOn(dst, time.Now())
	_, err = c.Acquire(ctx, acquireReq(lk, token(t, "other"), 10*time.Second))
	g.Expect(errors.Is(err, lockclient.ErrBusy)).To(BeTrue(), "%v: the moved lease is still held", err)

	// 3. redis-cli reshards it back while the renewals run.
	start := time.Now()
	cli := exec.CommandContext(ctx, "redis-cli", "--cluster", "reshard", src.srv.Addr(),
		"--cluster-from", dst.id, "--cluster-to", src.id, "--cluster-slots", "1", "--cluster-yes")
	out, err := cli.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	g.Expect(slotOwner(t, nodes, slot).id).To(Equal(src.id), "%s", out)
	renewedOn(src, time.Now())
	t.Logf("redis-cli reshard took %s", time.Since(start).Round(time.Millisecond))

	st, _ := k.Get(lease.Token)
	g.Expect(st.State).To(Equal(lockclient.StateHeld))
	drainReports(k, func(r lockclient.Report) {
		g.Expect(r.Kind).NotTo(Equal(lockclient.ReportLost), "no lease is lost to a resharding")
		g.Expect(r.Kind).NotTo(Equal(lockclient.ReportDeadlineReached))
	})
}

// Replica acknowledgement in a Cluster pins the acquisition to the master of
// the run's slot; that connection goes through --store-allow like every other.
func TestClusterReplicaAcknowledgementDialsOnlyAllowedNodes(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	cl := redisserver.StartCluster(t, 3)
	lk := lockclient.Keys{Lock: "{acks}:lock", Fence: "{acks}:fence"}

	// Masters without replicas: WAIT on the slot's master answers 0 at once.
	c := dialConfig(t, lockclient.Config{URL: "redis+cluster://" + strings.Join(cl.Addrs(), ",") + "?minReplicaAcks=1&replicaAckTimeout=20ms"})
	_, err := c.Acquire(ctx, acquireReq(lk, token(t, "j"), 5*time.Second))
	g.Expect(errors.Is(err, lockclient.ErrTooFewReplicas)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("0 of 1 within 20ms; released it"))
	g.Expect(cl.Client(t).Exists(ctx, lk.Lock).Val()).To(BeZero())

	_, port, _ := strings.Cut(cl.Addrs()[0], ":")
	list := allow(t, "localhost") // the seed by name; the slots name 127.0.0.1 nodes
	c = dialConfig(t, lockclient.Config{URL: "redis+cluster://localhost:" + port + "?minReplicaAcks=1", Tenant: true, Allow: list, Timeout: 2 * time.Second})
	_, err = c.Acquire(ctx, acquireReq(lk, token(t, "j"), 5*time.Second))
	g.Expect(errors.Is(err, lockclient.ErrNotAllowed)).To(BeTrue(), "%v", err)
	g.Expect(cl.Client(t).Exists(ctx, lk.Lock).Val()).To(BeZero())
}
