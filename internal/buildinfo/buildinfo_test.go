package buildinfo

import (
	"runtime/debug"
	"testing"

	. "github.com/onsi/gomega"
)

func TestResolve(t *testing.T) {
	vcs := func(version, revision, modified string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/guardedjob/guardedjob", Version: version}}
		if revision != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.revision", Value: revision}, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return bi
	}
	tests := []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            Info
	}{
		{"a release build prints what it was stamped with", "0.2.0", "0123abcd", vcs("v0.0.0-20261202001500-694be35a1b2c", "694be35a1b2c", "false"),
			Info{"0.2.0", "0123abcd"}},
		{"go install module@v0.2.0 prints the module's version", "dev", "", vcs("v0.2.0", "", ""),
			Info{"0.2.0", "unknown"}},
		{"go install module@commit prints the pseudo-version and its commit", "", "", vcs("v0.0.0-20261202001500-694be35a1b2c", "", ""),
			Info{"0.0.0-20261202001500-694be35a1b2c", "694be35a1b2c"}},
		{"a build in a checkout prints the VCS revision, dirty when changed", "dev", "", vcs("v0.1.1-0.20261202001500-694be35a1b2c+dirty", "694be35a1b2c0000", "true"),
			Info{"0.1.1-0.20261202001500-694be35a1b2c+dirty", "694be35a1b2c0000-dirty"}},
		{"a stamped version keeps the VCS revision when no commit was stamped", "0.2.0", "", vcs("(devel)", "694be35a1b2c0000", "false"),
			Info{"0.2.0", "694be35a1b2c0000"}},
		{"nothing known is dev and unknown", "dev", "", vcs("(devel)", "", ""),
			Info{"dev", "unknown"}},
		{"no build info at all", "", "", nil, Info{"dev", "unknown"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(resolve(tt.version, tt.commit, tt.bi)).To(Equal(tt.want))
		})
	}
	NewWithT(t).Expect(Info{"0.2.0", "0123abcd"}.String()).To(Equal("0.2.0 (commit 0123abcd)"))
}
