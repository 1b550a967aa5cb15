package apirecorder_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/guardedjob/guardedjob/internal/testutil/apirecorder"
)

func TestParseNamesRequestsAsRBACDoes(t *testing.T) {
	for _, tc := range []struct {
		name, method, url, key string
		ns, obj                string
	}{
		{"a get of a namespaced object", "GET", "/apis/batch/v1/namespaces/pay/jobs/settle", "get jobs.batch", "pay", "settle"},
		{"a list in a namespace", "GET", "/apis/batch/v1/namespaces/pay/jobs?labelSelector=a", "list jobs.batch", "pay", ""},
		{"a cluster-wide list", "GET", "/apis/batch/v1/jobs", "list jobs.batch", "", ""},
		{"a watch", "GET", "/apis/batch/v1/jobs?watch=true&resourceVersion=5", "watch jobs.batch", "", ""},
		{"a core-group get", "GET", "/api/v1/namespaces/pay/secrets/redis", "get secrets", "pay", "redis"},
		{"a namespace itself", "GET", "/api/v1/namespaces/kube-system", "get namespaces", "kube-system", "kube-system"},
		{"a status patch", "PATCH", "/apis/batch.guardedjob.dev/v1alpha1/namespaces/pay/guardedjobs/daily/status", "patch guardedjobs.batch.guardedjob.dev/status", "pay", "daily"},
		{"a status update", "PUT", "/apis/batch.guardedjob.dev/v1alpha1/namespaces/pay/guardedjobs/daily/status", "update guardedjobs.batch.guardedjob.dev/status", "pay", "daily"},
		{"a create", "POST", "/apis/batch/v1/namespaces/pay/jobs", "create jobs.batch", "pay", ""},
		{"a delete", "DELETE", "/api/v1/namespaces/pay/pods/p-1", "delete pods", "pay", "p-1"},
		{"a delete of a collection", "DELETE", "/api/v1/namespaces/pay/pods", "deletecollection pods", "pay", ""},
		{"a cluster-scoped create", "POST", "/apis/authentication.k8s.io/v1/tokenreviews", "create tokenreviews.authentication.k8s.io", "", ""},
		{"a non-resource URL", "GET", "/version", "get /version", "", ""},
		{"discovery", "GET", "/apis/batch/v1", "get /apis/batch/v1", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			req := httptest.NewRequest(tc.method, tc.url, nil)
			got := apirecorder.Parse(req)
			g.Expect(got.Key()).To(Equal(tc.key))
			g.Expect(got.Namespace).To(Equal(tc.ns))
			g.Expect(got.Name).To(Equal(tc.obj))
		})
	}
}

func TestRecorderCountsConcurrentRequests(t *testing.T) {
	g := NewWithT(t)
	rec := apirecorder.New()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				rec.Record(httptest.NewRequest("GET", "/apis/batch/v1/namespaces/a/jobs/x", nil))
				rec.Record(httptest.NewRequest("PATCH", "/apis/batch/v1/namespaces/a/jobs/x", nil))
			}
		})
	}
	wg.Wait()
	g.Expect(rec.Counts()).To(Equal(map[string]int{"get jobs.batch": 800, "patch jobs.batch": 800}))
	g.Expect(rec.Total()).To(Equal(1600))
	g.Expect(rec.Requests()).To(HaveLen(2))
	rec.Reset()
	g.Expect(rec.Total()).To(BeZero())
}

// A client-go clientset built from a wrapped rest.Config is recorded, and its
// requests still reach the server.
func TestWrapRecordsAClientsRequests(t *testing.T) {
	g := NewWithT(t)
	var served sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Store(r.Method+" "+r.URL.Path, true)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)

	rec := apirecorder.New()
	cfg := &rest.Config{Host: srv.URL}
	cfg.Wrap(rec.Wrap)
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	_, err = cs.BatchV1().Jobs("pay").Get(ctx, "settle", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cs.BatchV1().Jobs("pay").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cs.BatchV1().Jobs("pay").Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cs.BatchV1().Jobs("pay").Patch(ctx, "x", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}, "status")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cs.CoreV1().Pods("pay").Delete(ctx, "p", metav1.DeleteOptions{})).To(Succeed())

	g.Expect(rec.Counts()).To(Equal(map[string]int{
		"get jobs.batch": 1, "list jobs.batch": 1, "create jobs.batch": 1, "patch jobs.batch/status": 1, "delete pods": 1,
	}))
	_, ok := served.Load("PATCH /apis/batch/v1/namespaces/pay/jobs/x/status")
	g.Expect(ok).To(BeTrue(), "the wrapped transport passes requests on")
}
