package controllers_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/controllers"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// staleObjectReader answers the first n Gets of one object with an older copy of
// it (a cache that read it a moment ago, or a read that raced a write), and
// everything else as it is.
type staleObjectReader struct {
	client.Reader
	old client.Object
	n   *int
}

func (r staleObjectReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if reflect.TypeOf(obj) == reflect.TypeOf(r.old) && key == client.ObjectKeyFromObject(r.old) && *r.n > 0 {
		*r.n--
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(r.old.DeepCopyObject()).Elem())
		return nil
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// always is a count of stale reads that does not run out.
func always() *int { n := 1 << 30; return &n }

// The stop controller reads a Job, then its GuardedJob. Between the two reads the
// Job may complete and the run be recorded as ended: the GuardedJob then claims
// no run for a Job that, as first read, still runs. That finished run's Job must
// stay (it is the history kubectl shows), and no StaleJob warning may say it was
// stopped.
func TestAJobThatCompletesBetweenTheStopControllersReadsIsNotStopped(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.guardedJob("ends", h.ns+":ends")
	job, _ := h.runningJob(gj)
	running := h.gateOpened(job) // as the cache read it: working, past its start gate

	h.complete(job)
	g := h.g
	g.Eventually(func() *batchv1alpha1.GuardedJobStatus { return &h.get(gj).Status }).WithTimeout(20 * time.Second).Should(And(
		HaveField("Active", BeEmpty()), HaveField("LastRun", HaveField("Result", batchv1alpha1.RunResultSucceeded))))

	var warned []string
	stop := &controllers.StopReconciler{
		Reader: staleObjectReader{Reader: k8s, old: running, n: always()}, APIReader: k8s, Writer: k8s, Keeper: h.keeper,
		Recorder: reasonRecorder{reasons: &warned},
	}
	_, err := stop.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(job)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.jobDeleted(job)).To(BeFalse(), "the finished run's Job is kept")
	g.Consistently(func() bool { return h.jobDeleted(job) }).WithTimeout(time.Second).Should(BeFalse())
	g.Expect(warned).To(BeEmpty(), "no StaleJob warning from this stop controller")
	g.Expect(h.events(gj)).NotTo(ContainElement(HavePrefix(batchv1alpha1.StaleJobReason)), "nor from the manager's")
}

// reasonRecorder keeps the reasons of the events it is given.
type reasonRecorder struct{ reasons *[]string }

func (r reasonRecorder) Eventf(_ runtime.Object, _ runtime.Object, _, reason, _, _ string, _ ...any) {
	*r.reasons = append(*r.reasons, reason)
}

func (r reasonRecorder) AnnotatedEventf(_ runtime.Object, _ runtime.Object, _ map[string]string, _, reason, _, _ string, _ ...any) {
	*r.reasons = append(*r.reasons, reason)
}

// TestJobFirst_AJobWhoseGateOpensBetweenTheStopControllersReadsIsNotStopped: a
// run's Job exists before the status write that records the run, and its gate
// opens right after that write. The stop controller reads the GuardedJob from
// before the write (no run claims the Job) and the Job after the gate opened
// (not waiting for adoption any more): the Job is its run's, working, and must
// not be stopped as one no run claims.
func TestJobFirst_AJobWhoseGateOpensBetweenTheStopControllersReadsIsNotStopped(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.guardedJob("gate", h.ns+":gate")
	job, _ := h.runningJob(gj)
	before := h.get(gj)
	before.Status.Active = nil // as it was when the Job was created

	var warned []string
	direct := 1
	// Its keeper renews no lease (a Job past its gate whose lease it renews
	// is kept without any read: the early gate), so it must judge by reads.
	stop := &controllers.StopReconciler{
		Reader:    staleObjectReader{Reader: k8s, old: before, n: always()},
		APIReader: staleObjectReader{Reader: k8s, old: before, n: &direct},
		Writer:    k8s, Keeper: lockclient.NewKeeper(h.store), Recorder: reasonRecorder{reasons: &warned},
	}
	_, err := stop.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(job)})
	g := h.g
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(direct).To(BeZero(), "the stop controller read the GuardedJob from before the run was recorded")
	g.Expect(h.jobDeleted(job)).To(BeFalse(), "the run's working Job is kept")
	g.Expect(warned).To(BeEmpty(), "no StaleJob warning")
	g.Expect(h.get(gj).Status.Active).To(ConsistOf(HaveField("JobUID", job.UID)))
}
