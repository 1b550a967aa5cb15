// Package metricscrape reads the manager's metrics endpoint as Prometheus does:
// over HTTPS (the manager's certificate is self-signed) with the bearer token of
// a ServiceAccount allowed to get /metrics, and parses what it reads so that
// tests assert values, not only names.
package metricscrape

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Get GETs url with a bearer token (none if empty), accepting the manager's
// self-signed certificate as a scraper configured with insecureSkipVerify does.
// It returns the status code (0 when nothing answered) and the body.
func Get(url, token string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil) //nolint:noctx // a loopback scrape in a test
	if err != nil {
		return 0, ""
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the manager's certificate is self-signed
	}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, ""
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Token returns a token of a new ServiceAccount default/name, bound to a
// ClusterRole that allows get on /metrics when allowed is true (as the
// guardedjob-metrics-reader role allows Prometheus).
func Token(t testing.TB, c client.Client, name string, allowed bool) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	must(t, c.Create(ctx, sa))
	if allowed {
		must(t, c.Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
		}))
		must(t, c.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: "default"}},
		}))
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	must(t, c.SubResource("token").Create(ctx, sa, req))
	if req.Status.Token == "" {
		t.Fatalf("metricscrape: no token for ServiceAccount %s", name)
	}
	return req.Status.Token
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("metricscrape: %v", err)
	}
}

// Metrics is one scrape, parsed.
type Metrics map[string]*dto.MetricFamily

// Parse parses a scrape in the Prometheus text format.
func Parse(body string) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return Metrics(fams), nil
}

// Value returns the value of the series of family name whose labels include
// labels ("k", "v", ...): a gauge's or counter's value, or a histogram's sample
// count. ok is false when there is no such series.
func (m Metrics) Value(name string, labels ...string) (float64, bool) {
	mt := m.series(name, labels)
	switch {
	case mt == nil:
		return 0, false
	case mt.Gauge != nil:
		return mt.Gauge.GetValue(), true
	case mt.Counter != nil:
		return mt.Counter.GetValue(), true
	case mt.Histogram != nil:
		return float64(mt.Histogram.GetSampleCount()), true
	case mt.Untyped != nil:
		return mt.Untyped.GetValue(), true
	}
	return 0, false
}

// HistogramSum returns the sum of the histogram series of family name whose
// labels include labels.
func (m Metrics) HistogramSum(name string, labels ...string) (float64, bool) {
	mt := m.series(name, labels)
	if mt == nil || mt.Histogram == nil {
		return 0, false
	}
	return mt.Histogram.GetSampleSum(), true
}

// Series counts the series of family name whose labels include labels.
func (m Metrics) Series(name string, labels ...string) int {
	n := 0
	if f := m[name]; f != nil {
		for _, mt := range f.Metric {
			if hasLabels(mt, labels) {
				n++
			}
		}
	}
	return n
}

func (m Metrics) series(name string, labels []string) *dto.Metric {
	f := m[name]
	if f == nil {
		return nil
	}
	for _, mt := range f.Metric {
		if hasLabels(mt, labels) {
			return mt
		}
	}
	return nil
}

func hasLabels(mt *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, lp := range mt.Label {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
