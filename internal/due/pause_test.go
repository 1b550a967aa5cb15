package due_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
)

// TestTheFailurePolicyPausesAfterSuspendAfterFailuresInARow: below the
// threshold nothing happens; at it the count starts again, and the GuardedJob
// is paused (by the failure policy, saying which run ended how) unless it is
// suspended already.
func TestTheFailurePolicyPausesAfterSuspendAfterFailuresInARow(t *testing.T) {
	now := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name     string
		failures int32
		policy   bool
		suspend  bool
		lastRun  *batchv1alpha1.RunRecord
		pauses   bool
		reset    bool
		reason   string
	}{
		{name: "no failure policy", failures: 9},
		{name: "below the threshold", failures: 2, policy: true},
		{name: "at the threshold", failures: 3, policy: true, pauses: true, reset: true,
			reason: "3 runs in a row failed (the Job failed, MaxHoldExceeded, PodStartTimeout; spec.failurePolicy.suspendAfter 3)"},
		{name: "at the threshold, with the last run", failures: 3, policy: true, pauses: true, reset: true,
			lastRun: &batchv1alpha1.RunRecord{Result: batchv1alpha1.RunResultFailed, Message: "the Job failed: BackoffLimitExceeded"},
			reason:  "; the last, -, ended Failed: the Job failed: BackoffLimitExceeded"},
		{name: "at the threshold while suspended", failures: 4, policy: true, suspend: true, reset: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			gj := &batchv1alpha1.GuardedJob{}
			if c.policy {
				gj.Spec.FailurePolicy = &batchv1alpha1.FailurePolicy{SuspendAfter: 3, AlsoCount: []batchv1alpha1.FailureCause{batchv1alpha1.FailurePodStartTimeout}}
			}
			gj.Spec.Suspend = ptr.To(c.suspend)
			gj.Status.ConsecutiveFailures, gj.Status.LastRun = c.failures, c.lastRun
			pause, reason, reset := due.FailurePause(gj, now)
			g.Expect(reset).To(Equal(c.reset))
			g.Expect(pause != nil).To(Equal(c.pauses))
			if c.pauses {
				g.Expect(reason).To(ContainSubstring(c.reason))
				g.Expect(pause.By).To(Equal(batchv1alpha1.FailurePolicySuspender))
				g.Expect(pause.Reason).To(Equal(reason))
				g.Expect(pause.Since.Time).To(Equal(now))
				g.Expect(pause.Until).To(BeNil(), "it lasts until a resume request")
			}
		})
	}
	g := NewWithT(t)
	long := &batchv1alpha1.GuardedJob{Spec: batchv1alpha1.GuardedJobSpec{FailurePolicy: &batchv1alpha1.FailurePolicy{SuspendAfter: 1}}}
	long.Status.ConsecutiveFailures = 1
	long.Status.LastRun = &batchv1alpha1.RunRecord{JobName: "settle-1", Result: batchv1alpha1.RunResultFailed, Message: strings.Repeat("é", 400)}
	pause, _, _ := due.FailurePause(long, now)
	g.Expect(len(pause.Reason)).To(BeNumerically("<=", 512), "the schema's bound of suspendNote.reason")
}

// TestAPauseWithAnUntilEndsThen: a pause without an until lasts; one with an
// until wakes the manager then, and is over from then on.
func TestAPauseWithAnUntilEndsThen(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	until := metav1.NewTime(now.Add(time.Hour))
	over, wake := due.PauseOver(&batchv1alpha1.Pause{}, now)
	g.Expect(over).To(BeFalse())
	g.Expect(wake.IsZero()).To(BeTrue())
	over, wake = due.PauseOver(&batchv1alpha1.Pause{SuspendNote: batchv1alpha1.SuspendNote{Until: &until}}, now)
	g.Expect(over).To(BeFalse())
	g.Expect(wake).To(Equal(until.Time))
	over, _ = due.PauseOver(&batchv1alpha1.Pause{SuspendNote: batchv1alpha1.SuspendNote{Until: &until}}, until.Time)
	g.Expect(over).To(BeTrue())
}
