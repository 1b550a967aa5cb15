// Package buildinfo says which build a binary is: the release version and commit
// stamped at build time (-ldflags "-X main.version=... -X main.commit=..."), or, for
// a `go install` build that stamps nothing, what the Go toolchain recorded in the
// binary: the module's version and the VCS revision.
package buildinfo

import (
	"regexp"
	"runtime/debug"
	"strings"
)

// Info is a binary's version and commit.
type Info struct {
	Version string
	Commit  string
}

// String is how the binaries print it: "0.2.0 (commit 3f2c...)".
func (i Info) String() string { return i.Version + " (commit " + i.Commit + ")" }

// Resolve returns the stamped version and commit where set ("dev" counts as
// unset: it is the Makefile's default), else the ones in the binary's build info,
// else "dev" and "unknown".
func Resolve(version, commit string) Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, bi)
}

// pseudoRevision is the commit in a pseudo-version such as
// v0.0.0-20261202001500-694be35a1b2c (what `go install module@commit` records).
var pseudoRevision = regexp.MustCompile(`\d{14}-([0-9a-f]{12})(\+.*)?$`)

func resolve(version, commit string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit}
	if info.Version == "dev" {
		info.Version = ""
	}
	if bi != nil {
		// "(devel)": built from a checkout by a Go that does not stamp VCS versions.
		if mv := bi.Main.Version; info.Version == "" && mv != "" && mv != "(devel)" {
			info.Version = strings.TrimPrefix(mv, "v")
		}
		if info.Commit == "" {
			var revision string
			var modified bool
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					revision = s.Value
				case "vcs.modified":
					modified = s.Value == "true"
				}
			}
			switch {
			case revision != "" && modified:
				info.Commit = revision + "-dirty"
			case revision != "":
				info.Commit = revision
			default:
				// A module download has no VCS settings, but a pseudo-version names its commit.
				if m := pseudoRevision.FindStringSubmatch(bi.Main.Version); m != nil {
					info.Commit = m[1]
				}
			}
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}
