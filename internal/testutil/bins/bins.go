// Package bins finds the programs tests run besides themselves: the manager, the pod
// guard, the kubectl plugin, kubectl and helm. `make test` builds each of them once, with the
// flags of a release build, and names them in the environment; a plain `go test`
// builds the project's own binaries on first use instead. Nothing is taken from the
// machine's PATH: a test always runs the versions the project pins.
package bins

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Environment variables that name prebuilt binaries (set by `make test`).
const (
	ManagerEnv = "GUARDEDJOB_MANAGER_BIN"
	PluginEnv  = "GUARDEDJOB_PLUGIN_BIN"
	GuardEnv   = "GUARDEDJOB_GUARD_BIN"
	KubectlEnv = "KUBECTL"
	HelmEnv    = "HELM"
)

// Manager returns the manager binary: $GUARDEDJOB_MANAGER_BIN, or one built from
// this checkout on first use.
func Manager(t testing.TB) string {
	t.Helper()
	return projectBinary(t, ManagerEnv, "./cmd/manager", "manager")
}

// Plugin returns the kubectl-guardedjob binary: $GUARDEDJOB_PLUGIN_BIN, or one built
// from this checkout on first use.
func Plugin(t testing.TB) string {
	t.Helper()
	return projectBinary(t, PluginEnv, "./cmd/kubectl-guardedjob", "kubectl-guardedjob")
}

// Guard returns the pod guard binary: $GUARDEDJOB_GUARD_BIN, or one built from this
// checkout on first use.
func Guard(t testing.TB) string {
	t.Helper()
	return projectBinary(t, GuardEnv, "./cmd/guard", "guard")
}

// Kubectl returns the kubectl built at the API server's version: $KUBECTL, or the
// one beside the control plane in $KUBEBUILDER_ASSETS (hack/build-control-plane.sh
// builds both).
func Kubectl(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(KubectlEnv); p != "" {
		return mustExist(t, KubectlEnv, p)
	}
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return mustExist(t, "KUBEBUILDER_ASSETS", filepath.Join(dir, "kubectl"))
	}
	t.Fatalf("no kubectl: set %s or KUBEBUILDER_ASSETS (make test sets both; hack/build-control-plane.sh builds kubectl at the API server's version)", KubectlEnv)
	return ""
}

// Helm returns $HELM (make test installs the pinned helm into the tools cache).
func Helm(t testing.TB) string {
	t.Helper()
	p := os.Getenv(HelmEnv)
	if p == "" {
		t.Fatalf("no helm: set %s (make test installs the pinned helm and sets it)", HelmEnv)
	}
	return mustExist(t, HelmEnv, p)
}

func mustExist(t testing.TB, what, p string) string {
	t.Helper()
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return p
}

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// projectBinary returns $env, or builds pkg once per test process with the flags
// of `make build` (so the build cache is shared with it).
func projectBinary(t testing.TB, env, pkg, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return mustExist(t, env, p)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "guardedjob-bin-")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s (set %s to use a prebuilt one): %v\n%s", pkg, env, err, b)
	}
	built[pkg] = out
	return out
}

// moduleRoot is the directory of the project's go.mod, found upward from the
// working directory (a test runs in its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "cmd", "manager")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("the project's go.mod was not found above the working directory")
		}
		dir = parent
	}
}
