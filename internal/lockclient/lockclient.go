package lockclient

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
)

// MaxKeyLength is the longest key the client accepts, in bytes.
const MaxKeyLength = 512

// MinTTL is the shortest lease the client accepts. Shorter leases cannot be renewed
// reliably across a busy network and a Redis round trip.
const MinTTL = time.Second

// FencePolicy says whether and how Acquire issues a fence.
type FencePolicy string

const (
	// FenceNone issues no fence; the fence key is not touched.
	FenceNone FencePolicy = "None"
	// FenceInject increments the fence counter on every acquisition.
	FenceInject FencePolicy = "Inject"
	// FenceStrict increments the counter but never issues a fence at or below the
	// caller's floor or below one derived from the Redis clock, so fences keep
	// rising even after Redis lost its data.
	FenceStrict FencePolicy = "Strict"
)

// Keys are the Redis keys of one run.
type Keys struct {
	// Lock is the mutual-exclusion key. Required.
	Lock string
	// Occurrence is the done-marker of the scheduled occurrence; empty for none.
	Occurrence string
	// Fence is the fence counter; required unless the policy is FenceNone.
	Fence string
}

// AcquireRequest is the input of Client.Acquire.
type AcquireRequest struct {
	Keys  Keys
	Token string
	TTL   time.Duration
	// Floor is the highest fence handed out before for this work (Strict only).
	Floor  int64
	Policy FencePolicy
}

// Lease is a held lock.
type Lease struct {
	Keys  Keys
	Token string
	TTL   time.Duration
	// Fence is the number issued with this acquisition; 0 under FenceNone.
	Fence int64
	// FenceRaised is true when Strict fencing found the counter at or below the
	// floor (Redis lost it) and raised the fence above the floor.
	FenceRaised bool
	// Reentered is true when the key already held this token.
	Reentered bool
	// SentAt is the local time the acquiring call was sent; the lease is valid until
	// SentAt + TTL at the latest, measured on the local monotonic clock.
	SentAt time.Time
}

// ValidUntil is the latest local time the lease can still be held, as far as this
// acquisition knows.
func (l Lease) ValidUntil() time.Time { return l.SentAt.Add(l.TTL) }

// Holder returns the holder part of the lease's token.
func (l Lease) Holder() string { return leasetoken.HolderOf(l.Token) }

var (
	// ErrBusy matches *BusyError.
	ErrBusy = errors.New("lock is held by another holder")
	// ErrDone matches *DoneError.
	ErrDone = errors.New("occurrence already done")
	// ErrNotHeld matches *NotHeldError.
	ErrNotHeld = errors.New("lease is not held")
	// ErrStore matches *StoreError.
	ErrStore = errors.New("lock store unavailable")
	// ErrInvalid matches errors about the caller's input (keys, TTLs, URLs).
	ErrInvalid = errors.New("invalid lock request")
)

