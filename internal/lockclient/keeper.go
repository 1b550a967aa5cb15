package lockclient

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"
)

// TrackRequest asks the Keeper to keep a lease alive.
type TrackRequest struct {
	Lease Lease
	// Client is the store the lease lives in; the Keeper's default when nil.
	Client *Client
	// Owner is opaque to the Keeper and comes back in reports (for example the
	// namespace/name of the object that owns the run).
	Owner string
	// RenewInterval is how often the lease is extended; TTL/3 when zero.
	RenewInterval time.Duration
	// SelfFence turns on the self-fence deadline: when no renewal has succeeded for
	// TTL - StopBudget (counted from the last successful renewal's send time), the
	// Keeper reports DeadlineReached so the caller can stop the work before the
	// lease could expire. StopBudget covers the Pods' grace period, the time to
	// issue the deletes and a margin.
	SelfFence  bool
	StopBudget time.Duration
	// MaxHoldUntil is when the run must end whatever happens; zero for never.
	MaxHoldUntil time.Time
	// ReacquireIfAbsent takes the key again, with the same token, when a renewal
	// finds it absent (Redis restarted empty). A different holder is still a loss.
	ReacquireIfAbsent bool
	// LastRenewed is the latest moment from which the lease is provably valid for
	// its TTL, by the Keeper's clock: the send time of an acquisition or renewal
	// this process saw succeed, or, for a lease resumed after a restart or a leader
	// change, the run's recorded acquisition time less a clock-skew allowance.
	// Never an assumed time. Lease.SentAt is used when it is zero. With neither
	// (no evidence at all) the self-fence deadline has already passed: only a
	// renewal that succeeds at once keeps the lease.
	LastRenewed time.Time
	// MaxPodLife is how long after the manager's last contact with the API server
	// a Pod of the run may still be running (maxHold + Pod grace + stop margin: the
	// kubelet counts activeDeadlineSeconds from the Pod's start). ExtendMaxHold
	// uses it; zero leaves MaxHoldUntil as it is.
	MaxPodLife time.Duration
}

// LeaseState is the Keeper's view of a tracked lease.
type LeaseState string

// Lease states.
const (
	// StateHeld: the last renewal succeeded.
	StateHeld LeaseState = "Held"
	// StateFailing: the store did not answer the last renewal; the lease may still
	// be held.
	StateFailing LeaseState = "Failing"
	// StateLost: Redis said another token holds the key, or nobody does. Final.
	StateLost LeaseState = "Lost"
)

// LeaseStatus is a copy of the Keeper's state for one lease.
type LeaseStatus struct {
	Token string
	Owner string
	Keys  Keys
	Fence int64
	State LeaseState
	// Holder is the key's value when the lease was lost; empty when the key was gone.
	Holder string
	// LostAt is when the Keeper learnt that the lease was lost (State Lost), by its
	// clock.
	LostAt time.Time
	// LastRenewed is the send time of the last successful renewal (or acquisition),
	// or the evidence the lease was resumed with.
	LastRenewed time.Time
	// Confirmed is true once this process saw an acquisition or a renewal of the
	// lease succeed; a resumed lease is unconfirmed until its first renewal answers.
	Confirmed bool
	// ValidUntil is LastRenewed + TTL: the lease cannot be ours after it unless a
	// renewal succeeds.
	ValidUntil time.Time
	// ValidFor is ValidUntil less the Keeper's clock when the status was read.
	ValidFor time.Duration
	// Deadline is the self-fence deadline; zero when self-fencing is off.
	Deadline        time.Time
	DeadlineReached bool
	// DeadlineReachedAt is when DeadlineReached was reported, by the Keeper's
	// clock: the deadline itself, or earlier when many leases were at risk at
	// once (WithStopRate).
	DeadlineReachedAt time.Time
	MaxHoldReached    bool
	// Failures counts consecutive renewals the store did not answer.
	Failures  int
	LastError error
}

