package config_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/guardedjob/guardedjob/internal/testutil/bins"
)

// apiServer starts a real API server for one test and returns a kubeconfig for an
// administrator of it.
func apiServer(t *testing.T) string {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds kube-apiserver and etcd")
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	if _, err := env.Start(); err != nil {
		t.Fatalf("start the API server: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubectlRun runs kubectl against kubeconfig and returns stdout and stderr.
func kubectlRun(t *testing.T, kubeconfig string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(bins.Kubectl(t), append(args, "--kubeconfig", kubeconfig)...)
	cmd.Dir = repoRoot(t)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// TestInstallerAppliesClientSide applies the installer `make build-installer`
// writes, and the samples, the way a GitOps tool's default sync does: a
// client-side `kubectl apply` (no --server-side), which keeps a copy of every
// object in its last-applied annotation and so fails on an object over 256 KiB.
// A second apply of the same files changes nothing.
func TestInstallerAppliesClientSide(t *testing.T) {
	g := NewWithT(t)
	kubeconfig := apiServer(t)

	render := exec.Command(filepath.Join(repoRoot(t), "hack", "render-manifests.sh"), "registry.example/guardedjob-manager:9.8.7")
	render.Env = append(os.Environ(), "KUBECTL="+bins.Kubectl(t))
	var stderr bytes.Buffer
	render.Stderr = &stderr
	installer, err := render.Output()
	g.Expect(err).NotTo(HaveOccurred(), "hack/render-manifests.sh: %s", stderr.String())
	install := filepath.Join(t.TempDir(), "install.yaml")
	g.Expect(os.WriteFile(install, installer, 0o644)).To(Succeed())
	objects := len(decode(t, installer))

	apply := func(args ...string) []string {
		t.Helper()
		out, errOut, err := kubectlRun(t, kubeconfig, append([]string{"apply"}, args...)...)
		g.Expect(err).NotTo(HaveOccurred(), "kubectl apply %v: %s", args, errOut)
		g.Expect(errOut).NotTo(ContainSubstring("Warning"), "kubectl apply %v", args)
		return strings.Split(strings.TrimSpace(out), "\n")
	}

	first := apply("-f", install)
	g.Expect(first).To(HaveLen(objects))
	g.Expect(first).To(ContainElement("customresourcedefinition.apiextensions.k8s.io/guardedjobs.batch.guardedjob.dev created"))
	g.Expect(first).To(HaveEach(HaveSuffix(" created")))

	// kubectl wait fails rather than waits while a new CRD has no status yet, so
	// it is retried until the deadline.
	g.Eventually(func() error {
		_, errOut, err := kubectlRun(t, kubeconfig, "wait", "--for=condition=Established", "--timeout=10s", "crd/guardedjobs.batch.guardedjob.dev")
		if err != nil {
			return fmt.Errorf("%w: %s", err, errOut)
		}
		return nil
	}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Succeed())
	samples := apply("-k", "config/samples")
	g.Expect(samples).To(ContainElement(HavePrefix("guardedjob.batch.guardedjob.dev/")))
	g.Expect(samples).To(HaveEach(HaveSuffix(" created")))

	// Applied again, nothing changes: kubectl says so, and no object gets a new
	// resourceVersion. kubectl always sends a PodDisruptionBudget's selector (its
	// patch strategy is replace) and so calls it configured; the API server stores
	// nothing new.
	before := resourceVersions(t, kubeconfig, "-f", install)
	g.Expect(before).To(HaveLen(objects))
	again := apply("-f", install)
	g.Expect(again).To(HaveLen(objects))
	for _, line := range again {
		if strings.HasPrefix(line, "poddisruptionbudget.policy/") {
			continue
		}
		g.Expect(line).To(HaveSuffix(" unchanged"), "a second apply of the installer changes nothing")
	}
	g.Expect(resourceVersions(t, kubeconfig, "-f", install)).To(Equal(before), "a second apply of the installer stores nothing new")
	g.Expect(apply("-k", "config/samples")).To(HaveEach(HaveSuffix(" unchanged")), "a second apply of the samples changes nothing")
}

// resourceVersions lists kind/name=resourceVersion of the objects kubectl get
// finds with args.
func resourceVersions(t *testing.T, kubeconfig string, args ...string) []string {
	t.Helper()
	out, errOut, err := kubectlRun(t, kubeconfig, append([]string{"get", "-o",
		`jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}`}, args...)...)
	if err != nil {
		t.Fatalf("kubectl get %v: %v: %s", args, err, errOut)
	}
	return strings.Split(strings.TrimSpace(out), "\n")
}
