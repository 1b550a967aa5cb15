package controllers

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// With the early gate, the update that opens a run's gate brings the pass that
// records the run at low priority, behind the due runs already waiting; every
// other Job event brings its pass at the usual priority. A real priority queue,
// no API server.
func TestTheEarlyGatesRecordPassWaitsBehindDueRuns(t *testing.T) {
	gated := func(name string) *batchv1.Job {
		return &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, Labels: map[string]string{batchv1alpha1.GuardedJobLabel: "settle"},
				Annotations: map[string]string{batchv1alpha1.StartGateAnnotation: batchv1alpha1.StartGateLease}},
			Spec: batchv1.JobSpec{Suspend: ptr.To(true)},
		}
	}
	opened := func(j *batchv1.Job) *batchv1.Job {
		j = j.DeepCopy()
		j.Spec.Suspend = ptr.To(false)
		delete(j.Annotations, batchv1alpha1.StartGateAnnotation)
		return j
	}
	byLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrl.Request {
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetLabels()[batchv1alpha1.GuardedJobLabel]}}}
	})
	for _, c := range []struct {
		name        string
		early       bool
		before, now *batchv1.Job // before nil: the Job's creation
		want        int
	}{
		{"the gate opens, early gate", true, gated("settle-1"), opened(gated("settle-1")), handler.LowPriority},
		{"the gate opens, default order", false, gated("settle-1"), opened(gated("settle-1")), 0},
		{"another update, early gate", true, opened(gated("settle-1")), opened(gated("settle-1")), 0},
		{"a gated Job is created, early gate", true, nil, gated("settle-1"), handler.LowPriority},
		{"a gated Job is created, default order", false, nil, gated("settle-1"), 0},
		{"an open Job is created, early gate", true, nil, opened(gated("settle-1")), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := priorityqueue.New[ctrl.Request]("test")
			defer q.ShutDown()
			r := &GuardedJobReconciler{EarlyGate: c.early}
			c.now.ResourceVersion = "2" // an update, not a resync
			if c.before == nil {
				r.jobEvents(byLabel).Create(context.Background(), event.CreateEvent{Object: c.now}, q)
			} else {
				r.jobEvents(byLabel).Update(context.Background(), event.UpdateEvent{ObjectOld: c.before, ObjectNew: c.now}, q)
			}
			item, priority, _ := q.GetWithPriority()
			if item.Name != "settle" || priority != c.want {
				t.Errorf("queued %v at priority %d, want settle at %d", item, priority, c.want)
			}
		})
	}
}
