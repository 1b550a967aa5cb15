package chart_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/testutil/bins"
)

// minimumKubernetes is the oldest Kubernetes the operator supports: the version
// make test-min-k8s runs on (hack/tools/k8s-min), as major, minor and patch.
func minimumKubernetes(t *testing.T) (int, int, int) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "hack", "tools", "k8s-min", "go.mod"))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes v(\d+)\.(\d+)\.(\d+)\b`).FindSubmatch(raw)
	NewWithT(t).Expect(m).NotTo(BeNil(), "hack/tools/k8s-min requires k8s.io/kubernetes")
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	patch, _ := strconv.Atoi(string(m[3]))
	return major, minor, patch
}

// The chart installs on the oldest Kubernetes make test-min-k8s runs on, and
// refuses the minor before it.
func TestChartKubeVersionIsTheTestedMinimum(t *testing.T) {
	g := NewWithT(t)
	major, minor, patch := minimumKubernetes(t)
	template := func(version string) ([]byte, error) {
		return run(t, bins.Helm(t), "template", release, "charts/guardedjob", "--namespace", namespace,
			"--kube-version", version, "--set", "redis.existingSecret=guardedjob-redis")
	}
	_, err := template(fmt.Sprintf("%d.%d.0", major, minor))
	g.Expect(err).NotTo(HaveOccurred(), "the chart installs on %d.%d", major, minor)
	_, err = template(fmt.Sprintf("%d.%d.%d", major, minor, patch))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = template(fmt.Sprintf("%d.%d.99", major, minor-1))
	g.Expect(err).To(MatchError(ContainSubstring("kubeVersion")), "the chart refuses %d.%d", major, minor-1)
}
