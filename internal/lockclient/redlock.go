package lockclient

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/fence_raise.lua
	fenceRaiseSrc    string
	fenceRaiseScript = redis.NewScript(fenceRaiseSrc)
)

// redlock is a store of N independent masters (URL scheme redis+redlock, N odd
// and at least 3): a lease is held while a majority of them hold it. Each node
// is a single-node Client, so every per-node call is the same script, reply
// check and error typing as for one Redis.
//
// What it guarantees, and what not (docs/lock-stores.md says it for users):
//   - an acquisition succeeds only when a majority took the key and the time it
//     took, plus a clock-drift allowance, is shorter than the TTL; otherwise it
//     is released on every node;
//   - a renewal counts only when a majority extended the key; a minority is a
//     failed renewal (the Keeper retries and self-fences), and when so many
//     nodes answered "not held" that no majority can, the lease is lost; a
//     renewal a majority confirmed puts the key back where it was absent;
//   - the fence is the highest counter of the nodes that took the key, written
//     back to every node that answered, and the acquisition fails unless a
//     majority kept it: two majorities share a node, so a later acquisition
//     counts from above it. A node that lost its data can be that shared node:
//     then only Strict fencing (the caller's floor and the nodes' clocks) keeps
//     the fence rising;
//   - mutual exclusion assumes node clocks that run at about the same rate and
//     processes that are not paused for longer than the lease: Redlock does not
//     remove the need to check the fence where the work writes.
type redlock struct {
	nodes  []*Client
	quorum int
}

// clockDrift is the allowance for node clocks running faster than ours: 1% of
// the TTL plus 2 ms, the figure the Redlock description uses.
func clockDrift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// provenSent is the time from which a renewal sent at sent provably keeps a
// lease of ttl: for Redlock, less the drift allowance, because the nodes'
// clocks decide when their copies expire.
func (c *Client) provenSent(sent time.Time, ttl time.Duration) time.Time {
	if c.redlock == nil {
		return sent
	}
	return sent.Add(-clockDrift(ttl))
}

// dialRedlock makes a Client over one single-node Client per host.
func dialRedlock(cfg Config, uo *redis.UniversalOptions, p parsedURL, acks replicaAck, timeout time.Duration, opts []ClientOption) (*Client, error) {
	rl := &redlock{quorum: len(p.hosts)/2 + 1}
	for _, h := range p.hosts {
		o := uo.Simple()
		o.Addr = h
		if uo.TLSConfig != nil {
			// Each node proves its own name.
			o.TLSConfig = uo.TLSConfig.Clone()
			o.TLSConfig.ServerName, _, _ = net.SplitHostPort(h)
		}
		if cfg.Tenant || cfg.Allow != nil {
			o.Dialer = tenantDialer(cfg.Allow, uo.DialTimeout, o.TLSConfig)
		}
		rl.nodes = append(rl.nodes, New(redis.NewClient(o), WithTimeout(timeout), WithIdentity(p.scheme+"://"+h), withReplicaAck(acks)))
	}
	c := New(rl.nodes[0].rdb, append([]ClientOption{WithTimeout(timeout), WithIdentity(p.identity())}, opts...)...)
	c.redlock = rl
	for _, n := range rl.nodes {
		n.clock = c.clock
	}
	return c, nil
}

// each calls f for every node at once and waits for all.
func (r *redlock) each(f func(i int, n *Client)) {
	var wg sync.WaitGroup
	for i, n := range r.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i, n)
		}()
	}
	wg.Wait()
}

// reachedError describes a call that too few nodes answered.
func (r *redlock) reachedError(op string, answered int, errs []error) error {
	var first error
	for _, err := range errs {
		if err != nil && errors.Is(err, ErrStore) {
			first = err
			break
		}
	}
	msg := fmt.Errorf("%d of %d Redlock nodes answered, %d needed", answered, len(r.nodes), r.quorum)
	if first != nil {
		msg = fmt.Errorf("%w (first failure: %w)", msg, first)
	}
	return &StoreError{Op: op, Err: msg}
}

