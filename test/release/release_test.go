// Package release_test runs hack/release.sh (what `make release` runs) into a
// temporary directory and checks what a user downloads: every file is there and in
// checksums.txt with its sha256, the krew manifest points at each archive under
// RELEASE_URL with the archive's sha256, the plugin binaries are static, trimmed and
// say their version and commit, the manager image's archive holds the index its
// digest file names, and the installer, CRDs and chart name the release's image.
package release_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/guardedjob/guardedjob/internal/testutil/bins"
)

const (
	version    = "0.0.0-test"
	imageRepo  = "registry.example:5000/team/guardedjob-manager"
	releaseURL = "https://downloads.example/guardedjob/v0.0.0-test"
)

// krewPlugin is the part of krew's Plugin manifest (v1alpha2) a release sets.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// releasePlatforms are the platforms the test releases the plugin for:
// $RELEASE_TEST_PLATFORMS (make test-release sets every platform krew lists), or
// this machine's alone, whose build make test has already compiled: every other
// platform compiles the plugin's dependencies again, minutes each.
func releasePlatforms() []string {
	if v := strings.Fields(os.Getenv("RELEASE_TEST_PLATFORMS")); len(v) > 0 {
		return v
	}
	return []string{runtime.GOOS + "/" + runtime.GOARCH}
}

// imagePlatforms are the platforms the test builds the manager image for: the
// release's (linux/amd64 and linux/arm64) under make test-release, else Linux on
// this machine's architecture alone (make test-image checks both).
func imagePlatforms() []string {
	if os.Getenv("RELEASE_TEST_PLATFORMS") != "" {
		return []string{"linux/amd64", "linux/arm64"}
	}
	return []string{"linux/" + runtime.GOARCH}
}

