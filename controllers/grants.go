package controllers

import (
	"context"
	"sync"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/guardedjob/guardedjob/internal/keys"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

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
