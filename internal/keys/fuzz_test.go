package keys

import (
	"errors"
	"testing"
	"time"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// fuzzTime maps any int64 to a time between 1970 and about 2200.
func fuzzTime(n int64) time.Time {
	const span = 230 * 365 * 24 * 3600
	n %= span
	if n < 0 {
		n += span
	}
	return time.Unix(n, 0)
}

// FuzzKeyTemplate: any template text parses or gives a spec error; one that
// parses renders a key that meets the key rules or gives a spec error, with a
// message of bounded size, never a panic.
func FuzzKeyTemplate(f *testing.F) {
	for _, s := range []string{
		"payments:settlement",
		`{{ .Key }}:done:{{ .ScheduledTime.Unix }}`,
		`{{ .Namespace }}:{{ .Name | replace "-" "_" | upper }}:{{ .ScheduledTime.UTC.Format "2006-01-02T15" }}`,
		`{{ printf "%0512d" 1 }}`,
		`{{ range .Name }}x{{ end }}`,
		`{{ .ScheduledTime.Format (.ScheduledTime.Format "2006") }}`,
		`{{ define "x" }}{{ end }}`,
		`{{ if eq .Name "a" }}a{{ else }}{{ .Name | trimSuffix "-job" | lower }}{{ end }}`,
		`{{ urlquery .Name | js | html }}`,
		`{{ .Missing }}`,
	} {
		f.Add(s, "payments", "daily-settlement", int64(1795968300))
	}
	f.Fuzz(func(t *testing.T, text, namespace, name string, at int64) {
		start := time.Now()
		defer func() {
			if d := time.Since(start); d > 2*time.Second { // bounded work: a template cannot stall a reconcile
				t.Fatalf("%q took %s", text, d)
			}
		}()
		tmpl, err := ParseTemplate("spec.lock.key", text)
		if err != nil {
			checkSpecError(t, err)
			return
		}
		data := Data{ScheduledTime: fuzzTime(at).In(time.UTC), Namespace: namespace, Name: name, Key: "k"}
		key, err := Render("spec.lock.key", tmpl, data)
		if err != nil {
			checkSpecError(t, err)
			return
		}
		if err := lockclient.ValidateKey(key); err != nil {
			t.Fatalf("rendered key %q breaks the key rules: %v", key, err)
		}
	})
}

func checkSpecError(t *testing.T, err error) {
	t.Helper()
	var se *specerror.Error
	if !errors.As(err, &se) || se.Reason == "" {
		t.Fatalf("not a spec error with a reason: %v", err)
	}
	if len(se.Message) > 4096 {
		t.Fatalf("message of %d bytes", len(se.Message))
	}
}