// ReportKind says what happened to a lease.
type ReportKind string

// Report kinds.
const (
	// ReportLost: Redis said the lease is not ours (authoritative).
	ReportLost ReportKind = "Lost"
	// ReportDeadlineReached: renewals kept failing until the self-fence deadline.
	ReportDeadlineReached ReportKind = "DeadlineReached"
	// ReportMaxHoldReached: the run reached MaxHoldUntil.
	ReportMaxHoldReached ReportKind = "MaxHoldReached"
	// ReportStoreFailing: a renewal failed for a lease that was renewing fine.
	ReportStoreFailing ReportKind = "StoreFailing"
	// ReportRecovered: a renewal succeeded again after failures.
	ReportRecovered ReportKind = "Recovered"
	// ReportReacquired: the key was absent and was taken again (ReacquireIfAbsent).
	ReportReacquired ReportKind = "Reacquired"
)

// Report tells the Keeper's consumer that a lease changed. The details stay in the
// Keeper: read them with Get.
type Report struct {
	Token string
	Owner string
	Kind  ReportKind
}

type entry struct {
	req      TrackRequest
	client   *Client
	interval time.Duration

	state         LeaseState
	holder        string
	lostAt        time.Time
	inflightSince time.Time
	lastRenewed   time.Time
	nextRenew     time.Time
	inflight      bool
	confirmed     bool
	// settled is closed when the renewal in flight has been applied.
	settled         chan struct{}
	deadlineReached bool
	// deadlineReachedAt is when the deadline was reported: earlier than the
	// deadline itself when many leases were at risk at once (WithStopRate).
	deadlineReachedAt time.Time
	maxHoldReached    bool
	failures          int
	lastErr           error
}

func (e *entry) startInflight(now time.Time) {
	e.inflight, e.inflightSince = true, now
	e.settled = make(chan struct{})
}

func (e *entry) deadline() time.Time {
	if !e.req.SelfFence {
		return time.Time{}
	}
	return e.lastRenewed.Add(e.req.Lease.TTL - e.req.StopBudget)
}

func (e *entry) status() LeaseStatus {
	return LeaseStatus{
		Token: e.req.Lease.Token, Owner: e.req.Owner, Keys: e.req.Lease.Keys, Fence: e.req.Lease.Fence,
		State: e.state, Holder: e.holder, LostAt: e.lostAt, LastRenewed: e.lastRenewed, Confirmed: e.confirmed,
		ValidUntil: e.lastRenewed.Add(e.req.Lease.TTL), Deadline: e.deadline(),
		DeadlineReached: e.deadlineReached, DeadlineReachedAt: e.deadlineReachedAt, MaxHoldReached: e.maxHoldReached,
		Failures: e.failures, LastError: e.lastErr,
	}
}

// Renewal batching: a renewal may go out up to renewCoalesce early to join a
// batch that is being sent anyway; one pipeline carries at most renewBatchSize
// renewals; a renewal the store did not answer is retried after renewRetry (never
// later than the lease's renew interval).
const (
	renewCoalesce  = 25 * time.Millisecond
	renewBatchSize = 1000
	renewRetry     = time.Second
)

// resumeAnswerAllowance is how long an unconfirmed (resumed) lease whose
// self-fence deadline has already passed waits for its first renewal to answer
// before it is reported: long enough for a healthy store, much shorter than the
// call timeout, which would eat into the stop margin. Confirmed leases get no
// allowance: the lease-timing rule (ttl - stop budget > renew interval + call
// timeout) makes every regular renewal answer or time out before the deadline.
const resumeAnswerAllowance = 500 * time.Millisecond

