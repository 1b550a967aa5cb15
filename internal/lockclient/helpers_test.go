package lockclient_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// dial returns a lock client for srv, closed when the test ends.
func dial(t testing.TB, srv *redisserver.Server, opts ...lockclient.ClientOption) *lockclient.Client {
	t.Helper()
	return dialConfig(t, lockclient.Config{URL: srv.URL(), Timeout: 2 * time.Second}, opts...)
}

func dialConfig(t testing.TB, cfg lockclient.Config, opts ...lockclient.ClientOption) *lockclient.Client {
	t.Helper()
	c, err := lockclient.Dial(cfg, opts...)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// quietLogger drops go-redis' own messages (reconnect attempts while a test has
// killed the server on purpose).
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func init() {
	redis.SetLogger(quietLogger{})
	// Waits that fit a loaded 2-core machine; safety bounds are asserted
	// explicitly, never through this timeout.
	SetDefaultEventuallyTimeout(10 * time.Second)
}

var tokenSeq struct {
	sync.Mutex
	n int
}

// token returns a fresh token in the contract's format.
func token(t testing.TB, job string) string {
	t.Helper()
	r, err := leasetoken.NewRandom()
	if err != nil {
		t.Fatal(err)
	}
	return leasetoken.Format(leasetoken.FormatHolder("test-cluster", "ns", job), r)
}

// keys returns a fresh set of keys under a unique prefix.
func keys(name string) lockclient.Keys {
	tokenSeq.Lock()
	tokenSeq.n++
	n := tokenSeq.n
	tokenSeq.Unlock()
	base := fmt.Sprintf("ns:%s:%d", name, n)
	return lockclient.Keys{Lock: base, Occurrence: base + ":done:1", Fence: base + ":fence"}
}

func acquireReq(k lockclient.Keys, tok string, ttl time.Duration) lockclient.AcquireRequest {
	return lockclient.AcquireRequest{Keys: k, Token: tok, TTL: ttl, Policy: lockclient.FenceInject}
}

// cmdRecorder is a go-redis hook that records the commands a client sends, to
// assert how many round trips and which commands an operation takes.
type cmdRecorder struct {
	mu        sync.Mutex
	cmds      []string
	pipelines int
}

func (r *cmdRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *cmdRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if handshake[strings.ToLower(cmd.Name())] {
			return next(ctx, cmd)
		}
		r.mu.Lock()
		r.cmds = append(r.cmds, strings.ToLower(cmd.Name()))
		r.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (r *cmdRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && handshake[strings.ToLower(cmds[0].Name())] {
			return next(ctx, cmds) // a new connection's login, not our traffic
		}
		r.mu.Lock()
		r.pipelines++
		for _, c := range cmds {
			r.cmds = append(r.cmds, strings.ToLower(c.Name()))
		}
		r.mu.Unlock()
		return next(ctx, cmds)
	}
}

var handshake = map[string]bool{"hello": true, "auth": true, "client": true, "select": true}

func (r *cmdRecorder) reset() (cmds []string, pipelines int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cmds, pipelines = r.cmds, r.pipelines
	r.cmds, r.pipelines = nil, 0
	return cmds, pipelines
}

// record installs a recorder on c's underlying client.
func record(c *lockclient.Client) *cmdRecorder {
	r := &cmdRecorder{}
	c.Redis().AddHook(r)
	return r
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
