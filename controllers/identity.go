package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leadership"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// A run's token binds it to this manager's cluster name, the object's UID and
// the occurrence (internal/runtoken), so that a lease a crashed manager never
// recorded can be taken up. Two clusters that claim the same identity break that
// binding: clusters restored from one etcd snapshot share their kube-system UID
// (the default --cluster-name) and every object's UID, and each could take up a
// lease the other took, and run it beside the other. The identity check detects
// a second live manager claiming this manager's identity in its store, and the
// manager then starts no run until only one does.
//
// Each leader writes a heartbeat under a key named after its cluster name and
// leader election ID (shards of one cluster have their own), with a value of its
// own, every identityBeat, and reads back what it replaced. Another manager's
// value, found in place of its own several beats in a row, means another manager
// writes the same key as often: a leader that took over writes once over the old
// leader's value, and an old leader stops writing when it loses its leadership.
// Beats are counted in a window, not in a row: two managers' tickers drift, and a
// manager may beat twice between the other's beats.

// identityKeyPrefix starts the heartbeat keys. The underscore cannot begin a
// namespace name, so no namespace's default key prefix covers it.
const identityKeyPrefix = "_guardedjob:identity:"

// identityBeat is how often the leader writes its heartbeat by default (the
// judgement of the beats: runcore.Beats).
const identityBeat = 2 * time.Second

// IdentityCheck is the heartbeat of this manager's cluster identity, in its own
// store and in every tenant store (spec.lock.storeRef) it has a client for: clones
// whose managers have stores of their own may share only a tenant's store, and
// take up each other's leases there.
type IdentityCheck struct {
	store    *lockclient.Client
	key      string
	value    string
	shard    string
	interval time.Duration
	// tenantStores lists the tenant stores to beat in besides the manager's own.
	tenantStores func() []*lockclient.Client

	mu  sync.Mutex
	own runcore.Beats
	// tenants holds the beats in each tenant store, by store identity. A tenant
	// can write its store, so what they find holds back only the runs whose
	// leases live there, never another tenant's or the manager's own store's.
	tenants map[string]*runcore.Beats
}

// NewIdentityCheck returns the check of identity (cluster name and leader
// election ID) in store, beating every interval (identityBeat when zero).
func NewIdentityCheck(store *lockclient.Client, clusterName, electionID string, interval time.Duration) *IdentityCheck {
	if interval <= 0 {
		interval = identityBeat
	}
	sum := sha256.Sum256([]byte(electionID))
	host, _ := os.Hostname()
	random, _ := leasetoken.NewRandom()
	return &IdentityCheck{
		store: store, interval: interval,
		key:   identityKeyPrefix + clusterName + ":" + hex.EncodeToString(sum[:6]),
		value: fmt.Sprintf("host=%s pid=%d id=%s", host, os.Getpid(), random[:12]),
	}
}

// ForShard adds this manager's shard (its --watch-label-selector) to its
// heartbeat, so that a manager whose key another shard also writes (the same
// --leader-election-id) says so, instead of taking it for a restored clone.
func (c *IdentityCheck) ForShard(selector string) *IdentityCheck {
	c.shard = selector
	c.value += " shard=" + strconv.Quote(selector)
	return c
}

// shardOf reads the shard a heartbeat value names, and whether it names one
// (a manager serving every GuardedJob names "").
func shardOf(value string) (string, bool) {
	_, quoted, ok := strings.Cut(value, " shard=")
	if !ok {
		return "", false
	}
	shard, err := strconv.Unquote(quoted)
	return shard, err == nil
}

