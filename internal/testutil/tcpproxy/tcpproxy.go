// Package tcpproxy is a loopback TCP proxy for fault injection in tests: it
// forwards connections to a target until a test cuts it (connections refused
// and closed) or blackholes it (connections stay open, nothing gets through,
// so callers wait for their own timeouts, as behind a dead network path), and
// can slow it down (Delay).
package tcpproxy

import (
	"net"
	"sync"
	"testing"
	"time"
)

type mode int

const (
	forwarding mode = iota
	blackholed
)

// Proxy forwards connections from Addr to a target.
type Proxy struct {
	addr, target string

	mu    sync.Mutex
	l     net.Listener
	mode  mode
	conns map[*link]struct{}
	// gate is closed while data may flow; Hold replaces it with an open one.
	gate chan struct{}
	// replyGate is the same for the target's replies alone (HoldReplies).
	replyGate chan struct{}
	// requestsDropped makes the proxy read and drop what callers send.
	requestsDropped bool
	// delay is added before each chunk is passed on (Delay).
	delay time.Duration
	// requests counts the chunks callers have sent (Requests).
	requests int
}

// link is one proxied connection: the client side and, unless blackholed, the
// target side.
type link struct {
	client, up net.Conn
	dead       bool
	// repliesLost: what the target sends back on this link is dropped
	// (LoseOpenReplies).
	repliesLost bool
}

// Start listens on a free loopback port and forwards to target. It is stopped
// when the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tcpproxy: listen: %v", err)
	}
	p := &Proxy{addr: l.Addr().String(), target: target, conns: map[*link]struct{}{}, gate: make(chan struct{}), replyGate: make(chan struct{})}
	close(p.gate)
	close(p.replyGate)
	p.serve(l)
	t.Cleanup(p.Cut)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(l net.Listener) {
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.handle(c)
		}
	}()
}

func (p *Proxy) handle(c net.Conn) {
	p.mu.Lock()
	lk := &link{client: c, dead: p.mode == blackholed}
	p.conns[lk] = struct{}{}
	p.mu.Unlock()
	if lk.dead {
		go p.pump(lk, c, nil)
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		p.drop(lk)
		return
	}
	p.mu.Lock()
	lk.up = up
	p.mu.Unlock()
	go p.pump(lk, c, up)
	go p.pump(lk, up, c)
}

// pump copies from src to dst until either side closes; once the link is dead
// (blackholed) whatever arrives is read and dropped.
func (p *Proxy) pump(lk *link, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate, replyGate := p.gate, p.replyGate
			if src == lk.client {
				p.requests++
			}
			p.mu.Unlock()
			<-gate
			if src == lk.up {
				<-replyGate
			}
			p.mu.Lock()
			delay := p.delay
			p.mu.Unlock()
			if delay > 0 {
				time.Sleep(delay)
			}
			p.mu.Lock()
			dead := lk.dead || src == lk.client && p.requestsDropped || src == lk.up && lk.repliesLost
			p.mu.Unlock()
			if !dead && dst != nil {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					p.drop(lk)
					return
				}
			}
		}
		if err != nil {
			p.mu.Lock()
			dead := lk.dead
			p.mu.Unlock()
			if !dead {
				p.drop(lk)
			}
			return
		}
	}
}

func (p *Proxy) drop(lk *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	closeLink(lk)
	delete(p.conns, lk)
}

func closeLink(lk *link) {
	_ = lk.client.Close()
	if lk.up != nil {
		_ = lk.up.Close()
	}
}

// HoldReplies delays what the target sends back until UnholdReplies, while
// requests still reach it: a call has taken effect, but its caller learns so late.
func (p *Proxy) HoldReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.replyGate:
		p.replyGate = make(chan struct{})
	default: // already held
	}
}

// Requests is how many chunks callers have sent through the proxy so far: once it
// grows, a call the test caused has left its caller.
func (p *Proxy) Requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests
}

// UnholdReplies delivers the replies HoldReplies delayed, in order.
func (p *Proxy) UnholdReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.replyGate:
	default:
		close(p.replyGate)
	}
}

// DropRequests keeps connections open and replies flowing, but drops what callers
// send from now on: a reply already on its way still arrives, later calls wait for
// their own timeouts.
func (p *Proxy) DropRequests() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requestsDropped = true
}

// Cut refuses new connections and closes the open ones: callers see errors at once.
func (p *Proxy) Cut() {
	p.Unhold()
	p.UnholdReplies()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		_ = p.l.Close()
		p.l = nil
	}
	for lk := range p.conns {
		closeLink(lk)
	}
	p.conns = map[*link]struct{}{}
}

// LoseOpenReplies drops, from now on, every reply on the connections open now,
// while their requests still reach the target; new connections work: a call in
// flight on one of them takes effect but fails by its own timeout, and the
// caller's next call, on a new connection, goes through.
func (p *Proxy) LoseOpenReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for lk := range p.conns {
		lk.repliesLost = true
	}
}

// Blackhole keeps every connection open and accepts new ones, but nothing gets
// through in either direction: callers wait until their own timeouts.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = blackholed
	for lk := range p.conns {
		lk.dead = true
		if lk.up != nil {
			_ = lk.up.Close()
		}
	}
}

// Hold delays everything sent through the proxy, in both directions, until
// Unhold: a request is on its way but has not arrived.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default: // already held
	}
}

// Delay passes everything on d late, in both directions (so a request and
// its reply take 2*d longer): a slow but working network. Zero ends it.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Unhold delivers what Hold delayed, in order, and forwards again.
func (p *Proxy) Unhold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// Restore forwards again. Connections that were blackholed are closed (their
// streams lost data), so clients reconnect.
func (p *Proxy) Restore(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	p.mode = forwarding
	for lk := range p.conns {
		if lk.dead {
			closeLink(lk)
			delete(p.conns, lk)
		}
	}
	listening := p.l != nil
	p.mu.Unlock()
	if listening {
		return
	}
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("tcpproxy: listen on %s again: %v", p.addr, err)
	}
	p.serve(l)
}
