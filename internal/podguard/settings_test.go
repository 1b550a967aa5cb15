package podguard

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func envOf(vars []EnvVar) func(string) string {
	m := map[string]string{}
	for _, v := range vars {
		m[v.Name] = v.Value
	}
	return func(name string) string { return m[name] }
}

func validSettings() Settings {
	return Settings{
		Key:         "payments:settlement",
		Holder:      "cluster-a/payments/settlement-29123456-5f3a9c",
		TokenSHA256: TokenSHA256("cluster-a/payments/settlement-29123456-5f3a9c#5f3a9c00"),
		Interval:    4 * time.Second,
		Grace:       30 * time.Second,
		Margin:      2 * time.Second,
	}
}

func TestWhatTheManagerSetsIsWhatTheGuardReads(t *testing.T) {
	g := NewWithT(t)
	s := validSettings()
	got, err := FromEnv(envOf(s.Environment()))
	g.Expect(err).NotTo(HaveOccurred())
	s.StoreDir, s.StateDir, s.TerminationMessagePath = DefaultStoreDir, DefaultStateDir, DefaultTerminationMessagePath
	g.Expect(got).To(Equal(s))

	s.StoreDir, s.StateDir, s.TerminationMessagePath = "/s", "/st", "/t"
	got, err = FromEnv(envOf(s.Environment()))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(s))
}

func TestTheTokenNeverGoesIntoTheEnvironment(t *testing.T) {
	g := NewWithT(t)
	const token = "cluster-a/payments/settlement-29123456-5f3a9c#5f3a9c0011223344"
	s := validSettings()
	s.TokenSHA256 = TokenSHA256(token)
	for _, v := range s.Environment() {
		g.Expect(v.Value).NotTo(ContainSubstring("5f3a9c0011223344"), v.Name)
	}
}

func TestBadSettingsAreNamedOneByOne(t *testing.T) {
	valid := map[string]string{}
	for _, v := range validSettings().Environment() {
		valid[v.Name] = v.Value
	}
	for name, tc := range map[string]struct {
		set  map[string]string
		want []string
	}{
		"nothing set": {
			set: map[string]string{EnvKey: "", EnvHolder: "", EnvTokenSHA256: "", EnvInterval: "", EnvGrace: ""},
			want: []string{EnvKey + ": not set", EnvHolder + ": not set", EnvTokenSHA256 + ": not set",
				EnvInterval + ": not set", EnvGrace + ": not set"},
		},
		"a key with a space":          {set: map[string]string{EnvKey: "a b"}, want: []string{EnvKey + ": key \"a b\" has a whitespace"}},
		"a hash that is not hex":      {set: map[string]string{EnvTokenSHA256: strings.Repeat("z", 64)}, want: []string{EnvTokenSHA256 + ": not 64 hex digits"}},
		"a hash too short":            {set: map[string]string{EnvTokenSHA256: "abcd"}, want: []string{EnvTokenSHA256 + ": not 64 hex digits"}},
		"an interval that is no time": {set: map[string]string{EnvInterval: "20"}, want: []string{EnvInterval + `: "20" is not a duration`}},
		"an interval too short":       {set: map[string]string{EnvInterval: "10ms"}, want: []string{EnvInterval + ": 10ms is outside 100ms..1h0m0s"}},
		"a negative grace":            {set: map[string]string{EnvGrace: "-1s"}, want: []string{EnvGrace + ": -1s is outside"}},
		"a margin that is no time":    {set: map[string]string{EnvMargin: "soon"}, want: []string{EnvMargin + `: "soon" is not a duration`}},
		"a holder with a control":     {set: map[string]string{EnvHolder: "a\nb"}, want: []string{EnvHolder + ": longer than 512 bytes or holds a control character"}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			env := map[string]string{}
			for k, v := range valid {
				env[k] = v
			}
			for k, v := range tc.set {
				env[k] = v
			}
			_, err := FromEnv(func(n string) string { return env[n] })
			g.Expect(err).To(HaveOccurred())
			lines := strings.Split(err.Error(), "\n")
			g.Expect(lines).To(HaveLen(len(tc.want)), err.Error())
			for i, w := range tc.want {
				g.Expect(lines[i]).To(HavePrefix(w))
			}
		})
	}
}

// A token passed as the holder by mistake is refused without being repeated:
// its random part would end up in logs and the termination message.
func TestATokenAsHolderIsRefusedWithoutEchoingIt(t *testing.T) {
	g := NewWithT(t)
	env := map[string]string{}
	for _, v := range validSettings().Environment() {
		env[v.Name] = v.Value
	}
	env[EnvHolder] = "cluster-a/payments/job#0123456789abcdef"
	_, err := FromEnv(func(n string) string { return env[n] })
	g.Expect(err).To(MatchError(ContainSubstring("pass the holder (the token's part before '#'), never the token")))
	g.Expect(err.Error()).NotTo(ContainSubstring("0123456789abcdef"))
	g.Expect(err.Error()).NotTo(ContainSubstring("cluster-a/payments/job"))
}

func TestReadInterval(t *testing.T) {
	for name, tc := range map[string]struct {
		ttl, renew, grace, margin time.Duration
		want                      time.Duration
		wantErr                   string
	}{
		"the defaults: half the 8s headroom":       {ttl: 60 * time.Second, renew: 20 * time.Second, grace: 30 * time.Second, margin: 2 * time.Second, want: 4 * time.Second},
		"never slower than the manager renews":     {ttl: 10 * time.Minute, renew: 20 * time.Second, grace: 30 * time.Second, margin: 2 * time.Second, want: 20 * time.Second},
		"the least timing the manager accepts":     {ttl: 55 * time.Second, renew: 20 * time.Second, grace: 30 * time.Second, margin: 2 * time.Second, want: 1500 * time.Millisecond},
		"too little headroom for a guard":          {ttl: 53 * time.Second, renew: 20 * time.Second, grace: 30 * time.Second, margin: 2 * time.Second, wantErr: "at least 2s, got 1s"},
		"a grace longer than the lease is refused": {ttl: 60 * time.Second, renew: 20 * time.Second, grace: time.Minute, margin: 2 * time.Second, wantErr: "got -22s"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := ReadInterval(tc.ttl, tc.renew, tc.grace, tc.margin)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
