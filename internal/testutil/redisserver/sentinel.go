package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Sentinel is a running redis-server in Sentinel mode monitoring one master.
type Sentinel struct {
	master          *Server
	masterName      string
	dir             string
	port            int
	proc            process
	failoverTimeout time.Duration
}

// SentinelOption configures a Sentinel started by [StartSentinel].
type SentinelOption func(*Sentinel)

// WithFailoverTimeout sets the Sentinel's failover-timeout (default 3 s). A
// Sentinel starts no new failover of a master within twice this time of the
// last attempt, so tests that fail over twice, or whose Sentinels may split
// their votes, finish sooner with a shorter one.
func WithFailoverTimeout(d time.Duration) SentinelOption {
	return func(s *Sentinel) { s.failoverTimeout = d }
}

// StartSentinel starts a Sentinel monitoring master under masterName, with a
// quorum of 1 and short timeouts (master down after 1 s) so that failover tests
// finish quickly. It logs in to the data nodes with the master's credentials and,
// for a TLS master, listens on TLS itself, so that one go-redis FailoverOptions
// works for Sentinel and data nodes alike. It returns once the Sentinel answers
// SENTINEL GET-MASTER-ADDR-BY-NAME and is connected to the master.
func StartSentinel(t testing.TB, master *Server, masterName string, opts ...SentinelOption) *Sentinel {
	t.Helper()
	bin := lookBinary(t, "redis-server")
	s := &Sentinel{master: master, masterName: masterName, dir: t.TempDir(), failoverTimeout: 3 * time.Second}
	for _, o := range opts {
		o(s)
	}
	t.Cleanup(s.Kill)
	for attempt := 1; ; attempt++ {
		s.port = freePort(t)
		err := s.startOnce(bin, attempt)
		if err == nil {
			return s
		}
		if errors.Is(err, errAddrInUse) && attempt < startAttempts {
			continue
		}
		t.Fatalf("redisserver: starting Sentinel on %s: %v", s.Addr(), err)
	}
}

// Addr returns "127.0.0.1:port".
func (s *Sentinel) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the Sentinel's port.
func (s *Sentinel) Port() int { return s.port }

// PID returns the process id of the Sentinel.
func (s *Sentinel) PID() int { return s.proc.pid() }

// MasterName returns the name the master is monitored under.
func (s *Sentinel) MasterName() string { return s.masterName }

// Kill sends SIGKILL and waits for the process to exit.
func (s *Sentinel) Kill() { s.proc.kill() }

// Client returns a client for the Sentinel API, closed when the test ends.
func (s *Sentinel) Client(t testing.TB) *redis.SentinelClient {
	t.Helper()
	c := redis.NewSentinelClient(s.sentinelOptions())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// FailoverOptions returns go-redis options that find the master through this
// Sentinel, with the master's credentials and TLS settings.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	mo := s.master.Options()
	return &redis.FailoverOptions{
		MasterName:    s.masterName,
		SentinelAddrs: []string{s.Addr()},
		Username:      mo.Username,
		Password:      mo.Password,
		TLSConfig:     mo.TLSConfig,
	}
}

// FailoverClient returns a client that follows the master through this
// Sentinel, closed when the test ends.
func (s *Sentinel) FailoverClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(s.FailoverOptions())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Sentinel) sentinelOptions() *redis.Options {
	o := &redis.Options{
		Addr:                     s.Addr(),
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if s.master.tlsConf != nil {
		o.TLSConfig = s.master.tlsConf.Clone()
	}
	return o
}

func (s *Sentinel) startOnce(bin string, attempt int) error {
	logPath := filepath.Join(s.dir, fmt.Sprintf("sentinel.%d.log", attempt))
	var b strings.Builder
	line := func(args ...string) { b.WriteString(strings.Join(args, " ") + "\n") }
	line("bind", "127.0.0.1")
	line("daemonize", "no")
	line("dir", quoteConf(s.dir))
	line("logfile", quoteConf(logPath))
	m, name := s.master, quoteConf(s.masterName)
	if files := m.TLS(); files != nil {
		line("port", "0")
		line("tls-port", strconv.Itoa(s.port))
		line("tls-cert-file", quoteConf(files.CertFile))
		line("tls-key-file", quoteConf(files.KeyFile))
		line("tls-ca-cert-file", quoteConf(files.CAFile))
		line("tls-auth-clients", "optional")
		// Sentinel uses the replication TLS setting for its links to data nodes.
		line("tls-replication", "yes")
	} else {
		line("port", strconv.Itoa(s.port))
	}
	line("sentinel", "monitor", name, "127.0.0.1", strconv.Itoa(m.Port()), "1")
	line("sentinel", "down-after-milliseconds", name, "1000")
	line("sentinel", "failover-timeout", name, strconv.FormatInt(s.failoverTimeout.Milliseconds(), 10))
	if user, pw := m.credentials(); pw != "" || user != "" {
		if user != "" {
			line("sentinel", "auth-user", name, quoteConf(user))
		}
		line("sentinel", "auth-pass", name, quoteConf(pw))
	}
	// Sentinel rewrites its configuration file, so each attempt gets a fresh one.
	confPath := filepath.Join(s.dir, "sentinel.conf")
	if err := os.WriteFile(confPath, []byte(b.String()), 0o600); err != nil {
		return err
	}
	if err := s.proc.start(bin, []string{confPath, "--sentinel"}, s.dir, logPath); err != nil {
		return err
	}
	err := s.proc.poll(startTimeout, func(ctx context.Context) error {
		o := s.sentinelOptions()
		if err := probe(ctx, o); err != nil {
			return err
		}
		c := redis.NewSentinelClient(o)
		defer func() { _ = c.Close() }()
		if _, err := c.GetMasterAddrByName(ctx, s.masterName).Result(); err != nil {
			return err
		}
		info, err := c.Master(ctx, s.masterName).Result()
		if err != nil {
			return err
		}
		if flags := info["flags"]; flags != "master" {
			return fmt.Errorf("master flags %q, want %q", flags, "master")
		}
		return nil
	})
	if err != nil {
		s.proc.kill()
	}
	return err
}
