package main

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// softLimitShare is the share of the container's memory limit the Go runtime's
// soft limit takes: the rest is for what the runtime does not count against it
// (the binary, pages not returned yet) and for the moment the collector needs
// to catch up.
const softLimitShare = 0.9

// softMemoryLimit is the Go runtime's soft memory limit for a manager whose
// container may use limit (--memory-limit, a quantity; the manifests pass the
// container's limits.memory in bytes through the Downward API), or 0 for none.
// Near the soft limit the garbage collector runs more often instead of letting a
// burst of garbage (thousands of GuardedJobs created at once, say) take the
// process over its hard limit: an OOM kill would drop the leases the keeper
// holds in memory. GOMEMLIMIT, when set, is the operator's own choice and wins.
func softMemoryLimit(limit, gomemlimit string) (int64, error) {
	if limit == "" || gomemlimit != "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(limit)
	if err != nil {
		return 0, fmt.Errorf("--memory-limit %q: want a quantity of bytes such as 256Mi: %w", limit, err)
	}
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("--memory-limit %q: want more than 0 bytes", limit)
	}
	return int64(float64(q.Value()) * softLimitShare), nil
}
