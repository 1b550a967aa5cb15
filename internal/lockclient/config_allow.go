package lockclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
)

// ErrNotAllowed matches errors about a store address outside an AllowList.
var ErrNotAllowed = errors.New("store address not allowed")

// NotAllowedError says a store address is outside the AllowList; nothing was
// sent to it.
type NotAllowedError struct {
	// Addr is the host:port as configured, or as a Sentinel or Cluster announced it.
	Addr string
}

func (e *NotAllowedError) Error() string {
	return fmt.Sprintf("store address %s is not allowed by the manager's --store-allow", e.Addr)
}

// Is makes errors.Is(err, ErrNotAllowed) true.
func (e *NotAllowedError) Is(target error) bool { return target == ErrNotAllowed }

// ClusterRanges is the AllowList item that stands for the cluster's own Service and
// Pod address ranges. The list does not know them: whoever parses it finds them (the
// manager, from the API server) and sets them with SetClusterRanges, again whenever
// they change. Until then the item admits no address.
const ClusterRanges = "cluster-ranges"

// AllowList says which addresses tenant stores may have: host name patterns
// ("redis.example.com", "*.svc.cluster.local": '*' stands for one or more
// leading labels) and CIDRs ("10.96.0.0/12", "fd00::/8"; a bare IP is a /32 or
// /128). With patterns, a host must be a name that matches one; with CIDRs,
// every address the host is or resolves to must lie in one; with both, both
// hold, so "*.svc.cluster.local,10.96.0.0/12" admits Service names that resolve
// to ClusterIPs and nothing a tenant's DNS or Endpoints could point elsewhere.
//
// ClusterRanges adds the cluster's Service and Pod ranges to the CIDRs, and admits
// an address in them even as a bare IP with patterns in the list: a Sentinel or a
// Cluster inside the cluster announces its nodes by Pod IP.
type AllowList struct {
	patterns []string
	nets     []netip.Prefix
	// withCluster says the list has ClusterRanges; cluster holds the ranges set so
	// far (read on every connection, set while connections are made).
	withCluster bool
	cluster     atomic.Pointer[[]netip.Prefix]
	resolver    *net.Resolver
}

// ParseAllowList parses a comma-separated list of host patterns and CIDRs.
// An empty string gives nil: every address is allowed.
func ParseAllowList(s string) (*AllowList, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	a := &AllowList{resolver: net.DefaultResolver}
	for _, item := range strings.Split(s, ",") {
		item = strings.ToLower(strings.TrimSpace(item))
		switch {
		case item == "":
		case item == ClusterRanges:
			a.withCluster = true
		case strings.Contains(item, "/"):
			p, err := netip.ParsePrefix(item)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8: %w", item, err)
			}
			a.nets = append(a.nets, p.Masked())
		default:
			if ip, err := netip.ParseAddr(item); err == nil {
				a.nets = append(a.nets, netip.PrefixFrom(ip, ip.BitLen()))
				continue
			}
			name := strings.TrimPrefix(item, "*.")
			if !validHostname(name) || strings.Contains(name, "*") {
				return nil, fmt.Errorf("%q is neither a host name, a pattern such as *.redis.example.com, nor a CIDR", item)
			}
			a.patterns = append(a.patterns, item)
		}
	}
	return a, nil
}

// WantsClusterRanges reports whether the list has the ClusterRanges item, whose
// ranges its user must find and set.
func (a *AllowList) WantsClusterRanges() bool { return a != nil && a.withCluster }

// SetClusterRanges sets the cluster's Service and Pod ranges that the ClusterRanges
// item stands for, replacing those set before. It is safe to call while the list is
// in use; a list without the item ignores it.
func (a *AllowList) SetClusterRanges(ranges []netip.Prefix) {
	if !a.WantsClusterRanges() {
		return
	}
	masked := make([]netip.Prefix, 0, len(ranges))
	for _, r := range ranges {
		if r.IsValid() {
			masked = append(masked, r.Masked())
		}
	}
	a.cluster.Store(&masked)
}

// clusterRanges returns the ranges set for ClusterRanges (none before the first set).
func (a *AllowList) clusterRanges() []netip.Prefix {
	if p := a.cluster.Load(); p != nil {
		return *p
	}
	return nil
}

