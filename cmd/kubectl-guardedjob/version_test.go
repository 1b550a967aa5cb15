package main

import (
	"bytes"
	"context"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/buildinfo"
)

// version (and --version) prints the plugin's version and commit without
// touching a cluster.
func TestVersionCommand(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		g := NewWithT(t)
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), []string{arg}, nil, &stdout, &stderr, func(string) string { return "" })
		g.Expect(code).To(Equal(0), stderr.String())
		g.Expect(stdout.String()).To(Equal("kubectl-guardedjob " + buildinfo.Resolve(version, commit).String() + "\n"))
		g.Expect(stdout.String()).To(MatchRegexp(`^kubectl-guardedjob \S+ \(commit \S+\)\n$`))
	}
}
