package main_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// documentedFlags returns the flags docs/configuration.md's table documents, each with the
// environment variable its row names ("" for none).
func documentedFlags(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/configuration.md")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	_, section, ok := strings.Cut(string(raw), "\n## Flags\n")
	NewWithT(t).Expect(ok).To(BeTrue(), "docs/configuration.md has a Flags section")
	section, _, _ = strings.Cut(section, "\n## ")
	flagRe, envRe := regexp.MustCompile("`(--[a-z0-9-]+)`"), regexp.MustCompile("`([A-Z][A-Z0-9_]*)`")
	out := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "`--") {
			continue
		}
		env := ""
		if m := envRe.FindStringSubmatch(cells[2]); m != nil {
			env = m[1]
		}
		for _, m := range flagRe.FindAllStringSubmatch(cells[1], -1) {
			NewWithT(t).Expect(out).NotTo(HaveKey(m[1]), "%s has one row", m[1])
			out[m[1]] = env
		}
	}
	NewWithT(t).Expect(out).NotTo(BeEmpty())
	return out
}

// helpFlags returns the flags `manager --help` lists, each with the environment
// variable its help text names ("env NAME"), or "" for none.
func helpFlags(t *testing.T, bin string) map[string]string {
	t.Helper()
	// The flag package prints the usage and exits 0 for -help.
	out, err := exec.Command(bin, "--help").CombinedOutput()
	NewWithT(t).Expect(err).NotTo(HaveOccurred(), "%s", out)
	flags := map[string]string{}
	var current string
	envRe := regexp.MustCompile(`\benv ([A-Z][A-Z0-9_]*)`)
	for _, line := range strings.Split(string(out), "\n") {
		if m := regexp.MustCompile(`^  -([a-z0-9-]+)`).FindStringSubmatch(line); m != nil {
			current = "--" + m[1]
			flags[current] = ""
			continue
		}
		if m := envRe.FindStringSubmatch(line); m != nil && current != "" {
			flags[current] = m[1]
		}
	}
	NewWithT(t).Expect(flags).To(HaveKey("--redis-url"), "parsed --help:\n%s", out)
	return flags
}

// docs/configuration.md's flag table and the manager's flags are the same set, both ways, and where
// the manager's help names an environment variable, the table names the same one.
func TestTheConfigurationDocDocumentsEveryManagerFlag(t *testing.T) {
	g := NewWithT(t)
	documented := documentedFlags(t)
	served := helpFlags(t, buildManager(t))
	var missing, stale []string
	for f := range served {
		if _, ok := documented[f]; !ok {
			missing = append(missing, f)
		}
	}
	for f := range documented {
		if _, ok := served[f]; !ok {
			stale = append(stale, f)
		}
	}
	slices.Sort(missing)
	slices.Sort(stale)
	g.Expect(missing).To(BeEmpty(), "flags of the manager missing from docs/configuration.md's flag table")
	g.Expect(stale).To(BeEmpty(), "flags in docs/configuration.md's flag table the manager does not have")
	for f, env := range served {
		if env != "" {
			g.Expect(documented[f]).To(Equal(env), "docs/configuration.md's row of %s names the environment variable --help names", f)
		}
	}
}
