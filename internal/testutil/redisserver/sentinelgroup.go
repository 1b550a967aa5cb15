package redisserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// SentinelGroup is one master, one replica and three Sentinels on loopback: the
// smallest deployment in which a failover is decided by a majority.
type SentinelGroup struct {
	Master, Replica *Server
	Sentinels       []*Sentinel
	MasterName      string
}

// StartSentinelGroup starts a group monitoring "mymaster" and returns once every
// Sentinel knows the replica and the other Sentinels (they announce themselves
// through the master every 2 s), so that a failover can be decided at once.
func StartSentinelGroup(t testing.TB) *SentinelGroup {
	t.Helper()
	g := &SentinelGroup{Master: Start(t), MasterName: "mymaster"}
	g.Replica = Start(t, WithReplicaOf(g.Master))
	for range 3 {
		g.Sentinels = append(g.Sentinels, StartSentinel(t, g.Master, g.MasterName, WithFailoverTimeout(time.Second)))
	}
	ctx := context.Background()
	for _, s := range g.Sentinels {
		sc := s.Client(t)
		waitFor(t, 15*time.Second, func() error {
			if n := len(sc.Replicas(ctx, g.MasterName).Val()); n != 1 {
				return fmt.Errorf("sentinel %s knows %d replicas", s.Addr(), n)
			}
			if n := len(sc.Sentinels(ctx, g.MasterName).Val()); n != 2 {
				return fmt.Errorf("sentinel %s knows %d other sentinels", s.Addr(), n)
			}
			return nil
		})
	}
	return g
}

// URL returns a redis+sentinel URL naming all three Sentinels, followed by query
// (empty, or starting with '?').
func (g *SentinelGroup) URL(query string) string {
	addrs := make([]string, len(g.Sentinels))
	for i, s := range g.Sentinels {
		addrs[i] = s.Addr()
	}
	return "redis+sentinel://" + strings.Join(addrs, ",") + "/" + g.MasterName + query
}

// WaitMaster waits until every Sentinel names srv as the master.
func (g *SentinelGroup) WaitMaster(t testing.TB, srv *Server) {
	t.Helper()
	ctx := context.Background()
	for _, s := range g.Sentinels {
		sc := s.Client(t)
		waitFor(t, 20*time.Second, func() error {
			if got := strings.Join(sc.GetMasterAddrByName(ctx, g.MasterName).Val(), ":"); got != srv.Addr() {
				return fmt.Errorf("sentinel %s names %q as the master, not %s", s.Addr(), got, srv.Addr())
			}
			return nil
		})
	}
}

// WaitReplicating waits until srv replicates from a master with its link up.
func WaitReplicating(t testing.TB, srv *Server) {
	t.Helper()
	rdb := srv.Client(t)
	waitFor(t, 20*time.Second, func() error {
		info := rdb.Info(context.Background(), "replication").Val()
		if !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("%s does not replicate yet:\n%s", srv.Addr(), info)
		}
		return nil
	})
}

// CutReplication stops the replica and closes its replication link, so that
// writes on the master from now on do not reach it. SIGSTOP alone is not enough
// on one machine: the kernel would still take the master's writes into the
// stopped replica's socket buffer, and the replica would apply them once
// continued. Resume the replica to let it be promoted.
func (g *SentinelGroup) CutReplication(t testing.TB) {
	t.Helper()
	g.Replica.Pause()
	if err := g.Master.Client(t).Do(context.Background(), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatalf("close the replication link: %v", err)
	}
}

// waitFor polls check every 50 ms until it returns nil, and fails the test with
// its last error after timeout.
func waitFor(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