func (r *redlock) acquire(ctx context.Context, c *Client, req AcquireRequest) (Lease, error) {
	if err := req.validate(); err != nil {
		return Lease{}, err
	}
	sent := c.clock.Now()
	leases := make([]Lease, len(r.nodes))
	errs := make([]error, len(r.nodes))
	r.each(func(i int, n *Client) { leases[i], errs[i] = n.Acquire(ctx, req) })

	var ok []int
	var busy *BusyError
	for i, err := range errs {
		var b *BusyError
		switch {
		case err == nil:
			ok = append(ok, i)
		case errors.As(err, &b):
			if busy == nil || b.TTL > busy.TTL {
				busy = b
			}
		case errors.Is(err, ErrDone), errors.Is(err, ErrInvalid):
			// The occurrence is done on a node (a Complete reached it), or a key
			// there holds something else: nothing else matters.
			r.releaseAll(ctx, req)
			return Lease{}, err
		}
	}
	if len(ok) < r.quorum {
		r.releaseAll(ctx, req)
		if busy != nil {
			return Lease{}, busy
		}
		return Lease{}, r.reachedError("acquire "+req.Keys.Lock, len(ok), errs)
	}

	lease := leases[ok[0]]
	for _, i := range ok {
		l := leases[i]
		lease.Fence = max(lease.Fence, l.Fence)
		lease.FenceRaised = lease.FenceRaised || l.FenceRaised
		lease.Reentered = lease.Reentered || l.Reentered
	}
	if req.Policy != FenceNone {
		if err := r.raiseFence(ctx, req.Keys.Fence, lease.Fence, errs); err != nil {
			r.releaseAll(ctx, req)
			return Lease{}, err
		}
	}
	drift := clockDrift(req.TTL)
	if elapsed := c.clock.Since(sent); elapsed+drift >= req.TTL {
		r.releaseAll(ctx, req)
		return Lease{}, &StoreError{Op: "acquire " + req.Keys.Lock, Err: fmt.Errorf("the Redlock majority took %s, longer than the lease %s less the drift allowance", elapsed.Round(time.Millisecond), req.TTL)}
	}
	// The nodes' keys may expire up to the drift allowance early by our clock:
	// the lease is never assumed to last longer than that.
	lease.SentAt = sent.Add(-drift)
	return lease, nil
}

// raiseFence writes fence back to every node that answered the acquisition
// (answered[i] is nil or not a store error) and fails unless a majority has it.
func (r *redlock) raiseFence(ctx context.Context, key string, fence int64, answered []error) error {
	raised := make([]bool, len(r.nodes))
	errs := make([]error, len(r.nodes))
	r.each(func(i int, n *Client) {
		if answered[i] != nil && errors.Is(answered[i], ErrStore) {
			errs[i] = answered[i]
			return
		}
		cctx, cancel := context.WithTimeout(ctx, n.timeout)
		defer cancel()
		res, err := fenceRaiseScript.Run(cctx, n.rdb, []string{key}, fence).Int64()
		switch {
		case err != nil:
			errs[i] = n.callError("raise fence", key, err)
		case res < fence:
			errs[i] = unexpectedReply("raise fence", key, []any{res})
		default:
			raised[i] = true
		}
	})
	count := 0
	for _, ok := range raised {
		if ok {
			count++
		}
	}
	if count < r.quorum {
		return r.reachedError("raise fence "+key, count, errs)
	}
	return nil
}

// releaseAll deletes the key on every node where it holds req.Token, including
// nodes whose answer was lost, with a context of its own (the caller's may be
// spent). Failures are left to the TTL.
func (r *redlock) releaseAll(ctx context.Context, req AcquireRequest) {
	l := Lease{Keys: req.Keys, Token: req.Token, TTL: req.TTL}
	r.each(func(_ int, n *Client) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.timeout)
		defer cancel()
		_ = n.Release(rctx, l)
	})
}

