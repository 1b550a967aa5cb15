package leadership_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/guardedjob/guardedjob/internal/leadership"
)

const renewDeadline = 10 * time.Second

func TestAGuardLeadsOnlyWhileItsLeaderLeaseIsFreshlyRenewedAndNoPauseCameSince(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC))
	guard := leadership.New(clk, renewDeadline)

	g.Expect(guard.Err()).To(MatchError(leadership.ErrNotLeading), "before its first renewal")
	guard.Renewed(clk.Now())
	g.Expect(guard.Err()).NotTo(HaveOccurred())

	clk.Step(renewDeadline)
	g.Expect(guard.Leading()).To(BeTrue(), "up to the renew deadline")
	clk.Step(time.Millisecond)
	g.Expect(guard.Err()).To(MatchError(ContainSubstring("more than the renew deadline")))

	sent := clk.Now()
	guard.Renewed(sent)
	g.Expect(guard.Leading()).To(BeTrue())
	clk.Step(time.Second)
	guard.Paused(clk.Now())
	g.Expect(guard.Err()).To(MatchError(ContainSubstring("was paused")), "within the renew deadline, but paused")
	guard.Renewed(sent)
	g.Expect(guard.Leading()).To(BeFalse(), "a renewal sent before the pause does not count, however late its answer")
	clk.Step(time.Millisecond)
	guard.Renewed(clk.Now())
	g.Expect(guard.Leading()).To(BeTrue(), "a renewal sent after the pause does")
}

func TestANilGuardAlwaysLeads(t *testing.T) {
	var guard *leadership.Guard
	NewWithT(t).Expect(guard.Err()).NotTo(HaveOccurred())
}

func TestTheWatchdogTakesALateTickForAPause(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	guard := leadership.New(clk, renewDeadline)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = guard.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	g.Eventually(clk.HasWaiters).Should(BeTrue())

	guard.Renewed(clk.Now())
	for range 20 { // ticks on time: no pause
		clk.Step(100 * time.Millisecond)
		g.Consistently(guard.Leading).WithTimeout(5 * time.Millisecond).Should(BeTrue())
	}
	clk.Step(30 * time.Second) // the process was stopped
	g.Eventually(func() error { return guard.Err() }).Should(MatchError(ContainSubstring("was paused")))
}

// fakeLock is a leader-election lock whose writes succeed or fail as told.
type fakeLock struct {
	resourcelock.Interface
	id  string
	err error
}

func (f *fakeLock) Identity() string { return f.id }
func (f *fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error {
	return f.err
}
func (f *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	return f.err
}

func TestTheGuardSeesEveryLeaderLeaseWriteThatSucceeds(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	guard := leadership.New(clk, renewDeadline)
	inner := &fakeLock{id: "replica-a", err: errors.New("conflict: held by replica-b")}
	lock := guard.Lock(inner)
	ctx := context.Background()

	g.Expect(lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "replica-a"})).NotTo(Succeed())
	g.Expect(guard.Leading()).To(BeFalse(), "a renewal that failed")
	inner.err = nil
	g.Expect(lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: ""})).To(Succeed())
	g.Expect(guard.Leading()).To(BeFalse(), "giving the lease up is no renewal")
	g.Expect(lock.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "replica-a"})).To(Succeed())
	g.Expect(guard.Leading()).To(BeTrue(), "taking the lease")
	clk.Step(renewDeadline + time.Second)
	g.Expect(lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "replica-a"})).To(Succeed())
	g.Expect(guard.Leading()).To(BeTrue(), "renewing it")
}

// recorded is an event recorder that keeps what it is asked to record.
type recorded struct{ reasons []string }

func (r *recorded) Eventf(_, _ runtime.Object, _, reason, _, _ string, _ ...any) {
	r.reasons = append(r.reasons, reason)
}

func (r *recorded) AnnotatedEventf(_, _ runtime.Object, _ map[string]string, _, reason, _, _ string, _ ...any) {
	r.reasons = append(r.reasons, reason)
}

func TestAManagerNotKnownToLeadWritesNothingAndRecordsNoEvent(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	guard := leadership.New(clk, renewDeadline)
	existing := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "existing"}}
	c := guard.Client(fake.NewClientBuilder().WithObjects(existing).WithStatusSubresource(&corev1.Pod{}).Build())
	rec := &recorded{}
	events := guard.Recorder(rec)

	writes := map[string]func() error{
		"create": func() error {
			return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "new"}})
		},
		"update": func() error { return c.Update(ctx, existing.DeepCopy()) },
		"patch": func() error {
			return c.Patch(ctx, existing.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(`{"data":{"a":"b"}}`)))
		},
		"delete":        func() error { return c.Delete(ctx, existing.DeepCopy()) },
		"delete all of": func() error { return c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace("ns")) },
		"status update": func() error {
			return c.Status().Update(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}})
		},
		"status patch": func() error {
			return c.Status().Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}, client.MergeFrom(&corev1.Pod{}))
		},
		"subresource create": func() error {
			return c.SubResource("eviction").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}, &corev1.Pod{})
		},
	}
	for name, write := range writes {
		g.Expect(write()).To(MatchError(leadership.ErrNotLeading), name)
	}
	events.Eventf(existing, nil, corev1.EventTypeNormal, "LockAcquired", "LockAcquired", "not leading")
	g.Expect(rec.reasons).To(BeEmpty(), "no event while not leading")
	got := &corev1.ConfigMap{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(existing), got)).To(Succeed(), "reads go through")
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "new"}, &corev1.ConfigMap{})).To(MatchError(ContainSubstring("not found")), "nothing was created")

	guard.Renewed(clk.Now())
	g.Expect(writes["create"]()).To(Succeed(), "leading again")
	events.Eventf(existing, nil, corev1.EventTypeNormal, "LockAcquired", "LockAcquired", "leading")
	g.Expect(rec.reasons).To(Equal([]string{"LockAcquired"}))
}
