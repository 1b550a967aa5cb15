package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's contract with the Deployments that run it (config/manager, the chart):
// a numeric non-root user, so that runAsNonRoot can verify it, and the manager as
// entrypoint. The pod guard sidecar runs /guard from the same image.
const (
	imageTitle = "guardedjob-manager"
	imageUser  = "65532:65532"
	entrypoint = "/manager"
	license    = "Apache-2.0"
	// binaries are the files each BINDIR holds, copied to the image's root.
	manager = "manager"
	guard   = "guard"
)

var binaries = []string{manager, guard}

type platformDir struct {
	platform string // os/arch[/variant]
	dir      string // holds the manager and guard built for it
}

type options struct {
	layout, archive, sbom     string
	version, revision, source string
	tag                       string
	created                   time.Time
	platforms                 []platformDir
}

// labels are the image's OCI labels, also the index's annotations.
func (o options) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       imageTitle,
		"org.opencontainers.image.description": "GuardedJob manager: scheduled Jobs that hold a Redis lease with a fencing number while they run",
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.revision":    o.revision,
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
		"org.opencontainers.image.licenses":    license,
	}
}

// build writes the layout (and the archive and SBOM when asked) and returns the
// image index's digest.
func build(o options) (v1.Hash, error) {
	base, err := baseLayer(o.created)
	if err != nil {
		return v1.Hash{}, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	var built []builtBinary
	for _, p := range o.platforms {
		platform, err := v1.ParsePlatform(p.platform)
		if err != nil {
			return v1.Hash{}, err
		}
		bins, err := readBinaries(p.dir, *platform)
		if err != nil {
			return v1.Hash{}, err
		}
		built = append(built, bins...)
		img, err := platformImage(o, *platform, base, bins)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("image for %s: %w", p.platform, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: platform}})
	}
	idx = mutate.AppendManifests(idx, adds...)
	idx = mutate.Annotations(idx, o.labels()).(v1.ImageIndex)
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if err := writeLayout(o.layout, idx, o.tag); err != nil {
		return v1.Hash{}, err
	}
	if o.archive != "" {
		if err := writeArchive(o.layout, o.archive, o.created); err != nil {
			return v1.Hash{}, err
		}
	}
	if o.sbom != "" {
		if err := writeSBOM(o, digest, built); err != nil {
			return v1.Hash{}, err
		}
	}
	return digest, nil
}

// builtBinary is one binary of one platform, with what it was built from.
type builtBinary struct {
	name     string
	platform v1.Platform
	data     []byte
	info     *buildinfo.BuildInfo
}

// readBinaries reads the manager and guard in dir and refuses a binary built for
// another platform, or with cgo: the image has no C library.
func readBinaries(dir string, platform v1.Platform) ([]builtBinary, error) {
	var bins []builtBinary
	for _, name := range binaries {
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		info, err := buildinfo.Read(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if settings["GOOS"] != platform.OS || settings["GOARCH"] != platform.Architecture {
			return nil, fmt.Errorf("%s is built for %s/%s, not %s", path, settings["GOOS"], settings["GOARCH"], platform.String())
		}
		if settings["CGO_ENABLED"] != "0" {
			return nil, fmt.Errorf("%s is built with cgo (CGO_ENABLED=%q); the image has no C library", path, settings["CGO_ENABLED"])
		}
		bins = append(bins, builtBinary{name: name, platform: platform, data: data, info: info})
	}
	return bins, nil
}

func platformImage(o options, platform v1.Platform, base v1.Layer, bins []builtBinary) (v1.Image, error) {
	var files []file
	for _, b := range bins {
		files = append(files, file{name: b.name, mode: 0o755, data: b.data})
	}
	app, err := layer(files, o.created)
	if err != nil {
		return nil, err
	}
	cfg := &v1.ConfigFile{
		Architecture: platform.Architecture,
		OS:           platform.OS,
		Variant:      platform.Variant,
		Created:      v1.Time{Time: o.created},
		Config: v1.Config{
			User:       imageUser,
			Entrypoint: []string{entrypoint},
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"SSL_CERT_FILE=" + caFile,
			},
			WorkingDir: "/",
			Labels:     o.labels(),
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.created}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "ociimage: root certificates, users nonroot (65532) and nobody, /tmp", Comment: caComment()}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created, CreatedBy: "ociimage: /manager and /guard"}},
	)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	return mutate.ConfigMediaType(img, types.OCIConfigJSON), nil
}

// file is one entry of a layer: a directory when its name ends with "/".
type file struct {
	name     string
	mode     int64
	uid, gid int
	data     []byte
}

// layer returns a gzipped tar layer of files, in their order, every entry dated
// created and owned by uid:gid as numbers only, so that its digest depends on the
// files alone.
func layer(files []file, created time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: created, Format: tar.FormatPAX}
		if f.name[len(f.name)-1] == '/' {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
}

// writeLayout replaces dir with an OCI image layout holding idx, named tag.
func writeLayout(dir string, idx v1.ImageIndex, tag string) error {
	// Replace only an earlier layout (or an empty directory), never other files.
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
			return fmt.Errorf("%s exists and is not an OCI image layout; not replacing it", dir)
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag}))
}
