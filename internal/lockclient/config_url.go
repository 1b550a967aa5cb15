package lockclient

import (
	"net"
	"net/url"
	"strconv"
	"strings"
)

// maxURLLength bounds a store URL; nothing legitimate comes close.
const maxURLLength = 16384

// queryParams are the query parameters a store URL takes. An '@' inside one of
// their values (an unencoded sentinelPassword) does not end the URL's userinfo.
var queryParams = []string{"db", "sentinelUsername", "sentinelPassword"}

// Redact returns the URL without credentials or query, for status and logs.
// It returns "<invalid URL>" for anything Dial would reject as malformed, so
// that nothing of an unparsable URL (which may be all password) is shown.
func Redact(rawURL string) string {
	u, err := splitURL(rawURL)
	if err != nil {
		return "<invalid URL>"
	}
	return u.identity()
}

// parsedURL is a store URL broken into parts. Multi-host URLs are not valid for
// net/url, and net/url both splits a password at its first '/' and quotes the
// input in its errors, so store URLs are parsed by hand.
type parsedURL struct {
	scheme   string // redis | rediss | unix
	mode     string // "", "sentinel", "cluster" or "redlock"
	user     string
	password string
	hosts    []string
	path     string // unix: the socket path; otherwise "" or "/..." (db, master name)
	db       int
	master   string
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

// urlError describes what is wrong with a store URL. It never quotes the URL:
// any part of it may be a password that was split in an unexpected place.
func urlError(what string) error { return invalidf("redis URL: %s", what) }

// splitURL parses a store URL. The userinfo ends at the last '@' before the host
// part, so an unencoded '@' or ':' in a password is read as the user meant it;
// an unencoded '/', '?' or '#' in a password is rejected, because other Redis
// tools would split the URL there.
func splitURL(raw string) (parsedURL, error) {
	var p parsedURL
	if len(raw) > maxURLLength {
		return p, urlError("longer than " + strconv.Itoa(maxURLLength) + " bytes")
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] < 0x20 || raw[i] == 0x7f {
			return p, urlError("contains a control character (a line break?)")
		}
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return p, urlError("must start with redis://, rediss://, unix://, redis+sentinel://, redis+cluster:// or redis+redlock://")
	}
	p.scheme, p.mode, _ = strings.Cut(strings.ToLower(scheme), "+")
	switch {
	case p.scheme == "unix" && p.mode == "":
	case (p.scheme == "redis" || p.scheme == "rediss") && (p.mode == "" || p.mode == "sentinel" || p.mode == "cluster" || p.mode == "redlock"):
	default:
		return p, urlError("the scheme is not one of redis, rediss, unix, redis+sentinel, rediss+sentinel, redis+cluster, rediss+cluster, redis+redlock, rediss+redlock")
	}

	at := userinfoEnd(rest, p.scheme == "unix")
	after := rest
	if at >= 0 {
		if err := p.setUserinfo(rest[:at]); err != nil {
			return p, err
		}
		after = rest[at+1:]
	}
	if strings.ContainsRune(after, '#') {
		return p, urlError("contains '#': percent-encode it as %23 (in a password too)")
	}
	hostPart, tail := after, ""
	if i := strings.IndexAny(after, "/?"); i >= 0 {
		hostPart, tail = after[:i], after[i:]
	}
	path, rawQuery, _ := strings.Cut(tail, "?")
	q, err := parseQuery(rawQuery)
	if err != nil {
		return p, err
	}
	p.query = q
	if _, err := parseReplicaAck(p); err != nil {
		return p, err
	}

	if p.scheme == "unix" {
		if hostPart != "" || path == "" || path == "/" {
			return p, urlError("a unix URL must look like unix:///path/to/redis.sock")
		}
		p.path = path
		return p, p.setDB(q.Get("db"))
	}
	if err := p.setHosts(hostPart, strings.Contains(rest, "@")); err != nil {
		return p, err
	}
	p.path = path
	return p, p.setPath(path)
}

// userinfoEnd returns the index of the '@' that ends the userinfo, or -1. For
// unix URLs the socket path follows it directly. Elsewhere it is the last '@'
// that is not inside the value of a known query parameter.
func userinfoEnd(rest string, unix bool) int {
	if unix {
		if strings.HasPrefix(rest, "/") {
			return -1
		}
		return strings.LastIndex(rest, "@/")
	}
	return strings.LastIndexByte(rest[:queryValueStart(rest)], '@')
}

// queryValueStart returns where the value of the first known query parameter
// begins in s, or len(s): an '@' from there on belongs to that value.
func queryValueStart(s string) int {
	start := len(s)
	for _, name := range queryParams {
		for _, sep := range []string{"?", "&"} {
			if i := strings.Index(s, sep+name+"="); i >= 0 {
				start = min(start, i+len(sep+name+"="))
			}
		}
	}
	return start
}