// pauseThreshold is how much later than planned the run loop must wake to take
// it for a pause of the process.
const pauseThreshold = time.Second

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Keeper renews tracked leases on its own goroutine and clock, so that nothing the
// caller does (a slow API server, a full work queue) can delay a renewal.
type Keeper struct {
	client *Client
	clock  clock.WithTicker

	mu      sync.Mutex
	leases  map[string]*entry
	pending []Report
	stats   KeeperStats
	// onRoundTrip, when set, is told how long each renewal pipeline took.
	onRoundTrip func(time.Duration)
	// stopRate is how many runs per second the caller can be counted on to stop
	// when many leases are at risk at once; zero for no limit.
	stopRate float64
	// planned is when the run loop looks again (the earliest renewal, deadline
	// or maxHold it saw); an answered renewal wakes it only if it moves the
	// lease's next renewal before that.
	planned time.Time
	// wokeAt is set when the run loop woke much later than it planned: it was
	// not running (the process was paused or starved). What this process knows
	// of a lease from before then is as old as the pause, and another replica (a
	// new leader) may have renewed the same token meanwhile: every lease whose
	// evidence predates the wake is renewed again at once, and its self-fence
	// deadline waits for that renewal's answer until resumeAnswerAllowance after
	// the wake (not after a send that was in flight across the pause).
	wokeAt time.Time
	// mayReacquire, when set, says whether renewals may take back a key they
	// find absent (ReacquireIfAbsent) at the moment they are sent: a manager
	// that is not known to lead never writes a key back.
	mayReacquire func() bool
	// onPause, when set, is told at once of every pause the run loop sees.
	onPause func(at time.Time)

	wake chan struct{}
	// waking is set by every poke until the run loop has planned after it
	// and waits on its timer again: between taking the poke from wake and
	// setting that timer, the wake-up would be counted nowhere else.
	waking atomic.Bool
	queued chan struct{}
	out    chan Report
	wg     sync.WaitGroup
}

// KeeperStats counts the Keeper's work since it was made (for metrics).
type KeeperStats struct {
	// Renewals counts renewals by outcome: ok, lost, store_error.
	RenewalsOK, RenewalsLost, RenewalsFailed uint64
	// Pipelines counts renewal round trips.
	Pipelines uint64
}

// Stats returns the Keeper's counters.
func (k *Keeper) Stats() KeeperStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stats
}

// OnRoundTrip sets a function told the duration of every renewal round trip
// (for metrics). It is called with the Keeper's lock held: it must be quick and
// must not call the Keeper.
func (k *Keeper) OnRoundTrip(f func(time.Duration)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.onRoundTrip = f
}

// KeeperOption configures a Keeper.
type KeeperOption func(*Keeper)

// WithKeeperClock sets the clock that schedules renewals and deadlines (tests).
func WithKeeperClock(c clock.WithTicker) KeeperOption { return func(k *Keeper) { k.clock = c } }

// WithReacquireGate makes renewals take back a key they find absent
// (TrackRequest.ReacquireIfAbsent) only while allowed() says so, asked when
// each renewal is sent: a manager that is not known to lead never writes a key
// back (a new leader may have released it).
func WithReacquireGate(allowed func() bool) KeeperOption {
	return func(k *Keeper) { k.mayReacquire = allowed }
}

// WithPauseHook tells f of every pause of the process the Keeper sees (its run
// loop woke much later than it planned), with the time it woke.
func WithPauseHook(f func(at time.Time)) KeeperOption { return func(k *Keeper) { k.onPause = f } }

// WithStopRate tells the Keeper how many runs per second its caller can stop
// (delete their Jobs and Pods) when many leases are at risk at once. With many
// leases whose renewals fail, their self-fence deadlines are reported early
// enough that, stopped one after another at that rate, in deadline order, each
// is stopped by its own deadline. Zero (the default) assumes any number of runs
// can be stopped at once.
func WithStopRate(perSecond float64) KeeperOption {
	return func(k *Keeper) { k.stopRate = max(perSecond, 0) }
}

