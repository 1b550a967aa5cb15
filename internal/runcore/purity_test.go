package runcore_test

import (
	"testing"

	"github.com/guardedjob/guardedjob/internal/testutil/purity"
)

// TestTheCoreIsPure: the protocol's decisions reach no API server, no store, no
// keeper and no clock. Its own imports name none of the packages that do, none
// of its dependencies is a client of either, and no file of it reads the clock:
// the time comes from its caller, as what a pass observed.
func TestTheCoreIsPure(t *testing.T) {
	purity.Check(t, "runcore")
}
