// Command ociimage builds the GuardedJob manager image without a container engine,
// as an OCI image layout, and pushes such a layout to a registry.
//
//	ociimage build -o DIR [-archive FILE] [-sbom FILE] -version V -revision COMMIT
//	               [-created UNIX] [-source URL] [-tag TAG] PLATFORM=BINDIR...
//	ociimage push SOURCE REFERENCE
//
// build assembles one image per PLATFORM (linux/amd64, linux/arm64, ...) from
// scratch: a base layer with what distroless static:nonroot gives a static Go
// binary (root certificates, the nonroot user and group, /tmp), then BINDIR's
// manager and guard as /manager and /guard. It writes an image index of them to
// DIR, an OCI image layout whose index.json names it TAG (default V), optionally a
// tar of that layout (FILE, what skopeo and podman call an oci-archive) and a
// CycloneDX SBOM of the Go modules in the binaries, and prints the index's digest.
// Every timestamp is -created (default $SOURCE_DATE_EPOCH), so the same binaries
// give the same digest.
//
// push copies the image index in SOURCE (a layout directory or a tar of one) to
// REFERENCE (REGISTRY/REPOSITORY:TAG) with the credentials of the Docker config
// file (crane auth login, podman login) and prints REGISTRY/REPOSITORY@DIGEST.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  ociimage build -o DIR [-archive FILE] [-sbom FILE] -version V -revision COMMIT [-created UNIX] [-source URL] [-tag TAG] PLATFORM=BINDIR...
  ociimage push SOURCE REFERENCE`

func run(args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "build":
		return runBuild(args[1:])
	case "push":
		if len(args) != 3 {
			return errors.New(usage)
		}
		ref, err := push(args[1], args[2])
		if err != nil {
			return err
		}
		fmt.Println(ref)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

func runBuild(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	var o options
	var created string
	fs.StringVar(&o.layout, "o", "", "the OCI image layout directory to write (replaced)")
	fs.StringVar(&o.archive, "archive", "", "also write a tar of the layout to this file")
	fs.StringVar(&o.sbom, "sbom", "", "write a CycloneDX JSON SBOM of the binaries' Go modules to this file")
	fs.StringVar(&o.version, "version", "", "the release version the binaries were built with")
	fs.StringVar(&o.revision, "revision", "", "the commit the binaries were built from")
	fs.StringVar(&o.source, "source", "https://github.com/guardedjob/guardedjob", "the source repository's URL")
	fs.StringVar(&o.tag, "tag", "", "the reference name index.json gives the image (default: -version)")
	fs.StringVar(&created, "created", os.Getenv("SOURCE_DATE_EPOCH"), "the image's time, in Unix seconds (default: $SOURCE_DATE_EPOCH)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.layout == "" || o.version == "" || o.revision == "" {
		return errors.New("build needs -o, -version and -revision")
	}
	secs, err := strconv.ParseInt(created, 10, 64)
	if err != nil {
		return fmt.Errorf("-created (or SOURCE_DATE_EPOCH) must be Unix seconds, got %q", created)
	}
	o.created = time.Unix(secs, 0).UTC()
	if o.tag == "" {
		o.tag = o.version
	}
	if fs.NArg() == 0 {
		return errors.New("build needs at least one PLATFORM=BINDIR")
	}
	for _, a := range fs.Args() {
		platform, dir, ok := strings.Cut(a, "=")
		if !ok || platform == "" || dir == "" {
			return fmt.Errorf("want PLATFORM=BINDIR, got %q", a)
		}
		o.platforms = append(o.platforms, platformDir{platform: platform, dir: dir})
	}
	digest, err := build(o)
	if err != nil {
		return err
	}
	fmt.Println(digest)
	return nil
}
