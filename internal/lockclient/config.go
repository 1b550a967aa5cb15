package lockclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Config says how to reach a store. URL forms:
//
//	redis://[user:password@]host:port[/db]
//	rediss://[user:password@]host:port[/db]           TLS
//	unix://[user:password@]/path/to/redis.sock[?db=N]
//	redis+sentinel://[user:password@]host:port[,host:port...]/master-name[/db]
//	rediss+sentinel://...                               TLS to Sentinels and data nodes
//	redis+cluster://[user:password@]host:port[,host:port...]
//	rediss+cluster://...                                TLS
//	redis+redlock://[user:password@]host:port,host:port,host:port[/db]
//	rediss+redlock://...                                TLS; N independent masters, N odd >= 3
//
// Every form takes the query minReplicaAcks=N[&replicaAckTimeout=D]:
// an acquisition then waits (WAIT) until N replicas have the lease, at most D
// (default 500ms), and fails as a store error, releasing the key, if fewer did.
// The URL's user and password log in to the data nodes. Sentinels that need their
// own login take the query parameters sentinelUsername and sentinelPassword.
// A user name or password holding '/', '?', '#' or '%' must be percent-encoded
// (other Redis tools split the URL there); '@' and ':' may be written as they are.
// Errors about a URL never quote it.
type Config struct {
	URL string
	// Username and Password, when set, override the URL's.
	Username string
	Password string
	// CACert is a PEM bundle that verifies the server (TLS only). Without it the
	// system roots are used.
	CACert []byte
	// ClientCert and ClientKey are a PEM pair presented to the server (TLS only).
	ClientCert []byte
	ClientKey  []byte
	// InsecureSkipVerify turns off verification of the server certificate (TLS
	// only). Callers take it only from an explicit setting and warn about it.
	InsecureSkipVerify bool
	// Timeout bounds every call; DefaultTimeout when zero.
	Timeout time.Duration
	// PoolSize is the connection pool size per node; go-redis' default when zero.
	PoolSize int
	// Tenant marks a store a tenant named: a failure to connect is reported as
	// "unreachable", without the dialer's detail.
	Tenant bool
	// Allow, when set, is checked on every connection, including to masters a
	// Sentinel announces and nodes a Cluster redirects to.
	Allow *AllowList
}

// Dial makes a Client from cfg. It does not connect: the first call does.
// Errors never contain the password.
func Dial(cfg Config, opts ...ClientOption) (*Client, error) {
	uo, identity, err := universalOptions(cfg)
	if err != nil {
		return nil, err
	}
	acks, err := replicaAckOf(cfg.URL)
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	// Every call is bounded by its context (the call timeout, plus the replicas'
	// acknowledgement wait for an acquisition); the sockets' own deadlines must
	// not cut a call shorter than that, or --redis-timeout would silently be
	// capped at go-redis' default of 5s.
	uo.ReadTimeout = max(timeout+acks.timeout, 5*time.Second)
	uo.WriteTimeout = uo.ReadTimeout
	var rdb redis.UniversalClient
	switch {
	case uo.MasterName != "":
		rdb = redis.NewFailoverClient(uo.Failover())
	case uo.IsClusterMode:
		rdb = redis.NewClusterClient(uo.Cluster())
	default:
		o := uo.Simple()
		if strings.HasPrefix(identity, "unix://") {
			o.Network = "unix"
		}
		rdb = redis.NewClient(o)
	}
	if p, _ := splitURL(cfg.URL); p.mode == "redlock" {
		return dialRedlock(cfg, uo, p, acks, timeout, opts)
	}
	return New(rdb, append([]ClientOption{WithTimeout(timeout), WithIdentity(identity), withReplicaAck(acks)}, opts...)...), nil
}

func universalOptions(cfg Config) (*redis.UniversalOptions, string, error) {
	p, err := splitURL(cfg.URL)
	if err != nil {
		return nil, "", err
	}
	uo := &redis.UniversalOptions{
		Username: p.user,
		Password: p.password,
		// Calls are bounded by their context; go-redis applies its deadline to
		// socket reads and writes.
		ContextTimeoutEnabled: true,
		DialTimeout:           2 * time.Second,
		MaxRetries:            1,
		// A refused connection is an answer: report it now instead of retrying
		// for seconds while a deadline runs.
		DialerRetries: 1,
		PoolSize:      cfg.PoolSize,
		// The default RESP3 handshake costs an extra HELLO round trip per connection
		// and some managed Redis versions reject it.
		Protocol: 2,
		// CLIENT SETINFO only names the library; without it the ACL the manager
		// needs is smaller and works on Redis before 7.2.
		DisableIdentity: true,
		// Maintenance notifications need RESP3 and a managed service that sends them.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if cfg.Username != "" {
		uo.Username = cfg.Username
	}
	if cfg.Password != "" {
		uo.Password = cfg.Password
	}
	if p.scheme == "rediss" {
		if uo.TLSConfig, err = tlsConfig(cfg, p.hosts[0]); err != nil {
			return nil, "", err
		}
	} else if len(cfg.CACert) > 0 || len(cfg.ClientCert) > 0 || cfg.InsecureSkipVerify {
		return nil, "", invalidf("TLS settings were given but the redis URL is not rediss://")
	}

	if cfg.Tenant || cfg.Allow != nil {
		uo.Dialer = tenantDialer(cfg.Allow, uo.DialTimeout, uo.TLSConfig)
	}
	uo.DB = p.db
	uo.Addrs = p.hosts
	switch {
	case p.scheme == "unix":
		uo.Addrs = []string{p.path}
	case p.mode == "sentinel":
		uo.MasterName = p.master
		uo.SentinelUsername = p.query.Get("sentinelUsername")
		uo.SentinelPassword = p.query.Get("sentinelPassword")
	case p.mode == "cluster":
		uo.IsClusterMode = true
	}
	return uo, p.identity(), nil
}

func tlsConfig(cfg Config, firstHost string) (*tls.Config, error) {
	host, _, _ := net.SplitHostPort(firstHost)
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host, InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // an explicit, warned-about opt-in
	if len(cfg.CACert) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CACert) {
			return nil, invalidf("the CA bundle holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	if len(cfg.ClientCert) > 0 || len(cfg.ClientKey) > 0 {
		pair, err := tls.X509KeyPair(cfg.ClientCert, cfg.ClientKey)
		if err != nil {
			return nil, errors.Join(invalidf("client certificate and key do not form a pair"), fmt.Errorf("load key pair: %w", err))
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}
