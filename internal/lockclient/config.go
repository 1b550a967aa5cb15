package lockclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
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
//
// The URL's user and password log in to the data nodes. Sentinels that need their
// own login take the query parameters sentinelUsername and sentinelPassword.
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
	// Timeout bounds every call; DefaultTimeout when zero.
	Timeout time.Duration
	// PoolSize is the connection pool size per node; go-redis' default when zero.
	PoolSize int
}

// Dial makes a Client from cfg. It does not connect: the first call does.
// Errors never contain the password.
func Dial(cfg Config, opts ...ClientOption) (*Client, error) {
	uo, identity, err := universalOptions(cfg)
	if err != nil {
		return nil, err
	}
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
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return New(rdb, append([]ClientOption{WithTimeout(timeout), WithIdentity(identity)}, opts...)...), nil
}

// Redact returns the URL without credentials or query, for status and logs.
// It returns "<invalid URL>" for anything it cannot parse.
func Redact(rawURL string) string {
	u, err := splitURL(rawURL)
	if err != nil {
		return "<invalid URL>"
	}
	return u.identity()
}

// parsedURL is a store URL broken into parts. Multi-host URLs are not valid for
// net/url, so it is parsed by hand.
type parsedURL struct {
	scheme   string // redis | rediss | unix
	mode     string // "", "sentinel" or "cluster"
	user     string
	password string
	hasPass  bool
	hosts    []string
	path     string
	query    url.Values
}

func (p parsedURL) identity() string {
	if p.scheme == "unix" {
		return "unix://" + p.path
	}
	s := p.scheme
	if p.mode != "" {
		s += "+" + p.mode
	}
	return s + "://" + strings.Join(p.hosts, ",") + p.path
}

func splitURL(raw string) (parsedURL, error) {
	var p parsedURL
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return p, invalidf("redis URL must start with redis://, rediss://, unix://, redis+sentinel:// or redis+cluster://")
	}
	p.scheme, p.mode, _ = strings.Cut(strings.ToLower(scheme), "+")
	switch {
	case p.scheme == "unix" && p.mode == "":
	case (p.scheme == "redis" || p.scheme == "rediss") && (p.mode == "" || p.mode == "sentinel" || p.mode == "cluster"):
	default:
		return p, invalidf("redis URL scheme %q is not one of redis, rediss, unix, redis+sentinel, rediss+sentinel, redis+cluster, rediss+cluster", scheme)
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return p, invalidf("redis URL has a malformed query")
	}
	p.query = q
	authority, path, _ := strings.Cut(rest, "/")
	if path != "" || strings.HasSuffix(rest, "/") {
		p.path = "/" + path
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo := authority[:at]
		authority = authority[at+1:]
		user, pass, hasPass := strings.Cut(userinfo, ":")
		if p.user, err = url.PathUnescape(user); err != nil {
			return p, invalidf("redis URL has a malformed user name")
		}
		if p.password, err = url.PathUnescape(pass); err != nil {
			return p, invalidf("redis URL has a malformed password")
		}
		p.hasPass = hasPass
	}
	if p.scheme == "unix" {
		if authority != "" || p.path == "" {
			return p, invalidf("unix redis URL must look like unix:///path/to/redis.sock")
		}
		return p, nil
	}
	if authority == "" {
		return p, invalidf("redis URL has no host")
	}
	for _, h := range strings.Split(authority, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			if p.mode == "sentinel" {
				h = net.JoinHostPort(h, "26379")
			} else {
				h = net.JoinHostPort(h, "6379")
			}
		} else if _, perr := strconv.Atoi(port); perr != nil || host == "" {
			return p, invalidf("redis URL host %q is not host:port", h)
		}
		p.hosts = append(p.hosts, h)
	}
	if len(p.hosts) > 1 && p.mode == "" {
		return p, invalidf("redis URL lists several hosts: use redis+sentinel:// or redis+cluster://")
	}
	return p, nil
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
	} else if len(cfg.CACert) > 0 || len(cfg.ClientCert) > 0 {
		return nil, "", invalidf("TLS certificates were given but the redis URL is not rediss://")
	}

	dbFrom := func(s string) error {
		if s == "" {
			return nil
		}
		db, err := strconv.Atoi(s)
		if err != nil || db < 0 {
			return invalidf("redis URL database %q is not a number", s)
		}
		uo.DB = db
		return nil
	}
	switch {
	case p.scheme == "unix":
		uo.Addrs = []string{p.path}
		if err := dbFrom(p.query.Get("db")); err != nil {
			return nil, "", err
		}
	case p.mode == "sentinel":
		parts := strings.Split(strings.Trim(p.path, "/"), "/")
		if parts[0] == "" {
			return nil, "", invalidf("redis+sentinel URL needs the master name as its path, e.g. redis+sentinel://sentinel-0:26379/mymaster")
		}
		uo.MasterName = parts[0]
		if len(parts) > 1 {
			if err := dbFrom(parts[1]); err != nil {
				return nil, "", err
			}
		}
		uo.Addrs = p.hosts
		uo.SentinelUsername = p.query.Get("sentinelUsername")
		uo.SentinelPassword = p.query.Get("sentinelPassword")
	case p.mode == "cluster":
		if strings.Trim(p.path, "/") != "" {
			return nil, "", invalidf("redis+cluster URL cannot select a database")
		}
		uo.Addrs = p.hosts
		uo.IsClusterMode = true
	default:
		uo.Addrs = p.hosts
		if err := dbFrom(strings.Trim(p.path, "/")); err != nil {
			return nil, "", err
		}
	}
	return uo, p.identity(), nil
}

func tlsConfig(cfg Config, firstHost string) (*tls.Config, error) {
	host, _, _ := net.SplitHostPort(firstHost)
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
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
