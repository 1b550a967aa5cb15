// Package redisserver starts real redis-server processes for tests.
//
// The code under test depends on how a real Redis behaves (Lua scripting,
// expiry, replication, restarts without data, unresponsive servers), which fakes
// do not reproduce, so tests run against the redis-server binary instead. Every server
// listens on 127.0.0.1 only, on a free random port, with persistence disabled and
// its files in t.TempDir(); it is killed when the test ends.
//
// The helpers cover a plain server ([Start]), password and ACL logins, TLS with
// certificates generated in Go, replicas, Sentinel ([StartSentinel]) and Cluster
// ([StartCluster]), plus fault injection: [Server.Kill], [Server.Restart],
// [Server.Pause] and [Server.Resume].
package redisserver

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

const (
	// startTimeout bounds how long a server may take to answer PING (and, for a
	// replica, to finish its first sync). Generous because CI machines are slow
	// and shared.
	startTimeout = 15 * time.Second
	pollInterval = 10 * time.Millisecond
	// startAttempts is how often a start is retried with new ports when another
	// process took the chosen port between probing and binding.
	startAttempts = 5
)

// Option configures a server started by [Start].
type Option func(*config)

type config struct {
	args        []string
	password    string
	hasPassword bool
	aclUser     string
	aclPassword string
	tls         bool
	replicaOf   *Server
	cluster     bool
}

// WithArgs passes extra command-line arguments to redis-server, for example
// WithArgs("--maxmemory-policy", "allkeys-lru"). The loopback binding, port,
// disabled persistence, directory and log file cannot be overridden.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithPassword sets requirepass, i.e. the password of the default user.
func WithPassword(pw string) Option {
	return func(c *config) { c.password, c.hasPassword = pw, true }
}

// WithACLUser adds an ACL user with full access (all keys, channels and
// commands). Unless [WithPassword] is also given, the default user is disabled,
// so only this user can log in: that is how ACL-only deployments look.
// [Server.Client] and [Server.URL] log in as this user.
func WithACLUser(user, pw string) Option {
	return func(c *config) { c.aclUser, c.aclPassword = user, pw }
}

// WithTLS makes the server accept only TLS connections. A CA, a server
// certificate for 127.0.0.1 and a client certificate are written to the
// server's directory (see [Server.TLS]); client certificates are optional.
func WithTLS() Option {
	return func(c *config) { c.tls = true }
}

// WithReplicaOf makes the server a replica of master. Start returns once the
// first sync is done. Unless set explicitly, the replica takes the master's
// password, ACL user and TLS setting, so that clients and Sentinel can use the
// same settings for every node (as they must after a failover).
func WithReplicaOf(master *Server) Option {
	return func(c *config) { c.replicaOf = master }
}

// TLSFiles holds the paths of the PEM files of a TLS server.
type TLSFiles struct {
	CAFile         string
	CertFile       string
	KeyFile        string
	ClientCertFile string
	ClientKeyFile  string
}

// Server is a running (or killed) redis-server process.
type Server struct {
	cfg     config
	dir     string
	port    int // the port clients use: the TLS port for TLS servers
	busPort int // cluster bus port, for cluster nodes
	tls     *TLSFiles
	tlsConf *tls.Config
	proc    process
	starts  int
}

// Start starts a redis-server and waits until it answers PING. The process is
// killed when the test ends. The test fails if the server cannot be started.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	return start(t, cfg)
}

func start(t testing.TB, cfg config) *Server {
	t.Helper()
	bin := lookBinary(t, "redis-server")
	if m := cfg.replicaOf; m != nil {
		if !cfg.hasPassword && cfg.aclUser == "" {
			cfg.password, cfg.hasPassword = m.cfg.password, m.cfg.hasPassword
			cfg.aclUser, cfg.aclPassword = m.cfg.aclUser, m.cfg.aclPassword
		}
		cfg.tls = cfg.tls || m.cfg.tls
	}
	s := &Server{cfg: cfg, dir: t.TempDir()}
	if cfg.tls {
		s.tls, s.tlsConf = writeTLSFiles(t, s.dir)
	}
	t.Cleanup(s.Kill)
	s.launch(t, bin, false)
	return s
}

// Addr returns "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the port clients connect to (the TLS port for a TLS server).
func (s *Server) Port() int { return s.port }

// PID returns the process id of the current redis-server process.
func (s *Server) PID() int { return s.proc.pid() }

// TLS returns the certificate files of a TLS server, or nil.
func (s *Server) TLS() *TLSFiles {
	if s.tls == nil {
		return nil
	}
	f := *s.tls
	return &f
}

// URL returns a redis:// (or rediss://) URL for the server, with the
// credentials that [Server.Client] uses. A rediss:// URL alone does not trust
// the test CA: clients must add it (see [Server.Options]).
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr()}
	if s.cfg.tls {
		u.Scheme = "rediss"
	}
	switch {
	case s.cfg.aclUser != "":
		u.User = url.UserPassword(s.cfg.aclUser, s.cfg.aclPassword)
	case s.cfg.hasPassword:
		u.User = url.UserPassword("", s.cfg.password)
	}
	return u.String()
}

