package lockclient

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
)

var (
	//go:embed lua/acquire.lua
	acquireSrc string
	//go:embed lua/renew.lua
	renewSrc string
	//go:embed lua/complete.lua
	completeSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/unlock.lua
	unlockSrc string

	acquireScript  = redis.NewScript(acquireSrc)
	renewScript    = redis.NewScript(renewSrc)
	completeScript = redis.NewScript(completeSrc)
	releaseScript  = redis.NewScript(releaseSrc)
	unlockScript   = redis.NewScript(unlockSrc)
)

// DefaultTimeout bounds every call when Options.Timeout is zero.
//
// Each call runs under a context deadline of its own. go-redis' read and write
// timeouts cannot replace it: they bound one socket operation, while a call may
// also wait for a pooled connection, dial, back off and retry, and fall back from
// EVALSHA to EVAL, each with a bound of its own.
const DefaultTimeout = 3 * time.Second

// Client talks to one Redis deployment (standalone, Sentinel or Cluster).
type Client struct {
	rdb     redis.UniversalClient
	timeout time.Duration
	clock   clock.PassiveClock
	// cluster is true for Redis Cluster, where every key of one call must share a slot.
	cluster bool
	// identity names the store without credentials, for status and logs.
	identity string
	// acks is the replica acknowledgement an acquisition waits for (replica_ack.go).
	acks replicaAck
	// redlock, when set, holds the independent masters of a Redlock store
	// (redlock.go); rdb is then its first node.
	redlock *redlock
	// writeGate, when set, is asked before every write other than a renewal
	// (acquire, complete, release, unlock, swap): its error refuses the call
	// before anything is sent.
	writeGate func() error
}

// ClientOption configures a Client made by New.
type ClientOption func(*Client)

