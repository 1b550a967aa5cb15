package main

// These tests check the image `make image` built (make test-image runs them with
// its layout, SBOM and build settings in OCIIMAGE_TEST_*): what a registry, a
// container runtime and the Deployments see, the binaries it runs, its SBOM, that
// building it again from the same binaries gives the same digest, and a push to a
// registry on 127.0.0.1 (go-containerregistry's, in the test process).

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	. "github.com/onsi/gomega"
	purl "github.com/package-url/packageurl-go"
)

// built is what make image built, from OCIIMAGE_TEST_*.
var built struct {
	layout, sbom, version, revision string
	created                         time.Time
	platforms                       []string
}

func TestMain(m *testing.M) {
	env := func(k string) string {
		v := os.Getenv("OCIIMAGE_TEST_" + k)
		if v == "" {
			fmt.Fprintf(os.Stderr, "OCIIMAGE_TEST_%s is not set: these tests check the image make image built; run make test-image\n", k)
			os.Exit(2)
		}
		return v
	}
	built.layout, built.sbom = env("LAYOUT"), env("SBOM")
	built.version, built.revision = env("VERSION"), env("REVISION")
	built.platforms = strings.Fields(env("PLATFORMS"))
	secs, err := strconv.ParseInt(env("CREATED"), 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "OCIIMAGE_TEST_CREATED:", err)
		os.Exit(2)
	}
	built.created = time.Unix(secs, 0).UTC()
	os.Exit(m.Run())
}

func builtIndex(t *testing.T) v1.ImageIndex {
	t.Helper()
	idx, err := layoutIndex(built.layout)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// images returns the index's images by platform.
func images(t *testing.T, idx v1.ImageIndex) map[string]v1.Image {
	t.Helper()
	g := NewWithT(t)
	m, err := idx.IndexManifest()
	g.Expect(err).NotTo(HaveOccurred())
	imgs := map[string]v1.Image{}
	for _, d := range m.Manifests {
		g.Expect(d.Platform).NotTo(BeNil(), "manifest %s has no platform", d.Digest)
		img, err := idx.Image(d.Digest)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(imgs).NotTo(HaveKey(d.Platform.String()), "two images for one platform")
		imgs[d.Platform.String()] = img
	}
	return imgs
}

// entry is a file of an image's filesystem.
type entry struct {
	header *tar.Header
	data   []byte
}

// filesystem returns the image's files as a container runtime unpacks them.
func filesystem(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	files := map[string]entry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files["/"+strings.Trim(h.Name, "/")] = entry{header: h, data: b}
	}
}