// NewKeeper returns a Keeper whose leases live in client unless a TrackRequest
// names another. Call Run to start it.
func NewKeeper(client *Client, opts ...KeeperOption) *Keeper {
	k := &Keeper{
		client: client,
		clock:  clock.RealClock{},
		leases: map[string]*entry{},
		wake:   make(chan struct{}, 1),
		queued: make(chan struct{}, 1),
		out:    make(chan Report, 64),
	}
	for _, o := range opts {
		o(k)
	}
	return k
}

// Reports delivers a Report for every change worth acting on. The Keeper never
// blocks on it: reports wait in an internal queue, and several reports of one kind
// for one lease are delivered once.
func (k *Keeper) Reports() <-chan Report { return k.out }

// Track starts keeping a lease alive. Tracking a token that is already tracked
// changes nothing, so callers may ensure tracking on every pass.
func (k *Keeper) Track(req TrackRequest) error {
	if err := validateLease(req.Lease); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.trackLocked(req)
	k.poke()
	return nil
}

func (k *Keeper) trackLocked(req TrackRequest) *entry {
	if e, ok := k.leases[req.Lease.Token]; ok {
		return e
	}
	e := &entry{req: req, client: req.Client, interval: req.RenewInterval, state: StateHeld}
	if e.client == nil {
		e.client = k.client
	}
	if e.interval <= 0 || e.interval >= req.Lease.TTL {
		e.interval = req.Lease.TTL / 3
	}
	e.lastRenewed = req.LastRenewed
	if !req.Lease.SentAt.IsZero() {
		// Acquired by this process: the acquisition is confirmed evidence.
		e.confirmed = true
		e.lastRenewed = latest(e.lastRenewed, req.Lease.SentAt)
		e.nextRenew = e.lastRenewed.Add(e.interval)
	} else {
		// Resumed: renew at once; until that answers, only the evidence counts.
		e.nextRenew = k.clock.Now()
	}
	k.leases[req.Lease.Token] = e
	return e
}

// Untrack stops renewing a lease. It does not release it.
func (k *Keeper) Untrack(token string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.leases, token)
	kept := k.pending[:0]
	for _, r := range k.pending {
		if r.Token != token {
			kept = append(kept, r)
		}
	}
	k.pending = kept
}

