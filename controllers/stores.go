package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/keys"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/specerror"
	"github.com/guardedjob/guardedjob/internal/storeconfig"
)

// safetyRecheck is how often a store's configuration is checked again.
const safetyRecheck = 5 * time.Minute

// storeSet holds one client per tenant store (a storeRef Secret), reused by every
// GuardedJob naming that Secret. A changed Secret (rotated password, new CA) gets
// a new client; the old one stays open for the leases the keeper renews with it.
type storeSet struct {
	mu sync.Mutex
	// byVersion is keyed by identity and Secret resourceVersion.
	byVersion map[string]*lockclient.Client
	// latest is the newest client of each identity.
	latest map[string]*lockclient.Client
	// safety caches StoreSafe verdicts by identity.
	safety map[string]safetyVerdict
	// lastUsed is when a pass last resolved each identity.
	lastUsed map[string]time.Time
	// insecure holds the identities whose Secret turns TLS verification off.
	insecure map[string]bool
}

// storeIdle is how long a tenant store's client stays open after the last pass
// that used it, when no lease lives in it.
const storeIdle = 10 * time.Minute

type safetyVerdict struct {
	safe      lockclient.Tristate
	reason    string
	checkedAt time.Time
}

func (s *storeSet) init() {
	if s.byVersion == nil {
		s.byVersion, s.latest, s.safety = map[string]*lockclient.Client{}, map[string]*lockclient.Client{}, map[string]safetyVerdict{}
		s.lastUsed, s.insecure = map[string]time.Time{}, map[string]bool{}
	}
}

// storeFor resolves the store of a GuardedJob: the manager's own (keys confined
// to the namespace) or the one its storeRef Secret describes (any key). The
// Secret is read around the cache, so the manager never watches Secrets.
func (r *GuardedJobReconciler) storeFor(ctx context.Context, gj *batchv1alpha1.GuardedJob) (*lockclient.Client, bool, error) {
	ref := gj.Spec.Lock.StoreRef
	if ref == nil {
		return r.Store, true, nil
	}
	// Only a Secret of the object's own namespace: a name that is not a plain
	// object name never reaches the API server.
	if msgs := validation.IsDNS1123Subdomain(ref.Name); len(msgs) > 0 {
		return nil, false, &specerror.Error{Reason: batchv1alpha1.StoreSecretInvalidReason,
			Message: fmt.Sprintf("spec.lock.storeRef.name must name a Secret in namespace %s: %s", gj.Namespace, strings.Join(msgs, "; "))}
	}
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: gj.Namespace, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, &specerror.Error{Reason: batchv1alpha1.StoreSecretNotFoundReason,
				Message: fmt.Sprintf("spec.lock.storeRef: Secret %s/%s was not found; create it with a key \"url\" (redis:// or rediss://)", gj.Namespace, ref.Name)}
		}
		return nil, false, fmt.Errorf("read store Secret %s: %w", ref.Name, err)
	}
	cfg, err := storeconfig.FromSecret(fmt.Sprintf("spec.lock.storeRef: Secret %s/%s", gj.Namespace, ref.Name), secret.Data)
	if err != nil {
		return nil, false, &specerror.Error{Reason: batchv1alpha1.StoreSecretInvalidReason, Message: err.Error()}
	}
	identity := "secret:" + gj.Namespace + "/" + ref.Name + ":" + lockclient.Redact(cfg.URL)
	// Checked on every pass, not only for a new client: DNS answers change.
	// (A malformed URL is reported by Dial below.)
	switch err := r.StoreAllow.Check(ctx, cfg.URL); {
	case errors.Is(err, lockclient.ErrNotAllowed):
		return nil, false, &specerror.Error{Reason: batchv1alpha1.StoreNotAllowedReason,
			Message: fmt.Sprintf("spec.lock.storeRef: Secret %s/%s: %v; ask the cluster admin to add the host to --store-allow", gj.Namespace, ref.Name, err)}
	case err != nil && !errors.Is(err, lockclient.ErrInvalid):
		return nil, false, &lockclient.StoreError{Op: "resolve store " + identity, Err: err}
	}
	key := identity + "@" + secret.ResourceVersion

	r.stores.mu.Lock()
	defer r.stores.mu.Unlock()
	r.stores.init()
	now := r.Clock.Now()
	r.stores.lastUsed[identity] = now
	defer r.closeUnusedLocked(now)
	if c, ok := r.stores.byVersion[key]; ok {
		return c, false, nil
	}
	cfg.Timeout, cfg.Tenant, cfg.Allow = r.storeTimeout(), true, r.StoreAllow
	c, err := lockclient.Dial(cfg, lockclient.WithIdentity(identity), lockclient.WithWriteGate(r.Guard.Err))
	if err != nil {
		return nil, false, &specerror.Error{Reason: batchv1alpha1.StoreSecretInvalidReason,
			Message: fmt.Sprintf("spec.lock.storeRef: Secret %s/%s: %v", gj.Namespace, ref.Name, err)}
	}
	r.stores.byVersion[key] = c
	r.stores.latest[identity] = c
	r.stores.insecure[identity] = cfg.InsecureSkipVerify
	return c, false, nil
}

