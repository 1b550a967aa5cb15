package controllers

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/calibration"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// kstatusOf computes what Flux and other kstatus users see.
func kstatusOf(t *testing.T, gj *batchv1alpha1.GuardedJob) *status.Result {
	t.Helper()
	gj = gj.DeepCopy()
	gj.APIVersion, gj.Kind = batchv1alpha1.GroupVersion.String(), "GuardedJob"
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(gj)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return res
}

func TestKstatus(t *testing.T) {
	now := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	errStore := errors.New("acquire lock: dial tcp 10.0.0.7:6379: connection refused")
	specErr := func(reason string) error { return &specerror.Error{Reason: reason, Message: reason + ": fix the spec"} }

	// pass plays one reconcile pass the way Reconcile does: Ready from the spec
	// check, the pass's own changes, observedGeneration only after a pass without
	// error, then the kstatus conditions just before the write.
	pass := func(gj *batchv1alpha1.GuardedJob, compileErr, passErr error, during func(*batchv1alpha1.GuardedJob)) {
		runcore.SetReady(gj, compileErr, now)
		if during != nil {
			during(gj)
		}
		if passErr == nil {
			gj.Status.ObservedGeneration = gj.Generation
		}
		runcore.SetKstatus(gj, now)
	}
	// reconciled returns an object at generation gen after a clean pass over a
	// valid spec.
	reconciled := func(gen int64) *batchv1alpha1.GuardedJob {
		gj := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: "daily-settlement", Namespace: "payments", Generation: gen}}
		gj.Spec.Schedule = "5 0 * * *"
		pass(gj, nil, nil, func(gj *batchv1alpha1.GuardedJob) { runcore.SetLockHeld(gj, "", "", now) })
		return gj
	}
	running := func(gj *batchv1alpha1.GuardedJob) {
		gj.Status.Active = []batchv1alpha1.ActiveRun{{JobName: "daily-settlement-29123456-a1b2c3", Phase: batchv1alpha1.RunPhaseRunning,
			Key: "payments:settlement", Holder: "cluster-a/payments/daily-settlement-29123456-a1b2c3", Fence: 34}}
		runcore.SetLockHeld(gj, "", "", now)
		runcore.SetLock(gj, batchv1alpha1.LockStateHeld, "payments:settlement", "cluster-a/payments/daily-settlement-29123456-a1b2c3", 34)
	}

	type want struct {
		status    status.Status
		stalled   string // Stalled=True with this reason, "" for absent
		reconcile bool   // Reconciling=True
	}
	tests := []struct {
		name  string
		setup func() *batchv1alpha1.GuardedJob
		want  want
	}{
		{"a valid spec waiting for its next run is Current", func() *batchv1alpha1.GuardedJob { return reconciled(1) },
			want{status: status.CurrentStatus}},
		{"a run in progress is normal operation, Current", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			pass(gj, nil, nil, running)
			return gj
		}, want{status: status.CurrentStatus}},
		{"runs that come close to maxHold (MaxHoldAtRisk=True) are a calibration matter, Current", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			gj.Spec.Lock.MaxHold = &metav1.Duration{Duration: time.Hour}
			pass(gj, nil, nil, func(gj *batchv1alpha1.GuardedJob) {
				gj.Status.RunDurations = calibration.WithDuration(nil, 55*time.Minute)
				s := &scope{gj: gj, orig: gj.DeepCopy(), now: now}
				(&GuardedJobReconciler{}).setMaxHoldAtRisk(s)
				NewWithT(t).Expect(runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.MaxHoldAtRiskCondition)).To(HaveField("Status", metav1.ConditionTrue))
			})
			return gj
		}, want{status: status.CurrentStatus}},
		{"a suspended GuardedJob is Current", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			gj.Spec.Suspend = ptr.To(true)
			pass(gj, nil, nil, nil)
			return gj
		}, want{status: status.CurrentStatus}},
		{"a busy lock is normal operation, Current", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			pass(gj, nil, nil, func(gj *batchv1alpha1.GuardedJob) {
				runcore.SetLockHeld(gj, batchv1alpha1.LockBusyReason, "lock payments:settlement is held by cluster-b/payments/daily-settlement-29123456-d4e5f6", now)
			})
			return gj
		}, want{status: status.CurrentStatus}},
		{"an unreachable store on an observed spec is Current: retrying fixes it", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			pass(gj, nil, errStore, func(gj *batchv1alpha1.GuardedJob) { runcore.SetStoreReachable(gj, errStore, now) })
			return gj
		}, want{status: status.CurrentStatus}},
		{"a new generation not yet seen by the manager is InProgress", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			gj.Generation = 2
			return gj
		}, want{status: status.InProgressStatus}},
		{"a new generation whose pass failed on the store is InProgress and Reconciling", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			gj.Generation = 2
			pass(gj, nil, errStore, func(gj *batchv1alpha1.GuardedJob) { runcore.SetStoreReachable(gj, errStore, now) })
			return gj
		}, want{status: status.InProgressStatus, reconcile: true}},
		{"an invalid schedule is Failed", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			gj.Generation = 2
			pass(gj, specErr(batchv1alpha1.InvalidScheduleReason), nil, nil)
			return gj
		}, want{status: status.FailedStatus, stalled: batchv1alpha1.InvalidScheduleReason}},
		{"an invalid schedule, fixed, is Current again", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			gj.Generation = 2
			pass(gj, specErr(batchv1alpha1.InvalidScheduleReason), nil, nil)
			gj.Generation = 3
			pass(gj, nil, nil, nil)
			return gj
		}, want{status: status.CurrentStatus}},
		{"a stalled reason from an older generation does not stall the new one", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			gj.Generation = 2
			pass(gj, specErr(batchv1alpha1.InvalidScheduleReason), nil, nil)
			gj.Generation = 3
			pass(gj, errStore, errStore, nil) // the store Secret could not be read
			return gj
		}, want{status: status.InProgressStatus, reconcile: true}},
		{"a missing store Secret is InProgress, not Failed: applying the Secret clears it", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			pass(gj, specErr(batchv1alpha1.StoreSecretNotFoundReason), nil, nil)
			return gj
		}, want{status: status.InProgressStatus}},
		{"an invalid store Secret is InProgress, not Failed: fixing the Secret clears it", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			pass(gj, specErr(batchv1alpha1.StoreSecretInvalidReason), nil, nil)
			return gj
		}, want{status: status.InProgressStatus}},
		{"a key of the wrong type found by an acquisition is Failed, and stays so on the next pass", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			pass(gj, nil, nil, func(gj *batchv1alpha1.GuardedJob) {
				runcore.SetCondition(gj, batchv1alpha1.ReadyCondition, metav1.ConditionFalse, batchv1alpha1.StoreKeyWrongTypeReason, "payments:settlement holds a hash", now)
			})
			pass(gj, nil, nil, nil)
			return gj
		}, want{status: status.FailedStatus, stalled: batchv1alpha1.StoreKeyWrongTypeReason}},
		{"a key of the wrong type, fixed in the store, is Current after the next acquisition", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			pass(gj, nil, nil, func(gj *batchv1alpha1.GuardedJob) {
				runcore.SetCondition(gj, batchv1alpha1.ReadyCondition, metav1.ConditionFalse, batchv1alpha1.StoreKeyWrongTypeReason, "payments:settlement holds a hash", now)
			})
			pass(gj, nil, nil, func(gj *batchv1alpha1.GuardedJob) { runcore.SetAcquired(gj, now); running(gj) })
			return gj
		}, want{status: status.CurrentStatus}},
	}
	for _, reason := range []string{
		batchv1alpha1.InvalidScheduleReason, batchv1alpha1.InvalidTimeZoneReason, batchv1alpha1.InvalidTemplateReason,
		batchv1alpha1.InvalidKeyReason, batchv1alpha1.KeyNotAllowedReason, batchv1alpha1.UnsafeLeaseTimingReason,
		batchv1alpha1.StoreNotAllowedReason,
	} {
		tests = append(tests, struct {
			name  string
			setup func() *batchv1alpha1.GuardedJob
			want  want
		}{"spec error " + reason + " is Failed", func() *batchv1alpha1.GuardedJob {
			gj := reconciled(1)
			gj.Generation = 2
			pass(gj, specErr(reason), nil, nil)
			return gj
		}, want{status: status.FailedStatus, stalled: reason}})
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			gj := tt.setup()
			res := kstatusOf(t, gj)
			g.Expect(res.Status).To(Equal(tt.want.status), res.Message)

			stalled := runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.StalledCondition)
			if tt.want.stalled == "" {
				g.Expect(stalled).To(BeNil())
			} else {
				g.Expect(stalled).NotTo(BeNil())
				g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
				g.Expect(stalled.Reason).To(Equal(tt.want.stalled))
				g.Expect(stalled.ObservedGeneration).To(Equal(gj.Generation))
				g.Expect(res.Message).To(Equal(runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.ReadyCondition).Message),
					"the Failed message says what to fix")
			}
			reconciling := runcore.FindCondition(gj.Status.Conditions, batchv1alpha1.ReconcilingCondition)
			if tt.want.reconcile {
				g.Expect(reconciling).NotTo(BeNil())
				g.Expect(reconciling.Status).To(Equal(metav1.ConditionTrue))
				g.Expect(reconciling.ObservedGeneration).To(Equal(gj.Generation))
			} else {
				g.Expect(reconciling).To(BeNil())
			}
			for _, c := range gj.Status.Conditions {
				g.Expect(c.ObservedGeneration).NotTo(BeZero(), "condition %s carries observedGeneration", c.Type)
			}
		})
	}
}