func (p *parsedURL) setUserinfo(userinfo string) error {
	user, pass, _ := strings.Cut(userinfo, ":")
	var err error
	if p.user, err = unescapeCredential(user, "user name"); err != nil {
		return err
	}
	p.password, err = unescapeCredential(pass, "password")
	return err
}

// unescapeCredential decodes a user name or password. Its errors name the
// offending character class, never the text.
func unescapeCredential(s, what string) (string, error) {
	if i := strings.IndexAny(s, "/?#"); i >= 0 {
		return "", urlError("the " + what + " must be percent-encoded: it contains '" + s[i:i+1] + "'")
	}
	v, err := url.PathUnescape(s)
	if err != nil {
		return "", urlError("the " + what + " must be percent-encoded: it contains '%' not followed by two hex digits")
	}
	return v, nil
}

// parseQuery splits the query. Values are decoded like the userinfo ('+' stays
// '+'), so a password reads the same in both places.
func parseQuery(raw string) (url.Values, error) {
	q := url.Values{}
	for _, part := range strings.Split(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		key, err := url.PathUnescape(k)
		if err != nil {
			return nil, urlError("the query is malformed: a name contains '%' not followed by two hex digits")
		}
		val, err := url.PathUnescape(v)
		if err != nil {
			return nil, urlError("the query is malformed: a value must be percent-encoded: it contains '%' not followed by two hex digits")
		}
		q.Add(key, val)
	}
	return q, nil
}

func (p *parsedURL) setHosts(hostPart string, hasAt bool) error {
	if hostPart == "" {
		if hasAt {
			return urlError("no host after the user name and password; percent-encode '/', '?' and '#' in them")
		}
		return urlError("no host")
	}
	defPort := "6379"
	if p.mode == "sentinel" {
		defPort = "26379"
	}
	for i, h := range strings.Split(hostPart, ",") {
		addr, ok := hostPort(h, defPort)
		if !ok {
			what := "the host"
			if strings.Contains(hostPart, ",") {
				what = "host " + strconv.Itoa(i+1)
			}
			msg := what + " is not host or host:port with a port from 1 to 65535"
			if hasAt {
				msg += "; percent-encode '@', '/', '?' and '#' in the user name and password"
			}
			return urlError(msg)
		}
		p.hosts = append(p.hosts, addr)
	}
	if len(p.hosts) > 1 && p.mode == "" {
		return urlError("lists several hosts: use redis+sentinel://, redis+cluster:// or redis+redlock://")
	}
	if p.mode == "redlock" && (len(p.hosts) < 3 || len(p.hosts)%2 == 0) {
		return urlError("a redis+redlock URL needs an odd number of hosts, at least 3, got " + strconv.Itoa(len(p.hosts)))
	}
	return nil
}

// hostPort checks one host[:port] and returns it with the default port added.
func hostPort(h, defPort string) (string, bool) {
	host, port := h, defPort
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "", false
		}
		host = h[1:end]
		if ip := net.ParseIP(host); ip == nil || ip.To4() != nil {
			return "", false
		}
		switch r := h[end+1:]; {
		case r == "":
		case strings.HasPrefix(r, ":"):
			port = r[1:]
		default:
			return "", false
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 {
		host, port = h[:i], h[i+1:]
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return "", false
	}
	if !strings.HasPrefix(h, "[") && !validHostname(host) {
		return "", false
	}
	return net.JoinHostPort(host, port), true
}

// validHostname accepts DNS names and IPv4 addresses.
func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	return onlyBytes(h, "._-")
}

// onlyBytes reports whether s holds only ASCII letters, digits and bytes of extra.
func onlyBytes(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return true
}

// setPath reads the database (and for Sentinel the master name) from the path.
func (p *parsedURL) setPath(path string) error {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch p.mode {
	case "sentinel":
		if parts[0] == "" {
			return urlError("a redis+sentinel URL needs the master name as its path, e.g. redis+sentinel://sentinel-0:26379/mymaster")
		}
		if !validName(parts[0]) {
			return urlError("the Sentinel master name may hold only letters, digits, '.', '_', '-' and ':'")
		}
		p.master = parts[0]
		if len(parts) > 2 {
			return urlError("the path of a redis+sentinel URL is /master-name or /master-name/db")
		}
		if len(parts) == 2 {
			return p.setDB(parts[1])
		}
		return nil
	case "cluster":
		if parts[0] != "" {
			return urlError("a redis+cluster URL cannot select a database")
		}
		return nil
	default:
		if len(parts) > 1 {
			return urlError("the path of a redis URL is /db, a database number")
		}
		return p.setDB(parts[0])
	}
}

func (p *parsedURL) setDB(s string) error {
	if s == "" {
		return nil
	}
	db, err := strconv.Atoi(s)
	if err != nil || db < 0 || strconv.Itoa(db) != s {
		return urlError("the database is not a number")
	}
	p.db = db
	return nil
}

func validName(s string) bool { return onlyBytes(s, "._-:") }
