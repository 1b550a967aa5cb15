package calibration

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

func seconds(ns ...int) []time.Duration {
	out := make([]time.Duration, len(ns))
	for i, n := range ns {
		out[i] = time.Duration(n) * time.Second
	}
	return out
}

// durations records ds one after the other, as runs end.
func durations(ds ...time.Duration) *batchv1alpha1.RunDurations {
	var rd *batchv1alpha1.RunDurations
	for _, d := range ds {
		rd = WithDuration(rd, d)
	}
	return rd
}

func TestRunDurationPercentiles(t *testing.T) {
	tests := []struct {
		name     string
		recorded []time.Duration
		count    int32
		p50, p99 time.Duration
		recent   []time.Duration
	}{
		{name: "one run is its own p50 and p99", recorded: seconds(42), count: 1, p50: 42 * time.Second, p99: 42 * time.Second, recent: seconds(42)},
		{name: "the median of an even count is the lower middle (nearest rank)", recorded: seconds(40, 10, 30, 20), count: 4,
			p50: 20 * time.Second, p99: 40 * time.Second, recent: seconds(40, 10, 30, 20)},
		{name: "with 20 runs or fewer the p99 is the longest", recorded: seconds(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 100),
			count: 20, p50: 10 * time.Second, p99: 100 * time.Second},
		{name: "only the last 20 runs count: an old outlier drops out", recorded: seconds(500, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20),
			count: 20, p50: 10 * time.Second, p99: 20 * time.Second},
		{name: "durations are kept in whole seconds", recorded: []time.Duration{1500 * time.Millisecond, 2400 * time.Millisecond}, count: 2,
			p50: 2 * time.Second, p99: 2 * time.Second, recent: seconds(2, 2)},
		{name: "a negative duration (clock trouble) counts as zero", recorded: []time.Duration{-time.Minute}, count: 1, recent: seconds(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rd := durations(tt.recorded...)
			g.Expect(rd.Count).To(Equal(tt.count))
			g.Expect(rd.Recent).To(HaveLen(int(tt.count)))
			g.Expect(rd.P50.Duration).To(Equal(tt.p50))
			g.Expect(rd.P99.Duration).To(Equal(tt.p99))
			if tt.recent != nil {
				var got []time.Duration
				for _, r := range rd.Recent {
					got = append(got, r.Duration)
				}
				g.Expect(got).To(Equal(tt.recent), "oldest first")
			}
		})
	}
	t.Run("the status it was given is not changed", func(t *testing.T) {
		g := NewWithT(t)
		before := durations(seconds(1, 2)...)
		kept := before.DeepCopy()
		_ = WithDuration(before, time.Hour)
		g.Expect(before).To(Equal(kept))
	})
}

func TestMaxHoldAtRisk(t *testing.T) {
	tests := []struct {
		name     string
		recorded []time.Duration
		maxHold  time.Duration
		want     bool
	}{
		{name: "no run recorded yet", maxHold: time.Hour, want: false},
		{name: "p99 well within maxHold", recorded: seconds(600, 700, 800), maxHold: time.Hour, want: false},
		{name: "p99 at exactly 80% of maxHold is still fine", recorded: seconds(2880), maxHold: time.Hour, want: false},
		{name: "p99 just over 80% of maxHold", recorded: seconds(2881), maxHold: time.Hour, want: true},
		{name: "one long run among short ones is the p99", recorded: seconds(60, 60, 60, 3000), maxHold: time.Hour, want: true},
		{name: "a run stopped at maxHold", recorded: []time.Duration{time.Hour}, maxHold: time.Hour, want: true},
		{name: "raising maxHold clears it", recorded: seconds(3000), maxHold: 2 * time.Hour, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(MaxHoldAtRisk(durations(tt.recorded...), tt.maxHold)).To(Equal(tt.want))
		})
	}
}

func TestUnusuallyLong(t *testing.T) {
	tests := []struct {
		name      string
		recorded  []time.Duration
		after     time.Duration // 0: never called unusual
		longRun   time.Duration
		isUnusual bool
	}{
		{name: "four runs are too few to say what is usual", recorded: seconds(10, 10, 10, 10), longRun: time.Hour},
		{name: "from five runs on, over 3x the p99 is unusual", recorded: seconds(10, 10, 10, 10, 10), after: 30 * time.Second,
			longRun: 31 * time.Second, isUnusual: true},
		{name: "exactly 3x the p99 is not", recorded: seconds(10, 10, 10, 10, 10), after: 30 * time.Second, longRun: 30 * time.Second},
		{name: "the p99 is the longest recent run, not the median", recorded: seconds(10, 10, 10, 10, 100), after: 300 * time.Second,
			longRun: 200 * time.Second},
		{name: "runs under a second do not make every run unusual", recorded: seconds(0, 0, 0, 0, 0), after: 3 * time.Second,
			longRun: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rd := durations(tt.recorded...)
			after, ok := UnusuallyLongAfter(rd)
			g.Expect(ok).To(Equal(tt.after != 0))
			g.Expect(after).To(Equal(tt.after))
			g.Expect(ok && tt.longRun > after).To(Equal(tt.isUnusual))
		})
	}
}

func TestJobDuration(t *testing.T) {
	at := func(s int) *metav1.Time { t := metav1.NewTime(time.Unix(1_800_000_000+int64(s), 0)); return &t }
	cond := func(typ batchv1.JobConditionType, s int) batchv1.JobCondition {
		return batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: *at(s)}
	}
	tests := []struct {
		name   string
		job    batchv1.Job
		want   time.Duration
		wantOK bool
	}{
		{name: "a completed Job: start to completion", job: batchv1.Job{Status: batchv1.JobStatus{StartTime: at(0), CompletionTime: at(90),
			Conditions: []batchv1.JobCondition{cond(batchv1.JobComplete, 95)}}}, want: 90 * time.Second, wantOK: true},
		{name: "a failed Job: start to its Failed condition", job: batchv1.Job{Status: batchv1.JobStatus{StartTime: at(0),
			Conditions: []batchv1.JobCondition{cond(batchv1.JobFailureTarget, 50), cond(batchv1.JobFailed, 60)}}}, want: time.Minute, wantOK: true},
		{name: "without a start time, from the Job's creation", job: batchv1.Job{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: *at(10)},
			Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{cond(batchv1.JobFailed, 40)}}}, want: 30 * time.Second, wantOK: true},
		{name: "a Job without an end has no duration", job: batchv1.Job{Status: batchv1.JobStatus{StartTime: at(0)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d, ok := JobDuration(&tt.job)
			g.Expect(ok).To(Equal(tt.wantOK))
			g.Expect(d).To(Equal(tt.want))
		})
	}
}
