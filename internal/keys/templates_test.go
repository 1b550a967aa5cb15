package keys

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// The templates api/v1alpha1 defaults to (this package's tests do not import
// it: the fuzz build would instrument all of k8s.io/api).
const (
	defaultOccurrence = "{{ .Key }}:done:{{ .ScheduledTime.Unix }}"
	defaultFence      = "{{ .Key }}:fence"
)

func TestTemplatesRenderTheThreeKeysOfAnOccurrence(t *testing.T) {
	spec := func(lock, occurrence, fence string, fenced bool) Spec {
		return Spec{Lock: lock, Occurrence: occurrence, Fence: fence, Fenced: fenced}
	}
	tests := []struct {
		name     string
		spec     Spec
		want     lockclient.Keys
		reason   string // "" means valid
		contains string
	}{
		{name: "the defaults derive the done-marker and the fence from the lock key",
			spec: spec("payments:settlement", defaultOccurrence, defaultFence, true),
			want: lockclient.Keys{Lock: "payments:settlement", Occurrence: "payments:settlement:done:1795968300", Fence: "payments:settlement:fence"}},
		{name: "custom templates read the occurrence in the spec's zone",
			spec: spec(`lock:{{ .Name }}`, `done:{{ .Key }}:{{ .ScheduledTime.Format "2006-01-02" }}`, `fences:{{ .Namespace }}`, true),
			want: lockclient.Keys{Lock: "lock:daily-settlement", Occurrence: "done:lock:daily-settlement:2026-11-30", Fence: "fences:payments"}},
		{name: "without fencing there is no fence key",
			spec: spec("payments:settlement", defaultOccurrence, defaultFence, false),
			want: lockclient.Keys{Lock: "payments:settlement", Occurrence: "payments:settlement:done:1795968300"}},
		{name: "a fence template that does not parse is an error even without fencing",
			spec: spec("payments:settlement", defaultOccurrence, "{{ .Key", false), reason: "InvalidTemplate", contains: "spec.fencing.key"},
		{name: "a done-marker template that fails names its error",
			spec: spec("payments:settlement", "{{ .Missing }}", defaultFence, true), reason: "InvalidTemplate", contains: "can't evaluate field Missing"},
		{name: "a lock key that does not render to a key names its field",
			spec: spec("payments: settlement", defaultOccurrence, defaultFence, true), reason: "InvalidKey", contains: "spec.lock.key renders an invalid key"},
		{name: "keys that render the same are rejected",
			spec:   spec("payments:settlement", "payments:settlement", defaultFence, true),
			reason: "InvalidKey", contains: "must render to different keys, got payments:settlement, payments:settlement, payments:settlement:fence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			data := keyData(t, "ignored: the lock key is rendered first")
			tmpl, err := ParseTemplates(tt.spec)
			if err == nil {
				var got lockclient.Keys
				got, err = tmpl.Keys(data)
				if tt.reason == "" {
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(got).To(Equal(tt.want))
					lock, err := tmpl.LockKey(data)
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(lock).To(Equal(tt.want.Lock))
					return
				}
			}
			se := specerror.As(err)
			g.Expect(se).NotTo(BeNil(), "want a *specerror.Error, got %v", err)
			g.Expect(se.Reason).To(Equal(tt.reason))
			g.Expect(se.Message).To(ContainSubstring(tt.contains))
		})
	}
}

func TestTemplatesLockKeyIsTheSameForEveryOccurrenceOfAFixedKey(t *testing.T) {
	g := NewWithT(t)
	tmpl, err := ParseTemplates(Spec{Lock: "payments:settlement", Occurrence: defaultOccurrence, Fence: defaultFence, Fenced: true})
	g.Expect(err).NotTo(HaveOccurred())
	data := keyData(t, "")
	first, err := tmpl.Keys(data)
	g.Expect(err).NotTo(HaveOccurred())
	data.ScheduledTime = data.ScheduledTime.Add(24 * time.Hour)
	next, err := tmpl.Keys(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next.Lock).To(Equal(first.Lock))
	g.Expect(next.Occurrence).NotTo(Equal(first.Occurrence), "each occurrence has its own done-marker")
}
