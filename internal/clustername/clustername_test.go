package clustername_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/clustername"
)

func TestFromNamespaceUID(t *testing.T) {
	for _, tt := range []struct{ name, uid, want string }{
		{"the first group of a UID", "5f3a9c0b-1d2e-4f60-8a7b-9c0d1e2f3a4b", "cluster-5f3a9c0b"},
		{"a UID without dashes is used whole", "5f3a9c0b", "cluster-5f3a9c0b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(clustername.FromNamespaceUID(tt.uid)).To(Equal(tt.want))
		})
	}
}
