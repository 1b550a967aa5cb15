package lockclient

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrTooFewReplicas matches the store error of an acquisition that fewer
// replicas acknowledged than the store URL's minReplicaAcks asks for.
var ErrTooFewReplicas = errors.New("too few replicas acknowledged the lease")

// replicaAck is a store's replica acknowledgement setting (URL query
// minReplicaAcks and replicaAckTimeout). The zero value waits for nothing.
type replicaAck struct {
	min     int
	timeout time.Duration
}

const (
	// defaultReplicaAckTimeout bounds the wait when the URL names no timeout:
	// long enough for a replica on another zone's network, short enough that
	// an acquisition with a replica down fails well inside a start deadline.
	defaultReplicaAckTimeout = 500 * time.Millisecond
	maxReplicaAckTimeout     = 10 * time.Second
	maxReplicaAcks           = 16
)

// parseReplicaAck reads minReplicaAcks and replicaAckTimeout from a parsed
// store URL's query. Its errors never quote the values.
func parseReplicaAck(p parsedURL) (replicaAck, error) {
	var a replicaAck
	n, hasN := p.query["minReplicaAcks"]
	d, hasD := p.query["replicaAckTimeout"]
	if hasD && !hasN {
		return a, urlError("replicaAckTimeout needs minReplicaAcks")
	}
	if !hasN {
		return a, nil
	}
	v, err := strconv.Atoi(n[len(n)-1])
	if len(n) > 1 || err != nil || v < 1 || v > maxReplicaAcks {
		return a, urlError("minReplicaAcks must be given once, as a whole number from 1 to " + strconv.Itoa(maxReplicaAcks))
	}
	a.min, a.timeout = v, defaultReplicaAckTimeout
	if hasD {
		t, err := time.ParseDuration(d[len(d)-1])
		if len(d) > 1 || err != nil || t < time.Millisecond || t > maxReplicaAckTimeout {
			return a, urlError("replicaAckTimeout must be given once, as a duration from 1ms to " + maxReplicaAckTimeout.String() + ", e.g. 500ms")
		}
		a.timeout = t
	}
	return a, nil
}

// ReplicaAcks returns the number of replicas that must acknowledge an
// acquisition and how long the client waits for them; zero when off.
func (c *Client) ReplicaAcks() (int, time.Duration) { return c.acks.min, c.acks.timeout }

// withReplicaAck sets the store's replica acknowledgement (from Dial).
func withReplicaAck(a replicaAck) ClientOption { return func(c *Client) { c.acks = a } }

// acquireAcked runs the acquire script and WAIT in one pipeline on one
// connection: WAIT only counts replicas that have every write made on its own
// connection, so it must follow the script there. A lease that too few replicas
// acknowledged is released and reported as a *StoreError: a failover in that
// state could hand the key to a second holder, so the store is treated as
// unavailable for this acquisition.
func (c *Client) acquireAcked(ctx context.Context, req AcquireRequest, keys []string, hasOccurrence string) (Lease, error) {
	args := []any{req.Token, req.TTL.Milliseconds(), req.Floor, strings.ToLower(string(req.Policy)), hasOccurrence}
	ctx, cancel := context.WithTimeout(ctx, c.timeout+c.acks.timeout)
	defer cancel()
	node, err := c.nodeFor(ctx, req.Keys.Lock)
	if err != nil {
		return Lease{}, c.callError("acquire", req.Keys.Lock, err)
	}
	sent := c.clock.Now()
	pipe := node.Pipeline()
	// EVAL, not EVALSHA: a pipelined EVALSHA cannot fall back after a restart
	// or failover emptied the script cache, and acquisitions are rare enough
	// that sending the script body costs nothing that matters.
	acq := acquireScript.Eval(ctx, pipe, keys, args...)
	wait := pipe.Do(ctx, "WAIT", c.acks.min, c.acks.timeout.Milliseconds())
	_, _ = pipe.Exec(ctx) // per-command errors are read below
	res, err := acq.Slice()
	if err != nil {
		if c.cluster && redis.HasErrorPrefix(err, "MOVED") {
			// The slot moved: learn the new layout before the caller retries.
			c.rdb.(*redis.ClusterClient).ReloadState(ctx)
		}
		return Lease{}, c.callError("acquire", req.Keys.Lock, err)
	}
	lease, err := acquireResult(req, res, sent)
	if err != nil {
		return Lease{}, err
	}
	acked, waitErr := wait.Int64()
	if waitErr == nil && acked >= int64(c.acks.min) {
		return lease, nil
	}
	why := fmt.Errorf("%w: %d of %d within %s", ErrTooFewReplicas, acked, c.acks.min, c.acks.timeout)
	if waitErr != nil {
		why = fmt.Errorf("%w: WAIT failed: %w", ErrTooFewReplicas, waitErr)
	}
	// A fresh context: the wait may have used up the call's.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer rcancel()
	if err := c.Release(rctx, lease); err != nil && !errors.Is(err, ErrNotHeld) {
		why = fmt.Errorf("%w; releasing it failed too, it expires within %s: %w", why, req.TTL, err)
	} else {
		why = fmt.Errorf("%w; released it", why)
	}
	return Lease{}, &StoreError{Op: "acquire " + req.Keys.Lock, Err: why}
}