// tenantStoreClients lists the newest client of each tenant store this manager
// has open, for the identity heartbeat.
func (r *GuardedJobReconciler) tenantStoreClients() []*lockclient.Client {
	r.stores.mu.Lock()
	defer r.stores.mu.Unlock()
	out := make([]*lockclient.Client, 0, len(r.stores.latest))
	for _, c := range r.stores.latest {
		out = append(out, c)
	}
	return out
}

// insecureStore reports whether a tenant store's Secret turns TLS verification off.
func (r *GuardedJobReconciler) insecureStore(c *lockclient.Client) bool {
	r.stores.mu.Lock()
	defer r.stores.mu.Unlock()
	return r.stores.insecure[c.Identity()]
}

// closeUnusedLocked closes tenant store clients no lease is renewed through any
// more: those of Secret versions a newer version replaced, and those no pass has
// used for storeIdle (their GuardedJobs were deleted or moved to another store).
func (r *GuardedJobReconciler) closeUnusedLocked(now time.Time) {
	for key, c := range r.stores.byVersion {
		identity := key[:strings.LastIndexByte(key, '@')]
		superseded := r.stores.latest[identity] != c
		idle := now.Sub(r.stores.lastUsed[identity]) > storeIdle
		if (superseded || idle) && !r.Keeper.Uses(c) {
			_ = c.Close()
			delete(r.stores.byVersion, key)
			if !superseded {
				delete(r.stores.latest, identity)
				delete(r.stores.lastUsed, identity)
				delete(r.stores.safety, identity)
				delete(r.stores.insecure, identity)
			}
		}
	}
}

func (r *GuardedJobReconciler) storeTimeout() time.Duration {
	if r.Store != nil {
		return r.Store.Timeout()
	}
	return lockclient.DefaultTimeout
}

// runStore returns the client of the store a run's lease lives in, as recorded
// at intent time. After a restart a tenant store is resolved from the object's
// storeRef again; a run whose store cannot be found gets a store error (its lease
// is not renewed, and FailClosed stops it at its deadline).
func (r *GuardedJobReconciler) runStore(ctx context.Context, gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) (*lockclient.Client, error) {
	if run.Store == "" || run.Store == r.Store.Identity() {
		return r.Store, nil
	}
	// A tenant store is always a Secret of the object's own namespace: no run
	// ever reaches another namespace's store.
	if !strings.HasPrefix(run.Store, "secret:"+gj.Namespace+"/") {
		return nil, &lockclient.StoreError{Op: "resolve store", Err: fmt.Errorf("run %s names a store outside namespace %s", run.JobName, gj.Namespace)}
	}
	r.stores.mu.Lock()
	r.stores.init()
	c := r.stores.latest[run.Store]
	if c != nil {
		r.stores.lastUsed[run.Store] = r.Clock.Now()
	}
	r.stores.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, _, err := r.storeFor(ctx, gj)
	if err != nil {
		return nil, err
	}
	if c.Identity() != run.Store {
		return nil, &lockclient.StoreError{Op: "resolve store", Err: fmt.Errorf("run %s uses store %s, which spec.lock.storeRef no longer names", run.JobName, run.Store)}
	}
	return c, nil
}

// setStoreSafe reflects whether the store can lose leases, done-markers or fence
// counters silently (eviction, no persistence). Informational: it never blocks a
// run. The verdict is cached per store.
func (r *GuardedJobReconciler) setStoreSafe(ctx context.Context, gj *batchv1alpha1.GuardedJob, store *lockclient.Client, now time.Time) {
	r.stores.mu.Lock()
	r.stores.init()
	v, ok := r.stores.safety[store.Identity()]
	r.stores.mu.Unlock()
	if !ok || now.Sub(v.checkedAt) > safetyRecheck || now.Before(v.checkedAt) {
		info, err := store.StoreInfo(ctx)
		if err != nil {
			return // StoreReachable says it
		}
		// Done-markers are always written, so persistence always matters.
		v.safe, v.reason = info.Safety(true)
		v.checkedAt = now
		r.stores.mu.Lock()
		r.stores.safety[store.Identity()] = v
		r.stores.mu.Unlock()
	}
	switch v.safe {
	case lockclient.Yes:
		runcore.SetCondition(gj, batchv1alpha1.StoreSafeCondition, metav1.ConditionTrue, batchv1alpha1.SafeConfigurationReason, "the store does not evict keys and persists them", now)
	case lockclient.No:
		reason := batchv1alpha1.PersistenceDisabledReason
		if strings.HasPrefix(v.reason, "maxmemory-policy") {
			reason = batchv1alpha1.EvictionEnabledReason
		}
		runcore.SetCondition(gj, batchv1alpha1.StoreSafeCondition, metav1.ConditionFalse, reason, v.reason, now)
	default:
		runcore.SetCondition(gj, batchv1alpha1.StoreSafeCondition, metav1.ConditionUnknown, batchv1alpha1.ConfigUnknownReason, v.reason, now)
	}
}

