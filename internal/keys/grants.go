package keys

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// Grants lets an admin allow namespaces to use keys outside "<namespace>:" in the
// manager's shared store: namespace -> granted key prefixes. The --key-grants flag
// syntax is "payments=lock:settlement,payments=lock:payout,reports=shared:reports:". A
// prefix is a plain string prefix: "lock:settlement" also covers
// "lock:settlement:done:..." (the derived keys) and "lock:settlement2".
//
// A granted prefix belongs to its namespace alone: it is taken out of every other
// namespace's default, so that namespace "lock" cannot use the keys of
// "payments=lock:settlement". A prefix that would take a whole default away (every
// key another namespace may use by default, such as "shared:" or "shar") is refused
// when the flag is parsed: it would give one tenant the keys, holders and
// done-markers of whichever namespace has that name, in any cluster sharing the
// store.
type Grants map[string][]string

// ParseGrants parses the --key-grants flag: comma-separated namespace=prefix pairs;
// a namespace may appear several times; whitespace around items is ignored, and so are
// empty items. "" means no grants. A namespace must be a DNS label and a prefix must
// be a valid key.
func ParseGrants(s string) (Grants, error) {
	g := Grants{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		ns, prefix, ok := strings.Cut(item, "=")
		ns, prefix = strings.TrimSpace(ns), strings.TrimSpace(prefix)
		if !ok || ns == "" || prefix == "" {
			return nil, fmt.Errorf("key grant %q is not namespace=prefix, such as payments=lock:settlement", item)
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("key grant %q: %q is not a namespace name: %s", item, ns, strings.Join(errs, "; "))
		}
		if err := lockclient.ValidateKey(prefix); err != nil {
			return nil, fmt.Errorf("key grant %q: prefix is not a valid key: %w", item, err)
		}
		if whose := wholeDefault(prefix, ns); whose != "" {
			return nil, fmt.Errorf("key grant %q: the prefix %q covers every key %s may use by default (a namespace of that name may exist in any cluster sharing the store); grant a narrower prefix such as %q",
				item, prefix, whose, strings.TrimSuffix(prefix, ":")+":"+ns+":")
		}
		if !slices.Contains(g[ns], prefix) {
			g[ns] = append(g[ns], prefix)
		}
	}
	for ns := range g {
		slices.Sort(g[ns])
	}
	return g, nil
}

// String returns the grants in flag syntax, sorted by namespace and prefix, so that
// ParseGrants(g.String()) equals g.
func (g Grants) String() string {
	var items []string
	for ns, prefixes := range g {
		for _, p := range prefixes {
			items = append(items, ns+"="+p)
		}
	}
	slices.Sort(items)
	return strings.Join(slices.Compact(items), ",")
}

// wholeDefault says whose whole default a prefix granted to namespace would
// cover, or "": another namespace's when the prefix ends at its first colon after
// that namespace's name ("shared:"), any namespace's whose name starts with a
// prefix without a colon ("shar", or "reports", which covers "reports2:...").
func wholeDefault(prefix, namespace string) string {
	head, rest, hasColon := strings.Cut(prefix, ":")
	switch {
	case hasColon && rest == "" && head != namespace && len(validation.IsDNS1123Label(head)) == 0:
		return fmt.Sprintf("namespace %q", head)
	case !hasColon && len(validation.IsDNS1123Label(prefix)) == 0:
		return fmt.Sprintf("any namespace whose name starts with %q", prefix)
	}
	return ""
}

// Allowed reports whether namespace may use key: the key starts with a prefix
// granted to namespace, or with namespace+":" and no other namespace was granted
// a prefix of it.
func (g Grants) Allowed(namespace, key string) bool {
	if namespace == "" {
		return false
	}
	for _, p := range g[namespace] {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return strings.HasPrefix(key, namespace+":") && g.grantedElsewhere(namespace, key) == ""
}

// Disagree reports whether two managers' grants sharing one store judge key
// differently for namespace: one gives it to namespace, the other does not. A
// cluster started without another's grants would give a granted key back to
// the namespace whose default prefix covers it, and two tenants would then
// hold one key; such a key is refused until the sets agree.
func Disagree(ours, theirs Grants, namespace, key string) bool {
	return key != "" && ours.Allowed(namespace, key) != theirs.Allowed(namespace, key)
}

// grantedElsewhere returns a namespace other than namespace that key was granted
// to, or "".
func (g Grants) grantedElsewhere(namespace, key string) string {
	var owners []string
	for ns, prefixes := range g {
		if ns == namespace {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(key, p) {
				owners = append(owners, ns)
				break
			}
		}
	}
	if len(owners) == 0 {
		return ""
	}
	slices.Sort(owners)
	return owners[0]
}

// CheckKeys returns a *specerror.Error{Reason: KeyNotAllowed} for the first of
// keys that namespace may not use, saying which --key-grants would allow it; nil
// if all are allowed. Empty keys (no fence key with fencing None) are skipped.
func (g Grants) CheckKeys(namespace string, keys ...string) error {
	for _, k := range keys {
		if k == "" || g.Allowed(namespace, k) {
			continue
		}
		if owner := g.grantedElsewhere(namespace, k); owner != "" && strings.HasPrefix(k, namespace+":") {
			return specerror.Errorf(specerror.KeyNotAllowedReason,
				"key %s is inside this namespace's prefix %q, but --key-grants gives it to namespace %s: a granted prefix belongs to its namespace alone; use another key",
				quoteKey(k), namespace+":", owner)
		}
		granted := ""
		if ps := g[namespace]; len(ps) > 0 {
			q := make([]string, len(ps))
			for i, p := range ps {
				q[i] = strconv.Quote(p)
			}
			granted = " and its granted prefixes " + strings.Join(q, ", ")
		}
		return specerror.Errorf(specerror.KeyNotAllowedReason,
			"key %s is outside this namespace's prefix %q%s; an admin can grant it with --key-grants=%s=%s",
			quoteKey(k), namespace+":", granted, namespace, k)
	}
	return nil
}