func TestReleaseFiles(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)
	dist := t.TempDir()
	platforms := releasePlatforms()
	cmd := exec.Command(filepath.Join(root, "hack", "release.sh"), version)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "DIST="+dist, "IMAGE_REPO="+imageRepo, "RELEASE_URL="+releaseURL+"/",
		"HELM="+bins.Helm(t), "KUBECTL="+bins.Kubectl(t), "RELEASE_PLATFORMS="+strings.Join(platforms, " "),
		"IMAGE_PLATFORMS="+strings.Join(imagePlatforms(), " "))
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "hack/release.sh %s:\n%s", version, out)

	archives := map[string]string{} // os/arch -> archive
	for _, p := range platforms {
		goos, goarch, _ := strings.Cut(p, "/")
		ext := ".tar.gz"
		if goos == "windows" {
			ext = ".zip"
		}
		archives[p] = "kubectl-guardedjob_v" + version + "_" + goos + "_" + goarch + ext
	}
	want := []string{"install.yaml", "crds.yaml", "guardedjob-0.0.0-test.tgz", "krew-guardedjob.yaml", "checksums.txt",
		"guardedjob-manager-0.0.0-test.oci.tar", "guardedjob-manager-0.0.0-test.digest", "guardedjob-manager-0.0.0-test.cdx.json"}
	for _, a := range archives {
		want = append(want, a)
	}
	var got []string
	g.Expect(filepath.WalkDir(dist, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dist, path)
			got = append(got, rel)
		}
		return err
	})).To(Succeed())
	g.Expect(got).To(ConsistOf(want), "the release's files")

	// checksums.txt: every other file, with its sha256, in sha256sum's format.
	sums := map[string]string{}
	raw, err := os.ReadFile(filepath.Join(dist, "checksums.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		g.Expect(ok).To(BeTrue(), "checksums.txt line %q", line)
		g.Expect(sums).NotTo(HaveKey(name), "listed twice")
		sums[name] = sum
	}
	var listed []string
	for name, sum := range sums {
		listed = append(listed, name)
		g.Expect(sum).To(Equal(sha256File(t, filepath.Join(dist, name))), "sha256 of %s", name)
	}
	g.Expect(listed).To(ConsistOf(slices.DeleteFunc(slices.Clone(want), func(s string) bool { return s == "checksums.txt" })))
	check := exec.Command("sha256sum", "--check", "--strict", "checksums.txt")
	check.Dir = dist
	out, err = check.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "sha256sum --check:\n%s", out)

	// The krew manifest.
	raw, err = os.ReadFile(filepath.Join(dist, "krew-guardedjob.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var plugin krewPlugin
	g.Expect(yaml.UnmarshalStrict(raw, &plugin, yaml.DisallowUnknownFields)).To(Succeed(), "%s", raw)
	g.Expect(plugin.APIVersion).To(Equal("krew.googlecontainertools.github.com/v1alpha2"))
	g.Expect(plugin.Kind).To(Equal("Plugin"))
	g.Expect(plugin.Metadata.Name).To(Equal("guardedjob"), "kubectl guardedjob runs kubectl-guardedjob")
	g.Expect(plugin.Spec.Version).To(Equal("v" + version))
	g.Expect(plugin.Spec.Homepage).To(HavePrefix("https://"))
	g.Expect(plugin.Spec.ShortDescription).NotTo(BeEmpty())
	g.Expect(plugin.Spec.Description).NotTo(BeEmpty())
	checkKrewCaveats(t, plugin.Spec.Caveats)
	seen := map[string]bool{}
	for _, p := range plugin.Spec.Platforms {
		platform := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		g.Expect(p.Selector.MatchLabels).To(HaveLen(2))
		archive, ok := archives[platform]
		g.Expect(ok).To(BeTrue(), "unexpected platform %s", platform)
		g.Expect(seen).NotTo(HaveKey(platform))
		seen[platform] = true
		g.Expect(p.URI).To(Equal(releaseURL+"/"+archive), "uri of %s", platform)
		g.Expect(p.SHA256).To(Equal(sha256File(t, filepath.Join(dist, archive))), "sha256 of %s", archive)
		g.Expect(p.SHA256).To(Equal(sums[archive]))
		bin := "kubectl-guardedjob"
		if strings.HasPrefix(platform, "windows/") {
			bin += ".exe"
		}
		g.Expect(p.Bin).To(Equal(bin))

		files := unpack(t, filepath.Join(dist, archive))
		g.Expect(files).To(HaveLen(2), "%s holds the binary and LICENSE", archive)
		g.Expect(files).To(HaveKey("LICENSE"))
		g.Expect(string(files["LICENSE"])).To(ContainSubstring("Apache License"))
		g.Expect(files).To(HaveKey(bin), archive)
		checkBinary(t, platform, bin, files[bin])
	}
	g.Expect(seen).To(HaveLen(len(archives)))

	checkImage(t, dist)

	// The installer and the CRDs.
	objs := decode(t, filepath.Join(dist, "install.yaml"))
	var images []string
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range cs {
				images = append(images, c.(map[string]any)["image"].(string))
			}
		}
	}
	g.Expect(images).To(Equal([]string{imageRepo + ":" + version}))
	var crds []byte
	files, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		g.Expect(err).NotTo(HaveOccurred())
		crds = append(crds, b...)
	}
	got2, err := os.ReadFile(filepath.Join(dist, "crds.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got2)).To(Equal(string(crds)), "crds.yaml is config/crd/bases")

	// The chart: the release's version, image and runbooks.
	chart := filepath.Join(dist, "guardedjob-0.0.0-test.tgz")
	out, err = exec.Command(bins.Helm(t), "show", "chart", chart).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	g.Expect(string(out)).To(And(ContainSubstring("\nversion: "+version+"\n"), ContainSubstring("\nappVersion: "+version+"\n")))
	out, err = exec.Command(bins.Helm(t), "template", "guardedjob", chart, "--kube-version", "1.37.2", "--set", "redis.existingSecret=s",
		"--set", "metrics.prometheusRule.enabled=true").Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring(`image: "` + imageRepo + ":" + version + `"`))
	runbooks := regexp.MustCompile(`runbook_url: (\S+)`).FindAllStringSubmatch(string(out), -1)
	g.Expect(runbooks).NotTo(BeEmpty())
	for _, m := range runbooks {
		g.Expect(m[1]).To(HavePrefix("https://github.com/guardedjob/guardedjob/blob/v"+version+"/docs/operations.md#"), "the release's runbooks")
	}
}

