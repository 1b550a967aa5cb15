package redisserver_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// eventually polls check until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustPing(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
}

func configGet(t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	m, err := c.ConfigGet(t.Context(), key).Result()
	if err != nil {
		t.Fatalf("CONFIG GET %s: %v", key, err)
	}
	return m[key]
}

func TestStart(t *testing.T) {
	t.Parallel()
	s := redisserver.Start(t, redisserver.WithArgs("--maxmemory-policy", "allkeys-lru"))
	if host, _, _ := net.SplitHostPort(s.Addr()); host != "127.0.0.1" || s.Port() <= 0 {
		t.Fatalf("Addr %q Port %d", s.Addr(), s.Port())
	}
	if s.PID() <= 0 || s.TLS() != nil {
		t.Fatalf("PID %d TLS %v", s.PID(), s.TLS())
	}
	c := s.Client(t)
	mustPing(t, c)
	for key, want := range map[string]string{
		"bind":             "127.0.0.1",
		"save":             "",
		"appendonly":       "no",
		"maxmemory-policy": "allkeys-lru",
	} {
		if got := configGet(t, c, key); got != want {
			t.Errorf("CONFIG GET %s = %q, want %q", key, got, want)
		}
	}
	if s.URL() != "redis://"+s.Addr() {
		t.Errorf("URL %q", s.URL())
	}
}

func TestPassword(t *testing.T) {
	t.Parallel()
	s := redisserver.Start(t, redisserver.WithPassword(`p"w \x`))
	mustPing(t, s.Client(t))

	anon := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer func() { _ = anon.Close() }()
	if err := anon.Ping(t.Context()).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without password: %v, want NOAUTH", err)
	}

	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	byURL := redis.NewClient(opt)
	defer func() { _ = byURL.Close() }()
	mustPing(t, byURL)
}

func TestACLUser(t *testing.T) {
	t.Parallel()
	s := redisserver.Start(t, redisserver.WithACLUser("locker", "s3cret pw"))
	c := s.Client(t)
	if who, err := c.Do(t.Context(), "ACL", "WHOAMI").Text(); err != nil || who != "locker" {
		t.Fatalf("ACL WHOAMI = %q, %v", who, err)
	}
	// Full access: scripts and keys.
	if err := c.Eval(t.Context(), "return redis.call('SET', KEYS[1], 'v')", []string{"k"}).Err(); err != nil {
		t.Fatalf("EVAL: %v", err)
	}

	// The default user is disabled.
	anon := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer func() { _ = anon.Close() }()
	if err := anon.Ping(t.Context()).Err(); err == nil {
		t.Fatal("PING as default user succeeded, want an error")
	}
	wrong := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "locker", Password: "nope"})
	defer func() { _ = wrong.Close() }()
	if err := wrong.Ping(t.Context()).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("PING with wrong password: %v, want WRONGPASS", err)
	}

	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if opt.Username != "locker" || opt.Password != "s3cret pw" {
		t.Fatalf("URL %q parsed to user %q password %q", s.URL(), opt.Username, opt.Password)
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	s := redisserver.Start(t, redisserver.WithTLS())
	mustPing(t, s.Client(t))
	if !strings.HasPrefix(s.URL(), "rediss://127.0.0.1:") {
		t.Errorf("URL %q", s.URL())
	}

	files := s.TLS()
	if files == nil {
		t.Fatal("TLS() = nil")
	}
	caPEM, err := os.ReadFile(files.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no certificate in CA file")
	}
	cert, err := tls.LoadX509KeyPair(files.ClientCertFile, files.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, conf := range map[string]*tls.Config{
		"client certificate":    {RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		"no client certificate": {RootCAs: pool, MinVersion: tls.VersionTLS12},
	} {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: conf})
		if err := c.Ping(t.Context()).Err(); err != nil {
			t.Errorf("PING with %s: %v", name, err)
		}
		_ = c.Close()
	}

	// Plain connections are not served.
	plain := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: 2 * time.Second})
	defer func() { _ = plain.Close() }()
	if err := plain.Ping(t.Context()).Err(); err == nil {
		t.Fatal("plain-text PING to a TLS port succeeded")
	}
}

func TestReplica(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]redisserver.Option{
		"plain":   nil,
		"TLS+ACL": {redisserver.WithTLS(), redisserver.WithACLUser("u", "pw")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			master := redisserver.Start(t, opts...)
			replica := redisserver.Start(t, redisserver.WithReplicaOf(master))
			if replica.URL() == master.URL() || (replica.TLS() == nil) != (master.TLS() == nil) {
				t.Fatalf("replica URL %q, master URL %q", replica.URL(), master.URL())
			}
			if err := master.Client(t).Set(t.Context(), "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			rc := replica.Client(t)
			eventually(t, 5*time.Second, func() error {
				v, err := rc.Get(t.Context(), "k").Result()
				if err == nil && v != "v" {
					err = fmt.Errorf("got %q", v)
				}
				return err
			})
			if err := rc.Set(t.Context(), "x", "y", 0).Err(); err == nil || !strings.Contains(err.Error(), "READONLY") {
				t.Fatalf("SET on replica: %v, want READONLY", err)
			}
		})
	}
}

