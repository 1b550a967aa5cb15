package main_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/bins"
	"github.com/guardedjob/guardedjob/internal/testutil/metricscrape"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// syncBuffer is a bytes.Buffer safe for a process writing while the test reads.
type syncBuffer struct {
	mu chan struct{}
	b  bytes.Buffer
}

// Waits that fit a loaded 2-core machine; safety bounds are asserted explicitly,
// never through this timeout.
func init() { SetDefaultEventuallyTimeout(30 * time.Second) }

// processesAtOnce is how many tests run side by side (go test's -parallel, when it
// is not given): each has a control plane, a store and managers of its own, and
// mostly waits on leader elections and leases.
const processesAtOnce = 4

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		utilruntime.Must(flag.Set("test.parallel", strconv.Itoa(processesAtOnce)))
	}
	os.Exit(m.Run())
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{mu: make(chan struct{}, 1)} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// buildManager returns the manager binary make test built (or one built now).
func buildManager(t *testing.T) string {
	t.Helper()
	return bins.Manager(t)
}

func probe(url string) int {
	resp, err := http.Get(url) //nolint:noctx // a loopback probe in a test
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func scrape(url string) string {
	_, body := metricscrape.Get(url, "")
	return body
}

// controlPlane is a real kube-apiserver + etcd with the CRD installed.
type controlPlane struct {
	env             *envtest.Environment
	host            string // host:port of the API server
	kubeconfig      string // path of an admin kubeconfig
	kubeconfigBytes []byte
	client          client.Client
}

func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	return startControlPlaneWith(t, nil)
}

// startControlPlaneWith is startControlPlane with configure applied to the
// environment before it starts (nil: none).
func startControlPlaneWith(t *testing.T, configure func(*envtest.Environment)) *controlPlane {
	t.Helper()
	g := NewWithT(t)
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with `make test`")
	}
	env := &envtest.Environment{
		CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")}, ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	if configure != nil {
		configure(env)
	}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := user.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(path, kubeconfig, 0o600)).To(Succeed())

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(batchv1alpha1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	return &controlPlane{env: env, host: strings.TrimSuffix(strings.TrimPrefix(cfg.Host, "https://"), "/"), kubeconfig: path, kubeconfigBytes: kubeconfig, client: c}
}

// managerProc is a manager subprocess, stopped by PID when the test ends.
type managerProc struct {
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan struct{}
}

func startManager(t *testing.T, bin string, args ...string) *managerProc {
	t.Helper()
	p := &managerProc{cmd: exec.Command(bin, args...), logs: newSyncBuffer(), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// dailyGuardedJob is a GuardedJob in the default namespace that runs daily (and
// when triggered) a Job of one container, under key.
func dailyGuardedJob(name, key string) *batchv1alpha1.GuardedJob {
	return &batchv1alpha1.GuardedJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: batchv1alpha1.GuardedJobSpec{
			Schedule: "@daily",
			Lock:     batchv1alpha1.LockSpec{Key: key},
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "w", Image: "busybox"}},
				TerminationGracePeriodSeconds: ptr.To(int64(5)),
			}}}},
		},
	}
}

// triggerNow sets the run-now annotation to the current time, which is never
// older than the object (a trigger older than its object is skipped as stale).
func triggerNow(t *testing.T, k8s client.Client, gj *batchv1alpha1.GuardedJob) {
	t.Helper()
	patch := client.MergeFrom(gj.DeepCopy())
	gj.Annotations = map[string]string{batchv1alpha1.RunNowAnnotation: time.Now().UTC().Format(time.RFC3339)}
	if err := k8s.Patch(context.Background(), gj, patch); err != nil {
		t.Fatal(err)
	}
}