// Quiesce stops re-acquiring a lease (ReacquireIfAbsent) and waits until no
// renewal of it is in flight. Call it before releasing or completing a lease that
// re-acquires: a renewal sent before the release could otherwise take the key
// again right after it was deleted. Renewals go on, compare-token only.
func (k *Keeper) Quiesce(ctx context.Context, token string) error {
	k.mu.Lock()
	e, ok := k.leases[token]
	if !ok {
		k.mu.Unlock()
		return nil
	}
	e.req.ReacquireIfAbsent = false
	settled := e.settled
	inflight := e.inflight
	k.mu.Unlock()
	if !inflight {
		return nil
	}
	select {
	case <-settled:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StopReacquiring turns re-acquiring (ReacquireIfAbsent) off for every tracked
// lease and waits until no renewal sent with it on is in flight: from then on a
// key found absent is a lost lease, never taken again. A manager that lost its
// leadership calls it before it goes on renewing alone: the new leader may
// release a lease that a re-acquiring renewal would otherwise write back.
func (k *Keeper) StopReacquiring(ctx context.Context) error {
	k.mu.Lock()
	var wait []chan struct{}
	for _, e := range k.leases {
		e.req.ReacquireIfAbsent = false
		if e.inflight {
			wait = append(wait, e.settled)
		}
	}
	k.mu.Unlock()
	for _, settled := range wait {
		select {
		case <-settled:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// ExtendMaxHold moves the maxHold bound of every lease that has a MaxPodLife to
// at least lastContact + MaxPodLife: a manager cut off from the API server since
// lastContact cannot see Pods started until then, and the kubelet lets each run
// for maxHold from its own start. A lease already reported at maxHold is renewed
// again until the new bound.
func (k *Keeper) ExtendMaxHold(lastContact time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.leases {
		if e.req.MaxPodLife <= 0 {
			continue
		}
		until := lastContact.Add(e.req.MaxPodLife)
		if until.After(e.req.MaxHoldUntil) {
			e.req.MaxHoldUntil = until
			e.maxHoldReached = false
		}
	}
	k.poke()
}

// NotePause tells the Keeper of a pause of the process that ended at at, seen by
// someone else (the manager's watchdog): the Keeper itself sees one only when a
// timer of its own fires late. Every lease whose evidence predates it is
// renewed again at once, and a key taken back by a renewal sent before it is
// lost (see wokeAt).
func (k *Keeper) NotePause(at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if at.After(k.wokeAt) {
		k.wokeAt = at
		k.poke()
	}
}

// Get returns the state of one tracked lease.
func (k *Keeper) Get(token string) (LeaseStatus, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.leases[token]
	if !ok {
		return LeaseStatus{}, false
	}
	st := e.status()
	st.ValidFor = st.ValidUntil.Sub(k.clock.Now())
	return st, true
}

// Owned returns the state of the tracked lease whose TrackRequest.Owner is
// owner (the first found when several share it).
func (k *Keeper) Owned(owner string) (LeaseStatus, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.leases {
		if e.req.Owner == owner {
			st := e.status()
			st.ValidFor = st.ValidUntil.Sub(k.clock.Now())
			return st, true
		}
	}
	return LeaseStatus{}, false
}

// Uses reports whether any tracked lease lives in c.
func (k *Keeper) Uses(c *Client) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.leases {
		if e.client == c {
			return true
		}
	}
	return false
}

// InFlight returns the number of renewals sent and not yet answered.
func (k *Keeper) InFlight() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.inFlightLocked()
}

func (k *Keeper) inFlightLocked() int {
	n := 0
	for _, e := range k.leases {
		if e.inflight {
			n++
		}
	}
	return n
}

// Settled says whether no renewal is in flight and the run loop has planned
// after every wake-up and waits on its timer: until that timer fires, the keeper
// does nothing (a test with a fake clock steps it only then).
func (k *Keeper) Settled() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.wake) == 0 && !k.waking.Load() && k.inFlightLocked() == 0
}

// Snapshot returns the state of every tracked lease, ordered by token.
func (k *Keeper) Snapshot() []LeaseStatus {
	k.mu.Lock()
	out := make([]LeaseStatus, 0, len(k.leases))
	for _, e := range k.leases {
		out = append(out, e.status())
	}
	k.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Token < out[j].Token })
	return out
}

// ResumeAll tracks every lease and renews them at once, one pipeline per store,
// before returning: a manager that takes over runs calls it before it does
// anything else. The result maps each token to its renewal's outcome (nil,
// *NotHeldError, *StoreError); the outcomes are also applied to the tracked state
// and reported, as for any renewal.
func (k *Keeper) ResumeAll(ctx context.Context, reqs []TrackRequest) map[string]error {
	k.mu.Lock()
	batches := map[*Client][]*entry{}
	for _, r := range reqs {
		if err := validateLease(r.Lease); err != nil {
			continue
		}
		e := k.trackLocked(r)
		if e.inflight || e.state == StateLost {
			continue
		}
		e.startInflight(k.clock.Now())
		batches[e.client] = append(batches[e.client], e)
	}
	k.mu.Unlock()
	// The run loop judges deadlines while these renewals are in flight: a lease
	// whose evidence is already too old is reported without waiting for them.
	k.poke()

	results := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c, es := range batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs := k.renewBatch(ctx, c, es)
			mu.Lock()
			for i, e := range es {
				results[e.req.Lease.Token] = errs[i]
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, r := range reqs {
		if _, ok := results[r.Lease.Token]; !ok {
			if err := validateLease(r.Lease); err != nil {
				results[r.Lease.Token] = err
			}
		}
	}
	k.poke()
	return results
}

// Run renews leases until ctx ends. Leases stay tracked afterwards.
func (k *Keeper) Run(ctx context.Context) error {
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		k.forward(ctx)
	}()
	defer k.wg.Wait()
	for {
		now := k.clock.Now()
		next := k.dispatch(ctx, now)
		t := k.clock.NewTimer(next.Sub(now))
		// Planned and waiting: a poke from here on is in wake, which Settled
		// counts too.
		k.waking.Store(false)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		case <-k.wake:
			t.Stop()
		}
	}
}