// OCI image layout documents, as much of them as the test reads (JSON field names
// match case-insensitively).
type (
	ociDescriptor struct {
		MediaType   string
		Digest      string
		Annotations map[string]string
		Platform    *struct{ OS, Architecture string }
	}
	ociIndex    struct{ Manifests []ociDescriptor }
	ociManifest struct {
		Config ociDescriptor
		Layers []ociDescriptor
	}
	ociConfig struct {
		OS, Architecture string
		Config           struct {
			User       string
			Entrypoint []string
			Labels     map[string]string
		}
	}
)

// checkImage checks the release's manager image: the archive is an OCI image
// layout whose every blob has the digest it is named by; index.json names one image
// index, tagged with the version, whose digest is the digest file's; it has an
// image for every platform, run as 65532:65532 with /manager as entrypoint and the
// release's labels; this machine's /manager prints the release's version; the
// SBOM describes that index.
func checkImage(t *testing.T, dist string) {
	t.Helper()
	g := NewWithT(t)
	name := "guardedjob-manager-" + version
	files := untar(t, filepath.Join(dist, name+".oci.tar"), nil)
	g.Expect(files).To(HaveKeyWithValue("oci-layout", MatchJSON(`{"imageLayoutVersion": "1.0.0"}`)))
	blob := func(digest string) []byte {
		t.Helper()
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
		if !ok {
			t.Fatalf("%s.oci.tar has no blob %s", name, digest)
		}
		return b
	}
	for path, b := range files {
		if hex, ok := strings.CutPrefix(path, "blobs/sha256/"); ok {
			sum := sha256.Sum256(b)
			g.Expect(hex).To(Equal(fmt.Sprintf("%x", sum)), "blob %s", path)
		}
	}
	digest, err := os.ReadFile(filepath.Join(dist, name+".digest"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(digest)).To(MatchRegexp(`^sha256:[0-9a-f]{64}\n$`))

	var top, index ociIndex
	g.Expect(json.Unmarshal(files["index.json"], &top)).To(Succeed())
	g.Expect(top.Manifests).To(HaveLen(1))
	g.Expect(top.Manifests[0].MediaType).To(Equal("application/vnd.oci.image.index.v1+json"))
	g.Expect(top.Manifests[0].Digest).To(Equal(strings.TrimSpace(string(digest))), "the digest file names the index in the archive")
	g.Expect(top.Manifests[0].Annotations).To(HaveKeyWithValue("org.opencontainers.image.ref.name", version))
	g.Expect(json.Unmarshal(blob(top.Manifests[0].Digest), &index)).To(Succeed())

	head, err := exec.Command("git", "-C", repoRoot(t), "rev-parse", "HEAD").Output()
	g.Expect(err).NotTo(HaveOccurred())
	var platforms []string
	for _, d := range index.Manifests {
		g.Expect(d.Platform).NotTo(BeNil())
		platform := d.Platform.OS + "/" + d.Platform.Architecture
		platforms = append(platforms, platform)
		var m ociManifest
		var c ociConfig
		g.Expect(json.Unmarshal(blob(d.Digest), &m)).To(Succeed())
		g.Expect(json.Unmarshal(blob(m.Config.Digest), &c)).To(Succeed())
		g.Expect(c.OS + "/" + c.Architecture).To(Equal(platform))
		g.Expect(c.Config.User).To(Equal("65532:65532"))
		g.Expect(c.Config.Entrypoint).To(Equal([]string{"/manager"}))
		g.Expect(c.Config.Labels).To(HaveKeyWithValue("org.opencontainers.image.version", version))
		g.Expect(c.Config.Labels).To(HaveKeyWithValue("org.opencontainers.image.revision", HavePrefix(strings.TrimSpace(string(head)))))
		if platform != runtime.GOOS+"/"+runtime.GOARCH {
			continue
		}
		// The binaries are the last layer.
		app := untar(t, "", blob(m.Layers[len(m.Layers)-1].Digest))
		g.Expect(app).To(HaveKey("guard"))
		manager := filepath.Join(t.TempDir(), "manager")
		g.Expect(os.WriteFile(manager, app["manager"], 0o755)).To(Succeed())
		out, err := exec.Command(manager, "--version").CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "%s", out)
		g.Expect(string(out)).To(HavePrefix(version + " (commit " + strings.TrimSpace(string(head))))
	}
	g.Expect(platforms).To(ConsistOf(imagePlatforms()))

	var sbom struct {
		BOMFormat string
		Metadata  struct{ Component struct{ Purl string } }
	}
	raw, err := os.ReadFile(filepath.Join(dist, name+".cdx.json"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(json.Unmarshal(raw, &sbom)).To(Succeed())
	g.Expect(sbom.BOMFormat).To(Equal("CycloneDX"))
	g.Expect(sbom.Metadata.Component.Purl).To(HavePrefix("pkg:oci/guardedjob-manager@" + strings.TrimSpace(string(digest))))
}

// untar returns the regular files of a tar file (or of gzipped tar data) by name.
func untar(t *testing.T, path string, gzipped []byte) map[string][]byte {
	t.Helper()
	var r io.Reader
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		r = f
	} else {
		gz, err := gzip.NewReader(bytes.NewReader(gzipped))
		if err != nil {
			t.Fatal(err)
		}
		r = gz
	}
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}

// unpack returns the regular files of a .tar.gz or .zip archive by name.
func unpack(t *testing.T, path string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	if strings.HasSuffix(path, ".zip") {
		r, err := zip.OpenReader(path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = r.Close() }()
		for _, f := range r.File {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(rc)
			_ = rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			files[f.Name] = b
		}
		return files
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			t.Errorf("%s: %s is not a regular file", path, h.Name)
			continue
		}
		if h.Mode&0o111 == 0 && h.Name != "LICENSE" {
			t.Errorf("%s: %s is not executable (mode %o)", path, h.Name, h.Mode)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}

// checkBinary checks a plugin binary: built for its platform without cgo and with
// -trimpath, static on Linux, and, where it can run here, saying its version and
// commit.
func checkBinary(t *testing.T, platform, name string, b []byte) {
	t.Helper()
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), name)
	g.Expect(os.WriteFile(path, b, 0o755)).To(Succeed())
	info, err := buildinfo.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred(), platform)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	goos, goarch, _ := strings.Cut(platform, "/")
	for k, v := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": goos, "GOARCH": goarch} {
		g.Expect(settings).To(HaveKeyWithValue(k, v), "%s build setting %s", platform, k)
	}
	if goos == "linux" {
		f, err := elf.Open(path)
		g.Expect(err).NotTo(HaveOccurred())
		for _, p := range f.Progs {
			g.Expect(p.Type).NotTo(Equal(elf.PT_INTERP), "%s: dynamically linked", platform)
		}
		_ = f.Close()
	}
	if platform != runtime.GOOS+"/"+runtime.GOARCH {
		return
	}
	out, err := exec.Command(path, "version").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	head, err := exec.Command("git", "-C", repoRoot(t), "rev-parse", "HEAD").Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(HavePrefix("kubectl-guardedjob " + version + " (commit " + strings.TrimSpace(string(head))))
}

