package chart_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// repoBlob is where the chart README's links to the project's docs point: the docs
// of the release the chart installs (its appVersion).
const repoBlob = "https://github.com/guardedjob/guardedjob/blob/v"

// The chart's README is read where the packaged chart is (Artifact Hub, helm show
// readme, an unpacked .tgz), where nothing outside the chart directory exists: every
// link is either a file of the chart or an absolute link to the docs of the chart's
// appVersion, naming a file and a heading that exist.
func TestChartREADMELinksWorkInThePackagedChart(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)
	chartDir := filepath.Join(root, "charts", "guardedjob")
	raw, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	g.Expect(err).NotTo(HaveOccurred())
	links := regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(string(raw), -1)
	g.Expect(links).NotTo(BeEmpty())
	blob := repoBlob + chartMeta(t).AppVersion + "/"
	for _, l := range links {
		target := l[1]
		path, anchor, _ := strings.Cut(target, "#")
		switch {
		case strings.HasPrefix(target, "https://github.com/guardedjob/"):
			rel, ok := strings.CutPrefix(path, blob)
			g.Expect(ok).To(BeTrue(), "%s links the docs of the chart's appVersion (%s...)", target, blob)
			g.Expect(filepath.Join(root, rel)).To(BeAnExistingFile(), target)
			if anchor != "" {
				g.Expect(headingAnchors(t, filepath.Join(root, rel))).To(ContainElement(anchor), target)
			}
		case strings.Contains(target, "://"):
			// Another site: nothing to resolve here.
		default:
			g.Expect(filepath.IsLocal(path)).To(BeTrue(), "%s stays inside the chart", target)
			g.Expect(filepath.Join(chartDir, path)).To(BeAnExistingFile(), "%s is a file of the chart", target)
		}
	}
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown file.
func headingAnchors(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(raw), -1) {
		h := strings.ToLower(strings.TrimSpace(m[1]))
		h = regexp.MustCompile("[^a-z0-9 _-]").ReplaceAllString(h, "")
		out = append(out, strings.ReplaceAll(h, " ", "-"))
	}
	return out
}
