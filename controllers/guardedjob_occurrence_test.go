package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

func TestPeerRunMinutes(t *testing.T) {
	tests := []struct {
		name, holder string
		want         int64
		ok           bool
	}{
		{name: "a run of the same GuardedJob in another cluster", holder: "cluster-b/payments/settle-29123456-3f9a1c", want: 29123456, ok: true},
		{name: "in another namespace of the other cluster", holder: "cluster-b/payments-eu/settle-29123456-3f9a1c", want: 29123456, ok: true},
		{name: "a run of this cluster", holder: "cluster-a/payments/settle-29123456-3f9a1c"},
		{name: "a run of another GuardedJob sharing the key", holder: "cluster-b/payments/payout-29123456-3f9a1c"},
		{name: "a GuardedJob whose name starts with this one's", holder: "cluster-b/payments/settle-eu-29123456-3f9a1c"},
		{name: "a foreign holder", holder: "billing-cron@host-7"},
		{name: "a holder with no random part", holder: "cluster-b/payments/settle-29123456-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := peerRunMinutes("settle", tt.holder, "cluster-a")
			NewWithT(t).Expect(ok).To(Equal(tt.ok))
			if tt.ok {
				NewWithT(t).Expect(got).To(Equal(tt.want))
			}
		})
	}
}

func TestNoteOccurrenceDone(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 5, 0, 0, time.UTC)
	completed := t0.Add(41 * time.Minute)
	now := t0.Add(time.Hour)
	done := func(scheduled time.Time, by string, at time.Time) *batchv1alpha1.OccurrenceDone {
		return &batchv1alpha1.OccurrenceDone{ScheduledTime: metav1.NewTime(scheduled), By: by, At: metav1.NewTime(at)}
	}
	tests := []struct {
		name   string
		before *batchv1alpha1.OccurrenceDone
		at     time.Time // the run's occurrence
		result batchv1alpha1.RunResult
		heldBy string
		want   *batchv1alpha1.OccurrenceDone
	}{
		{name: "a success here: done by the run, when its Job completed", at: t0, result: batchv1alpha1.RunResultSucceeded,
			want: done(t0, "cluster-a/payments/settle-1-abc", completed)},
		{name: "skipped because another cluster had done it: by that run, found now", at: t0, result: batchv1alpha1.RunResultSkipped,
			heldBy: "cluster-b/payments/settle-1-def", want: done(t0, "cluster-b/payments/settle-1-def", now)},
		{name: "skipped for another reason: nothing is known done", at: t0, result: batchv1alpha1.RunResultSkipped},
		{name: "busy: not known yet", at: t0, result: batchv1alpha1.RunResultBusy, heldBy: "cluster-b/payments/settle-1-def"},
		{name: "failed", at: t0, result: batchv1alpha1.RunResultFailed},
		{name: "a backfilled older occurrence leaves the latest one", before: done(t0.Add(24*time.Hour), "cluster-b/payments/settle-2-def", now),
			at: t0, result: batchv1alpha1.RunResultSucceeded, want: done(t0.Add(24*time.Hour), "cluster-b/payments/settle-2-def", now)},
		{name: "a later occurrence replaces an earlier one", before: done(t0.Add(-24*time.Hour), "cluster-b/payments/settle-0-def", now),
			at: t0, result: batchv1alpha1.RunResultSucceeded, want: done(t0, "cluster-a/payments/settle-1-abc", completed)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gj := &batchv1alpha1.GuardedJob{}
			gj.Status.LastOccurrenceDone = tt.before
			if tt.result == batchv1alpha1.RunResultSucceeded {
				gj.Status.LastSuccessfulTime = runcore.PtrTime(completed)
			}
			run := &batchv1alpha1.ActiveRun{ScheduledTime: metav1.NewTime(tt.at), Holder: "cluster-a/payments/settle-1-abc"}
			runcore.NoteOccurrenceDone(gj, run, tt.result, tt.heldBy, now)
			NewWithT(t).Expect(gj.Status.LastOccurrenceDone).To(Equal(tt.want))
		})
	}
}
