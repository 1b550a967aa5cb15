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