// The manager binary with the contract flags, against a real API server and a
// real Redis: it becomes ready, runs a triggered GuardedJob, reports not-ready
// (but alive) while Redis is down, and stops on SIGTERM.
func TestTheManagerBinaryRunsAGuardedJob(t *testing.T) {
	t.Parallel() // each test here has a control plane, a store and a manager of its own
	g := NewWithT(t)
	bin := buildManager(t)
	cp := startControlPlane(t)
	kubeconfigPath, k8s := cp.kubeconfig, cp.client

	t.Run("a missing store is a clear error", func(t *testing.T) {
		out, err := exec.Command(bin, "--kubeconfig", kubeconfigPath).CombinedOutput()
		NewWithT(t).Expect(err).To(HaveOccurred())
		NewWithT(t).Expect(string(out)).To(ContainSubstring("exactly one of --redis-url (GUARDEDJOB_REDIS_URL) and --redis-secret (GUARDEDJOB_REDIS_SECRET) is required"))
	})
	t.Run("a missing store Secret is a clear error", func(t *testing.T) {
		out, err := exec.Command(bin, "--kubeconfig", kubeconfigPath, "--redis-secret", "default/nope", "--cluster-name", "x").CombinedOutput()
		NewWithT(t).Expect(err).To(HaveOccurred())
		NewWithT(t).Expect(string(out)).To(ContainSubstring(`read --redis-secret default/nope: secrets \"nope\" not found`))
	})
	t.Run("a store Secret whose insecureSkipVerify is neither true nor false is a clear error", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(k8s.Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "garbled", Namespace: "default"},
			StringData: map[string]string{"url": "rediss://127.0.0.1:1", "insecureSkipVerify": "yes"},
		})).To(Succeed())
		out, err := exec.Command(bin, "--kubeconfig", kubeconfigPath, "--redis-secret", "default/garbled", "--cluster-name", "x").CombinedOutput()
		g.Expect(err).To(HaveOccurred())
		g.Expect(string(out)).To(ContainSubstring(`--redis-secret default/garbled: insecureSkipVerify must be \"true\" or \"false\"`))
	})

	// The store connection comes from a Secret, as a Deployment would have it.
	const password = "manager-test-password"
	srv := redisserver.Start(t, redisserver.WithPassword(password))
	g.Expect(k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "guardedjob-redis", Namespace: "default"},
		StringData: map[string]string{"url": "redis://" + srv.Addr(), "password": password},
	})).To(Succeed())
	probeAddr, metricsAddr, pprofAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	mgr := startManager(t, bin,
		"--kubeconfig", kubeconfigPath,
		"--redis-secret", "default/guardedjob-redis",
		"--cluster-name", "cluster-smoke",
		"--key-grants", "default=lock:smoke",
		"--metrics-bind-address", metricsAddr,
		"--health-probe-bind-address", probeAddr,
		"--pprof-bind-address", pprofAddr,
		"--leader-elect=false",
	)
	logs, cmd, exited := mgr.logs, mgr.cmd, mgr.exited

	g.Eventually(func() int { return probe("http://" + probeAddr + "/readyz") }).WithTimeout(30*time.Second).Should(Equal(http.StatusOK), "logs:\n%s", logs)
	g.Expect(probe("http://"+pprofAddr+"/debug/pprof/")).To(Equal(http.StatusOK), "--pprof-bind-address serves Go's profiles")

	ctx := context.Background()
	gj := dailyGuardedJob("smoke", "lock:smoke")
	g.Expect(k8s.Create(ctx, gj)).To(Succeed())
	triggerNow(t, k8s, gj)
	g.Eventually(func() []batchv1.Job {
		list := &batchv1.JobList{}
		_ = k8s.List(ctx, list, client.InNamespace("default"))
		return list.Items
	}).WithTimeout(60*time.Second).Should(ConsistOf(HaveField("Spec.Template.Spec.Containers", ConsistOf(
		HaveField("Env", ContainElement(corev1.EnvVar{Name: "GUARDEDJOB_FENCE", Value: "1"}))))), func() string {
		cur := &batchv1alpha1.GuardedJob{}
		_ = k8s.Get(ctx, client.ObjectKeyFromObject(gj), cur)
		return fmt.Sprintf("status: %+v\nlogs:\n%s", cur.Status, logs)
	})
	g.Expect(srv.Client(t).Get(ctx, "lock:smoke").Val()).To(HavePrefix("cluster-smoke/default/smoke-"))
	// Events go out through the manager's paced events client.
	g.Eventually(func() []string {
		list := &eventsv1.EventList{}
		_ = k8s.List(ctx, list, client.InNamespace("default"))
		var reasons []string
		for _, e := range list.Items {
			if e.Regarding.Name == "smoke" && e.ReportingController == "guardedjob-controller" {
				reasons = append(reasons, e.Reason)
			}
		}
		return reasons
	}).WithTimeout(30 * time.Second).Should(ContainElements(batchv1alpha1.LockAcquiredReason, batchv1alpha1.JobCreatedReason))

	// Metrics are HTTPS by default and answer only callers the API server
	// authenticates and allows to get /metrics.
	metricsURL := "https://" + metricsAddr + "/metrics"
	scraper, stranger := metricscrape.Token(t, cp.client, "scraper", true), metricscrape.Token(t, cp.client, "stranger", false)
	statusFor := func(token string) int { code, _ := metricscrape.Get(metricsURL, token); return code }
	// The metrics server may start a moment after /readyz answers.
	g.Eventually(func() int { return statusFor("") }).Should(Equal(http.StatusUnauthorized), "no token")
	// (controller-runtime answers 500 when the TokenReview reports an error, as it
	// does for a malformed token: refused all the same.)
	g.Expect(statusFor("not-a-token")).To(BeNumerically(">=", 400), "a token the API server does not know")
	g.Expect(statusFor(stranger)).To(Equal(http.StatusForbidden), "a token not allowed to get /metrics")
	g.Expect(probe("http://"+metricsAddr+"/metrics")).NotTo(Equal(http.StatusOK), "plain HTTP on the secure port")
	scrapeMetrics := func() string { _, body := metricscrape.Get(metricsURL, scraper); return body }
	g.Eventually(scrapeMetrics).Should(And(
		ContainSubstring(`guardedjob_leases{state="Held"} 1`),
		// The first renewal comes one renew interval (20s) after the acquisition.
		MatchRegexp(`guardedjob_lease_renewals_total\{result="ok"\} [1-9]`),
		MatchRegexp(`guardedjob_lease_renewal_pipelines_total [1-9]`)))

	// The Job succeeds (the test plays the Job controller): the run is counted.
	list := &batchv1.JobList{}
	g.Expect(k8s.List(ctx, list, client.InNamespace("default"))).To(Succeed())
	job := &list.Items[0]
	now := metav1.Now()
	job.Status = batchv1.JobStatus{StartTime: &now, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}}
	g.Expect(k8s.Status().Update(ctx, job)).To(Succeed())
	g.Eventually(scrapeMetrics).Should(
		ContainSubstring(`guardedjob_runs_total{result="Succeeded"} 1`))

	srv.Kill()
	g.Eventually(func() int { return probe("http://" + probeAddr + "/readyz") }).WithTimeout(20 * time.Second).ShouldNot(Equal(http.StatusOK))
	g.Expect(probe("http://"+probeAddr+"/healthz")).To(Equal(http.StatusOK), "a Redis outage must not make Kubernetes restart the manager")

	g.Expect(cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	g.Eventually(exited).WithTimeout(30 * time.Second).Should(BeClosed())
	g.Expect(logs.String()).NotTo(ContainSubstring(password), "the Redis password never reaches the log")
	g.Expect(strings.Count(logs.String(), "Starting manager")).To(Equal(1), fmt.Sprintf("logs:\n%s", logs))
	// The startup line names the version and commit --version prints.
	printed, err := exec.Command(bin, "--version").Output()
	g.Expect(err).NotTo(HaveOccurred())
	m := regexp.MustCompile(`^(\S+) \(commit (\S+)\)\n$`).FindStringSubmatch(string(printed))
	g.Expect(m).NotTo(BeNil(), "manager --version printed %q", printed)
	g.Expect(logs.String()).To(MatchRegexp(`"Starting manager".*"version":"`+regexp.QuoteMeta(m[1])+`","commit":"`+regexp.QuoteMeta(m[2])+`"`),
		"the startup line names the version and commit")

	t.Run("--metrics-cert-path serves the given certificate, and its renewal", func(t *testing.T) {
		g := NewWithT(t)
		ca := newTestCA(t)
		dir := t.TempDir()
		ca.issue(t, dir, 1)
		addr := freeAddr(t)
		withCert := startManager(t, bin, "--kubeconfig", kubeconfigPath, "--redis-url", "redis://"+srv.Addr(),
			"--cluster-name", "cluster-cert", "--metrics-bind-address", addr, "--metrics-cert-path", dir,
			"--health-probe-bind-address", "0", "--leader-elect=false")
		url := "https://" + addr + "/metrics"
		// A scraper that verifies the certificate against the CA (as a ServiceMonitor
		// with tlsConfig.ca does) gets the metrics.
		g.Eventually(func() (int, error) { code, _, err := ca.get(url, scraper); return code, err }).
			Should(Equal(http.StatusOK), "logs:\n%s", withCert.logs)
		_, serial, _ := ca.get(url, scraper)
		g.Expect(serial).To(BeEquivalentTo(1))
		// One that trusts another CA does not: this is the given certificate, not a
		// self-signed one.
		_, _, err := newTestCA(t).get(url, scraper)
		g.Expect(err).To(MatchError(ContainSubstring("certificate signed by unknown authority")))

		// A renewed certificate in the same files is served without a restart.
		ca.issue(t, dir, 2)
		g.Eventually(func() int64 { _, serial, _ := ca.get(url, scraper); return serial }).WithTimeout(30*time.Second).Should(BeEquivalentTo(2),
			"logs:\n%s", withCert.logs)
		g.Expect(withCert.exited).NotTo(BeClosed())
	})

	t.Run("--metrics-cert-path without a certificate is a clear error", func(t *testing.T) {
		g := NewWithT(t)
		out, err := exec.Command(bin, "--kubeconfig", kubeconfigPath, "--redis-url", "redis://"+srv.Addr(), "--cluster-name", "x",
			"--metrics-bind-address", freeAddr(t), "--metrics-cert-path", t.TempDir(), "--health-probe-bind-address", "0").CombinedOutput()
		g.Expect(err).To(HaveOccurred())
		g.Expect(string(out)).To(ContainSubstring("--metrics-cert-path: "))
		g.Expect(string(out)).To(ContainSubstring("tls.crt"))
		out, err = exec.Command(bin, "--kubeconfig", kubeconfigPath, "--redis-url", "redis://"+srv.Addr(), "--cluster-name", "x",
			"--metrics-secure=false", "--metrics-cert-path", t.TempDir(), "--health-probe-bind-address", "0").CombinedOutput()
		g.Expect(err).To(HaveOccurred())
		g.Expect(string(out)).To(ContainSubstring("--metrics-cert-path needs --metrics-secure"))
	})

	t.Run("--metrics-secure=false serves plain HTTP to anyone", func(t *testing.T) {
		g := NewWithT(t)
		addr := freeAddr(t)
		plain := startManager(t, bin, "--kubeconfig", kubeconfigPath, "--redis-url", "redis://"+srv.Addr(),
			"--cluster-name", "cluster-plain", "--metrics-bind-address", addr, "--metrics-secure=false",
			"--health-probe-bind-address", "0", "--leader-elect=false")
		g.Eventually(func() string { return scrape("http://" + addr + "/metrics") }).WithTimeout(30*time.Second).Should(
			ContainSubstring("guardedjob_leases"), "logs:\n%s", plain.logs)
	})
}

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "guardedjob test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// issue writes a serving certificate for 127.0.0.1 with the given serial number,
// and its key, as dir/tls.crt and dir/tls.key (the keys of a kubernetes.io/tls
// Secret), replacing each file at once as a Secret volume update does.
func (ca *testCA) issue(t *testing.T, dir string, serial int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "guardedjob-manager-metrics"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{"tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER}, "tls.crt": {Type: "CERTIFICATE", Bytes: der}} {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// get GETs url with a bearer token, verifying the server's certificate against
// the CA only, and returns the status code and the serial number of the
// certificate the server presented.
func (ca *testCA) get(url, token string) (int, int64, error) {
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequest(http.MethodGet, url, nil) //nolint:noctx // a loopback scrape in a test
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber.Int64(), nil
}
