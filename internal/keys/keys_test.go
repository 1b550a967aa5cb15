package keys

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/specerror"
)

// keyData is the data of the 2026-11-30 00:05 Taipei occurrence of payments/daily-settlement.
func keyData(t *testing.T, key string) Data {
	t.Helper()
	taipei, err := time.LoadLocation("Asia/Taipei")
	if err != nil {
		t.Fatal(err)
	}
	return Data{
		ScheduledTime: time.Date(2026, 11, 30, 0, 5, 0, 0, taipei),
		Namespace:     "payments",
		Name:          "daily-settlement",
		Key:           key,
	}
}

func TestParseKeyTemplate(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		contains []string // "" entries: the template is valid
	}{
		{name: "the default occurrence key is valid", text: "{{ .Key }}:done:{{ .ScheduledTime.Unix }}"},
		{name: "a method with a constant argument is valid", text: `{{ .ScheduledTime.Format "2006-01-02" }}`},
		{name: "if, with, variables and pipelines are valid",
			text: `{{ $d := .ScheduledTime.UTC }}{{ with .Name }}{{ . | upper }}{{ end }}{{ if eq .Namespace "payments" }}:p{{ else }}:o{{ end }}:{{ $d.Unix }}`},
		{name: "an undefined function is a parse error", text: "{{ env \"HOME\" }}",
			contains: []string{"spec.lock.key:1:", `function "env" not defined`}},
		{name: "an unclosed action is a parse error", text: "{{ .Name ", contains: []string{"spec.lock.key:1:"}},
		{name: "range is rejected", text: `{{ range .Name }}x{{ end }}`,
			contains: []string{"spec.lock.key:1:", "range is not allowed"}},
		{name: "define is rejected", text: `{{ define "x" }}a{{ end }}b`, contains: []string{"define and block are not allowed"}},
		{name: "block is rejected", text: `{{ block "x" . }}a{{ end }}`, contains: []string{"define and block are not allowed"}},
		{name: "template is rejected", text: `{{ template "x" . }}`, contains: []string{"template is not allowed"}},
		{name: "a method fed a variable is rejected", text: `{{ $l := "2006" }}{{ .ScheduledTime.Format $l }}`,
			contains: []string{"methods take only constant arguments"}},
		{name: "a method fed its own output is rejected", text: `{{ .ScheduledTime.Format (.ScheduledTime.Format "1111") }}`,
			contains: []string{"methods take only constant arguments"}},
		{name: "a method fed through a pipeline is rejected", text: `{{ "2006" | .ScheduledTime.Format }}`,
			contains: []string{"cannot take a piped value"}},
		{name: "a method on a variable fed a variable is rejected", text: `{{ $t := .ScheduledTime }}{{ $t.Format .Name }}`,
			contains: []string{"methods take only constant arguments"}},
		{name: "an empty template is rejected", text: "", contains: []string{"spec.lock.key is empty"}},
		{name: "a template longer than the CRD allows is rejected", text: strings.Repeat("a", 1025),
			contains: []string{"spec.lock.key is 1025 bytes long"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			tmpl, err := ParseTemplate("spec.lock.key", tt.text)
			if len(tt.contains) == 0 {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(tmpl).NotTo(BeNil())
				return
			}
			g.Expect(tmpl).To(BeNil())
			se := specerror.As(err)
			g.Expect(se).NotTo(BeNil(), "want a *specerror.Error, got %v", err)
			g.Expect(se.Reason).To(Equal("InvalidTemplate"))
			for _, c := range tt.contains {
				g.Expect(se.Message).To(ContainSubstring(c))
			}
		})
	}
}

