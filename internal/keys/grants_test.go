package keys

import (
	"testing"

	"github.com/guardedjob/guardedjob/internal/specerror"
	. "github.com/onsi/gomega"
)

func TestParseKeyGrants(t *testing.T) {
	tests := []struct {
		name      string
		flag      string
		want      Grants
		canonical string
		err       string
	}{
		{name: "an empty flag grants nothing", flag: "", want: Grants{}, canonical: ""},
		{name: "one grant", flag: "payments=lock:settlement",
			want: Grants{"payments": {"lock:settlement"}}, canonical: "payments=lock:settlement"},
		{name: "repeated namespaces, whitespace and empty items",
			flag:      " reports=shared:reports: , payments=lock:settlement,,payments=lock:payout ,payments=lock:settlement",
			want:      Grants{"payments": {"lock:payout", "lock:settlement"}, "reports": {"shared:reports:"}},
			canonical: "payments=lock:payout,payments=lock:settlement,reports=shared:reports:"},
		{name: "a namespace's own default prefix may be granted to it", flag: "reports=reports:",
			want: Grants{"reports": {"reports:"}}, canonical: "reports=reports:"},
		{name: "a prefix that is another namespace's whole default is an error", flag: "reports=shared:",
			err: `key grant "reports=shared:": the prefix "shared:" covers every key namespace "shared" may use by default (a namespace of that name may exist in any cluster sharing the store); grant a narrower prefix such as "shared:reports:"`},
		{name: "a prefix without a colon covers every namespace whose name starts so", flag: "reports=shar",
			err: `the prefix "shar" covers every key any namespace whose name starts with "shar" may use by default`},
		{name: "even the grantee's own name without the colon covers other namespaces", flag: "reports=reports",
			err: `covers every key any namespace whose name starts with "reports" may use by default`},
		{name: "a prefix that no namespace name can begin is fine", flag: "reports={shared}",
			want: Grants{"reports": {"{shared}"}}, canonical: "reports={shared}"},
		{name: "an item without = is an error", flag: "payments", err: `key grant "payments" is not namespace=prefix`},
		{name: "an empty prefix is an error", flag: "payments=", err: "is not namespace=prefix"},
		{name: "an empty namespace is an error", flag: "=lock:", err: "is not namespace=prefix"},
		{name: "a namespace that is not a DNS label is an error", flag: "Payments=lock:", err: `"Payments" is not a namespace name`},
		{name: "a prefix with whitespace inside is an error", flag: "payments=lock: x", err: "prefix is not a valid key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := ParseGrants(tt.flag)
			if tt.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
			g.Expect(got.String()).To(Equal(tt.canonical))
			again, err := ParseGrants(got.String())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(again).To(Equal(got))
		})
	}
}

func TestKeyGrantsAllowed(t *testing.T) {
	grants := Grants{"payments": {"lock:settlement"}, "reports": {"shared:reports:"}}
	tests := []struct {
		name      string
		namespace string
		key       string
		want      bool
	}{
		{name: "a key under the namespace's own prefix", namespace: "payments", key: "payments:nightly", want: true},
		{name: "a key under another namespace's prefix", namespace: "reports", key: "payments:nightly", want: false},
		{name: "a namespace that is a prefix of another is not confused", namespace: "pay", key: "payments:x", want: false},
		{name: "the namespace without the colon", namespace: "payments", key: "payments", want: false},
		{name: "a granted prefix", namespace: "payments", key: "lock:settlement", want: true},
		{name: "keys derived from a granted key", namespace: "payments", key: "lock:settlement:done:1795968300", want: true},
		{name: "a grant to another namespace does not apply", namespace: "reports", key: "lock:settlement", want: false},
		{name: "a key outside every prefix", namespace: "payments", key: "lock:payout", want: false},
		{name: "an empty namespace is allowed nothing", namespace: "", key: ":x", want: false},
		{name: "a key granted to another namespace is not in the default of the namespace it starts with", namespace: "shared", key: "shared:reports:daily", want: false},
		{name: "nor is a done-marker under it", namespace: "shared", key: "shared:reports:daily:done:1795968300", want: false},
		{name: "the grantee has it", namespace: "reports", key: "shared:reports:daily", want: true},
		{name: "the rest of the default stays", namespace: "shared", key: "shared:other", want: true},
		{name: "a granted prefix of a namespace's default is taken out of it", namespace: "lock", key: "lock:settlement:done:1", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(grants.Allowed(tt.namespace, tt.key)).To(Equal(tt.want))
		})
	}
}