// Run beats until ctx ends. It runs only while this manager leads.
func (c *IdentityCheck) Run(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("identity")
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		c.beat(ctx, log.Info)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// WithTenantStores makes the heartbeat beat in the tenant stores stores lists too.
func (c *IdentityCheck) WithTenantStores(stores func() []*lockclient.Client) *IdentityCheck {
	c.tenantStores = stores
	return c
}

func (c *IdentityCheck) beat(ctx context.Context, logf func(string, ...any)) {
	prev, err := c.store.Swap(ctx, c.key, c.value, c.ttl())
	c.mu.Lock()
	logChange(c.own.Record(beatOf(err, false), prev, c.value), prev, logf, "key", c.key)
	c.mu.Unlock()
	if c.tenantStores == nil {
		return
	}
	// Side by side: a tenant store that does not answer must not hold back the
	// beats in the others.
	stores := c.tenantStores()
	var wg sync.WaitGroup
	for _, store := range stores {
		wg.Go(func() {
			prev, err := store.Swap(ctx, c.key, c.value, c.ttl())
			c.recordTenant(store.Identity(), prev, err, logf)
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, store := range stores {
		seen[store.Identity()] = true
	}
	c.mu.Lock()
	for id := range c.tenants {
		if !seen[id] {
			delete(c.tenants, id) // its client was closed: no run uses it
		}
	}
	c.mu.Unlock()
}

// recordTenant counts one beat in the tenant store id.
func (c *IdentityCheck) recordTenant(id, prev string, err error, logf func(string, ...any)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tenants == nil {
		c.tenants = map[string]*runcore.Beats{}
	}
	b := c.tenants[id]
	if b == nil {
		b = &runcore.Beats{}
		c.tenants[id] = b
	}
	logChange(b.Record(beatOf(err, true), prev, c.value), prev, logf, "key", c.key, "store", id)
}

// beatOf says what a heartbeat write's error makes of the beat. Only a tenant
// store's ACL refusal counts as refused: in the manager's own store, the
// store is down for the manager's every use.
func beatOf(err error, tenant bool) runcore.Beat {
	switch {
	case errors.Is(err, leadership.ErrNotLeading):
		return runcore.BeatNotSent
	case tenant && lockclient.IsPermissionDenied(err):
		return runcore.BeatRefused
	case err != nil:
		return runcore.BeatUnanswered
	}
	return runcore.BeatAnswered
}

// logChange logs what a beat changed in a store's judgement; kv names the
// store.
func logChange(ch runcore.Change, prev string, logf func(string, ...any), kv ...any) {
	switch ch {
	case runcore.TwinFound:
		logf("ANOTHER MANAGER CLAIMS THIS MANAGER'S CLUSTER IDENTITY: no run starts until only one does", append([]any{"other", prev}, kv...)...)
	case runcore.TwinGone:
		logf("Only this manager claims its cluster identity again: runs start again", kv...)
	case runcore.RefusedFirst:
		logf("A tenant store's ACL refuses this manager's identity heartbeat: a clone of this cluster that shares only this store goes unseen. Allow the manager's user ~_guardedjob:identity:* in it (docs/security.md)", kv...)
	}
}

// ttl is how long a heartbeat lives: a window of beats and one more.
func (c *IdentityCheck) ttl() time.Duration { return runcore.IdentityWindow*c.interval + c.interval }

// followerCheck runs while this manager waits to lead: it reads (never
// writes) the heartbeat of the leader of its --leader-election-id, and says so
// when that leader serves another shard. Such a shard shares this one's Lease,
// so this shard's GuardedJobs would never run, with nothing else to say why.
type followerCheck struct {
	c       *IdentityCheck
	elected <-chan struct{}
}

// FollowerCheck is the runnable that watches the leader's shard until this
// manager leads.
func (c *IdentityCheck) FollowerCheck(elected <-chan struct{}) manager.Runnable {
	return followerCheck{c: c, elected: elected}
}

func (followerCheck) NeedLeaderElection() bool { return false }

func (f followerCheck) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("identity")
	t := time.NewTicker(runcore.IdentityWindow * f.c.interval)
	defer t.Stop()
	reported := ""
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.elected:
			return nil
		case <-t.C:
		}
		if shard, ok := f.c.leaderOfAnotherShard(ctx); ok && shard != reported {
			reported = shard
			log.Error(nil, "The leader of this manager's --leader-election-id serves another shard: this shard's GuardedJobs run only while it leads. Give each shard its own --leader-election-id",
				"leaderShard", shard, "shard", f.c.shard, "key", f.c.key)
		}
	}
}

// leaderOfAnotherShard reads the heartbeat and says which other shard the
// manager that wrote it serves, if it serves another.
func (c *IdentityCheck) leaderOfAnotherShard(ctx context.Context) (string, bool) {
	st, err := c.store.Inspect(ctx, lockclient.Keys{Lock: c.key})
	if err != nil || st.Holder == "" || st.Holder == c.value {
		return "", false
	}
	shard, ok := shardOf(st.Holder)
	return shard, ok && shard != c.shard
}

// Settled says whether the heartbeat has beaten long enough, with no other
// manager's value in its last beats, to say that this manager alone claims its
// identity in its own store and in the given store (a tenant store's identity;
// "" or the manager's store's: the manager's store alone): a manager that has
// just started or become the leader has not seen a twin yet, and must not take up
// a lease a twin may have taken. A tenant store whose ACL refuses the heartbeat
// cannot tell, and holds nothing back.
func (c *IdentityCheck) Settled(store string) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.own.Settled() {
		return false
	}
	if !c.isTenant(store) {
		return true
	}
	// A tenant store not beaten in yet (its client is new) has not been seen.
	t := c.tenants[store]
	return t != nil && (t.Refused || t.Settled())
}

