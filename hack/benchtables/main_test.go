package main

import (
	"testing"

	. "github.com/onsi/gomega"
)

// The scale benchmark's tables in docs/benchmarks.md are the committed reports'.
func TestBenchmarkDocsComeFromTheCommittedReports(t *testing.T) {
	NewWithT(t).Expect(run("../..", true)).To(Succeed())
}

func TestSpliceNeedsTheMarkers(t *testing.T) {
	g := NewWithT(t)
	_, err := splice([]byte("# Benchmarks\n"), "x")
	g.Expect(err).To(MatchError(ContainSubstring("no generated section")))
	out, err := splice([]byte("a\n"+beginMarker+"\nold\n"+endMarker+"\nb\n"), "new\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(Equal("a\n" + beginMarker + "\nnew\n\n" + endMarker + "\nb\n"))
}