// WithTimeout bounds every call; the default is DefaultTimeout.
func WithTimeout(d time.Duration) ClientOption {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithClock sets the clock used to stamp Lease.SentAt (tests).
func WithClock(clk clock.PassiveClock) ClientOption { return func(c *Client) { c.clock = clk } }

// WithWriteGate makes every write other than a renewal (Acquire, Complete,
// Release, Unlock, Swap) ask gate first, and fail with its error, sending
// nothing, when it refuses: a manager that is not known to lead writes nothing
// but its own renewals.
func WithWriteGate(gate func() error) ClientOption { return func(c *Client) { c.writeGate = gate } }

// SetWriteGate is WithWriteGate for a client made before its gate.
func (c *Client) SetWriteGate(gate func() error) { c.writeGate = gate }

// allowWrite asks the write gate, if any, about an operation on key.
func (c *Client) allowWrite(op, key string) error {
	if c.writeGate == nil {
		return nil
	}
	if err := c.writeGate(); err != nil {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	return nil
}

// WithIdentity sets the store identity reported by Identity.
func WithIdentity(id string) ClientOption { return func(c *Client) { c.identity = id } }

// New wraps a go-redis client. Prefer Dial, which also sets timeouts and TLS.
func New(rdb redis.UniversalClient, opts ...ClientOption) *Client {
	c := &Client{rdb: rdb, timeout: DefaultTimeout, clock: clock.RealClock{}}
	_, c.cluster = rdb.(*redis.ClusterClient)
	for _, o := range opts {
		o(c)
	}
	return c
}

// Identity names the store without credentials, e.g. "redis://10.0.0.5:6379/0".
func (c *Client) Identity() string { return c.identity }

// Timeout is the bound on every call.
func (c *Client) Timeout() time.Duration { return c.timeout }

// Redis returns the underlying go-redis client; for a Redlock store, the
// client of its first node.
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// Close closes the connections.
func (c *Client) Close() error {
	if c.redlock != nil {
		return c.redlock.close()
	}
	return c.rdb.Close()
}

// Ping checks that the store answers.
func (c *Client) Ping(ctx context.Context) error {
	if c.redlock != nil {
		return c.redlock.ping(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return &StoreError{Op: "ping", Err: err}
	}
	return nil
}

// LoadScripts loads the scripts into the store's script cache (every shard in
// Cluster mode), so the first calls need no EVAL fallback.
func (c *Client) LoadScripts(ctx context.Context) error {
	if c.redlock != nil {
		return c.redlock.loadScripts(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	for _, s := range []*redis.Script{acquireScript, renewScript, completeScript, releaseScript, unlockScript} {
		if err := s.Load(ctx, c.rdb).Err(); err != nil {
			return &StoreError{Op: "load scripts", Err: err}
		}
	}
	return nil
}

func (c *Client) checkSlots(keys ...string) error {
	if !c.cluster {
		return nil
	}
	return SameSlot(keys...)
}

// Acquire takes the lock for req.Token, or reports why not: *BusyError,
// *DoneError, *StoreError or an ErrInvalid error.
func (c *Client) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	if err := c.allowWrite("acquire", req.Keys.Lock); err != nil {
		return Lease{}, err
	}
	if c.redlock != nil {
		return c.redlock.acquire(ctx, c, req)
	}
	if err := req.validate(); err != nil {
		return Lease{}, err
	}
	sc := newScriptCall(acquireCall)
	defer sc.done()
	sc.key(req.Keys.Lock)
	var hasOccurrence any = "0" // an interface holding a constant: no allocation
	if req.Keys.Occurrence != "" {
		sc.key(req.Keys.Occurrence)
		hasOccurrence = "1"
	}
	if req.Policy != FenceNone {
		sc.key(req.Keys.Fence)
	}
	if err := c.checkSlots(sc.keys()...); err != nil {
		return Lease{}, err
	}
	if c.acks.min > 0 {
		return c.acquireAcked(ctx, req, sc.keys(), hasOccurrence.(string))
	}
	sc.str(req.Token)
	sc.num(req.TTL.Milliseconds())
	sc.num(req.Floor)
	sc.lit(policyArg(req.Policy))
	sc.lit(hasOccurrence)

	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	sent := c.clock.Now()
	res, err := sc.run(ctx, c.rdb)
	if err != nil {
		return Lease{}, c.callError("acquire", req.Keys.Lock, err)
	}
	return acquireResult(req, res, sent)
}

// policyArg is the acquire script's policy argument. Constants, so passing one to
// go-redis allocates nothing.
func policyArg(p FencePolicy) any {
	switch p {
	case FenceInject:
		return "inject"
	case FenceStrict:
		return "strict"
	default:
		return "none"
	}
}

// acquireResult interprets the acquire script's reply; a reply of any other shape
// is a *StoreError.
func acquireResult(req AcquireRequest, res []any, sent time.Time) (Lease, error) {
	kind := str(res, 0)
	switch {
	case kind == "wrongtype" && len(res) == 3 && isStr(res[1]) && isStr(res[2]):
		return Lease{}, &WrongTypeError{Key: str(res, 1), Type: str(res, 2)}
	case kind == "done" && len(res) == 2 && isStr(res[1]):
		return Lease{}, &DoneError{Key: req.Keys.Occurrence, By: str(res, 1)}
	case kind == "busy" && len(res) == 3 && isStr(res[1]) && isNum(res[2]):
		return Lease{}, &BusyError{Key: req.Keys.Lock, Holder: str(res, 1), TTL: time.Duration(num(res, 2)) * time.Millisecond}
	case kind == "ok" && len(res) == 4 && isNum(res[1]) && isNum(res[2]) && isNum(res[3]):
		keysCopy := req.Keys
		if req.Policy == FenceNone {
			keysCopy.Fence = ""
		}
		return Lease{
			Keys: keysCopy, Token: req.Token, TTL: req.TTL, SentAt: sent,
			Fence: num(res, 1), FenceRaised: num(res, 2) == 1, Reentered: num(res, 3) == 1,
		}, nil
	default:
		return Lease{}, unexpectedReply("acquire", req.Keys.Lock, res)
	}
}

// Renew extends the lease to its full TTL if the key still holds its token.
// It returns *NotHeldError (naming the current holder) or *StoreError.
func (c *Client) Renew(ctx context.Context, l Lease) error {
	if c.redlock != nil {
		return c.redlock.renew(ctx, l)
	}
	if err := validateLease(l); err != nil {
		return err
	}
	sc := newScriptCall(renewCall)
	defer sc.done()
	sc.key(l.Keys.Lock)
	sc.str(l.Token)
	sc.num(l.TTL.Milliseconds())
	sc.lit("0")
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := sc.run(ctx, c.rdb)
	if err != nil {
		return c.callError("renew", l.Keys.Lock, err)
	}
	return renewResult(l.Keys.Lock, res, false)
}

// renewResult interprets the renew script's reply. errReacquired is returned as nil
// unless the caller asked to see it.
func renewResult(key string, res []any, reportReacquire bool) error {
	switch {
	case isReply(res, 1, false):
		return nil
	case isReply(res, 2, false):
		if reportReacquire {
			return errReacquired
		}
		return nil
	case isReply(res, 0, true):
		return &NotHeldError{Key: key, Holder: str(res, 1)}
	default:
		return unexpectedReply("renew", key, res)
	}
}

// errReacquired tells the keeper that a FailOpen lease was absent and was taken again.
var errReacquired = errors.New("lease re-acquired after the key was lost")

// Complete writes the occurrence's done-marker (valid for markerTTL) and releases
// the lease, in one call. The marker is written if the key holds the lease's token
// or is absent; released reports whether the key was deleted. When another token
// holds the key nothing is written and the error is *NotHeldError. A lease without
// an occurrence key is only released.
func (c *Client) Complete(ctx context.Context, l Lease, markerTTL time.Duration) (bool, error) {
	if err := c.allowWrite("complete", l.Keys.Lock); err != nil {
		return false, err
	}
	if c.redlock != nil && l.Keys.Occurrence != "" {
		return c.redlock.complete(ctx, l, markerTTL)
	}
	if l.Keys.Occurrence == "" {
		err := c.Release(ctx, l)
		var nh *NotHeldError
		if errors.As(err, &nh) && nh.Holder == "" {
			return false, nil
		}
		return err == nil, err
	}
	if err := validateLease(l); err != nil {
		return false, err
	}
	if markerTTL < time.Millisecond {
		return false, invalidf("done-marker ttl %s is too short", markerTTL)
	}
	if err := c.checkSlots(l.Keys.Lock, l.Keys.Occurrence); err != nil {
		return false, err
	}
	if c.acks.min > 0 {
		return c.completeAcked(ctx, l, markerTTL)
	}
	sc := newScriptCall(completeCall)
	defer sc.done()
	sc.key(l.Keys.Lock)
	sc.key(l.Keys.Occurrence)
	sc.str(l.Token)
	sc.num(markerTTL.Milliseconds())
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := sc.run(ctx, c.rdb)
	if err != nil {
		return false, c.callError("complete", l.Keys.Lock, err)
	}
	return completeResult(l.Keys.Lock, res)
}

// completeResult interprets the complete script's reply: {1, released} or {0, holder}
// ({1, 2}, marked and kept, is read by completeAcked).
func completeResult(key string, res []any) (bool, error) {
	switch {
	case len(res) == 2 && res[0] == int64(1) && (res[1] == int64(0) || res[1] == int64(1) || res[1] == int64(2)):
		return res[1] == int64(1), nil
	case len(res) == 2 && res[0] == int64(0) && isStr(res[1]):
		return false, &NotHeldError{Key: key, Holder: str(res, 1)}
	default:
		return false, unexpectedReply("complete", key, res)
	}
}

// Release deletes the lease key if it holds the lease's token. An absent key is
// *NotHeldError with an empty Holder; callers that only want the key gone may
// treat that as success.
func (c *Client) Release(ctx context.Context, l Lease) error {
	if err := c.allowWrite("release", l.Keys.Lock); err != nil {
		return err
	}
	if c.redlock != nil {
		return c.redlock.release(ctx, l)
	}
	if err := validateLease(l); err != nil {
		return err
	}
	sc := newScriptCall(releaseCall)
	defer sc.done()
	sc.key(l.Keys.Lock)
	sc.str(l.Token)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := sc.run(ctx, c.rdb)
	if err != nil {
		return c.callError("release", l.Keys.Lock, err)
	}
	return releaseResult(l.Keys.Lock, res)
}

// releaseResult interprets the release script's reply: {1}, or {0} / {0, holder}.
func releaseResult(key string, res []any) error {
	switch {
	case isReply(res, 1, false):
		return nil
	case isReply(res, 0, true):
		return &NotHeldError{Key: key, Holder: str(res, 1)}
	default:
		return unexpectedReply("release", key, res)
	}
}

// UnlockKind says what kind of key Unlock deletes.
type UnlockKind string

const (
	// UnlockLock is a lock key: a GuardedJob lease with time left on it is never
	// deleted (*LiveLeaseError).
	UnlockLock UnlockKind = "lock"
	// UnlockDoneMarker is an occurrence's done-marker.
	UnlockDoneMarker UnlockKind = "marker"
)

// Unlock deletes key if its value's holder (HolderOf) is holder: a manual
// compare-and-delete by a person who saw the holder, never the token, of a stale
// lock or of an occurrence's done-marker. It returns *NotHeldError naming the
// current value when the key holds another holder's value, or with an empty
// Holder when the key is absent, and for a lock key *LiveLeaseError when its
// value is a GuardedJob lease with time to live; nothing is deleted then.
func (c *Client) Unlock(ctx context.Context, key, holder string, kind UnlockKind) error {
	if err := c.allowWrite("unlock", key); err != nil {
		return err
	}
	if c.redlock != nil {
		return c.redlock.unlock(ctx, key, holder, kind)
	}
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("unlock key: %w", err)
	}
	if holder == "" {
		return invalidf("unlock %s: the holder is empty", key)
	}
	sc := newScriptCall(unlockCall)
	defer sc.done()
	sc.key(key)
	sc.str(holder)
	sc.str(string(kind))
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := sc.run(ctx, c.rdb)
	if err != nil {
		return c.callError("unlock", key, err)
	}
	if len(res) == 3 && isReply(res[:1], 2, false) {
		ttl, _ := res[2].(int64)
		return &LiveLeaseError{Key: key, Holder: leasetoken.HolderOf(str(res, 1)), TTL: time.Duration(ttl) * time.Millisecond}
	}
	// Otherwise the same replies as release.
	return releaseResult(key, res)
}

// Swap sets key to value, to live for ttl, and returns the value it replaced
// ("" when the key was absent), in one command (SET ... GET). On a Redlock store
// it uses the first node. The manager's cluster identity heartbeat uses it.
func (c *Client) Swap(ctx context.Context, key, value string, ttl time.Duration) (string, error) {
	if err := c.allowWrite("swap", key); err != nil {
		return "", err
	}
	if c.redlock != nil {
		return c.redlock.nodes[0].Swap(ctx, key, value, ttl)
	}
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	prev, err := c.rdb.SetArgs(ctx, key, value, redis.SetArgs{Get: true, TTL: ttl}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", nil
	case err != nil:
		return "", c.callError("swap", key, err)
	}
	return prev, nil
}

// KeyState is what Inspect saw.
type KeyState struct {
	// Holder is the lock key's value; empty when free.
	Holder string
	// TTL is the lock key's remaining life; 0 when free.
	TTL time.Duration
	// Fence is the counter's current value; 0 when absent or not a number.
	Fence int64
	// Done is the occurrence marker's value; empty when absent.
	Done string
}

// Inspect reads the keys without changing them (one round trip).
func (c *Client) Inspect(ctx context.Context, keys Keys) (KeyState, error) {
	if c.redlock != nil {
		return c.redlock.inspect(ctx, keys)
	}
	if err := ValidateKey(keys.Lock); err != nil {
		return KeyState{}, fmt.Errorf("lock key: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	pipe := c.rdb.Pipeline()
	holder := pipe.Get(ctx, keys.Lock)
	pttl := pipe.PTTL(ctx, keys.Lock)
	var fence, done *redis.StringCmd
	if keys.Fence != "" {
		fence = pipe.Get(ctx, keys.Fence)
	}
	if keys.Occurrence != "" {
		done = pipe.Get(ctx, keys.Occurrence)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return KeyState{}, c.callError("inspect", keys.Lock, err)
	}
	var st KeyState
	st.Holder = holder.Val()
	if st.Holder != "" && pttl.Val() > 0 {
		st.TTL = pttl.Val()
	}
	if fence != nil {
		st.Fence, _ = strconv.ParseInt(fence.Val(), 10, 64)
	}
	if done != nil {
		st.Done = done.Val()
	}
	return st, nil
}

// IsPermissionDenied says whether the store refused a command for its ACL
// (NOPERM): the user the store's URL logs in with may not use that key or command.
func IsPermissionDenied(err error) bool {
	return redis.HasErrorPrefix(err, "NOPERM")
}

// callError classifies an error from Redis. A key of the wrong type is the caller's
// problem (someone else stored a hash at the lock key); everything else is a store
// error, never a verdict about the lease.
func (c *Client) callError(op, key string, err error) error {
	if redis.HasErrorPrefix(err, "WRONGTYPE") {
		return invalidf("%s %s: the key holds a value that is not a string (written by something other than a lock client?)", op, key)
	}
	if redis.HasErrorPrefix(err, "CROSSSLOT") {
		return invalidf("%s %s: %v; use a {hash tag} in lock.key so that all keys of a run share a slot", op, key, err)
	}
	return &StoreError{Op: fmt.Sprintf("%s %s", op, key), Err: err}
}

func isStr(v any) bool { _, ok := v.(string); return ok }

func isNum(v any) bool { _, ok := v.(int64); return ok }

// isReply reports whether res is {n}, or with holder also {n, string}.
func isReply(res []any, n int64, holder bool) bool {
	switch len(res) {
	case 1:
		return res[0] == n
	case 2:
		return holder && res[0] == n && isStr(res[1])
	}
	return false
}

func unexpectedReply(op, key string, res []any) error {
	return &StoreError{Op: op + " " + key, Err: fmt.Errorf("unexpected script reply %.200v", res)}
}

// str returns res[i] as a string, or "" when absent.
func str(res []any, i int) string {
	if i >= len(res) {
		return ""
	}
	s, _ := res[i].(string)
	return s
}

// num returns res[i] as an int64, or 0 when absent.
func num(res []any, i int) int64 {
	if i >= len(res) {
		return 0
	}
	n, _ := res[i].(int64)
	return n
}