// renewMany renews every item on every node and counts, per item, the nodes
// that extended it. A minority is a store error (the Keeper retries and
// self-fences); so many "not held" answers that no majority can remain is lost.
func (r *redlock) renewMany(ctx context.Context, items []renewItem) []error {
	per := make([][]error, len(r.nodes))
	r.each(func(i int, n *Client) { per[i] = n.renewMany(ctx, items) })
	out := make([]error, len(items))
	repairs := make([][]renewItem, len(r.nodes))
	defer r.repair(ctx, repairs)
	for j, it := range items {
		var renewed, notHeld int
		var reacquired bool
		var holder string
		errs := make([]error, len(r.nodes))
		for i := range r.nodes {
			err := per[i][j]
			errs[i] = err
			var nh *NotHeldError
			switch {
			case err == nil:
				renewed++
			case errors.Is(err, errReacquired):
				renewed++
				reacquired = true
			case errors.As(err, &nh):
				notHeld++
				if holder == "" {
					holder = nh.Holder
				}
			case errors.Is(err, ErrInvalid):
				notHeld++
			}
		}
		key := it.lease.Keys.Lock
		if renewed >= r.quorum {
			r.markRepairs(repairs, per, items, j)
		}
		switch {
		case renewed >= r.quorum && reacquired:
			out[j] = errReacquired
		case renewed >= r.quorum:
			out[j] = nil
		case notHeld > len(r.nodes)-r.quorum:
			out[j] = &NotHeldError{Key: key, Holder: holder}
		default:
			out[j] = r.reachedError("renew "+key, renewed, errs)
		}
	}
	return out
}

// markRepairs notes, for a renewal a majority confirmed, every node where the
// key was absent (a node restarted without its data), so that the key is put
// back there. Without it, a rolling restart of the nodes would wear a
// long-running lease down to a minority.
func (r *redlock) markRepairs(repairs [][]renewItem, per [][]error, items []renewItem, j int) {
	for i := range r.nodes {
		var nh *NotHeldError
		if errors.As(per[i][j], &nh) && nh.Holder == "" {
			repairs[i] = append(repairs[i], renewItem{lease: items[j].lease, reacquire: true})
		}
	}
}

// repair puts keys back on the nodes markRepairs noted. The script sets a key
// only where it is absent, so no other holder's key is touched; failures wait
// for the next renewal.
func (r *redlock) repair(ctx context.Context, repairs [][]renewItem) {
	r.each(func(i int, n *Client) {
		if len(repairs[i]) > 0 {
			_ = n.renewMany(ctx, repairs[i])
		}
	})
}

func (r *redlock) renew(ctx context.Context, l Lease) error {
	if err := validateLease(l); err != nil {
		return err
	}
	err := r.renewMany(ctx, []renewItem{{lease: l}})[0]
	if errors.Is(err, errReacquired) {
		return nil
	}
	return err
}

// release deletes the key everywhere it holds the token. It succeeds when a
// majority answered and one of them deleted it; keys on nodes that did not
// answer expire with their TTL.
func (r *redlock) release(ctx context.Context, l Lease) error {
	if err := validateLease(l); err != nil {
		return err
	}
	errs := make([]error, len(r.nodes))
	r.each(func(i int, n *Client) { errs[i] = n.Release(ctx, l) })
	return r.majorityOutcome("release "+l.Keys.Lock, l.Keys.Lock, errs)
}

// unlock deletes the key on every node where its holder is holder, with
// release's rule for the outcome.
func (r *redlock) unlock(ctx context.Context, key, holder string, kind UnlockKind) error {
	errs := make([]error, len(r.nodes))
	r.each(func(i int, n *Client) { errs[i] = n.Unlock(ctx, key, holder, kind) })
	// A live lease on any node is a run that may be working: report it as such
	// (the nodes that held no live lease may have deleted theirs, which a
	// majority-held lease survives).
	for _, err := range errs {
		var live *LiveLeaseError
		if errors.As(err, &live) {
			return live
		}
	}
	return r.majorityOutcome("unlock "+key, key, errs)
}

// complete writes the done-marker on every node (where the key holds the token
// or is absent) and deletes the key. It succeeds when a majority wrote the
// marker, so that any later majority sees it.
func (r *redlock) complete(ctx context.Context, l Lease, markerTTL time.Duration) (bool, error) {
	errs := make([]error, len(r.nodes))
	released := make([]bool, len(r.nodes))
	r.each(func(i int, n *Client) { released[i], errs[i] = n.Complete(ctx, l, markerTTL) })
	deleted := false
	for i, err := range errs {
		deleted = deleted || err == nil && released[i]
	}
	err := r.majorityOutcome("complete "+l.Keys.Lock, l.Keys.Lock, errs)
	return err == nil && deleted, err
}

