package due_test

import (
	"testing"

	"github.com/guardedjob/guardedjob/internal/testutil/purity"
)

// TestDueIsPure: which start comes now is decided from the spec, the status
// and the now its caller hands it; no API server, store or clock.
func TestDueIsPure(t *testing.T) {
	purity.Check(t, "due")
}