// String lists the patterns and CIDRs, and the cluster ranges as set now, for the
// start-up log.
func (a *AllowList) String() string {
	if a == nil {
		return "any"
	}
	items := append([]string(nil), a.patterns...)
	for _, n := range a.nets {
		items = append(items, n.String())
	}
	if a.withCluster {
		var ranges []string
		for _, n := range a.clusterRanges() {
			ranges = append(ranges, n.String())
		}
		items = append(items, ClusterRanges+"("+strings.Join(ranges, ",")+")")
	}
	return strings.Join(items, ",")
}

func (a *AllowList) nameAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, p := range a.patterns {
		if suffix, ok := strings.CutPrefix(p, "*"); ok {
			if strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
				return true
			}
		} else if host == p {
			return true
		}
	}
	return false
}

func (a *AllowList) ipAllowed(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, n := range a.nets {
		if n.Contains(ip) {
			return true
		}
	}
	return a.inClusterRanges(ip)
}

func (a *AllowList) inClusterRanges(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, n := range a.clusterRanges() {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// resolve returns the addresses to connect to for addr (host:port), or a
// *NotAllowedError. Every address a name resolves to must be allowed: a name
// that also resolves outside the list would let DNS pick the target, and the
// checked addresses are the ones dialled, so a later DNS answer cannot either.
func (a *AllowList) resolve(ctx context.Context, addr string) ([]string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &NotAllowedError{Addr: addr}
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if len(a.patterns) == 0 && a.ipAllowed(ip) || a.inClusterRanges(ip) {
			return []string{addr}, nil
		}
		return nil, &NotAllowedError{Addr: addr}
	}
	if len(a.patterns) > 0 && !a.nameAllowed(host) {
		return nil, &NotAllowedError{Addr: addr}
	}
	// With ClusterRanges a name must resolve into them, even while none are known.
	if len(a.nets) == 0 && !a.withCluster {
		return []string{addr}, nil
	}
	ips, err := a.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, errUnreachable
	}
	var out []string
	for _, ip := range ips {
		if !a.ipAllowed(ip) {
			return nil, &NotAllowedError{Addr: addr}
		}
		out = append(out, net.JoinHostPort(ip.Unmap().String(), port))
	}
	return out, nil
}

// Check reports whether the hosts of a store URL are allowed, resolving names
// that no pattern names. It makes no connection.
func (a *AllowList) Check(ctx context.Context, rawURL string) error {
	if a == nil {
		return nil
	}
	p, err := splitURL(rawURL)
	if err != nil {
		return err
	}
	if p.scheme == "unix" {
		return &NotAllowedError{Addr: "unix://" + p.path}
	}
	// A slow resolver must not hold a reconcile.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, h := range p.hosts {
		if _, err := a.resolve(ctx, h); err != nil {
			return err
		}
	}
	return nil
}

// errUnreachable replaces a tenant store's dial error: its detail (resolver
// answers, routes, refusals) would let a tenant map the manager's network.
var errUnreachable = errors.New("unreachable")

// tenantDialer connects to the addresses allow permits (any when allow is nil),
// including masters a Sentinel announces and nodes a Cluster redirects to, and
// reports any failure to connect as "unreachable". The address that passed the
// check is the one dialled, so a second DNS answer cannot change the target.
func tenantDialer(allow *AllowList, timeout time.Duration, tlsConfig *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		targets := []string{addr}
		if allow != nil {
			if network == "unix" {
				return nil, &NotAllowedError{Addr: "unix://" + addr}
			}
			var err error
			if targets, err = allow.resolve(ctx, addr); err != nil {
				return nil, err
			}
		}
		d := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
		for _, target := range targets {
			conn, err := d.DialContext(ctx, network, target)
			if err != nil {
				continue
			}
			if tlsConfig == nil {
				return conn, nil
			}
			tc := tls.Client(conn, tlsConfig)
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = conn.Close()
				// A certificate problem is the tenant's to fix, and says nothing
				// about the network.
				return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
			}
			return tc, nil
		}
		return nil, fmt.Errorf("%s: %w", addr, errUnreachable)
	}
}
