// Command guard is the pod lease guard: a sidecar the manager adds to the Pods
// of a guarded run. It confirms the run's lease in Redis on its own clock and
// stops the Pod's workload before the lease could expire when it cannot, or
// at once when another holder has it. See internal/podguard for its contract
// (environment, state files, exit codes).
//
// It is built into the manager image as /guard. It depends on no Kubernetes
// client: everything it needs comes from its environment and mounted files.
package main

import (
	"os"

	"github.com/guardedjob/guardedjob/internal/buildinfo"

	"github.com/guardedjob/guardedjob/internal/podguard"
)

// version and commit are the release and commit this binary was built from, set
// at build time with -ldflags "-X main.version=... -X main.commit=..." (the
// Dockerfile, make binaries). Unset, the binary's build info says (internal/buildinfo).
var version, commit string

func main() { os.Exit(podguard.Main(buildinfo.Resolve(version, commit).String(), os.Args[1:])) }