func decode(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatal(err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// A release whose IMAGE_REPO names no registry is refused before anything is
// written: its installer and chart would make nodes look for the image on Docker
// Hub. ALLOW_LOCAL_IMAGE=1 lets it through (for nodes that have the image loaded
// by hand), and the installer then names the image as given.
func TestReleaseRefusesAnImageWithoutARegistry(t *testing.T) {
	root := repoRoot(t)
	for _, repo := range []string{"guardedjob-manager", "team/guardedjob-manager"} {
		t.Run(repo, func(t *testing.T) {
			g := NewWithT(t)
			dist := t.TempDir()
			cmd := exec.Command(filepath.Join(root, "hack", "release.sh"), version)
			cmd.Env = append(os.Environ(), "DIST="+dist, "IMAGE_REPO="+repo, "HELM="+bins.Helm(t), "KUBECTL="+bins.Kubectl(t))
			out, err := cmd.CombinedOutput()
			g.Expect(err).To(HaveOccurred(), "%s", out)
			g.Expect(string(out)).To(ContainSubstring("IMAGE_REPO=" + repo + " names no registry"))
			g.Expect(string(out)).To(ContainSubstring("IMAGE_REPO=registry.example.com/team/guardedjob-manager"))
			g.Expect(string(out)).To(ContainSubstring("ALLOW_LOCAL_IMAGE=1"))
			entries, err := os.ReadDir(dist)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(entries).To(BeEmpty(), "nothing was released")
		})
	}

	// Allowed: the release goes on (here it stops at the chart, with a helm that
	// does not exist, before compiling anything) and the installer names the image.
	g := NewWithT(t)
	dist := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack", "release.sh"), version)
	cmd.Env = append(os.Environ(), "DIST="+dist, "IMAGE_REPO=guardedjob-manager", "ALLOW_LOCAL_IMAGE=1",
		"HELM="+filepath.Join(t.TempDir(), "no-helm"), "KUBECTL="+bins.Kubectl(t))
	out, err := cmd.CombinedOutput()
	g.Expect(string(out)).NotTo(ContainSubstring("names no registry"))
	g.Expect(err).To(HaveOccurred(), "the missing helm stops it: %s", out)
	var images []string
	for _, o := range decode(t, filepath.Join(dist, "install.yaml")) {
		if o.GetKind() == "Deployment" {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range cs {
				images = append(images, c.(map[string]any)["image"].(string))
			}
		}
	}
	g.Expect(images).To(Equal([]string{"guardedjob-manager:" + version}))
}

// A release (not a pre-release) of a tree whose kustomize alerts link the
// runbooks of another version is refused before anything is built: users who
// apply config/ at the release's tag would follow links to other docs.
func TestReleaseRefusesAlertsOfAnotherVersion(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)
	dist := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack", "release.sh"), "99.0.0")
	cmd.Env = append(os.Environ(), "DIST="+dist, "HELM="+bins.Helm(t))
	out, err := cmd.CombinedOutput()
	g.Expect(err).To(HaveOccurred(), "%s", out)
	g.Expect(string(out)).To(ContainSubstring("config/prometheus links the runbooks of another release than 99.0.0"))
	g.Expect(string(out)).To(ContainSubstring(`sed -i 's|/blob/v[^/]*/docs/|/blob/v99.0.0/docs/|'`))
	entries, err := os.ReadDir(dist)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(BeEmpty(), "nothing was released")
}

// checkKrewCaveats checks what krew shows after an install: what the plugin needs
// (patch on GuardedJobs, the edit role: it asks the manager through annotations),
// and never that it needs the lock store's credentials. Reading the store directly
// (--redis-secret, GUARDEDJOB_REDIS_URL) is the admins' break-glass option, and
// every sentence naming it must say so.
func checkKrewCaveats(t *testing.T, caveats string) {
	t.Helper()
	g := NewWithT(t)
	text := strings.Join(strings.Fields(caveats), " ")
	g.Expect(text).To(ContainSubstring("patch on guardedjobs"), "the caveats say what the plugin needs: %s", text)
	g.Expect(text).To(ContainSubstring("edit role"), "and which built-in role gives it: %s", text)
	direct := regexp.MustCompile(`--redis-secret|GUARDEDJOB_REDIS_URL`)
	demand := regexp.MustCompile(`(?i)\b(pass|set|need|needs|required?|must)\b`)
	for _, sentence := range regexp.MustCompile(`[.;:]\s+`).Split(text, -1) {
		if !direct.MatchString(sentence) {
			continue
		}
		g.Expect(sentence).To(ContainSubstring("directly"), "direct store access is an option: %q", sentence)
		g.Expect(demand.FindString(sentence)).To(BeEmpty(), "the plugin does not need the store's credentials: %q", sentence)
	}
}
