package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

func retryingObject(schedule string, within time.Duration) *batchv1alpha1.GuardedJob {
	gj := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: "settle", Namespace: "payments"}}
	gj.Spec.Schedule = schedule
	gj.Spec.RetryOccurrence = &batchv1alpha1.OccurrenceRetry{Within: metav1.Duration{Duration: within}}
	return gj
}

// A run of an occurrence that is retried may start until its tries stop, and
// the spec's latest start of the occurrence (when its done-marker expires) is
// never before that.
func TestRetryDeadlinesOfARunFollowTheOccurrencesTries(t *testing.T) {
	g := NewWithT(t)
	occ := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		schedule string
		within   time.Duration
		want     time.Time
	}{
		{"0 * * * *", 30 * time.Minute, occ.Add(30 * time.Minute)},
		{"0 * * * *", 6 * time.Hour, occ.Add(time.Hour)},     // the next occurrence comes first
		{"0 2 * * *", 6 * time.Hour, occ.Add(6 * time.Hour)}, // daily
		{"*/5 * * * *", time.Hour, occ.Add(5 * time.Minute)}, // every five minutes
		{"0 2 * * *", 168 * time.Hour, occ.Add(24 * time.Hour)},
	} {
		gj := retryingObject(tt.schedule, tt.within)
		until := retryUntil(gj, occ, occ)
		g.Expect(until).To(BeTemporally("==", tt.want), "%s within %s", tt.schedule, tt.within)
		g.Expect(latestStart(gj, occ, occ)).To(BeTemporally(">=", until), "a retry may start only while the done-marker lives")
		run := &batchv1alpha1.ActiveRun{ScheduledTime: metav1.Time{Time: occ}, StartDeadline: &metav1.Time{Time: occ.Add(5 * time.Minute)}}
		g.Expect(runStartDeadline(gj, run)).To(BeTemporally("==", maxTime(until, occ.Add(5*time.Minute))), "a busy run waits until the tries stop")
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