// Key grants (--key-grants) are a manager's flag, but the keys they give away
// live in a store that several clusters share: a cluster started without
// another's grants gives a granted key back to the namespace whose default
// prefix covers it, and two tenants then hold one key. Each leader publishes
// its grants in its store (grantsKey); the first set stands while a manager
// with the same set renews it. A manager that reads another set refuses every
// key the two sets judge differently, until the sets agree.

// grantsKey holds the key grants of the managers sharing a store. The
// underscore cannot begin a namespace name, so no namespace's default covers
// it.
const grantsKey = "_guardedjob:key-grants"

// grantsTTL is how long a published set outlives the last manager that
// renews it: longer than any done-marker or lease of a key it grants lives
// (a BufferAll chain's marker, about ten days with the default limit and
// maxHold; a backfill's, seven), so that no other set takes its place while a
// tenant's marker or lease still stands under a granted key. Changing
// --key-grants therefore means changing it in every cluster sharing the store
// and deleting the key.
const grantsTTL = 14 * 24 * time.Hour

// GrantsCheck publishes this manager's key grants in its store and remembers a
// different set found there.
type GrantsCheck struct {
	store    *lockclient.Client
	ours     keys.Grants
	interval time.Duration

	mu        sync.Mutex
	published keys.Grants // the store's set, when it differs from ours
	text      string
}

// NewGrantsCheck returns the check of grants in store, every interval.
func NewGrantsCheck(store *lockclient.Client, grants keys.Grants, interval time.Duration) *GrantsCheck {
	if interval <= 0 {
		interval = identityBeat
	}
	return &GrantsCheck{store: store, ours: grants, interval: interval}
}

// Run publishes until ctx ends. It runs only while this manager leads.
func (c *GrantsCheck) Run(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("key-grants")
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		c.publish(ctx, log.Error)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (c *GrantsCheck) publish(ctx context.Context, logErr func(error, string, ...any)) {
	got, err := c.store.Publish(ctx, grantsKey, "grants="+c.ours.String(), grantsTTL)
	if err != nil {
		return // not known to lead, or the store does not answer: what was read stands
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	text, ok := cutGrants(got)
	if text == c.ours.String() && ok {
		c.published, c.text = nil, ""
		return
	}
	other, perr := keys.ParseGrants(text)
	if !ok || perr != nil {
		other = nil // unreadable: every granted key disagrees
	}
	if c.published == nil || c.text != text {
		logErr(nil, "ANOTHER MANAGER SHARING THIS STORE HAS OTHER KEY GRANTS: keys the two sets give to different namespaces are refused until every manager has the same --key-grants",
			"store", c.store.Identity(), "theirs", text, "ours", c.ours.String())
	}
	c.published, c.text = other, text
	if c.published == nil {
		c.published = keys.Grants{}
	}
}

func cutGrants(v string) (string, bool) {
	const prefix = "grants="
	if len(v) < len(prefix) || v[:len(prefix)] != prefix {
		return "", false
	}
	return v[len(prefix):], true
}

// Agree returns a KeyNotAllowed error for the first of keys that the store's
// published grants judge differently from this manager's for namespace (one
// allows it, the other does not), nil when they agree or nothing else is
// published.
func (c *GrantsCheck) Agree(namespace string, ks ...string) error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.published == nil {
		return nil
	}
	for _, k := range ks {
		if !keys.Disagree(c.ours, c.published, namespace, k) {
			continue
		}
		return specerror.Errorf(specerror.KeyNotAllowedReason,
			"key %q: another manager sharing the lock store has other --key-grants (%q; this manager's: %q), and the two give this key to different namespaces: "+
				"it is refused until every manager sharing the store has the same --key-grants", k, c.text, c.ours.String())
	}
	return nil
}