// Two managers sharing a store with other --key-grants disagree on exactly the
// keys one gives to a namespace and the other does not: a key granted away
// from the namespace whose default prefix covers it, and a granted prefix
// outside every default.
func TestKeyGrantsDisagreeOnlyOnKeysTheyGiveToDifferentNamespaces(t *testing.T) {
	ours := Grants{"reports": {"shared:reports:"}}
	none := Grants{}
	for _, c := range []struct {
		namespace, key string
		want           bool
	}{
		{"shared", "shared:reports:daily", true}, // ours: reports'; theirs: shared's default
		{"reports", "shared:reports:daily", true},
		{"shared", "shared:other", false},
		{"payments", "payments:nightly", false},
		{"reports", "reports:x", false},
		{"shared", "", false},
	} {
		if got := Disagree(ours, none, c.namespace, c.key); got != c.want {
			t.Errorf("%s %q: disagree %v, want %v", c.namespace, c.key, got, c.want)
		}
		if Disagree(ours, ours, c.namespace, c.key) {
			t.Errorf("%s %q: one set disagrees with itself", c.namespace, c.key)
		}
	}
}

func TestKeyGrantsCheckKeys(t *testing.T) {
	tests := []struct {
		name      string
		grants    Grants
		namespace string
		keys      []string
		msg       string // "" means allowed
	}{
		{name: "keys under the namespace's prefix pass", namespace: "payments",
			keys: []string{"payments:lock", "payments:lock:done:1", "payments:lock:fence"}},
		{name: "an empty fence key (fencing None) is skipped", namespace: "payments",
			keys: []string{"payments:lock", "payments:lock:done:1", ""}},
		{name: "granted keys pass", grants: Grants{"payments": {"lock:settlement"}}, namespace: "payments",
			keys: []string{"lock:settlement", "lock:settlement:done:1", "lock:settlement:fence"}},
		{name: "a key outside says how to grant it", namespace: "payments",
			keys: []string{"lock:settlement", "lock:settlement:done:1"},
			msg:  `key "lock:settlement" is outside this namespace's prefix "payments:"; an admin can grant it with --key-grants=payments=lock:settlement`},
		{name: "the first key outside is named", namespace: "payments",
			keys: []string{"payments:lock", "other:done"},
			msg:  `key "other:done" is outside this namespace's prefix "payments:"; an admin can grant it with --key-grants=payments=other:done`},
		{name: "a key of the namespace's default granted to another namespace names the grantee", grants: Grants{"reports": {"shared:reports:"}}, namespace: "shared",
			keys: []string{"shared:own", "shared:reports:daily"},
			msg:  `key "shared:reports:daily" is inside this namespace's prefix "shared:", but --key-grants gives it to namespace reports: a granted prefix belongs to its namespace alone; use another key`},
		{name: "existing grants are listed", grants: Grants{"payments": {"lock:a", "lock:b"}}, namespace: "payments",
			keys: []string{"lock:c"},
			msg:  `key "lock:c" is outside this namespace's prefix "payments:" and its granted prefixes "lock:a", "lock:b"; an admin can grant it with --key-grants=payments=lock:c`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := tt.grants.CheckKeys(tt.namespace, tt.keys...)
			if tt.msg == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			se := specerror.As(err)
			g.Expect(se).NotTo(BeNil(), "want a *specerror.Error, got %v", err)
			g.Expect(se.Reason).To(Equal("KeyNotAllowed"))
			g.Expect(se.Message).To(Equal(tt.msg))
		})
	}
}