// majorityOutcome folds per-node answers of a release or complete: success
// once a majority succeeded; "not held" once a majority answered and fewer
// succeeded; a store error when fewer than a majority answered.
func (r *redlock) majorityOutcome(op, key string, errs []error) error {
	var ok, answered int
	var notHeld *NotHeldError
	for _, err := range errs {
		var nh *NotHeldError
		switch {
		case err == nil:
			ok++
			answered++
		case errors.As(err, &nh):
			answered++
			if notHeld == nil || notHeld.Holder == "" {
				notHeld = nh
			}
		case !errors.Is(err, ErrStore):
			return err
		}
	}
	switch {
	case answered < r.quorum:
		return r.reachedError(op, answered, errs)
	case ok > 0 && (ok >= r.quorum || notHeld == nil || notHeld.Holder == ""):
		return nil
	case notHeld != nil:
		return notHeld
	}
	return &NotHeldError{Key: key}
}

// inspect reads every node: the holder a majority agrees on (else the first
// seen), the highest fence, and any done-marker.
func (r *redlock) inspect(ctx context.Context, keys Keys) (KeyState, error) {
	states := make([]KeyState, len(r.nodes))
	errs := make([]error, len(r.nodes))
	r.each(func(i int, n *Client) { states[i], errs[i] = n.Inspect(ctx, keys) })
	var st KeyState
	votes := map[string]int{}
	answered := 0
	for i, err := range errs {
		if err != nil {
			continue
		}
		answered++
		s := states[i]
		st.Fence = max(st.Fence, s.Fence)
		if st.Done == "" {
			st.Done = s.Done
		}
		if s.Holder != "" {
			votes[s.Holder]++
			if votes[s.Holder] >= r.quorum || st.Holder == "" {
				st.Holder, st.TTL = s.Holder, s.TTL
			}
		}
	}
	if answered < r.quorum {
		return KeyState{}, r.reachedError("inspect "+keys.Lock, answered, errs)
	}
	return st, nil
}

// storeInfo reports the least safe node that answered: one node that can lose
// a lease makes Strict fencing and done-markers depend on the others. Nodes
// that do not answer are left out while a majority does.
func (r *redlock) storeInfo(ctx context.Context) (StoreInfo, error) {
	infos := make([]StoreInfo, len(r.nodes))
	errs := make([]error, len(r.nodes))
	r.each(func(i int, n *Client) { infos[i], errs[i] = n.StoreInfo(ctx) })
	var out StoreInfo
	answered := 0
	for i, err := range errs {
		if err != nil {
			continue
		}
		in := infos[i]
		answered++
		if answered == 1 {
			out = in
			continue
		}
		if in.MaxMemoryPolicy != "noeviction" {
			out.MaxMemoryPolicy = in.MaxMemoryPolicy
		}
		out.AOF, out.RDB = worse(out.AOF, in.AOF), worse(out.RDB, in.RDB)
		out.Replicas = min(out.Replicas, in.Replicas)
	}
	if answered < r.quorum {
		return StoreInfo{}, r.reachedError("info", answered, errs)
	}
	return out, nil
}

// worse orders No below Unknown below Yes.
func worse(a, b Tristate) Tristate {
	rank := map[Tristate]int{No: 0, Unknown: 1, Yes: 2}
	if rank[b] < rank[a] {
		return b
	}
	return a
}

func (r *redlock) ping(ctx context.Context) error {
	errs := make([]error, len(r.nodes))
	r.each(func(i int, n *Client) { errs[i] = n.Ping(ctx) })
	answered := 0
	for _, err := range errs {
		if err == nil {
			answered++
		}
	}
	if answered < r.quorum {
		return r.reachedError("ping", answered, errs)
	}
	return nil
}

func (r *redlock) loadScripts(ctx context.Context) error {
	errs := make([]error, len(r.nodes))
	r.each(func(i int, n *Client) {
		if errs[i] = n.LoadScripts(ctx); errs[i] == nil {
			cctx, cancel := context.WithTimeout(ctx, n.timeout)
			defer cancel()
			if err := fenceRaiseScript.Load(cctx, n.rdb).Err(); err != nil {
				errs[i] = &StoreError{Op: "load scripts", Err: err}
			}
		}
	})
	answered := 0
	for _, err := range errs {
		if err == nil {
			answered++
		}
	}
	if answered < r.quorum {
		return r.reachedError("load scripts", answered, errs)
	}
	return nil
}

func (r *redlock) close() error {
	var errs []error
	for _, n := range r.nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}