// Options returns go-redis options for the server: address, credentials and,
// for TLS, a configuration trusting the test CA and presenting the client
// certificate. Each call returns a new value that the caller may change (for
// example to shorten timeouts before pausing the server).
func (s *Server) Options() *redis.Options {
	user, pw := s.credentials()
	o := &redis.Options{
		Addr:     s.Addr(),
		Username: user,
		Password: pw,
		// The notification handshake is for managed Redis; against redis-server
		// it only adds a failing command per connection.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if s.tlsConf != nil {
		o.TLSConfig = s.tlsConf.Clone()
	}
	return o
}

// Client returns a client for the server, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(s.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Server) credentials() (user, pw string) {
	if s.cfg.aclUser != "" {
		return s.cfg.aclUser, s.cfg.aclPassword
	}
	return "", s.cfg.password
}

// Kill sends SIGKILL and waits for the process to exit, like a crash. Since
// persistence is off, the data is gone. Killing a stopped server is a no-op.
func (s *Server) Kill() { s.proc.kill() }

// Restart kills the server if it is still running and starts it again on the
// same port with the same options. The new server is empty (a cluster node
// keeps its cluster membership, which lives in nodes.conf, but not its keys).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	s.launch(t, lookBinary(t, "redis-server"), true)
}

// Pause stops the process with SIGSTOP: the server keeps its port and accepts
// TCP connections (the kernel completes the handshake) but answers nothing, so
// clients see timeouts rather than refused connections.
func (s *Server) Pause() { s.proc.signal(syscall.SIGSTOP) }

// Resume continues a server stopped by [Server.Pause].
func (s *Server) Resume() { s.proc.signal(syscall.SIGCONT) }

// launch starts the process and waits until it is usable. Unless keepPort is
// set, it picks new ports and retries when the chosen port was taken meanwhile.
func (s *Server) launch(t testing.TB, bin string, keepPort bool) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		if !keepPort {
			s.port = freePort(t)
			if s.cfg.cluster {
				s.busPort = freePort(t)
			}
		}
		err := s.startOnce(bin)
		if err == nil {
			return
		}
		if errors.Is(err, errAddrInUse) && !keepPort && attempt < startAttempts {
			continue
		}
		t.Fatalf("redisserver: starting redis-server on %s: %v", s.Addr(), err)
	}
}

func (s *Server) startOnce(bin string) error {
	s.starts++
	confPath := filepath.Join(s.dir, "redis.conf")
	if err := os.WriteFile(confPath, []byte(s.configFile()), 0o600); err != nil {
		return err
	}
	logPath := filepath.Join(s.dir, fmt.Sprintf("redis.%d.log", s.starts))
	args := append([]string{confPath}, s.cfg.args...)
	// Last, so that WithArgs cannot override them.
	args = append(args,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", logPath,
	)
	if s.cfg.tls {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(s.port))
	} else {
		args = append(args, "--port", strconv.Itoa(s.port))
	}
	if s.cfg.cluster {
		args = append(args, "--cluster-port", strconv.Itoa(s.busPort))
	}
	if err := s.proc.start(bin, args, s.dir, logPath); err != nil {
		return err
	}
	if err := s.waitReady(); err != nil {
		s.proc.kill()
		return err
	}
	return nil
}

// configFile holds the settings that are awkward on a command line (ACL rules,
// passwords) or that a later command-line argument may override.
func (s *Server) configFile() string {
	var b strings.Builder
	line := func(args ...string) {
		for i, a := range args {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(a)
		}
		b.WriteByte('\n')
	}
	// Sync replicas at once instead of waiting for more replicas to batch with.
	line("repl-diskless-sync-delay", "0")
	if s.cfg.hasPassword {
		line("requirepass", quoteConf(s.cfg.password))
	}
	if s.cfg.aclUser != "" {
		if !s.cfg.hasPassword {
			line("user", "default", "off")
		}
		line("user", quoteConf(s.cfg.aclUser), "reset", "on", aclPasswordHash(s.cfg.aclPassword), "~*", "&*", "+@all")
	}
	if s.tls != nil {
		line("tls-cert-file", quoteConf(s.tls.CertFile))
		line("tls-key-file", quoteConf(s.tls.KeyFile))
		line("tls-ca-cert-file", quoteConf(s.tls.CAFile))
		line("tls-auth-clients", "optional")
	}
	if m := s.cfg.replicaOf; m != nil {
		line("replicaof", "127.0.0.1", strconv.Itoa(m.port))
		if m.cfg.aclUser != "" {
			line("masteruser", quoteConf(m.cfg.aclUser))
		}
		if _, pw := m.credentials(); pw != "" {
			line("masterauth", quoteConf(pw))
		}
		if m.cfg.tls {
			line("tls-replication", "yes")
		}
	}
	if s.cfg.cluster {
		line("cluster-enabled", "yes")
		line("cluster-config-file", "nodes.conf")
		line("cluster-node-timeout", "2000")
	}
	return b.String()
}