// dispatch checks deadlines, starts a renewal batch for every lease that is due,
// and returns when it needs to look again.
func (k *Keeper) dispatch(ctx context.Context, now time.Time) (next time.Time) {
	k.mu.Lock()
	paused := !k.planned.IsZero() && now.Sub(k.planned) > pauseThreshold
	if paused {
		k.wokeAt = now
	}
	next = now.Add(time.Minute)
	earliest := func(t time.Time) {
		if t.Before(next) {
			next = t
		}
	}
	batches := map[*Client][]*entry{}
	var atRisk []riskyLease
	for _, e := range k.leases {
		if e.state == StateLost {
			continue
		}
		// Renewals first: a renewal due at the deadline itself goes out before the
		// deadline is judged. A lease whose evidence predates a pause is renewed
		// again at once.
		stale := e.lastRenewed.Before(k.wokeAt)
		if !e.inflight {
			if stale && e.inflightSince.Before(k.wokeAt) || !e.nextRenew.After(now.Add(renewCoalesce)) {
				e.startInflight(now)
				batches[e.client] = append(batches[e.client], e)
			} else {
				earliest(e.nextRenew)
			}
		}
		if e.req.SelfFence && !e.deadlineReached {
			d := e.deadline()
			if e.inflight && !e.confirmed {
				// The first renewal of a resumed lease gets a moment to answer
				// before stale evidence stops a healthy run.
				d = latest(d, e.inflightSince.Add(resumeAnswerAllowance))
			}
			if stale {
				// So does the first renewal sent after a pause of this
				// process, counted from the wake: a renewal sent before the
				// pause has had its allowance spent by the pause.
				d = latest(d, k.wokeAt.Add(resumeAnswerAllowance))
			}
			switch {
			case !now.Before(d):
				k.reachDeadlineLocked(e, now)
			case k.stopRate > 0 && e.atRisk(now):
				atRisk = append(atRisk, riskyLease{e, d})
			default:
				earliest(d)
			}
		}
		if !e.req.MaxHoldUntil.IsZero() && !e.maxHoldReached {
			if !now.Before(e.req.MaxHoldUntil) {
				e.maxHoldReached = true
				k.reportLocked(e, ReportMaxHoldReached)
			} else {
				earliest(e.req.MaxHoldUntil)
			}
		}
	}
	k.stopAheadLocked(now, atRisk, earliest)
	k.planned = next
	k.mu.Unlock()
	if paused && k.onPause != nil {
		k.onPause(now) // before this round's renewals are sent: re-acquiring stops now
	}
	for c, es := range batches {
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			k.renewBatch(ctx, c, es)
		}()
	}
	return next
}

// riskyLease is a lease whose renewals are failing, with its self-fence deadline.
type riskyLease struct {
	e        *entry
	deadline time.Time
}

// atRisk says whether a lease may not be renewed before its deadline: its last
// renewal failed, or one has been in flight longer than a healthy store takes.
func (e *entry) atRisk(now time.Time) bool {
	return e.state == StateFailing || e.inflight && now.Sub(e.inflightSince) > renewRetry
}

func (k *Keeper) reachDeadlineLocked(e *entry, now time.Time) {
	e.deadlineReached, e.deadlineReachedAt = true, now
	k.reportLocked(e, ReportDeadlineReached)
}

