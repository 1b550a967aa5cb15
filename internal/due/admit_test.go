package due_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
)

// TestAnOccurrenceStartsOnlyWhenNothingMayStandAheadOfIt: what becomes of an
// occurrence that is due, before and after the buffer, for every policy.
func TestAnOccurrenceStartsOnlyWhenNothingMayStandAheadOfIt(t *testing.T) {
	g := NewWithT(t)
	at := time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)
	earlier := batchv1alpha1.ActiveRun{JobName: "payout-1", ScheduledTime: metav1.NewTime(at.Add(-time.Hour)), Phase: batchv1alpha1.RunPhaseRunning}
	same := batchv1alpha1.ActiveRun{JobName: "payout-2", ScheduledTime: metav1.NewTime(at), Phase: batchv1alpha1.RunPhaseAcquiring}
	backfill := batchv1alpha1.ActiveRun{JobName: "payout-0", ScheduledTime: metav1.NewTime(at.Add(-2 * time.Hour)), Phase: batchv1alpha1.RunPhaseRunning, Backfill: "bf-1"}

	for _, c := range []struct {
		name  string
		ahead due.Ahead
		want  due.Admission
	}{
		{"nothing ahead", due.Ahead{Occurrence: at, Policy: batchv1alpha1.ForbidConcurrent}, due.Admission{Act: due.Start}},
		{"its own run is active", due.Ahead{Occurrence: at, Active: []batchv1alpha1.ActiveRun{same}}, due.Admission{Act: due.Wait}},
		{"a run-now of an occurrence whose run is active", due.Ahead{Occurrence: at, Triggered: true, Active: []batchv1alpha1.ActiveRun{same}},
			due.Admission{Act: due.Skip, Why: "a run of this occurrence (payout-2) is active"}},
		{"a Job waits for its adoption", due.Ahead{Occurrence: at, Adopting: true, Policy: batchv1alpha1.AllowConcurrent}, due.Admission{Act: due.Wait}},
		{"a run-now while a Job waits for its adoption", due.Ahead{Occurrence: at, Triggered: true, Adopting: true}, due.Admission{Act: due.Wait}},
		{"an unclaimed Job, Forbid", due.Ahead{Occurrence: at, Unclaimed: "payout-x", Policy: batchv1alpha1.ForbidConcurrent},
			due.Admission{Act: due.Skip, Why: "concurrencyPolicy Forbid and Job payout-x, which no run claims, is still running"}},
		{"an unclaimed Job, Allow", due.Ahead{Occurrence: at, Unclaimed: "payout-x", Policy: batchv1alpha1.AllowConcurrent},
			due.Admission{Act: due.Wait, RetryAfter: time.Second}},
		{"an earlier run is active", due.Ahead{Occurrence: at, Active: []batchv1alpha1.ActiveRun{earlier}, Policy: batchv1alpha1.AllowConcurrent},
			due.Admission{Act: due.AskBuffer}},
	} {
		g.Expect(due.Admit(c.ahead)).To(Equal(c.want), c.name)
	}

	for _, c := range []struct {
		policy batchv1alpha1.ConcurrencyPolicy
		want   due.Admission
	}{
		{batchv1alpha1.ForbidConcurrent, due.Admission{Act: due.Skip, Why: "concurrencyPolicy Forbid and payout-0 is still active"}},
		// A backfill occurrence is never replaced.
		{batchv1alpha1.ReplaceConcurrent, due.Admission{Act: due.Replace, Victims: []int{1}, RetryAfter: time.Second}},
		{batchv1alpha1.AllowConcurrent, due.Admission{Act: due.Start}},
	} {
		ahead := due.Ahead{Occurrence: at, Active: []batchv1alpha1.ActiveRun{backfill, earlier}, Policy: c.policy}
		g.Expect(due.Contend(ahead)).To(Equal(c.want), string(c.policy))
	}
}

// TestARunThatWaitedStartsOnlyWhenNoJobOutsideStatusMayWork: a retry, a
// buffered occurrence or a backfill's next occurrence waits, whatever the
// policy, for a Job waiting for its adoption and for a Job no run claims whose
// Pods may still work without a lease.
func TestARunThatWaitedStartsOnlyWhenNoJobOutsideStatusMayWork(t *testing.T) {
	for _, c := range []struct {
		name  string
		ahead due.Ahead
		want  due.Admission
	}{
		{"nothing ahead", due.Ahead{Policy: batchv1alpha1.ForbidConcurrent}, due.Admission{Act: due.Start}},
		{"a Job waits for its adoption", due.Ahead{Adopting: true, Policy: batchv1alpha1.AllowConcurrent}, due.Admission{Act: due.Wait}},
		{"an unclaimed Job, Allow", due.Ahead{Unclaimed: "payout-x", Policy: batchv1alpha1.AllowConcurrent}, due.Admission{Act: due.Wait, RetryAfter: time.Second}},
		{"an unclaimed Job, Forbid", due.Ahead{Unclaimed: "payout-x", Policy: batchv1alpha1.ForbidConcurrent}, due.Admission{Act: due.Wait, RetryAfter: time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(due.AdmitWaiting(c.ahead)).To(Equal(c.want))
		})
	}
}