func TestRenderKey(t *testing.T) {
	tests := []struct {
		name   string
		text   string
		key    string // .Key
		want   string
		reason string // for errors
		msg    []string
	}{
		{name: "the default occurrence key", text: "{{ .Key }}:done:{{ .ScheduledTime.Unix }}", key: "lock:settlement",
			want: "lock:settlement:done:1795968300"},
		{name: "the default fence key", text: "{{ .Key }}:fence", key: "lock:settlement",
			want: "lock:settlement:fence"},
		{name: "a date in the spec's zone", text: `lock:settlement:done:{{ .ScheduledTime.Format "2006-01-02" }}`,
			want: "lock:settlement:done:2026-11-30"},
		{name: "the same date in UTC is the day before", text: `{{ .Namespace }}:{{ .ScheduledTime.UTC.Format "2006-01-02T15:04Z07:00" }}`,
			want: "payments:2026-11-29T16:05Z"},
		{name: "namespace and name", text: "{{ .Namespace }}:{{ .Name }}", want: "payments:daily-settlement"},
		{name: "replace in a pipeline takes the string last", text: `{{ .Namespace }}:{{ .Name | replace "-" "_" }}`,
			want: "payments:daily_settlement"},
		{name: "upper, lower, trimPrefix and trimSuffix", text: `{{ .Name | trimPrefix "daily-" | upper }}:{{ "ABC.x" | trimSuffix ".x" | lower }}`,
			want: "SETTLEMENT:abc"},
		{name: "printf with a modest width", text: `{{ .Namespace }}:{{ printf "%05d" 42 }}`, want: "payments:00042"},
		{name: "a key of exactly 512 bytes", text: strings.Repeat("k", 512), want: strings.Repeat("k", 512)},

		{name: "a missing field is a template error", text: "{{ .Foo }}", reason: "InvalidTemplate",
			msg: []string{"key template failed", "spec.lock.key:1:", "Foo"}},
		{name: "a method that does not exist is a template error", text: "{{ .ScheduledTime.Bogus }}", reason: "InvalidTemplate",
			msg: []string{"spec.lock.key:1:", "Bogus"}},
		{name: "the lock key template may not use .Key, which is empty then", text: "{{ .Key }}", reason: "InvalidKey",
			msg: []string{"spec.lock.key renders an invalid key: key is empty"}},
		{name: "a key of 513 bytes is too long", text: strings.Repeat("k", 513), reason: "InvalidKey",
			msg: []string{"spec.lock.key renders an invalid key: key is 513 bytes long", `"` + strings.Repeat("k", 80) + `"...`}},
		{name: "a 10 KB render stops at the cap", text: strings.Repeat(`{{ printf "%1000s" "x" }}`, 10), reason: "InvalidKey",
			msg: []string{"longer than 512 bytes"}},
		{name: "a newline in the key is rejected", text: "{{ .Namespace }}:a\nb", reason: "InvalidKey",
			msg: []string{"spec.lock.key renders an invalid key", `"payments:a\nb"`, "whitespace, control or invalid character"}},
		{name: "a space in the key is rejected", text: "{{ .Namespace }}: {{ .Name }}", reason: "InvalidKey",
			msg: []string{`"payments: daily-settlement"`}},
		{name: "a long invalid key is quoted to 80 bytes", text: strings.Repeat("k", 100) + " x", reason: "InvalidKey",
			msg: []string{`"` + strings.Repeat("k", 80) + `"...`}},
		{name: "replace cannot grow a string past the cap", reason: "InvalidTemplate",
			text: `{{ $a := .Name }}{{ $a = replace "" $a $a }}{{ $a = replace "" $a $a }}{{ $a }}`,
			msg:  []string{"error calling replace: result longer than 1024 bytes"}},
		{name: "print cannot grow a string past the cap", reason: "InvalidTemplate",
			text: `{{ $a := .Name }}{{ $a = print $a $a $a $a $a $a $a $a }}{{ $a = print $a $a $a $a $a $a $a $a }}{{ $a = print $a $a }}{{ $a }}`,
			msg:  []string{"error calling print: result longer than 1024 bytes"}},
		{name: "js cannot grow a string past the cap", reason: "InvalidTemplate",
			text: `{{ $a := printf "%200s" "<" | replace " " "<" }}{{ $a = js $a }}{{ $a }}`,
			msg:  []string{"error calling js: result longer than 1024 bytes"}},
		{name: "printf refuses huge widths", text: `{{ printf "%999999s" "x" }}`, reason: "InvalidTemplate",
			msg: []string{"error calling printf: widths and precisions above 1024 are not allowed"}},
		{name: "printf refuses widths from arguments", text: `{{ printf "%*s" 999999 "x" }}`, reason: "InvalidTemplate",
			msg: []string{"error calling printf: * widths are not allowed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			tmpl, err := ParseTemplate("spec.lock.key", tt.text)
			g.Expect(err).NotTo(HaveOccurred())
			got, err := Render("spec.lock.key", tmpl, keyData(t, tt.key))
			if tt.reason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(Equal(tt.want))
				return
			}
			g.Expect(got).To(BeEmpty())
			se := specerror.As(err)
			g.Expect(se).NotTo(BeNil(), "want a *specerror.Error, got %v", err)
			g.Expect(se.Reason).To(Equal(tt.reason))
			for _, m := range tt.msg {
				g.Expect(se.Message).To(ContainSubstring(m))
			}
			g.Expect(len(se.Message)).To(BeNumerically("<", 400), "messages quote at most 80 bytes of a key")
		})
	}
}

func TestKeyWriterKeepsAtMost513Bytes(t *testing.T) {
	g := NewWithT(t)
	var w keyWriter
	n, err := w.Write([]byte(strings.Repeat("a", 500)))
	g.Expect(n, err).To(Equal(500))
	n, err = w.Write([]byte(strings.Repeat("b", 10_000)))
	g.Expect(err).To(MatchError(errKeyTooLong))
	g.Expect(n).To(Equal(13))
	g.Expect(w.buf.Len()).To(Equal(513))
	g.Expect(w.buf.Cap()).To(BeNumerically("<", 4096))
}
