package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/controllers"
)

// staleJobReader is a cache that read a Job just before the Job controller
// marked it complete: Gets of that Job return the old copy, everything else is
// read as it is.
type staleJobReader struct {
	client.Reader
	job *batchv1.Job
}

func (r staleJobReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if j, ok := obj.(*batchv1.Job); ok && key == client.ObjectKeyFromObject(r.job) {
		r.job.DeepCopyInto(j)
		return nil
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

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
	running := job.DeepCopy()

	h.complete(job)
	g := h.g
	g.Eventually(func() *batchv1alpha1.GuardedJobStatus { return &h.get(gj).Status }).WithTimeout(20 * time.Second).Should(And(
		HaveField("Active", BeEmpty()), HaveField("LastRun", HaveField("Result", batchv1alpha1.RunResultSucceeded))))

	var warned []string
	stop := &controllers.StopReconciler{
		Reader: staleJobReader{Reader: k8s, job: running}, APIReader: k8s, Writer: k8s, Keeper: h.keeper,
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