// TestABufferedRunsDeadlineCountsFromWhenItCouldStart: from the end of the run
// it waited for, and never from before it was buffered.
func TestABufferedRunsDeadlineCountsFromWhenItCouldStart(t *testing.T) {
	g := NewWithT(t)
	at := time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)
	b := batchv1alpha1.BufferedRun{ScheduledTime: metav1.NewTime(at), BufferedAt: metav1.NewTime(at.Add(time.Second))}
	ended := func(d time.Duration) *batchv1alpha1.RunRecord {
		return &batchv1alpha1.RunRecord{FinishedAt: &metav1.Time{Time: at.Add(d)}}
	}
	g.Expect(due.BufferedDue(b, nil)).To(BeTemporally("==", at.Add(time.Second)), "no run recorded")
	g.Expect(due.BufferedDue(b, &batchv1alpha1.RunRecord{})).To(BeTemporally("==", at.Add(time.Second)), "the last run has no end")
	g.Expect(due.BufferedDue(b, ended(5*time.Minute))).To(BeTemporally("==", at.Add(5*time.Minute)), "the run it waited for ended")
	g.Expect(due.BufferedDue(b, ended(-time.Minute))).To(BeTemporally("==", at.Add(time.Second)), "an end before it was buffered")
}

// TestARunDueBehindActiveOnesWaitsOnlyAsThePolicyBuffersIt: which policies
// buffer a run due while earlier runs are active, how many may wait, and why
// one is skipped instead; Replace buffers one behind backfill runs only.
func TestARunDueBehindActiveOnesWaitsOnlyAsThePolicyBuffersIt(t *testing.T) {
	occ := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	earlier := batchv1alpha1.BufferedRun{ScheduledTime: metav1.NewTime(occ.Add(-time.Hour))}
	same := batchv1alpha1.BufferedRun{ScheduledTime: metav1.NewTime(occ)}
	running := []batchv1alpha1.ActiveRun{{JobName: "settle-1"}}
	backfill := []batchv1alpha1.ActiveRun{{JobName: "settle-b", Backfill: "b-1"}}
	for _, c := range []struct {
		name     string
		policy   batchv1alpha1.ConcurrencyPolicy
		limit    *int32
		active   []batchv1alpha1.ActiveRun
		buffered []batchv1alpha1.BufferedRun
		ok       bool
		skip     string
	}{
		{name: "Forbid buffers nothing", policy: batchv1alpha1.ForbidConcurrent, active: running},
		{name: "Replace behind a scheduled run buffers nothing", policy: batchv1alpha1.ReplaceConcurrent, active: running},
		{name: "Replace behind a backfill run buffers one", policy: batchv1alpha1.ReplaceConcurrent, active: backfill, ok: true},
		{name: "Replace behind a backfill run with one waiting", policy: batchv1alpha1.ReplaceConcurrent, active: backfill, buffered: []batchv1alpha1.BufferedRun{earlier},
			ok: true, skip: "concurrencyPolicy Replace and 1 run(s) already wait for settle-b"},
		{name: "BufferOne with room", policy: batchv1alpha1.BufferOneConcurrent, active: running, ok: true},
		{name: "BufferAll behind two runs waits for the first", policy: batchv1alpha1.BufferAllConcurrent, active: append(append([]batchv1alpha1.ActiveRun{}, running...), backfill...), ok: true},
		{name: "BufferOne full", policy: batchv1alpha1.BufferOneConcurrent, active: running, buffered: []batchv1alpha1.BufferedRun{earlier},
			ok: true, skip: "concurrencyPolicy BufferOne and 1 run(s) already wait for settle-1"},
		{name: "the occurrence waits already", policy: batchv1alpha1.BufferAllConcurrent, active: running, buffered: []batchv1alpha1.BufferedRun{same},
			ok: true, skip: "the run for 2026-12-07T03:00:00Z is waiting already"},
		{name: "BufferAll under its limit", policy: batchv1alpha1.BufferAllConcurrent, limit: ptr.To(int32(2)), active: running, buffered: []batchv1alpha1.BufferedRun{earlier}, ok: true},
		{name: "BufferAll at its limit", policy: batchv1alpha1.BufferAllConcurrent, limit: ptr.To(int32(1)), active: running, buffered: []batchv1alpha1.BufferedRun{earlier},
			ok: true, skip: "concurrencyPolicy BufferAll and 1 run(s) already wait for settle-1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			spec := &batchv1alpha1.GuardedJobSpec{ConcurrencyPolicy: c.policy, BufferLimit: c.limit}
			ok, skip, waitFor := due.Buffering(spec, &batchv1alpha1.GuardedJobStatus{Active: c.active, Buffered: c.buffered}, occ)
			g.Expect(ok).To(Equal(c.ok))
			g.Expect(skip).To(Equal(c.skip))
			if ok {
				g.Expect(waitFor).To(Equal(c.active[0].JobName))
			}
		})
	}
}
