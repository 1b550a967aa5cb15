package gjspec_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/gjspec"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

func TestKeysOfAnOccurrence(t *testing.T) {
	// 2026-11-30 00:05 in Taipei, 2026-11-29 in UTC.
	occurrence := time.Date(2026, 11, 29, 16, 5, 0, 0, time.UTC)
	gj := func(zone string, fencing *batchv1alpha1.FencingSpec, occurrenceKey string) *batchv1alpha1.GuardedJob {
		return &batchv1alpha1.GuardedJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "daily-settlement"},
			Spec: batchv1alpha1.GuardedJobSpec{Schedule: "5 0 * * *", TimeZone: zone, Fencing: fencing,
				Lock: batchv1alpha1.LockSpec{Key: "payments:{{ .Name }}", OccurrenceKey: occurrenceKey}},
		}
	}
	byDate := `{{ .Key }}:done:{{ .ScheduledTime.Format "2006-01-02" }}`
	tests := []struct {
		name string
		gj   *batchv1alpha1.GuardedJob
		want lockclient.Keys
	}{
		{"the defaults", gj("", nil, ""),
			lockclient.Keys{Lock: "payments:daily-settlement", Occurrence: "payments:daily-settlement:done:1795968300", Fence: "payments:daily-settlement:fence"}},
		{"templates see the occurrence in the spec's zone", gj("Asia/Taipei", nil, byDate),
			lockclient.Keys{Lock: "payments:daily-settlement", Occurrence: "payments:daily-settlement:done:2026-11-30", Fence: "payments:daily-settlement:fence"}},
		{"the same occurrence in UTC", gj("UTC", nil, byDate),
			lockclient.Keys{Lock: "payments:daily-settlement", Occurrence: "payments:daily-settlement:done:2026-11-29", Fence: "payments:daily-settlement:fence"}},
		{"a custom fence key", gj("", &batchv1alpha1.FencingSpec{Key: "fences:{{ .Namespace }}"}, ""),
			lockclient.Keys{Lock: "payments:daily-settlement", Occurrence: "payments:daily-settlement:done:1795968300", Fence: "fences:payments"}},
		{"no fence key without fencing", gj("", &batchv1alpha1.FencingSpec{Policy: batchv1alpha1.FencingNone}, ""),
			lockclient.Keys{Lock: "payments:daily-settlement", Occurrence: "payments:daily-settlement:done:1795968300"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rules, err := gjspec.Compile(tt.gj)
			g.Expect(err).NotTo(HaveOccurred())
			got, err := rules.Keys(occurrence)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
			lock, err := rules.LockKey(occurrence)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(lock).To(Equal(tt.want.Lock))
		})
	}
}

func TestCompileReportsTheScheduleBeforeTheTemplates(t *testing.T) {
	g := NewWithT(t)
	_, err := gjspec.Compile(&batchv1alpha1.GuardedJob{Spec: batchv1alpha1.GuardedJobSpec{
		Schedule: "61 * * * *", Lock: batchv1alpha1.LockSpec{Key: "{{ .Nope"}}})
	g.Expect(err).To(MatchError(ContainSubstring(`spec.schedule "61 * * * *" is not a valid schedule`)))
	_, err = gjspec.Compile(&batchv1alpha1.GuardedJob{Spec: batchv1alpha1.GuardedJobSpec{
		Schedule: "@daily", Lock: batchv1alpha1.LockSpec{Key: "{{ .Nope"}}})
	g.Expect(err).To(MatchError(ContainSubstring("spec.lock.key")))
}
