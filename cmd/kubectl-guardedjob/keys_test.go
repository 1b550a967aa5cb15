package main

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

func TestKeysOfAnIdleGuardedJobWithCustomTemplatesComeFromItsLastRun(t *testing.T) {
	due := metav1.NewTime(time.Date(2026, 11, 30, 0, 5, 0, 0, time.UTC))
	earlier := metav1.NewTime(due.Add(-24 * time.Hour))
	idle := func(lastRunFor metav1.Time) *batchv1alpha1.GuardedJob {
		return &batchv1alpha1.GuardedJob{
			Spec: batchv1alpha1.GuardedJobSpec{
				Lock:    batchv1alpha1.LockSpec{Key: "lock:settlement", OccurrenceKey: `lock:settlement:done:{{ .ScheduledTime.Format "2006-01-02" }}`},
				Fencing: &batchv1alpha1.FencingSpec{Key: "fences:{{ .Key }}"},
			},
			Status: batchv1alpha1.GuardedJobStatus{
				LastScheduleTime: &due,
				LastRun: &batchv1alpha1.RunRecord{ScheduledTime: &lastRunFor, Key: "lock:settlement",
					OccurrenceKey: "lock:settlement:done:" + lastRunFor.Format("2006-01-02"), FenceKey: "fences:lock:settlement"},
			},
		}
	}
	tests := []struct {
		name string
		gj   *batchv1alpha1.GuardedJob
		want runKeys
	}{
		{"the last run was for the latest occurrence: its rendered keys", idle(due),
			runKeys{Keys: keysWith("lock:settlement", "lock:settlement:done:2026-11-30", "fences:lock:settlement")}},
		{"the last run was for an older occurrence: the marker cannot be known without rendering", idle(earlier),
			runKeys{Keys: keysWith("lock:settlement", "", ""), unknown: []string{"fence", "done-marker"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(keysOf(tt.gj)).To(Equal([]runKeys{tt.want}))
		})
	}
}

func keysWith(lock, occurrence, fence string) lockclient.Keys {
	return lockclient.Keys{Lock: lock, Occurrence: occurrence, Fence: fence}
}
