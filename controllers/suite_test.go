package controllers_test

import (
	"cmp"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zapcore"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/controllers"
	"github.com/guardedjob/guardedjob/internal/keys"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/tcpproxy"
)

var (
	// testEnv is the API server every test shares (AddUser gives a test a
	// kubeconfig of its own, for the real kubectl).
	testEnv   *envtest.Environment
	restCfg   *rest.Config
	k8s       client.Client
	scheme    = runtime.NewScheme()
	nsCounter atomic.Int64
	// parallelTests remembers the tests already made parallel: a story with two
	// clusters makes two harnesses.
	parallelTests sync.Map
)

// storiesAtOnce is how many stories run side by side (go test's -parallel, when
// it is not given): a story mostly waits on leases, Pods and the API server, so
// a few share two cores without slowing each other's waits.
const storiesAtOnce = 4

// quietRedis drops go-redis' own messages (reconnect attempts while a test has
// stopped Redis on purpose).
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	// Waits that fit a loaded 2-core machine; safety bounds are asserted
	// explicitly, never through these timeouts.
	SetDefaultEventuallyTimeout(15 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	redis.SetLogger(quietRedis{})
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(batchv1alpha1.AddToScheme(scheme))
	if os.Getenv("TEST_VERBOSE") != "" {
		logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(zapcore.DebugLevel)))
	} else {
		logf.SetLogger(logr.Discard())
	}

	assets := os.Getenv("KUBEBUILDER_ASSETS")
	flag.Parse()
	parallelGiven := false
	flag.Visit(func(f *flag.Flag) { parallelGiven = parallelGiven || f.Name == "test.parallel" })
	if !parallelGiven {
		utilruntime.Must(flag.Set("test.parallel", strconv.Itoa(storiesAtOnce)))
	}
	if !needsAPIServer() {
		os.Exit(m.Run())
	}
	if assets == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds kube-apiserver and etcd")
		os.Exit(1)
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	testEnv = env
	var err error
	if restCfg, err = env.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start envtest:", err)
		os.Exit(1)
	}
	if k8s, err = client.New(restCfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := checkRole(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			code = 1
		}
	}
	_ = env.Stop()
	os.Exit(code)
}

// withoutAPIServer are the tests that need no API server (a real store, the
// keeper, the identity heartbeat): a run that selects only them (-run
// '^(TestA|TestB)$', as the mutant runner does) starts none, and takes
// seconds.
var withoutAPIServer = map[string]bool{
	"TestRenewOnlyNeverTakesBackAKeyFoundAbsent":                                   true,
	"TestIdentityAStoreThatAnswersAgainBetweenBeatsIsNotSettled":                   true,
	"TestIdentityABeatRefusedWhileNotLeadingUnsettlesWithoutTakingTheStoreForDown": true,
	"TestIdentityAnotherShardOnTheSameElectionIDIsNamedAsSuch":                     true,
	"TestIdentityATwinInATenantStoreHoldsBackOnlyThatStore":                        true,
	"TestIdentityATenantStoreWhoseACLRefusesTheHeartbeatHoldsNothingBack":          true,
}

// needsAPIServer says whether the tests -test.run selects may need the API
// server: unless it names only tests of withoutAPIServer.
func needsAPIServer() bool {
	f := flag.Lookup("test.run")
	if f == nil {
		return true
	}
	pattern := f.Value.String()
	if !strings.HasPrefix(pattern, "^(") || !strings.HasSuffix(pattern, ")$") {
		return true // only the exact form names whole tests
	}
	names := strings.TrimSuffix(strings.TrimPrefix(pattern, "^("), ")$")
	for _, name := range strings.Split(names, "|") {
		if !withoutAPIServer[name] {
			return true
		}
	}
	return false
}

