package main

import (
	"bytes"
	"encoding/pem"
	"runtime/debug"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The files distroless static:nonroot gives a static Go binary, made here instead
// of pulled, since no registry need be reachable to build the image:
//   - the users and groups root, nobody and nonroot (65532), with nonroot's home;
//   - the root certificates Go reads for rediss:// (the API server's CA comes from
//     the ServiceAccount), from Mozilla's trust store as Go's x509roots module pins
//     it, so the bundle changes only when go.mod does;
//   - /tmp, sticky and writable by all;
//   - nsswitch.conf, by which Go reads /etc/hosts before asking DNS.
//
// Time zone rules need no files: the manager compiles them in (time/tzdata).
const (
	caFile     = "/etc/ssl/certs/ca-certificates.crt"
	caModule   = "golang.org/x/crypto/x509roots/fallback"
	nonrootUID = 65532
	passwd     = `root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
`
	group = `root:x:0:
nobody:x:65534:
nonroot:x:65532:
`
	nsswitch = "hosts: files dns\n"
)

func baseLayer(created time.Time) (v1.Layer, error) {
	return layer([]file{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/nsswitch.conf", mode: 0o644, data: []byte(nsswitch)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: caFile[1:], mode: 0o644, data: caBundle()},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: nonrootUID, gid: nonrootUID},
		{name: "tmp/", mode: 0o1777},
	}, created)
}

// caBundle returns the trusted roots as PEM. A root Mozilla trusts only for
// certificates issued before a date (a constraint a PEM file cannot say) is left
// out: trusting it for later ones would trust what Mozilla no longer does.
func caBundle() []byte {
	var buf bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate})
	}
	return buf.Bytes()
}

// caVersion is the version of the x509roots module this program was built with.
func caVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == caModule {
				if m.Replace != nil {
					return m.Replace.Version
				}
				return m.Version
			}
		}
	}
	return "unknown"
}

func caComment() string {
	return caFile + " from " + caModule + "@" + caVersion()
}