func TestTheLayoutHoldsOneIndexWithAnImageForEveryPlatform(t *testing.T) {
	g := NewWithT(t)
	// index.json, as skopeo (oci:DIR:TAG) and crane read it.
	raw, err := os.ReadFile(filepath.Join(built.layout, "index.json"))
	g.Expect(err).NotTo(HaveOccurred())
	var top v1.IndexManifest
	g.Expect(json.Unmarshal(raw, &top)).To(Succeed())
	g.Expect(top.Manifests).To(HaveLen(1))
	g.Expect(top.Manifests[0].MediaType).To(Equal(types.OCIImageIndex))
	g.Expect(top.Manifests[0].Annotations).To(HaveKeyWithValue("org.opencontainers.image.ref.name", built.version))

	idx := builtIndex(t)
	// Every blob is there, with the digest and size its descriptor says; every
	// layer's diff ID is its uncompressed digest; each config's platform is its
	// descriptor's.
	g.Expect(validate.Index(idx)).To(Succeed())
	mt, err := idx.MediaType()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mt).To(Equal(types.OCIImageIndex))
	m, err := idx.IndexManifest()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Annotations).To(HaveKeyWithValue("org.opencontainers.image.version", built.version))
	g.Expect(m.Annotations).To(HaveKeyWithValue("org.opencontainers.image.revision", built.revision))

	imgs := images(t, idx)
	g.Expect(slices.Sorted(func(yield func(string) bool) {
		for p := range imgs {
			if !yield(p) {
				return
			}
		}
	})).To(Equal(slices.Sorted(slices.Values(built.platforms))))
	var bases []v1.Hash
	for platform, img := range imgs {
		mt, err := img.MediaType()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(mt).To(Equal(types.OCIManifestSchema1), platform)
		cfg, err := img.ConfigFile()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cfg.OS + "/" + cfg.Architecture).To(Equal(platform))
		g.Expect(cfg.Created.Time.Equal(built.created)).To(BeTrue(), "%s created %s, want SOURCE_DATE_EPOCH %s", platform, cfg.Created, built.created)
		// What the Deployments' runAsNonRoot and the pod guard sidecar rely on.
		g.Expect(cfg.Config.User).To(Equal("65532:65532"), platform)
		g.Expect(cfg.Config.Entrypoint).To(Equal([]string{"/manager"}), platform)
		g.Expect(cfg.Config.Cmd).To(BeEmpty(), platform)
		g.Expect(cfg.Config.Labels).To(Equal(map[string]string{
			"org.opencontainers.image.title":       "guardedjob-manager",
			"org.opencontainers.image.description": "GuardedJob manager: scheduled Jobs that hold a Redis lease with a fencing number while they run",
			"org.opencontainers.image.version":     built.version,
			"org.opencontainers.image.revision":    built.revision,
			"org.opencontainers.image.source":      "https://github.com/guardedjob/guardedjob",
			"org.opencontainers.image.created":     built.created.Format(time.RFC3339),
			"org.opencontainers.image.licenses":    "Apache-2.0",
		}), platform)
		layers, err := img.Layers()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(layers).To(HaveLen(2), "base files, then the binaries")
		d, err := layers[0].Digest()
		g.Expect(err).NotTo(HaveOccurred())
		bases = append(bases, d)
	}
	g.Expect(slices.Compact(bases)).To(HaveLen(1), "every platform shares the base layer (one blob to pull)")
}