// harness is one test's world: a namespace, a real redis-server, and a manager
// running the GuardedJob and stop controllers against the shared API server.
type harness struct {
	t       *testing.T
	g       Gomega
	ns      string
	redis   *redisserver.Server
	rdb     *redis.Client
	store   *lockclient.Client
	clock   *clocktesting.FakeClock
	stopMgr context.CancelFunc
	done    chan struct{}
	// intercept, when set, wraps the manager's client (fault injection).
	intercept *interceptor.Funcs
	// proxy, when set by storeViaProxy, stands between the manager and Redis.
	proxy *tcpproxy.Proxy
	// keeper is the running manager's keeper.
	keeper *lockclient.Keeper
	// restWrap, when set, wraps the manager's transport to the API server.
	restWrap func(http.RoundTripper) http.RoundTripper
	// stopRate is the manager's --stop-rate; zero for none.
	stopRate float64
	// storeAllow is the manager's --store-allow.
	storeAllow *lockclient.AllowList
	// clockSkew is the manager's --clock-skew-allowance; zero means 1s.
	clockSkew time.Duration
	// noGuardImage starts the manager without a pod guard image (--guard-image).
	noGuardImage bool
	// metricsAddr, when set, is where the manager serves its metrics, as the
	// manager binary does by default: HTTPS, to callers the API server
	// authenticates and allows to get /metrics.
	metricsAddr string
	// logger, when set, is the manager's logger; by default it logs nothing.
	logger logr.Logger
	// keyGrants is the manager's --key-grants.
	keyGrants keys.Grants
	// identityBeat is how often the manager writes its cluster identity
	// heartbeat; zero: every 100 ms (take-up waits for a few beats).
	identityBeat time.Duration
	// order pins the order a story's managers start runs in; orderDefault is
	// the manager's default (--early-gate), or the older order for every story
	// with GUARDEDJOB_TEST_RECORD_FIRST (recordFirstForAll).
	order runOrder
	// handoverTimeout is the shard managers' --shard-handover-timeout; zero: a minute.
	handoverTimeout time.Duration
	// shardIntercept, when set, wraps the client of the shard managers started
	// from now on; shardWorkers, when set, is their MaxConcurrentReconciles.
	shardIntercept *interceptor.Funcs
	shardWorkers   int
	// keeperOutlives runs the keeper on a context of its own, as cmd/manager
	// does, so that it goes on renewing after stop (until the test ends).
	keeperOutlives bool
	// clusterName is the manager's --cluster-name; empty means cluster-a.
	clusterName string
	// alone: the story runs by itself (newHarnessAlone).
	alone bool
}

// storeViaProxy makes the manager reach Redis through a proxy the test can cut
// or blackhole, while the test itself still reaches Redis directly.
func (h *harness) storeViaProxy() *tcpproxy.Proxy {
	h.t.Helper()
	return h.storeViaProxyWithTimeout(time.Second)
}

// storeViaProxyWithTimeout is storeViaProxy with the store's call timeout
// (--redis-timeout) set to timeout.
func (h *harness) storeViaProxyWithTimeout(timeout time.Duration) *tcpproxy.Proxy {
	h.t.Helper()
	h.proxy = tcpproxy.Start(h.t, h.redis.Addr())
	store, err := lockclient.Dial(lockclient.Config{URL: "redis://" + h.proxy.Addr(), Timeout: timeout})
	h.g.Expect(err).NotTo(HaveOccurred())
	h.t.Cleanup(func() { _ = store.Close() })
	h.store = store
	return h.proxy
}

// runOrder is the order a story's managers start runs in.
type runOrder int

const (
	// orderDefault: the manager's default, the early gate, unless
	// recordFirstForAll.
	orderDefault runOrder = iota
	// orderEarly: --early-gate, for a story of that order's own windows.
	orderEarly
	// orderRecordFirst: --early-gate=false, the status write that records a
	// run before its gate opens, for a story of that order's own windows.
	orderRecordFirst
)

// recordFirstForAll (GUARDEDJOB_TEST_RECORD_FIRST=1) starts every manager of
// the stories not pinned to an order with --early-gate=false, to run them all
// in the older order (docs/development.md).
var recordFirstForAll = os.Getenv("GUARDEDJOB_TEST_RECORD_FIRST") != ""

// earlyGate is the manager's --early-gate for the harness's managers.
func (h *harness) earlyGate() bool {
	switch h.order {
	case orderDefault:
		return !recordFirstForAll
	case orderEarly:
		return true
	}
	return false
}

// newHarness returns a world for a story that runs beside other stories (a
// top-level test runs in parallel once it makes its harness).
func newHarness(t *testing.T) *harness {
	t.Helper()
	if !strings.Contains(t.Name(), "/") {
		if _, seen := parallelTests.LoadOrStore(t.Name(), true); !seen {
			t.Parallel()
		}
	}
	return makeHarness(t)
}

// newHarnessAlone returns a world for a story that must have the API server and
// the cores to itself: mass stories, and stories whose assertions are time
// bounds a busy machine could miss, or process-wide metrics.
func newHarnessAlone(t *testing.T) *harness {
	t.Helper()
	h := makeHarness(t)
	h.alone = true
	return h
}

func makeHarness(t *testing.T) *harness {
	t.Helper()
	if k8s == nil {
		t.Fatalf("%s needs the API server, which this run did not start: withoutAPIServer must not list it", t.Name())
	}
	h := &harness{t: t, g: NewWithT(t), clock: clocktesting.NewFakeClock(time.Now())}
	h.ns = fmt.Sprintf("t%d-%d", nsCounter.Add(1), time.Now().UnixNano()%100000)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.ns}}
	h.g.Expect(k8s.Create(context.Background(), ns)).To(Succeed())
	h.redis = redisserver.Start(t)
	h.rdb = h.redis.Client(t)
	var err error
	h.store, err = lockclient.Dial(lockclient.Config{URL: h.redis.URL(), Timeout: time.Second})
	h.g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = h.store.Close() })
	return h
}

