package v1alpha1

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestSpreadAccessors(t *testing.T) {
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	for _, tc := range []struct {
		name              string
		retry             *BusyRetry
		wantInit, wantMax time.Duration
	}{
		{name: "unset: 5s, capped at 1m", wantInit: 5 * time.Second, wantMax: time.Minute},
		{name: "set", retry: &BusyRetry{Initial: d(2 * time.Second), Max: d(30 * time.Second)}, wantInit: 2 * time.Second, wantMax: 30 * time.Second},
		{name: "a first wait below 1s is the default", retry: &BusyRetry{Initial: d(time.Millisecond)}, wantInit: 5 * time.Second, wantMax: time.Minute},
		{name: "a cap below the first wait is the first wait", retry: &BusyRetry{Initial: d(2 * time.Minute)}, wantInit: 2 * time.Minute, wantMax: 2 * time.Minute},
		{name: "a cap above an hour is an hour", retry: &BusyRetry{Max: d(3 * time.Hour)}, wantInit: 5 * time.Second, wantMax: time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			l := &LockSpec{BusyRetry: tc.retry}
			g.Expect(l.BusyRetryInitial()).To(Equal(tc.wantInit))
			g.Expect(l.BusyRetryMax()).To(Equal(tc.wantMax))
		})
	}
	g := NewWithT(t)
	g.Expect((&GuardedJobSpec{}).ScheduleJitterOrDefault()).To(BeZero())
	g.Expect((&GuardedJobSpec{ScheduleJitter: d(time.Minute)}).ScheduleJitterOrDefault()).To(Equal(time.Minute))
	g.Expect((&GuardedJobSpec{ScheduleJitter: d(5 * time.Minute)}).ScheduleJitterOrDefault()).To(BeZero(), "not shorter than the default deadline")
	g.Expect((&GuardedJobSpec{ScheduleJitter: d(-time.Second)}).ScheduleJitterOrDefault()).To(BeZero())
	g.Expect((&GuardedJobSpec{ScheduleJitter: d(time.Minute), StartingDeadlineSeconds: ptr.To(int64(30))}).ScheduleJitterOrDefault()).To(BeZero())
}