func TestKillRestart(t *testing.T) {
	t.Parallel()
	s := redisserver.Start(t, redisserver.WithPassword("pw"))
	o := s.Options()
	o.MaxRetries = -1
	o.DialerRetries = 1
	c := redis.NewClient(o)
	defer func() { _ = c.Close() }()
	ctx := t.Context()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	sha, err := c.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatal(err)
	}
	addr, pid := s.Addr(), s.PID()

	s.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	s.Kill() // a second Kill is harmless

	s.Restart(t)
	if s.Addr() != addr || s.PID() == pid {
		t.Fatalf("after Restart: addr %s (was %s), pid %d (was %d)", s.Addr(), addr, s.PID(), pid)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after restart = %d, %v; want 0", n, err)
	}
	if err := c.EvalSha(ctx, sha, nil).Err(); err == nil || !strings.Contains(err.Error(), "NOSCRIPT") {
		t.Fatalf("EVALSHA after restart: %v, want NOSCRIPT", err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := redisserver.Start(t)
	o := s.Options()
	o.ReadTimeout = 200 * time.Millisecond
	o.MaxRetries = -1
	c := redis.NewClient(o)
	defer func() { _ = c.Close() }()
	mustPing(t, c)

	s.Pause()
	err := c.Ping(t.Context()).Err()
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("PING to a paused server: %v, want a timeout", err)
	}
	s.Resume()
	eventually(t, 5*time.Second, func() error { return c.Ping(t.Context()).Err() })
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]redisserver.Option{
		"plain":        nil,
		"TLS+password": {redisserver.WithTLS(), redisserver.WithPassword("pw")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			master := redisserver.Start(t, opts...)
			replica := redisserver.Start(t, redisserver.WithReplicaOf(master))
			sentinel := redisserver.StartSentinel(t, master, "mymaster")
			ctx := t.Context()

			sc := sentinel.Client(t)
			addr, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
			if err != nil || net.JoinHostPort(addr[0], addr[1]) != master.Addr() {
				t.Fatalf("master addr %v, %v; want %s", addr, err, master.Addr())
			}
			fc := sentinel.FailoverClient(t)
			if err := fc.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}

			// A failover needs Sentinel to know the replica.
			eventually(t, 10*time.Second, func() error {
				rs, err := sc.Replicas(ctx, "mymaster").Result()
				if err != nil || len(rs) != 1 {
					return fmt.Errorf("replicas %v, %v", rs, err)
				}
				return nil
			})
			master.Kill()
			eventually(t, 20*time.Second, func() error {
				addr, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
				if err != nil {
					return err
				}
				if got := net.JoinHostPort(addr[0], addr[1]); got != replica.Addr() {
					return fmt.Errorf("master is %s, want %s", got, replica.Addr())
				}
				return nil
			})
			eventually(t, 10*time.Second, func() error { return fc.Set(ctx, "k2", "v", 0).Err() })
		})
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redisserver.StartCluster(t, 3)
	if len(cl.Addrs()) != 3 || len(cl.Nodes()) != 3 {
		t.Fatalf("Addrs %v", cl.Addrs())
	}
	c := cl.Client(t)
	ctx := t.Context()
	for i := range 20 {
		if err := c.Set(ctx, fmt.Sprint("key", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var total int64
	for _, addr := range cl.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: addr})
		size, err := n.DBSize(ctx).Result()
		_ = n.Close()
		if err != nil {
			t.Fatal(err)
		}
		if size == 0 {
			t.Errorf("node %s holds no keys: slots not spread", addr)
		}
		total += size
	}
	if total != 20 {
		t.Fatalf("%d keys in the cluster, want 20", total)
	}
}

// fatalRecorder captures the message of the first Fatalf and ends the calling
// goroutine, as testing.T does, so that failure paths can be checked.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func expectFatal(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(rec)
	}()
	<-done
	if rec.msg == "" {
		t.Fatal("expected a failure, got none")
	}
	return rec.msg
}

func TestStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	msg := expectFatal(t, func(tb testing.TB) {
		redisserver.Start(tb, redisserver.WithArgs("--no-such-option", "1"))
	})
	if !strings.Contains(msg, "no-such-option") || !strings.Contains(msg, "Bad directive") {
		t.Fatalf("failure message lacks the log tail:\n%s", msg)
	}
}

func TestRestartPortTaken(t *testing.T) {
	t.Parallel()
	s := redisserver.Start(t)
	s.Kill()
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	msg := expectFatal(t, func(tb testing.TB) { s.Restart(tb) })
	if !strings.Contains(msg, "Address already in use") {
		t.Fatalf("failure message:\n%s", msg)
	}
}
