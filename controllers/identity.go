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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leadership"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
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

// identityBeat is how often the leader writes its heartbeat by default;
// identityStrikes of the last identityWindow beats must find another manager's
// value to take it for a second live manager, and identityWindow beats in a row
// its own value to take it for gone.
const (
	identityBeat    = 2 * time.Second
	identityStrikes = 3
	identityWindow  = 6
)

// IdentityCheck is the heartbeat of this manager's cluster identity.
type IdentityCheck struct {
	store    *lockclient.Client
	key      string
	value    string
	shard    string
	interval time.Duration

	mu     sync.Mutex
	recent []bool // the last beats' outcomes, true: another manager's value
	// down is set while the store does not answer the heartbeat.
	down  bool
	clear int
	other string
	dup   bool
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

func (c *IdentityCheck) beat(ctx context.Context, logf func(string, ...any)) {
	prev, err := c.store.Swap(ctx, c.key, c.value, identityWindow*c.interval+c.interval)
	c.mu.Lock()
	defer c.mu.Unlock()
	if errors.Is(err, leadership.ErrNotLeading) {
		// Not sent: this manager does not know it leads. A twin may have
		// started meanwhile, so the beats before count no more; the store is
		// not down for it, and runs stay held back until beats settle again.
		c.recent = c.recent[:0]
		return
	}
	if c.down = err != nil; c.down {
		// A twin may start unseen while the store does not answer: settled again
		// only after a few answered beats. The outage is reported elsewhere.
		c.recent = c.recent[:0]
		return
	}
	other := prev != "" && prev != c.value
	c.recent = append(c.recent, other)
	if len(c.recent) > identityWindow {
		c.recent = c.recent[1:]
	}
	if !other {
		if c.dup {
			if c.clear++; c.clear >= identityWindow {
				c.dup, c.clear = false, 0
				logf("Only this manager claims its cluster identity again: runs start again", "key", c.key)
			}
		}
		return
	}
	c.clear = 0
	c.other = prev
	strikes := 0
	for _, o := range c.recent {
		if o {
			strikes++
		}
	}
	if strikes >= identityStrikes && !c.dup {
		c.dup = true
		logf("ANOTHER MANAGER CLAIMS THIS MANAGER'S CLUSTER IDENTITY: no run starts until only one does", "key", c.key, "other", prev)
	}
}

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
	t := time.NewTicker(identityWindow * f.c.interval)
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
// identity: a manager that has just started or become the leader has not seen a
// twin yet, and must not take up a lease a twin may have taken.
func (c *IdentityCheck) Settled() bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dup || len(c.recent) < identityStrikes {
		return false
	}
	for _, o := range c.recent[len(c.recent)-identityStrikes:] {
		if o {
			return false
		}
	}
	return true
}

// storeDown says whether the last beat found the store not answering.
func (c *IdentityCheck) storeDown() bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down
}

// Duplicate says whether another live manager claims this identity, and what it
// wrote.
func (c *IdentityCheck) Duplicate() (string, bool) {
	if c == nil {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.other, c.dup
}

// Key is the heartbeat key.
func (c *IdentityCheck) Key() string { return c.key }

// duplicateIdentity holds back new runs while another manager claims this
// manager's cluster identity: Ready=False DuplicateClusterName, with a Warning
// event, and no run is scheduled or triggered. Active runs go on.
func (r *GuardedJobReconciler) duplicateIdentity(s *scope) bool {
	other, dup := r.Identity.Duplicate()
	if !dup {
		return false
	}
	msg := r.duplicateMessage(other)
	setCondition(s.gj, batchv1alpha1.ReadyCondition, metav1.ConditionFalse, batchv1alpha1.DuplicateClusterNameReason, msg, s.now)
	r.warnOnce(s, batchv1alpha1.DuplicateClusterNameReason, msg)
	s.requeueAfter(r.Identity.interval)
	return true
}

// identitySettled holds back new runs (and with them any take-up) until the
// identity heartbeat has beaten a few times with no other manager's value: a
// manager that has just started or become the leader cannot know yet whether a
// twin runs the same occurrences, and a twin's lease would look like one of its
// own that a crashed manager never recorded. Runs already recorded go on.
// While the store does not answer the heartbeat, new runs are not held back: a
// FailOpen run must still start unguarded and a FailClosed one waits for the
// store anyway. Take-up checks Settled itself, so a store that answers again
// between two beats still takes nothing up before the beats have settled.
func (r *GuardedJobReconciler) identitySettled(s *scope) bool {
	if r.Identity.Settled() || r.Identity.storeDown() {
		return true
	}
	s.requeueAfter(r.Identity.interval)
	return false
}

// duplicateMessage says who else claims this manager's identity: another shard
// started with this one's --leader-election-id, or a manager of another cluster
// (restored from a snapshot) or a second replica without leader election.
func (r *GuardedJobReconciler) duplicateMessage(other string) string {
	msg := fmt.Sprintf("another manager claims this cluster's identity (--cluster-name %q) in the lock store: it wrote %q over this manager's heartbeat %s again and again. "+
		"Clusters restored from one etcd snapshot share the kube-system UID (the default --cluster-name) and their objects' UIDs, and each could take up the other's leases: "+
		"no run starts here until only one manager claims it. Give each cluster its own --cluster-name; "+
		"a second replica of this manager needs leader election (--leader-elect)", r.ClusterName, other, r.Identity.Key())
	if shard, ok := shardOf(other); ok && shard != r.Identity.shard {
		msg = fmt.Sprintf("a manager serving another shard (--watch-label-selector %q) runs with this manager's --leader-election-id in cluster %q: "+
			"both write heartbeat %s, and neither can tell a restored clone from the other: no run starts here until only one does. "+
			"Give each shard its own --leader-election-id", shard, r.ClusterName, r.Identity.Key())
	}
	return msg
}