// BusyError says another token holds the lock.
type BusyError struct {
	Key string
	// Holder is the full value of the key, as another client wrote it.
	Holder string
	// TTL is the key's remaining time to live; negative when it has no expiry.
	TTL time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("lock %s is held by %s, expires in %s", e.Key, leasetoken.HolderOf(e.Holder), e.TTL.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// DoneError says the occurrence's done-marker exists.
type DoneError struct {
	Key string
	// By is the marker's value: the token of the run that completed it.
	By string
}

func (e *DoneError) Error() string {
	return fmt.Sprintf("occurrence %s already done by %s", e.Key, leasetoken.HolderOf(e.By))
}

// Is makes errors.Is(err, ErrDone) true.
func (e *DoneError) Is(target error) bool { return target == ErrDone }

// NotHeldError says the lease key no longer holds the caller's token.
// LiveLeaseError is returned by Unlock of a lock key whose value is a GuardedJob
// lease with time left: its run may still be working (in any cluster sharing the
// store), and the key expires by itself within TTL. Nothing was deleted.
type LiveLeaseError struct {
	Key string
	// Holder is the lease's holder (never its token).
	Holder string
	TTL    time.Duration
}

func (e *LiveLeaseError) Error() string {
	return fmt.Sprintf("lock %s holds the live lease of %s, which expires by itself in %s", e.Key, e.Holder, e.TTL.Round(time.Second))
}

type NotHeldError struct {
	Key string
	// Holder is the key's current value; empty when the key is absent.
	Holder string
}

func (e *NotHeldError) Error() string {
	if e.Holder == "" {
		return fmt.Sprintf("lease %s is not held: the key is gone", e.Key)
	}
	return fmt.Sprintf("lease %s is not held: it is held by %s", e.Key, leasetoken.HolderOf(e.Holder))
}

// Is makes errors.Is(err, ErrNotHeld) true.
func (e *NotHeldError) Is(target error) bool { return target == ErrNotHeld }

// StoreError wraps anything that kept Redis from giving an answer: a refused or
// timed-out connection, a failover in progress, a missing script, a permission
// error. It never means the lease was lost.
type StoreError struct {
	Op  string
	Err error
}

func (e *StoreError) Error() string { return fmt.Sprintf("%s: %s: %v", e.Op, ErrStore, e.Err) }

// Unwrap returns the underlying error.
func (e *StoreError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrStore) true.
func (e *StoreError) Is(target error) bool { return target == ErrStore }

// InvalidError describes bad input; errors.Is(err, ErrInvalid) is true.
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// WrongTypeError says a lock, done-marker or fence key holds a value of another
// type (a hash, a list, a counter that is not a number): written by something
// other than a lock client. Nothing was written. errors.Is(err, ErrInvalid) is
// true.
type WrongTypeError struct {
	Key string
	// Type is the Redis type found, or "string" for a fence that is not a number.
	Type string
}

func (e *WrongTypeError) Error() string {
	if e.Type == "string" {
		return fmt.Sprintf("key %s holds a value that is not a number; a fence counter must be an integer", e.Key)
	}
	return fmt.Sprintf("key %s holds a %s, not a string (written by something other than a lock client?); delete or rename it", e.Key, e.Type)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *WrongTypeError) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, args ...any) error {
	return &InvalidError{Msg: fmt.Sprintf(format, args...)}
}

// ValidateKey checks the rules every rendered key must meet.
func ValidateKey(key string) error {
	if key == "" {
		return invalidf("key is empty")
	}
	if len(key) > MaxKeyLength {
		return invalidf("key is %d bytes long, more than the %d allowed", len(key), MaxKeyLength)
	}
	for i, r := range key {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar {
			return invalidf("key %q has a whitespace, control or invalid character at byte %d", key, i)
		}
	}
	return nil
}

func (r AcquireRequest) validate() error {
	if err := ValidateKey(r.Keys.Lock); err != nil {
		return fmt.Errorf("lock key: %w", err)
	}
	if r.Keys.Occurrence != "" {
		if err := ValidateKey(r.Keys.Occurrence); err != nil {
			return fmt.Errorf("occurrence key: %w", err)
		}
	}
	switch r.Policy {
	case FenceNone:
	case FenceInject, FenceStrict:
		if err := ValidateKey(r.Keys.Fence); err != nil {
			return fmt.Errorf("fence key: %w", err)
		}
	default:
		return invalidf("unknown fence policy %q", r.Policy)
	}
	if r.Keys.Occurrence != "" && r.Keys.Occurrence == r.Keys.Lock || r.Keys.Fence != "" && (r.Keys.Fence == r.Keys.Lock || r.Keys.Fence == r.Keys.Occurrence) {
		return invalidf("lock, occurrence and fence keys must differ")
	}
	if r.Floor < 0 {
		return invalidf("fence floor %d is negative", r.Floor)
	}
	if err := validateToken(r.Token); err != nil {
		return err
	}
	return validateTTL(r.TTL)
}

func validateTTL(ttl time.Duration) error {
	if ttl < MinTTL {
		return invalidf("lease ttl %s is shorter than %s", ttl, MinTTL)
	}
	return nil
}

func validateToken(token string) error {
	if token == "" {
		return invalidf("token is empty")
	}
	return nil
}

func validateLease(l Lease) error {
	if err := ValidateKey(l.Keys.Lock); err != nil {
		return fmt.Errorf("lock key: %w", err)
	}
	if err := validateToken(l.Token); err != nil {
		return err
	}
	return validateTTL(l.TTL)
}

// Locker is what the controller needs from a lease client; *Client implements it.
type Locker interface {
	Acquire(ctx context.Context, req AcquireRequest) (Lease, error)
	Renew(ctx context.Context, l Lease) error
	Complete(ctx context.Context, l Lease, markerTTL time.Duration) (released bool, err error)
	Release(ctx context.Context, l Lease) error
	Inspect(ctx context.Context, keys Keys) (KeyState, error)
	StoreInfo(ctx context.Context) (StoreInfo, error)
}

var _ Locker = (*Client)(nil)