// stopAheadLocked reports leases at risk early enough that their caller,
// stopping stopRate runs a second in deadline order, stops each by its own
// deadline: walking back from the latest deadline, each lease is reported no
// later than its deadline and at least one stop's time before the next one is.
// A single lease at risk is reported at its deadline, as without a stop rate.
func (k *Keeper) stopAheadLocked(now time.Time, leases []riskyLease, earliest func(time.Time)) {
	if len(leases) == 0 {
		return
	}
	sort.Slice(leases, func(i, j int) bool { return leases[i].deadline.Before(leases[j].deadline) })
	step := time.Duration(float64(time.Second) / k.stopRate)
	var report time.Time
	for i := len(leases) - 1; i >= 0; i-- {
		l := leases[i]
		if i == len(leases)-1 || l.deadline.Before(report.Add(-step)) {
			report = l.deadline
		} else {
			report = report.Add(-step)
		}
		if !now.Before(report) {
			k.reachDeadlineLocked(l.e, now)
		} else {
			earliest(report)
		}
	}
}

// renewBatch renews es in pipelines of at most renewBatchSize and applies the outcomes.
func (k *Keeper) renewBatch(ctx context.Context, c *Client, es []*entry) []error {
	errs := make([]error, 0, len(es))
	for start := 0; start < len(es); start += renewBatchSize {
		chunk := es[start:min(start+renewBatchSize, len(es))]
		items := make([]renewItem, len(chunk))
		k.mu.Lock() // Quiesce may turn re-acquiring off meanwhile
		reacquire := k.mayReacquire == nil || k.mayReacquire()
		for i, e := range chunk {
			items[i] = renewItem{lease: e.req.Lease, reacquire: e.req.ReacquireIfAbsent && reacquire}
		}
		k.mu.Unlock()
		sent := k.clock.Now()
		res := c.renewMany(ctx, items)
		k.mu.Lock()
		k.stats.Pipelines++
		now := k.clock.Now()
		if k.onRoundTrip != nil {
			k.onRoundTrip(now.Sub(sent))
		}
		replan := false
		for i, e := range chunk {
			k.applyLocked(e, sent, c.provenSent(sent, e.req.Lease.TTL), now, res[i])
			replan = replan || e.state != StateLost && e.nextRenew.Before(k.planned)
		}
		// Wake the run loop before anyone can see the renewals as answered, so
		// that InFlight never reads zero while their outcome is still unplanned.
		// A renewal planned no earlier than the loop looks anyway needs no wake:
		// each wake scans every lease, which with many leases costs more than the
		// renewals themselves.
		if replan {
			k.poke()
		}
		k.mu.Unlock()
		errs = append(errs, res...)
	}
	return errs
}

// applyLocked applies the answer to a renewal of e sent at sent (by this
// keeper's clock: what a pause is judged by), whose evidence counts from proven
// (sent, less the clock drift Redlock allows).
func (k *Keeper) applyLocked(e *entry, sent, proven, now time.Time, err error) {
	e.inflight = false
	close(e.settled)
	if k.leases[e.req.Lease.Token] != e {
		return // untracked while the renewal was in flight
	}
	var nh *NotHeldError
	switch {
	case errors.Is(err, errReacquired) && sent.Before(k.wokeAt):
		// A renewal sent before a pause took the key back after it: a new
		// leader may have released the lease meanwhile, and the key it wrote
		// back is nobody's. It is never renewed again, and expires within its
		// ttl.
		k.stats.RenewalsLost++
		e.state, e.holder, e.lastErr, e.lostAt = StateLost, "", err, now
		k.reportLocked(e, ReportLost)
	case err == nil || errors.Is(err, errReacquired):
		k.stats.RenewalsOK++
		if e.state == StateFailing {
			k.reportLocked(e, ReportRecovered)
		}
		if err != nil {
			k.reportLocked(e, ReportReacquired)
		}
		e.state, e.failures, e.lastErr = StateHeld, 0, nil
		e.confirmed = true
		e.lastRenewed = proven
		e.nextRenew = proven.Add(e.interval)
		if sent.Before(k.wokeAt) {
			e.nextRenew = now // sent before a pause: it proves little, renew again
		}
	case errors.As(err, &nh):
		k.stats.RenewalsLost++
		e.state, e.holder, e.lastErr, e.lostAt = StateLost, nh.Holder, err, now
		k.reportLocked(e, ReportLost)
	case errors.Is(err, ErrInvalid):
		k.stats.RenewalsLost++
		// The key holds something other than a string: not our lease any more.
		e.state, e.holder, e.lastErr, e.lostAt = StateLost, "<non-string value>", err, now
		k.reportLocked(e, ReportLost)
	case sent.Before(k.wokeAt):
		// A call sent before a pause of this process that failed after it
		// (its timeout ran out during the pause) says nothing about the
		// store now: renew again at once, within the allowance a renewal
		// gets after a wake.
		k.stats.RenewalsFailed++
		e.nextRenew = now
	default:
		k.stats.RenewalsFailed++
		if e.state == StateHeld {
			k.reportLocked(e, ReportStoreFailing)
		}
		e.state, e.lastErr = StateFailing, err
		e.failures++
		e.nextRenew = now.Add(min(renewRetry, e.interval))
	}
}