// completeAcked completes a lease on a store that asks for replica
// acknowledgements: the done-marker must be on as many replicas as an
// acquisition before the lease goes, or a failover right after could lose the
// marker while the key is free, and the occurrence would run again. So the
// marker is written with the lock kept (the complete script with "keep"), WAIT
// follows on the same connection, and only an acknowledged marker lets the
// lease be released. Too few acknowledgements are a *StoreError wrapping
// ErrTooFewReplicas; the lease is still held (and renewed by its keeper), and a
// later Complete writes the marker again and waits again.
func (c *Client) completeAcked(ctx context.Context, l Lease, markerTTL time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout+c.acks.timeout)
	defer cancel()
	node, err := c.nodeFor(ctx, l.Keys.Lock)
	if err != nil {
		return false, c.callError("complete", l.Keys.Lock, err)
	}
	pipe := node.Pipeline()
	// EVAL, not EVALSHA: a pipelined EVALSHA cannot fall back after a restart
	// or failover (as for acquireAcked).
	mark := completeScript.Eval(ctx, pipe, []string{l.Keys.Lock, l.Keys.Occurrence}, l.Token, markerTTL.Milliseconds(), "keep")
	wait := pipe.Do(ctx, "WAIT", c.acks.min, c.acks.timeout.Milliseconds())
	_, _ = pipe.Exec(ctx) // per-command errors are read below
	res, err := mark.Slice()
	if err != nil {
		return false, c.callError("complete", l.Keys.Lock, err)
	}
	if _, err := completeResult(l.Keys.Lock, res); err != nil {
		return false, err
	}
	if acked, werr := wait.Int64(); werr != nil || acked < int64(c.acks.min) {
		why := fmt.Errorf("%w: the done-marker reached %d of %d within %s; the lease is kept until it does", ErrTooFewReplicas, acked, c.acks.min, c.acks.timeout)
		if werr != nil {
			why = fmt.Errorf("%w: WAIT failed: %w; the lease is kept until the done-marker is acknowledged", ErrTooFewReplicas, werr)
		}
		return false, &StoreError{Op: "complete " + l.Keys.Lock, Err: why}
	}
	if res[1] != int64(2) {
		return false, nil // the lock was absent: marked, nothing to release
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer rcancel()
	if err := c.Release(rctx, l); err != nil {
		var nh *NotHeldError
		if errors.As(err, &nh) {
			return false, nil // expired or taken since the marker was written
		}
		return false, err
	}
	return true, nil
}

// nodeFor returns a client whose pipelines use one connection to the node
// holding key: the client itself, or in Cluster mode the master of key's slot
// (a Cluster pipeline sends a keyless WAIT to any node).
func (c *Client) nodeFor(ctx context.Context, key string) (redis.Cmdable, error) {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return c.rdb, nil
	}
	return cc.MasterForKey(ctx, key)
}

// replicaAckOf parses the replica acknowledgement setting of a store URL.
func replicaAckOf(rawURL string) (replicaAck, error) {
	p, err := splitURL(rawURL)
	if err != nil {
		return replicaAck{}, err
	}
	return parseReplicaAck(p)
}
