package controllers_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/runtoken"
	"github.com/guardedjob/guardedjob/internal/testutil/apirecorder"
)

// writeLog records, in order, the manager's writes to GuardedJobs and Jobs.
type writeLog struct {
	mu     sync.Mutex
	writes []string
}

func (l *writeLog) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		r := apirecorder.Parse(req)
		if (r.Verb == "create" || r.Verb == "update" || r.Verb == "patch") && (r.Resource == "guardedjobs" || r.Resource == "jobs") {
			w := r.Verb + " " + r.Resource
			if r.Subresource != "" {
				w += "/" + r.Subresource
			}
			l.mu.Lock()
			l.writes = append(l.writes, w)
			l.mu.Unlock()
		}
		return next.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// upToJob returns the writes since the last reset up to and including the first
// Job create.
func (l *writeLog) upToJob() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, w := range l.writes {
		if w == "create jobs" {
			return append([]string(nil), l.writes[:i+1]...)
		}
	}
	return nil
}

func (l *writeLog) reset() {
	l.mu.Lock()
	l.writes = nil
	l.mu.Unlock()
}

// TestTwoWrites_AManagerThatDiesBetweenAcquiringAndRecordingLeavesALeaseTheNextOneTakesUp:
// the lease is taken before anything is written, so a manager can die holding a
// lease that no status records and that has no Job yet. The next manager finds the key held by a token
// minted for this very object, occurrence and cluster, takes it up (a new fence,
// the same token and Job name) and runs the occurrence: one Job, no Busy, no
// lease left behind.
func TestTwoWrites_AManagerThatDiesBetweenAcquiringAndRecordingLeavesALeaseTheNextOneTakesUp(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.intercept = &interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		if gj, ok := obj.(*batchv1alpha1.GuardedJob); ok {
			for _, run := range gj.Status.Active {
				if run.Fence > 0 || run.Phase == batchv1alpha1.RunPhaseAcquiring {
					return errors.New("injected: the manager dies before it records the run")
				}
			}
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}, Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*batchv1.Job); ok {
			return errors.New("injected: the manager dies before its Job create")
		}
		return c.Create(ctx, obj, opts...)
	}}
	h.start()
	key := h.ns + ":orphan"
	gj := h.create(h.guardedJob("orphan", key))
	h.trigger(gj)
	// The lease is taken, and nothing records it: the manager dies there.
	var token string
	h.g.Eventually(func() string { token = h.rdb.Get(ctx, key).Val(); return token }).ShouldNot(BeEmpty(), "the lease is taken before any write")
	h.stop()
	g := h.g
	g.Expect(h.get(gj).Status.Active).To(BeEmpty(), "no status records the run")
	g.Expect(h.jobs()).To(BeEmpty())
	g.Expect(leasetoken.HolderOf(token)).To(HavePrefix("cluster-a/" + h.ns + "/orphan-"))

	h.intercept = nil
	h.start()
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	st := h.get(gj).Status
	g.Expect(st.Active).To(ConsistOf(And(HaveField("Token", token), HaveField("JobName", job.Name), HaveField("Fence", BeNumerically(">", 1)))),
		"the next manager takes up the lease it found, with a new fence")
	g.Expect(envOf(&job, "GUARDEDJOB_FENCE")).To(Equal(itoa(st.Active[0].Fence)))
	g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(token))
	g.Expect(st.LastRun).To(BeNil(), "not Busy: the lease was the run's own")
	g.Consistently(h.jobs).WithTimeout(3 * time.Second).Should(ConsistOf(HaveField("UID", job.UID)))
}

// TestTwoWrites_ALeaseMintedForAnotherObjectOrClusterIsNeverTakenUp: only a token
// minted by this cluster for this very object and occurrence is taken up; one of
// another cluster name, or of an earlier object of the same name, is another
// holder: the run is Busy, and the key is left alone.
func TestTwoWrites_ALeaseMintedForAnotherObjectOrClusterIsNeverTakenUp(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	for i, other := range []struct {
		name         string
		cluster, uid string
	}{
		{name: "another cluster name", cluster: "cluster-b"},
		{name: "an earlier object of the same name", cluster: "cluster-a", uid: "uid-of-an-earlier-object"},
	} {
		t.Run(other.name, func(t *testing.T) {
			g := NewWithT(t)
			name := "lookalike-" + itoa(int64(i))
			key := h.ns + ":" + name
			gj := h.create(h.guardedJob(name, key))
			g.Eventually(func() *batchv1alpha1.GuardedJobStatus { return &h.get(gj).Status }).Should(HaveField("NextScheduleTime", Not(BeNil())))
			uid := string(h.get(gj).UID)
			if other.uid != "" {
				uid = other.uid
			}
			foreign, _, err := runtoken.Mint(runtoken.Run{Cluster: other.cluster, Namespace: h.ns, Name: name, UID: uid, Occurrence: yearStart()})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(h.rdb.Set(ctx, key, foreign, time.Minute).Err()).To(Succeed())
			h.trigger(gj)
			g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
				HaveField("Result", batchv1alpha1.RunResultBusy), HaveField("HeldBy", leasetoken.HolderOf(foreign))))
			g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(foreign), "the other holder's key is untouched")
			for _, j := range h.jobs() {
				g.Expect(j.Labels[batchv1alpha1.GuardedJobLabel]).NotTo(Equal(name))
			}
		})
	}
}