func (k *Keeper) reportLocked(e *entry, kind ReportKind) {
	r := Report{Token: e.req.Lease.Token, Owner: e.req.Owner, Kind: kind}
	for _, p := range k.pending {
		if p == r {
			return
		}
	}
	k.pending = append(k.pending, r)
	select {
	case k.queued <- struct{}{}:
	default:
	}
}

// forward moves queued reports to the consumer; only this goroutine ever blocks
// on the consumer.
func (k *Keeper) forward(ctx context.Context) {
	for {
		k.mu.Lock()
		if len(k.pending) == 0 {
			k.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-k.queued:
				continue
			}
		}
		r := k.pending[0]
		k.pending = k.pending[1:]
		k.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case k.out <- r:
		}
	}
}

func (k *Keeper) poke() {
	k.waking.Store(true)
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

type renewItem struct {
	lease     Lease
	reacquire bool
}

// renewMany renews leases in one pipeline. Pipelined EVALSHA cannot fall back to
// EVAL, so after a Redis restart or failover the replies are NOSCRIPT: the script
// is loaded again and those renewals are retried once. NOSCRIPT is a store error,
// never "not held".
func (c *Client) renewMany(ctx context.Context, items []renewItem) []error {
	if c.redlock != nil {
		return c.redlock.renewMany(ctx, items)
	}
	errs := make([]error, len(items))
	ctx, cancel := context.WithTimeout(ctx, c.timeout+time.Duration(len(items))*50*time.Microsecond)
	defer cancel()
	pending := make([]int, len(items))
	for i := range pending {
		pending[i] = i
	}
	for attempt := 0; attempt < 2 && len(pending) > 0; attempt++ {
		pipe := c.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(pending))
		for j, i := range pending {
			l := items[i].lease
			reacquire := "0"
			if items[i].reacquire {
				reacquire = "1"
			}
			cmds[j] = renewScript.EvalSha(ctx, pipe, []string{l.Keys.Lock}, l.Token, l.TTL.Milliseconds(), reacquire)
		}
		_, _ = pipe.Exec(ctx) // per-command errors are read below
		var retry []int
		for j, i := range pending {
			key := items[i].lease.Keys.Lock
			res, err := cmds[j].Slice()
			switch {
			case err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")):
				errs[i] = &StoreError{Op: "renew " + key, Err: fmt.Errorf("script not loaded (Redis restarted or failed over): %w", err)}
				retry = append(retry, i)
			case err != nil:
				errs[i] = c.callError("renew", key, err)
			default:
				errs[i] = renewResult(key, res, true)
			}
		}
		if len(retry) == 0 || renewScript.Load(ctx, c.rdb).Err() != nil {
			break
		}
		pending = retry
	}
	return errs
}