// start runs a manager until stop is called or the test ends. Each start is a
// fresh manager with a fresh keeper, as after a process restart.
func (h *harness) start() {
	h.t.Helper()
	opts := ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: func() cache.Options {
			o := controllers.CacheOptions()
			o.DefaultNamespaces = map[string]cache.Config{h.ns: {}}
			return o
		}(),
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if h.metricsAddr != "" {
		opts.Metrics = metricsserver.Options{
			BindAddress: h.metricsAddr, SecureServing: true, FilterProvider: filters.WithAuthenticationAndAuthorization,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
		}
	}
	if h.logger.GetSink() != nil {
		opts.Logger = h.logger
	}
	if h.intercept != nil {
		opts.NewClient = interceptedClient(*h.intercept)
	}
	cfg := rest.CopyConfig(restCfg)
	cfg.Wrap(apiCalls.Wrap)
	if h.restWrap != nil {
		cfg.Wrap(h.restWrap)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	h.g.Expect(err).NotTo(HaveOccurred())
	parts, err := controllers.Setup(mgr, controllers.ManagerOptions{
		Store: h.store, RESTConfig: cfg, ClusterName: cmp.Or(h.clusterName, "cluster-a"), KeyGrants: h.keyGrants, StoreAllow: h.storeAllow,
		GuardImage: testGuardImage, ClockSkew: cmp.Or(h.clockSkew, time.Second), Namespace: h.ns, StopRate: h.stopRate,
		Clock: h.clock, IdentityBeat: cmp.Or(h.identityBeat, 100*time.Millisecond), EarlyGate: h.earlyGate(),
	})
	h.g.Expect(err).NotTo(HaveOccurred())
	if h.noGuardImage {
		parts.Reconciler.GuardImage = ""
	}
	keeper := parts.Keeper
	h.keeper = keeper

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	keeperParent := ctx
	if h.keeperOutlives {
		var stopKeeper context.CancelFunc
		keeperParent, stopKeeper = context.WithCancel(context.Background())
		h.t.Cleanup(stopKeeper)
	}
	go func() {
		defer close(done)
		kctx, kcancel := context.WithCancel(keeperParent)
		if !h.keeperOutlives {
			defer kcancel()
		} else {
			h.t.Cleanup(kcancel)
		}
		go func() { _ = keeper.Run(kctx) }()
		if err := mgr.Start(ctx); err != nil {
			h.t.Errorf("manager: %v", err)
		}
	}()
	h.stopMgr, h.done = cancel, done
	h.t.Cleanup(h.stop)
}

// interceptedClient makes the manager's clients with funcs wrapped around them.
func interceptedClient(funcs interceptor.Funcs) client.NewClientFunc {
	return func(cfg *rest.Config, o client.Options) (client.Client, error) {
		c, err := client.NewWithWatch(cfg, o)
		if err != nil {
			return nil, err
		}
		return interceptor.NewClient(c, funcs), nil
	}
}

// testGuardImage is the pod guard image the test managers put into guarded Pods.
const testGuardImage = "registry.example/guardedjob-manager:test"

// stop ends the manager (and its keeper), like a crash of the process: leases are
// neither renewed nor released any more.
func (h *harness) stop() {
	if h.stopMgr != nil {
		h.stopMgr()
		<-h.done
		h.stopMgr = nil
	}
}

// guardedJob returns a GuardedJob that runs a one-container Job. Its Pods get a
// 1s grace period so that short test leases pass the lease-timing check.
func (h *harness) guardedJob(name, key string) *batchv1alpha1.GuardedJob {
	return &batchv1alpha1.GuardedJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns},
		Spec: batchv1alpha1.GuardedJobSpec{
			Schedule: "0 0 1 1 *",
			Lock:     batchv1alpha1.LockSpec{Key: key},
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy:                 corev1.RestartPolicyNever,
				TerminationGracePeriodSeconds: ptr.To(int64(1)),
				Containers:                    []corev1.Container{{Name: "work", Image: "busybox"}},
			}}}},
		},
	}
}

func (h *harness) create(gj *batchv1alpha1.GuardedJob) *batchv1alpha1.GuardedJob {
	h.t.Helper()
	h.g.Expect(k8s.Create(context.Background(), gj)).To(Succeed())
	return gj
}