func TestTheImageHoldsTheBinariesAndWhatDistrolessStaticGivesThem(t *testing.T) {
	host := runtime.GOOS + "/" + runtime.GOARCH
	for platform, img := range images(t, builtIndex(t)) {
		t.Run(platform, func(t *testing.T) {
			g := NewWithT(t)
			files := filesystem(t, img)
			for path, e := range files {
				g.Expect(e.header.ModTime.Equal(built.created)).To(BeTrue(), "%s is dated %s", path, e.header.ModTime)
			}
			for _, bin := range []string{"/manager", "/guard"} {
				g.Expect(files).To(HaveKey(bin))
				h := files[bin].header
				g.Expect(h.Typeflag).To(BeEquivalentTo(tar.TypeReg), bin)
				g.Expect(h.Mode).To(BeEquivalentTo(0o755), bin)
				g.Expect([]int{h.Uid, h.Gid}).To(Equal([]int{0, 0}), "%s is root's, so the manager cannot replace it", bin)
				info, err := buildinfo.Read(bytes.NewReader(files[bin].data))
				g.Expect(err).NotTo(HaveOccurred(), bin)
				g.Expect(info.Settings).To(ContainElements(
					setting("GOOS", strings.Split(platform, "/")[0]), setting("GOARCH", strings.Split(platform, "/")[1]),
					setting("CGO_ENABLED", "0"), setting("-trimpath", "true")), bin)
			}
			g.Expect(string(files["/etc/passwd"].data)).To(ContainSubstring("\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
			g.Expect(string(files["/etc/group"].data)).To(ContainSubstring("\nnonroot:x:65532:\n"))
			g.Expect(files["/home/nonroot"].header.Uid).To(Equal(65532))
			g.Expect(files["/tmp"].header.Mode).To(BeEquivalentTo(0o1777))
			pool := x509.NewCertPool()
			g.Expect(pool.AppendCertsFromPEM(files["/etc/ssl/certs/ca-certificates.crt"].data)).To(BeTrue(), "root certificates")
			g.Expect(bytes.Count(files["/etc/ssl/certs/ca-certificates.crt"].data, []byte("BEGIN CERTIFICATE"))).To(BeNumerically(">", 100))

			if platform != host {
				return
			}
			// This machine runs the image's binaries: they say the release they are.
			dir := t.TempDir()
			for _, bin := range []string{"manager", "guard"} {
				path := filepath.Join(dir, bin)
				g.Expect(os.WriteFile(path, files["/"+bin].data, 0o755)).To(Succeed())
				out, err := exec.Command(path, "--version").CombinedOutput()
				g.Expect(err).NotTo(HaveOccurred(), "/%s --version: %s", bin, out)
				if built.version == "dev" {
					// "dev" is the Makefile's unset version: a binary built from a clean
					// checkout says the pseudo-version Go stamps instead.
					g.Expect(strings.TrimSpace(string(out))).To(HaveSuffix(" (commit "+built.revision+")"), "/%s --version", bin)
					continue
				}
				g.Expect(strings.TrimSpace(string(out))).To(Equal(built.version+" (commit "+built.revision+")"), "/%s --version", bin)
			}
		})
	}
	if runtime.GOOS == "linux" {
		NewWithT(t).Expect(built.platforms).To(ContainElement(host), "the image is built for this machine's platform, whose binaries the test runs")
	}
}

// setting matches a build setting of a binary's build info.
func setting(key, value string) any {
	return And(HaveField("Key", key), HaveField("Value", value))
}

// unpackBinaries writes each platform's /manager and /guard from the image to a
// directory of its own, as build takes them.
func unpackBinaries(t *testing.T, imgs map[string]v1.Image) []platformDir {
	t.Helper()
	var dirs []platformDir
	for _, platform := range built.platforms {
		dir := t.TempDir()
		files := filesystem(t, imgs[platform])
		for _, bin := range binaries {
			if err := os.WriteFile(filepath.Join(dir, bin), files["/"+bin].data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		dirs = append(dirs, platformDir{platform: platform, dir: dir})
	}
	return dirs
}

func TestBuildingAgainFromTheSameBinariesGivesTheSameImage(t *testing.T) {
	g := NewWithT(t)
	idx := builtIndex(t)
	want, err := idx.Digest()
	g.Expect(err).NotTo(HaveOccurred())

	out := t.TempDir()
	o := options{
		layout: filepath.Join(out, "layout"), archive: filepath.Join(out, "image.tar"), sbom: filepath.Join(out, "sbom.json"),
		version: built.version, revision: built.revision, source: "https://github.com/guardedjob/guardedjob", tag: built.version,
		created: built.created, platforms: unpackBinaries(t, images(t, idx)),
	}
	got, err := build(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(want), "the index digest, built again at another time, in another directory")
	sbom, err := os.ReadFile(built.sbom)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.ReadFile(o.sbom)).To(Equal(sbom), "the SBOM")

	// The archive is the same bytes whichever copy of the layout it is made from.
	again := filepath.Join(out, "again.tar")
	g.Expect(writeArchive(built.layout, again, built.created)).To(Succeed())
	g.Expect(sha256File(t, again)).To(Equal(sha256File(t, o.archive)), "the archive of make image's layout")
	unpacked := t.TempDir()
	g.Expect(readArchive(o.archive, unpacked)).To(Succeed())
	fromArchive, err := layoutIndex(unpacked)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fromArchive.Digest()).To(Equal(want))
	g.Expect(validate.Index(fromArchive, validate.Fast)).To(Succeed())
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

func TestBuildRefusesBinariesOfAnotherPlatform(t *testing.T) {
	g := NewWithT(t)
	dir := unpackBinaries(t, images(t, builtIndex(t)))[0]
	_, err := build(options{
		layout: filepath.Join(t.TempDir(), "layout"), version: built.version, revision: built.revision, tag: built.version, created: built.created,
		platforms: []platformDir{{platform: "linux/s390x", dir: dir.dir}},
	})
	g.Expect(err).To(MatchError(ContainSubstring("is built for " + dir.platform + ", not linux/s390x")))
}

func TestTheSBOMListsTheGoModulesOfBothBinaries(t *testing.T) {
	g := NewWithT(t)
	f, err := os.Open(built.sbom)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	var bom cdx.BOM
	g.Expect(cdx.NewBOMDecoder(f, cdx.BOMFileFormatJSON).Decode(&bom)).To(Succeed())
	g.Expect(bom.SpecVersion).To(Equal(cdx.SpecVersion1_6))
	digest, err := builtIndex(t).Digest()
	g.Expect(err).NotTo(HaveOccurred())
	image, err := purl.FromString(bom.Metadata.Component.PackageURL)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect([]string{image.Type, image.Name, image.Version}).To(Equal([]string{"oci", "guardedjob-manager", digest.String()}), "the SBOM describes this image index")
	g.Expect(bom.Metadata.Timestamp).To(Equal(built.created.Format(time.RFC3339)))

	purls := map[string]bool{}
	for _, c := range *bom.Components {
		purls[c.PackageURL] = true
	}
	dependsOn := map[string][]string{}
	for _, d := range *bom.Dependencies {
		dependsOn[d.Ref] = *d.Dependencies
	}
	// The versions the binaries in the image were linked with.
	files := filesystem(t, images(t, builtIndex(t))[built.platforms[0]])
	for bin, modules := range map[string][]string{
		"manager": {"sigs.k8s.io/controller-runtime", "github.com/redis/go-redis/v9"},
		"guard":   {"github.com/redis/go-redis/v9"},
	} {
		info, err := buildinfo.Read(bytes.NewReader(files["/"+bin].data))
		g.Expect(err).NotTo(HaveOccurred())
		ref := binaryPURL(info, built.version)
		g.Expect(ref).To(HavePrefix("pkg:golang/github.com/guardedjob/guardedjob@"))
		g.Expect(ref).To(HaveSuffix("#cmd/" + bin))
		g.Expect(purls).To(HaveKey(ref), bin)
		g.Expect(dependsOn[ref]).To(ContainElement("pkg:golang/stdlib@"+info.GoVersion), bin)
		for _, module := range modules {
			i := slices.IndexFunc(info.Deps, func(m *debug.Module) bool { return m.Path == module })
			g.Expect(i).NotTo(Equal(-1), "%s is linked with %s", bin, module)
			p := goPURL(module, info.Deps[i].Version, "")
			g.Expect(purls).To(HaveKey(p))
			g.Expect(dependsOn[ref]).To(ContainElement(p), "%s depends on %s", bin, module)
		}
	}
	g.Expect(purls).To(HaveKey(goPURL(caModule, caVersion(), "")), "the root certificates' source")
}

func TestPushCopiesTheIndexToARegistryUnderItsDigest(t *testing.T) {
	g := NewWithT(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials of this machine's user
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	want, err := builtIndex(t).Digest()
	g.Expect(err).NotTo(HaveOccurred())

	archive := filepath.Join(t.TempDir(), "image.tar")
	g.Expect(writeArchive(built.layout, archive, built.created)).To(Succeed())
	for source, tag := range map[string]string{built.layout: built.version, archive: built.version + "-from-archive"} {
		pushed, err := push(source, host+"/team/guardedjob-manager:"+tag)
		g.Expect(err).NotTo(HaveOccurred(), source)
		g.Expect(pushed).To(Equal(host + "/team/guardedjob-manager@" + want.String()))

		// What a node pulls by tag: the same index, every platform and blob intact.
		ref, err := name.ParseReference(host + "/team/guardedjob-manager:" + tag)
		g.Expect(err).NotTo(HaveOccurred())
		idx, err := remote.Index(ref)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(idx.Digest()).To(Equal(want), "pulled by tag")
		g.Expect(validate.Index(idx)).To(Succeed())
		g.Expect(images(t, idx)).To(HaveLen(len(built.platforms)))
	}

	_, err = push(built.layout, "guardedjob-manager:"+built.version)
	g.Expect(err).To(MatchError(ContainSubstring("give REGISTRY/REPOSITORY:TAG")), "no registry named")
}
