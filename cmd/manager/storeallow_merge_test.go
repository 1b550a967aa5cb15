package main

import (
	"fmt"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
)

// The ranges read from a large cluster's Nodes collapse into the blocks they fill,
// for the log line and every connection's check.
func TestClusterRangesMergeIntoTheBlocksTheyFill(t *testing.T) {
	var nodes []netip.Prefix
	for i := range 256 {
		nodes = append(nodes, netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", i)))
	}
	r := clusterRanges{
		service: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:10:96::/112")},
		pod:     append(nodes, netip.MustParsePrefix("fd00:10:244:1::/64"), netip.MustParsePrefix("10.244.7.0/24")),
	}
	NewWithT(t).Expect(prefixes(r.all())).To(Equal("10.96.0.0/12,10.244.0.0/16,fd00:10:96::/112,fd00:10:244:1::/64"))
	NewWithT(t).Expect(r.all()).To(HaveLen(4))
	NewWithT(t).Expect(merge(nil)).To(BeEmpty())
}