func (s *Server) waitReady() error {
	return s.proc.poll(startTimeout, func(ctx context.Context) error {
		return withClient(ctx, s.Options(), func(c *redis.Client) error {
			if err := c.Ping(ctx).Err(); err != nil {
				return err
			}
			if s.cfg.replicaOf == nil {
				return nil
			}
			info, err := c.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "master_link_status:up") {
				return errors.New("replica not in sync with its master yet")
			}
			return nil
		})
	})
}

// withClient runs fn with a single-use client once the port accepts TCP
// connections. Probing first and using a fresh client per attempt keeps go-redis
// from logging dial failures and from backing off while the server starts.
func withClient(ctx context.Context, o *redis.Options, fn func(*redis.Client) error) error {
	if err := probe(ctx, o); err != nil {
		return err
	}
	c := redis.NewClient(o)
	defer func() { _ = c.Close() }()
	return fn(c)
}

// probe checks that o.Addr accepts TCP connections and sets o up for a
// single-use client: no retries, one connection, short timeouts.
func probe(ctx context.Context, o *redis.Options) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", o.Addr)
	if err != nil {
		return err
	}
	_ = conn.Close()
	o.DialTimeout = time.Second
	o.ReadTimeout = time.Second
	o.WriteTimeout = time.Second
	o.MaxRetries = -1
	o.DialerRetries = 1
	o.PoolSize = 1
	return nil
}

// aclPasswordHash returns an ACL rule setting the password by its SHA-256, which
// needs no quoting whatever the password contains.
func aclPasswordHash(pw string) string {
	sum := sha256.Sum256([]byte(pw))
	return "#" + hex.EncodeToString(sum[:])
}

// quoteConf quotes a value for redis.conf, whose parser understands
// double-quoted strings with \" \\ and \xHH escapes.
func quoteConf(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

var errAddrInUse = errors.New("address already in use")

// freePort returns a loopback port that was free a moment ago. Another process
// may take it before redis-server binds it; callers retry on errAddrInUse.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redisserver: finding a free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatalf("redisserver: finding a free port: %v", err)
	}
	return port
}

var binaries sync.Map // name -> path

func lookBinary(t testing.TB, name string) string {
	t.Helper()
	if p, ok := binaries.Load(name); ok {
		return p.(string)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redisserver: %s not found: run `make test`, which installs it (%v)", name, err)
	}
	binaries.Store(name, p)
	return p
}

// process is one redis-server (or Sentinel) process at a time, replaced on
// restart.
type process struct {
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited and been reaped
	logPath string
	outPath string
}

func (p *process) start(bin string, args []string, dir, logPath string) error {
	outPath := logPath + ".stdout"
	out, err := os.Create(outPath)
	if err != nil {
		return err
	}
	defer func() { _ = out.Close() }()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	// Errors raised before the log file is opened (bad arguments) go to stdout.
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done, p.logPath, p.outPath = cmd, done, logPath, outPath
	p.mu.Unlock()
	return nil
}

func (p *process) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

func (p *process) pid() int {
	cmd, _ := p.current()
	if cmd == nil {
		return 0
	}
	return cmd.Process.Pid
}

func (p *process) kill() {
	cmd, done := p.current()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Kill()
	<-done
}

func (p *process) signal(sig syscall.Signal) {
	cmd, done := p.current()
	if cmd == nil {
		return
	}
	select {
	case <-done:
	default:
		_ = cmd.Process.Signal(sig)
	}
}

// poll calls check until it succeeds, the process exits or the timeout passes.
// Errors carry the tail of the log, which usually says what went wrong.
func (p *process) poll(timeout time.Duration, check func(ctx context.Context) error) error {
	cmd, done := p.current()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		select {
		case <-done:
			tail := p.logTail()
			if strings.Contains(tail, "Address already in use") {
				return fmt.Errorf("%w\n%s", errAddrInUse, tail)
			}
			return fmt.Errorf("process exited (%v)\n%s", cmd.ProcessState, tail)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		last = check(ctx)
		cancel()
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v\n%s", timeout, last, p.logTail())
		}
		select {
		case <-done:
		case <-time.After(pollInterval):
		}
	}
}

// logTail returns the last lines of the log file and of stdout/stderr.
func (p *process) logTail() string {
	p.mu.Lock()
	logPath, outPath := p.logPath, p.outPath
	p.mu.Unlock()
	var b strings.Builder
	for _, path := range []string{logPath, outPath} {
		data, err := os.ReadFile(path)
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		fmt.Fprintf(&b, "--- %s (last %d lines)\n%s\n", path, len(lines), strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return "(no log output)"
	}
	return b.String()
}