// trigger sets the run-now annotation to the harness clock's current time.
func (h *harness) trigger(gj *batchv1alpha1.GuardedJob) string {
	h.t.Helper()
	h.clock.SetTime(time.Now())
	value := h.clock.Now().UTC().Format(time.RFC3339)
	h.annotate(gj, value)
	return value
}

func (h *harness) annotate(gj *batchv1alpha1.GuardedJob, value string) {
	h.t.Helper()
	h.g.Eventually(func() error {
		cur := &batchv1alpha1.GuardedJob{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(gj), cur); err != nil {
			return err
		}
		patch := client.MergeFrom(cur.DeepCopy())
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[batchv1alpha1.RunNowAnnotation] = value
		return k8s.Patch(context.Background(), cur, patch)
	}).Should(Succeed())
}

func (h *harness) get(gj *batchv1alpha1.GuardedJob) *batchv1alpha1.GuardedJob {
	h.t.Helper()
	cur := &batchv1alpha1.GuardedJob{}
	h.g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(gj), cur)).To(Succeed())
	return cur
}

// jobs lists the Jobs in the test namespace.
func (h *harness) jobs() []batchv1.Job {
	list := &batchv1.JobList{}
	h.g.Expect(k8s.List(context.Background(), list, client.InNamespace(h.ns))).To(Succeed())
	return list.Items
}

// waitJob waits until exactly n Jobs exist and returns the newest.
func (h *harness) waitJobs(n int) []batchv1.Job {
	h.t.Helper()
	var jobs []batchv1.Job
	h.g.Eventually(func() []batchv1.Job { jobs = h.jobs(); return jobs }).WithTimeout(20 * time.Second).Should(HaveLen(n))
	return jobs
}

// complete plays the Job controller: the Job succeeded and its Pods are gone.
func (h *harness) complete(job *batchv1.Job) {
	h.t.Helper()
	h.waitUnsuspended(job)
	now := metav1.Now()
	h.setJobStatus(job, batchv1.JobStatus{
		StartTime: &now, CompletionTime: &now, Succeeded: 1,
		Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	})
}

// fail plays the Job controller: the Job failed and its Pods are gone.
func (h *harness) fail(job *batchv1.Job) {
	h.t.Helper()
	h.waitUnsuspended(job)
	h.failAsItIs(job)
}

// failAsItIs marks job failed as it is, even behind its start gate (which the
// Job controller never does; anyone who may write a Job's status can).
func (h *harness) failAsItIs(job *batchv1.Job) {
	h.t.Helper()
	now := metav1.Now()
	h.setJobStatus(job, batchv1.JobStatus{
		StartTime: &now, Failed: 1,
		Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
		},
	})
}

// waitUnsuspended waits until job may run: the Job controller starts no Pod of
// a suspended Job (one behind its start gate), so it can neither succeed nor
// fail before the gate opens.
func (h *harness) waitUnsuspended(job *batchv1.Job) {
	h.t.Helper()
	h.g.Eventually(func() (bool, error) {
		cur := &batchv1.Job{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), cur); err != nil {
			return false, err
		}
		return ptr.Deref(cur.Spec.Suspend, false), nil
	}).Should(BeFalse(), "Job %s to be unsuspended (its start gate open)", job.Name)
}

func (h *harness) setJobStatus(job *batchv1.Job, st batchv1.JobStatus) {
	h.t.Helper()
	h.g.Eventually(func() error {
		cur := &batchv1.Job{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), cur); err != nil {
			return err
		}
		cur.Status = st
		return k8s.Status().Update(context.Background(), cur)
	}).Should(Succeed())
}

// events returns "<reason>: <note>" of the events about gj, oldest first.
func (h *harness) events(gj *batchv1alpha1.GuardedJob) []string {
	list := &eventsv1.EventList{}
	h.g.Expect(k8s.List(context.Background(), list, client.InNamespace(h.ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == gj.Name && e.Regarding.Kind == "GuardedJob" {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

// envOf returns the value of an env var of the Job's first container, or
// "<unset>".
func envOf(job *batchv1.Job, name string) string {
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return "<unset>"
}

// eventsAll returns the notes of every event in the test namespace.
func (h *harness) eventsAll() []string {
	list := &eventsv1.EventList{}
	h.g.Expect(k8s.List(context.Background(), list, client.InNamespace(h.ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason+": "+e.Note)
	}
	return out
}

// waitRecorded waits until the first active run of gj has its Job recorded.
func (h *harness) waitRecorded(gj *batchv1alpha1.GuardedJob) {
	h.t.Helper()
	h.g.Eventually(func() string {
		if a := h.get(gj).Status.Active; len(a) > 0 {
			return string(a[0].JobUID)
		}
		return ""
	}).ShouldNot(BeEmpty())
}
