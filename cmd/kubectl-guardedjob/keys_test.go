package main

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

func TestKeysOf(t *testing.T) {
	// The occurrence of 2026-11-30 00:05 in Taipei, and the day before.
	due := metav1.NewTime(time.Date(2026, 11, 29, 16, 5, 0, 0, time.UTC))
	earlier := metav1.NewTime(due.Add(-24 * time.Hour))
	now := due.Add(time.Hour)
	byDate := `lock:settlement:done:{{ .ScheduledTime.Format "2006-01-02" }}`
	gj := func(f func(*batchv1alpha1.GuardedJob)) *batchv1alpha1.GuardedJob {
		gj := &batchv1alpha1.GuardedJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "daily-settlement"},
			Spec: batchv1alpha1.GuardedJobSpec{Schedule: "5 0 * * *", TimeZone: "Asia/Taipei",
				Lock:    batchv1alpha1.LockSpec{Key: "lock:settlement", OccurrenceKey: byDate},
				Fencing: &batchv1alpha1.FencingSpec{Key: "fences:{{ .Key }}"},
			},
		}
		f(gj)
		return gj
	}
	ranFor := func(at metav1.Time, keys lockclient.Keys) func(*batchv1alpha1.GuardedJob) {
		return func(gj *batchv1alpha1.GuardedJob) {
			gj.Status.LastScheduleTime = &due
			gj.Status.LastRun = &batchv1alpha1.RunRecord{ScheduledTime: &at, Key: keys.Lock, OccurrenceKey: keys.Occurrence, FenceKey: keys.Fence}
		}
	}
	custom := keysWith("lock:settlement", "lock:settlement:done:2026-11-30", "fences:lock:settlement")
	tests := []struct {
		name string
		gj   *batchv1alpha1.GuardedJob
		want []lockclient.Keys
	}{
		{"each active run's keys, as the manager recorded them", gj(func(gj *batchv1alpha1.GuardedJob) {
			gj.Status.Active = []batchv1alpha1.ActiveRun{
				{Key: "lock:settlement", OccurrenceKey: "lock:settlement:done:2026-11-29", FenceKey: "fences:lock:settlement"},
				{Key: "lock:settlement", OccurrenceKey: "lock:settlement:done:2026-11-30", FenceKey: "fences:lock:settlement"},
			}
		}), []lockclient.Keys{
			keysWith("lock:settlement", "lock:settlement:done:2026-11-29", "fences:lock:settlement"),
			keysWith("lock:settlement", "lock:settlement:done:2026-11-30", "fences:lock:settlement"),
		}},
		{"the last run was for the latest occurrence: the keys it recorded, though the spec changed since",
			gj(ranFor(due, keysWith("lock:settlement", "old:done", "old:fence"))),
			[]lockclient.Keys{keysWith("lock:settlement", "old:done", "old:fence")}},
		{"the last run was for an older occurrence: custom done-marker and fence keys rendered for the latest, in the spec's zone",
			gj(ranFor(earlier, keysWith("lock:settlement", "lock:settlement:done:2026-11-29", "fences:lock:settlement"))),
			[]lockclient.Keys{custom}},
		{"never scheduled: the keys of the latest schedule time", gj(func(*batchv1alpha1.GuardedJob) {}),
			[]lockclient.Keys{custom}},
		{"a lock key template is rendered too", gj(func(gj *batchv1alpha1.GuardedJob) {
			gj.Spec.Lock.Key = "lock:{{ .Name }}"
			gj.Spec.Lock.OccurrenceKey = ""
			gj.Spec.Fencing = nil
		}), []lockclient.Keys{keysWith("lock:daily-settlement", "lock:daily-settlement:done:1795968300", "lock:daily-settlement:fence")}},
		{"no fence key without fencing", gj(func(gj *batchv1alpha1.GuardedJob) {
			ranFor(due, keysWith("lock:settlement", "lock:settlement:done:2026-11-30", "fences:lock:settlement"))(gj)
			gj.Spec.Fencing.Policy = batchv1alpha1.FencingNone
		}), []lockclient.Keys{keysWith("lock:settlement", "lock:settlement:done:2026-11-30", "")}},
		{"a spec whose keys do not render: the lock key status names", gj(func(gj *batchv1alpha1.GuardedJob) {
			gj.Spec.Lock.OccurrenceKey = "{{ .Missing }}"
			gj.Status.Lock = &batchv1alpha1.LockStatus{Key: "lock:settlement"}
		}), []lockclient.Keys{keysWith("lock:settlement", "", "")}},
		{"a spec whose keys do not render, never run: nothing to look at", gj(func(gj *batchv1alpha1.GuardedJob) {
			gj.Spec.Schedule = "not a schedule"
		}), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(keysOf(tt.gj, now)).To(Equal(tt.want))
		})
	}
}

func keysWith(lock, occurrence, fence string) lockclient.Keys {
	return lockclient.Keys{Lock: lock, Occurrence: occurrence, Fence: fence}
}

// history's header names an occurrence being tried again, in the schedule's zone.
func TestHistorySaysWhichOccurrenceIsTriedAgain(t *testing.T) {
	g := NewWithT(t)
	taipei, err := time.LoadLocation("Asia/Taipei")
	g.Expect(err).NotTo(HaveOccurred())
	occ := time.Date(2026, 12, 4, 16, 5, 0, 0, time.UTC)
	now := occ.Add(10 * time.Minute)
	g.Expect(retryLine(nil, taipei, now)).To(BeEmpty())
	rt := &batchv1alpha1.OccurrenceRetryStatus{ScheduledTime: metav1.NewTime(occ), Attempts: 1, NotBefore: &metav1.Time{Time: now.Add(40 * time.Second)},
		Until: metav1.NewTime(occ.Add(6 * time.Hour)), LastResult: batchv1alpha1.RunResultFailed, LastMessage: "the Job failed: BackoffLimitExceeded"}
	g.Expect(retryLine(rt, taipei, now)).To(Equal("Retrying occurrence 2026-12-05T00:05:00+08:00: try 2 at 2026-12-05T00:15:40+08:00 (in 40s), until 2026-12-05T06:05:00+08:00; the last run ended Failed: the Job failed: BackoffLimitExceeded"))
	rt.NotBefore = nil
	g.Expect(retryLine(rt, taipei, now)).To(HavePrefix("Retrying occurrence 2026-12-05T00:05:00+08:00: try 2 as soon as no run of it is active, until"))
}
