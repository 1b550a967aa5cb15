package redisserver

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Cluster is a Redis Cluster of masters without replicas.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts n (at least 3) cluster-enabled servers, joins them with
// `redis-cli --cluster create` (slots spread evenly, no replicas) and waits
// until every node reports cluster_state:ok and knows all the others.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redisserver: a Redis Cluster needs at least 3 masters, got %d", n)
	}
	cli := lookBinary(t, "redis-cli")
	c := &Cluster{}
	for range n {
		c.nodes = append(c.nodes, start(t, config{cluster: true}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redisserver: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	want := "cluster_known_nodes:" + strconv.Itoa(n)
	for _, node := range c.nodes {
		err := node.proc.poll(startTimeout, func(ctx context.Context) error {
			return withClient(ctx, node.Options(), func(rc *redis.Client) error {
				info, err := rc.ClusterInfo(ctx).Result()
				if err != nil {
					return err
				}
				if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want+"\r\n") {
					return fmt.Errorf("cluster not ready:\n%s", info)
				}
				return nil
			})
		})
		if err != nil {
			t.Fatalf("redisserver: waiting for cluster node %s: %v", node.Addr(), err)
		}
	}
	return c
}

// Addrs returns the "127.0.0.1:port" addresses of the nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns the servers of the cluster, for fault injection on one node.
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// ClusterOptions returns go-redis options for the cluster.
func (c *Cluster) ClusterOptions() *redis.ClusterOptions {
	return &redis.ClusterOptions{
		Addrs:                    c.Addrs(),
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(c.ClusterOptions())
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}