// isTenant says whether store names a tenant store rather than the manager's own.
func (c *IdentityCheck) isTenant(store string) bool {
	return store != "" && store != c.store.Identity()
}

// storeDown says whether the last beat found the store (the manager's own, or
// the given tenant store) not answering.
func (c *IdentityCheck) storeDown(store string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isTenant(store) {
		t := c.tenants[store]
		return t != nil && t.Down
	}
	return c.own.Down
}

// Duplicate says whether another live manager claims this identity in the
// manager's own store or the given store, and what it wrote.
func (c *IdentityCheck) Duplicate(store string) (string, bool) {
	if c == nil {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.own.Dup {
		return c.own.Other, true
	}
	if t := c.tenants[store]; c.isTenant(store) && t != nil && t.Dup {
		return t.Other, true
	}
	return "", false
}

// Key is the heartbeat key.
func (c *IdentityCheck) Key() string { return c.key }

// identityHolds holds back new runs as the identity heartbeat says
// (runcore.HoldsNewRuns): while another manager claims this manager's cluster
// identity, with Ready=False DuplicateClusterName and a Warning event; and until
// the heartbeat has beaten a few times with no other manager's value (a twin's
// lease would look like one of its own that a crashed manager never recorded),
// except while the store does not answer the heartbeat: a FailOpen run must
// still start unguarded. Take-up checks Settled itself, so a store that answers
// again between two beats still takes nothing up before the beats have
// settled. Runs already recorded go on.
func (r *GuardedJobReconciler) identityHolds(s *scope) bool {
	store := s.storeIdentity()
	other, dup := r.Identity.Duplicate(store)
	switch runcore.HoldsNewRuns(dup, r.Identity.Settled(store), r.Identity.storeDown("") || r.Identity.storeDown(store)) {
	case runcore.HoldDuplicate:
		msg := r.duplicateMessage(other, store)
		runcore.SetNotReady(s.gj, batchv1alpha1.DuplicateClusterNameReason, msg, s.now)
		r.warnOnce(s, batchv1alpha1.DuplicateClusterNameReason, msg)
	case runcore.HoldUnsettled:
	default:
		return false
	}
	s.requeueAfter(r.Identity.interval)
	return true
}

// storeIdentity names the store of the pass's GuardedJob; "" before its spec is
// compiled (the manager's own store).
func (s *scope) storeIdentity() string {
	if s.spec == nil || s.spec.store == nil {
		return ""
	}
	return s.spec.store.Identity()
}

// maxOtherValue bounds how much of another heartbeat value a message quotes: in
// a tenant store, the tenant may have written it.
const maxOtherValue = 200

// duplicateMessage says who else claims this manager's identity: another shard
// started with this one's --leader-election-id, or a manager of another cluster
// (restored from a snapshot) or a second replica without leader election. store
// is where the heartbeat found it, when that is a tenant store.
func (r *GuardedJobReconciler) duplicateMessage(other, store string) string {
	if len(other) > maxOtherValue {
		other = other[:maxOtherValue] + "..."
	}
	where := "the lock store"
	if _, dup := r.Identity.Duplicate(""); !dup && store != "" {
		where = "the tenant store " + store + " (spec.lock.storeRef), which no other store of this manager's shares"
	}
	msg := fmt.Sprintf("another manager claims this cluster's identity (--cluster-name %q) in %s: it wrote %q over this manager's heartbeat %s again and again. "+
		"Clusters restored from one etcd snapshot share the kube-system UID (the default --cluster-name) and their objects' UIDs, and each could take up the other's leases: "+
		"no run starts here until only one manager claims it. Give each cluster its own --cluster-name; "+
		"a second replica of this manager needs leader election (--leader-elect)", r.ClusterName, where, other, r.Identity.Key())
	if shard, ok := shardOf(other); ok && shard != r.Identity.shard {
		msg = fmt.Sprintf("a manager serving another shard (--watch-label-selector %q) runs with this manager's --leader-election-id in cluster %q: "+
			"both write heartbeat %s, and neither can tell a restored clone from the other: no run starts here until only one does. "+
			"Give each shard its own --leader-election-id", shard, r.ClusterName, r.Identity.Key())
	}
	return msg
}
