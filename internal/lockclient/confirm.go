package lockclient

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
)

// Confirmation is what Confirm read: whether the key holds the token whose
// SHA-256 the caller gave, and until when it cannot expire.
type Confirmation struct {
	// Held is true when the key's value hashes to the caller's token hash.
	Held bool
	// Holder is the holder part of the key's value (see HolderOf); empty when
	// the key is absent.
	Holder string
	// TTL is the key's remaining life as Redis reported it, for a held key
	// with an expiry; 0 otherwise (absent, another holder, or no expiry).
	TTL time.Duration
	// SentAt is the local time the read was sent. A held key cannot expire
	// before SentAt + TTL on the local monotonic clock (for Redlock, TTL is
	// already reduced by a clock-drift allowance).
	SentAt time.Time
}

// ValidUntil is the earliest local time the key could expire, as far as this
// read knows; the zero time when it gave no such bound.
func (c Confirmation) ValidUntil() time.Time {
	if !c.Held || c.TTL <= 0 {
		return time.Time{}
	}
	return c.SentAt.Add(c.TTL)
}

// Confirm reads the lease key and its remaining life in one atomic round trip
// (MULTI GET PTTL EXEC) and compares the value's SHA-256 with tokenSHA256, so a
// caller can check a lease without knowing its token. It writes nothing and
// needs only GET, PTTL, MULTI and EXEC on the key.
//
// Because GET and PTTL run together and Redis runs them after the request was
// sent, a held key with a TTL cannot expire before SentAt + TTL (clock rates
// aside). A key of another type is an ErrInvalid error; anything that kept
// Redis from answering is a *StoreError.
//
// For a Redlock store every node is read: the key is held when a majority
// holds the token, and TTL is the time until so many of those copies could
// expire that another holder could reach a majority, less the drift
// allowance. The key is not held (Held false) only when a majority answered
// and too few of all nodes could hold it; otherwise the answer is a
// *StoreError.
func (c *Client) Confirm(ctx context.Context, key string, tokenSHA256 [sha256.Size]byte) (Confirmation, error) {
	if err := ValidateKey(key); err != nil {
		return Confirmation{}, err
	}
	if c.redlock != nil {
		return c.redlock.confirm(ctx, c, key, tokenSHA256)
	}
	sent := c.clock.Now()
	v, err := c.readLease(ctx, key)
	if err != nil {
		return Confirmation{}, err
	}
	return v.confirmation(tokenSHA256, sent), nil
}

// leaseRead is the raw answer of one node.
type leaseRead struct {
	value  string
	exists bool
	pttl   time.Duration // negative: no expiry (-1) or absent (-2)
}

func (r leaseRead) held(sum [sha256.Size]byte) bool {
	got := sha256.Sum256([]byte(r.value))
	return r.exists && subtle.ConstantTimeCompare(got[:], sum[:]) == 1
}

func (r leaseRead) confirmation(sum [sha256.Size]byte, sent time.Time) Confirmation {
	cf := Confirmation{SentAt: sent}
	if !r.exists {
		return cf
	}
	cf.Holder = leasetoken.HolderOf(r.value)
	if cf.Held = r.held(sum); cf.Held && r.pttl > 0 {
		cf.TTL = r.pttl
	}
	return cf
}

func (c *Client) readLease(ctx context.Context, key string) (leaseRead, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		// A command refused while queued (NOPERM, WRONGTYPE) says more than
		// the EXECABORT that follows it.
		for _, cmdErr := range []error{get.Err(), pttl.Err()} {
			if cmdErr != nil && !errors.Is(cmdErr, redis.Nil) && !redis.HasErrorPrefix(cmdErr, "EXECABORT") {
				err = cmdErr
				break
			}
		}
		return leaseRead{}, c.callError("confirm", key, err)
	}
	if err := pttl.Err(); err != nil {
		return leaseRead{}, c.callError("confirm", key, err)
	}
	r := leaseRead{pttl: pttl.Val()}
	switch err := get.Err(); {
	case err == nil:
		r.value, r.exists = get.Val(), true
	case !errors.Is(err, redis.Nil):
		return leaseRead{}, c.callError("confirm", key, err)
	}
	return r, nil
}

// confirm reads every node at once. With k of N nodes holding the token,
// another holder reaches a majority once quorum-(N-k) of those k copies have
// expired (it can take the other N-k nodes at any time), so the bound is the
// (quorum-(N-k))-th shortest TTL among them. Nodes that do not answer count
// as nodes another holder may take.
func (r *redlock) confirm(ctx context.Context, c *Client, key string, sum [sha256.Size]byte) (Confirmation, error) {
	sent := c.clock.Now()
	reads := make([]leaseRead, len(r.nodes))
	errs := make([]error, len(r.nodes))
	r.each(func(i int, n *Client) { reads[i], errs[i] = n.readLease(ctx, key) })

	var ttls []time.Duration // TTLs of the copies that hold the token
	var mine string
	answered := 0
	votes := map[string]int{}
	var other string
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, ErrInvalid):
			// A value of another type: answered, and not ours.
			answered++
			continue
		default:
			continue
		}
		answered++
		rd := reads[i]
		switch {
		case rd.held(sum):
			mine = leasetoken.HolderOf(rd.value)
			// A copy without an expiry is not something the lease scripts
			// write; it gives no bound, so it counts as expiring now.
			ttls = append(ttls, max(rd.pttl, 0))
		case rd.exists:
			h := leasetoken.HolderOf(rd.value)
			if votes[h]++; other == "" || votes[h] > votes[other] {
				other = h
			}
		}
	}
	held, unanswered := len(ttls), len(r.nodes)-answered
	switch {
	case held >= r.quorum:
		slices.Sort(ttls)
		bound := ttls[r.quorum-(len(r.nodes)-held)-1]
		cf := Confirmation{Held: true, Holder: mine, SentAt: sent}
		if drift := clockDrift(bound); bound > drift {
			cf.TTL = bound - drift
		}
		return cf, nil
	case held+unanswered < r.quorum:
		return Confirmation{Holder: other, SentAt: sent}, nil
	case answered >= r.quorum:
		return Confirmation{}, &StoreError{Op: "confirm " + key, Err: fmt.Errorf(
			"the token is on %d of %d Redlock nodes and %d did not answer: a majority of %d can be neither confirmed nor ruled out",
			held, len(r.nodes), unanswered, r.quorum)}
	}
	return Confirmation{}, r.reachedError("confirm "+key, answered, errs)
}
