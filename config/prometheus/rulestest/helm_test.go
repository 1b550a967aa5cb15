package rulestest

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"testing"

	. "github.com/onsi/gomega"
	"go.yaml.in/yaml/v3"
)

const (
	chartDir = "../../../charts/guardedjob"
	// The namespace the installs in these tests go to.
	installNamespace = "guardedjob-system"
)

// helm returns the helm binary: $HELM (make test-ops sets it), or helm on PATH.
func helm(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		t.Fatal("no helm: run `make test-ops`, which installs it and sets $HELM, or put helm on PATH")
	}
	return h
}

// object is a rendered manifest.
type object map[string]any

func (o object) kind() string { s, _ := o["kind"].(string); return s }

func (o object) name() string {
	md, _ := o["metadata"].(map[string]any)
	s, _ := md["name"].(string)
	return s
}

// renderChart runs helm template for release in installNamespace with the
// monitoring extras on and the given --set values, from the chart in dir.
func renderChart(t *testing.T, dir, release string, set ...string) []object {
	t.Helper()
	args := []string{"template", release, dir, "--namespace", installNamespace, "--kube-version", "1.37.2",
		"--set", "redis.existingSecret=guardedjob-redis",
		"--set", "metrics.serviceMonitor.enabled=true",
		"--set", "metrics.prometheusRule.enabled=true",
		"--set", "metrics.grafanaDashboard.enabled=true"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helm(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, stderr.String())
	}
	return decodeYAML(t, out)
}

// decodeYAML decodes the documents of a manifest stream. A document that is no
// strict YAML (the chart's Deployment repeats labels, which Kubernetes' decoder
// takes last-wins) is left out: these tests read other kinds.
func decodeYAML(t *testing.T, b []byte) []object {
	t.Helper()
	var out []object
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		var o map[string]any // not object: yaml.v3 would make every nested map one
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			kind := regexp.MustCompile(`(?m)^kind: (\S+)`).FindStringSubmatch(doc)
			NewWithT(t).Expect(kind).NotTo(BeNil(), "undecodable document without a kind: %v", err)
			NewWithT(t).Expect(kind[1]).To(Equal("Deployment"), "decode %s: %v", kind[1], err)
			continue
		}
		if len(o) > 0 {
			out = append(out, object(o))
		}
	}
	return out
}

func find(t *testing.T, objs []object, kind string) object {
	t.Helper()
	var found []object
	for _, o := range objs {
		if o.kind() == kind {
			found = append(found, o)
		}
	}
	NewWithT(t).Expect(found).To(HaveLen(1), "one %s", kind)
	return found[0]
}

func readYAML(t *testing.T, path string) object {
	t.Helper()
	b, err := os.ReadFile(path)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	objs := decodeYAML(t, b)
	NewWithT(t).Expect(objs).To(HaveLen(1), path)
	return objs[0]
}
