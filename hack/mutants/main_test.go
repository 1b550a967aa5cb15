package main

import (
	"os"
	"regexp"
	"testing"
)

// TestEveryMutantHasItsRowInTheReliabilityDocs: docs/reliability.md's table of
// planted bugs names every mutant, and no mutant that is gone.
func TestEveryMutantHasItsRowInTheReliabilityDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/reliability.md")
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile("(?s)\n## Planted bugs\n(.*?)\n## ").FindSubmatch(b)
	if section == nil {
		t.Fatal("docs/reliability.md has no section \"Planted bugs\"")
	}
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\|").FindAllStringSubmatch(string(section[1]), -1) {
		rows[m[1]] = true
	}
	names := map[string]bool{}
	for _, m := range mutants {
		names[m.name] = true
		if !rows[m.name] {
			t.Errorf("mutant %s has no row in docs/reliability.md's table of planted bugs", m.name)
		}
	}
	for name := range rows {
		if !names[name] {
			t.Errorf("docs/reliability.md has a row for %s, which is no mutant", name)
		}
	}
}

// TestEveryMutantStillApplies: each mutant's code is in the checkout once, so
// that a rewrite that moves it fails here, in make test, and not only in the
// mutant step at the end of CI.
func TestEveryMutantStillApplies(t *testing.T) {
	for _, m := range mutants {
		if _, err := m.apply("../..", true); err != nil {
			t.Error(err)
		}
	}
}
