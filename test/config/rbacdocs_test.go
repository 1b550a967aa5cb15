package config_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// grant is one resource (in a group, optionally limited to one name) of a role.
type grant struct{ group, resource, name string }

func (g grant) String() string {
	s := g.resource
	if g.group != "" {
		s += "." + g.group
	}
	if g.name != "" {
		s += "/" + g.name
	}
	return s
}

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	inParens   = regexp.MustCompile(`\(([^)]*)\)`)
)

// docTable reads the table under the header "| resource | verbs | why |" in a doc:
// a resource cell names resources in backticks, with "(group)" ("(core)" for the
// core group) where the name alone is ambiguous, and "(`name` only)" for a rule
// limited to one object. groupsOf says which groups role.yaml has for a resource.
func docTable(t *testing.T, doc string, groupsOf map[string][]string) map[grant][]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), doc))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	start := slices.Index(lines, "| resource | verbs | why |")
	if start < 0 {
		t.Fatalf("%s has no table with the header | resource | verbs | why |", doc)
	}
	got := map[grant][]string{}
	for _, line := range lines[start+2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) < 3 {
			t.Fatalf("%s: row %q has fewer than 3 cells", doc, line)
		}
		resourceCell := strings.TrimSpace(cells[0])
		var group, name string
		explicitGroup := false
		for _, m := range inParens.FindAllStringSubmatch(resourceCell, -1) {
			if n := backticked.FindStringSubmatch(m[1]); n != nil && strings.HasSuffix(m[1], " only") {
				name = n[1]
			} else {
				group, explicitGroup = strings.TrimSpace(m[1]), true
				if group == "core" {
					group = ""
				}
			}
		}
		resources := backticked.FindAllStringSubmatch(inParens.ReplaceAllString(resourceCell, ""), -1)
		if len(resources) == 0 {
			t.Fatalf("%s: row %q names no resource in backticks", doc, line)
		}
		var verbs []string
		for _, v := range strings.Split(cells[1], ",") {
			verbs = append(verbs, strings.TrimSpace(v))
		}
		sort.Strings(verbs)
		for _, r := range resources {
			g := group
			if !explicitGroup {
				switch groups := groupsOf[r[1]]; len(groups) {
				case 1:
					g = groups[0]
				case 0:
					t.Errorf("%s: %s is in no rule of config/rbac/role.yaml", doc, r[1])
					continue
				default:
					t.Errorf("%s: %s is in several groups %q: name one, as `%s` (core)", doc, r[1], groups, r[1])
					continue
				}
			}
			key := grant{group: g, resource: r[1], name: name}
			if _, dup := got[key]; dup {
				t.Errorf("%s: %s is in two rows", doc, key)
			}
			got[key] = verbs
		}
	}
	return got
}

// TestRBACTablesMatchTheRole checks the tables of the manager's permissions in
// docs/security.md and docs/upgrade.md against config/rbac/role.yaml, which make
// manifests generates from the code: the same resources with the same verbs, and
// nothing else.
func TestRBACTablesMatchTheRole(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(raw, role); err != nil {
		t.Fatal(err)
	}
	want := map[grant][]string{}
	groupsOf := map[string][]string{}
	for _, r := range role.Rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				if !slices.Contains(groupsOf[res], g) {
					groupsOf[res] = append(groupsOf[res], g)
				}
				for _, n := range names {
					verbs := append(want[grant{g, res, n}], r.Verbs...)
					sort.Strings(verbs)
					want[grant{g, res, n}] = slices.Compact(verbs)
				}
			}
		}
	}
	if len(want) < 10 {
		t.Fatalf("config/rbac/role.yaml has %d grants; did it parse?", len(want))
	}
	for _, doc := range []string{"docs/security.md", "docs/upgrade.md"} {
		t.Run(doc, func(t *testing.T) {
			got := docTable(t, doc, groupsOf)
			for g, verbs := range want {
				if d, ok := got[g]; !ok {
					t.Errorf("%s: the table lacks %s (%s)", doc, g, strings.Join(verbs, ", "))
				} else if !slices.Equal(d, verbs) {
					t.Errorf("%s: %s has verbs %q in the table, %q in config/rbac/role.yaml", doc, g, d, verbs)
				}
			}
			for g := range got {
				if _, ok := want[g]; !ok {
					t.Errorf("%s: the table lists %s, which config/rbac/role.yaml does not grant", doc, g)
				}
			}
		})
	}
}
