package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// A scheduled run of an occurrence that is retried may start (and wait for a
// busy key) until the occurrence's tries stop, which is never after the spec's
// latest start of it, when its done-marker expires; a run-now run keeps its
// own start deadline. internal/due tests when the tries stop.
func TestRetryDeadlinesOfARunFollowTheOccurrencesTries(t *testing.T) {
	g := NewWithT(t)
	occ := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	started := &metav1.Time{Time: occ.Add(5 * time.Minute)}
	for _, schedule := range []string{"0 * * * *", "0 2 * * *", "*/5 * * * *"} {
		gj := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: "settle", Namespace: "payments"}}
		gj.Spec.Schedule = schedule
		gj.Spec.RetryOccurrence = &batchv1alpha1.OccurrenceRetry{Within: metav1.Duration{Duration: 3 * time.Hour}}
		until := retryUntil(gj, occ, occ)
		g.Expect(latestStart(gj, occ, occ)).To(BeTemporally(">=", until), schedule)

		scheduled := &batchv1alpha1.ActiveRun{ScheduledTime: metav1.Time{Time: occ}, StartDeadline: started}
		want := until
		if started.After(until) {
			want = started.Time
		}
		g.Expect(runStartDeadline(gj, scheduled)).To(BeTemporally("==", want), schedule)
		manual := &batchv1alpha1.ActiveRun{ScheduledTime: metav1.Time{Time: occ}, StartDeadline: started, RunNow: "2026-12-05T02:00:00Z"}
		g.Expect(runStartDeadline(gj, manual)).To(BeTemporally("==", started.Time), schedule)
	}
}
