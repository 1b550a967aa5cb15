// Command manager runs the GuardedJob controllers.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/controllers"
	"github.com/guardedjob/guardedjob/internal/buildinfo"
	"github.com/guardedjob/guardedjob/internal/clustername"
	"github.com/guardedjob/guardedjob/internal/keys"
	"github.com/guardedjob/guardedjob/internal/leadership"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/storeconfig"
)

// version and commit are the release and commit this binary was built from, set at
// build time with -ldflags "-X main.version=... -X main.commit=..." (make build,
// the Dockerfile, make release). Unset, the binary's build info says
// (internal/buildinfo).
var (
	version = "dev"
	commit  = ""
)

type options struct {
	redisURL                string
	redisSecret             string
	clusterName             string
	keyGrants               string
	storeAllow              string
	guardImage              string
	leaderElect             bool
	leaderElectionID        string
	leaderElectionNamespace string
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration
	metricsAddr             string
	metricsSecure           bool
	metricsCertPath         string
	metricsCertName         string
	metricsCertKey          string
	probeAddr               string
	pprofAddr               string
	maxConcurrentReconciles int
	kubeAPIQPS              float64
	kubeAPIBurst            int
	redisTimeout            time.Duration
	clockSkew               time.Duration
	stopRate                float64
	watchLabelSelector      string
	shardHandoverTimeout    time.Duration
	earlyGate               bool
	eventQPS                float64
	eventBurst              int
	memoryLimit             string
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	var o options
	flag.StringVar(&o.redisURL, "redis-url", envOr("GUARDEDJOB_REDIS_URL", ""),
		"URL of the manager's lock store (redis://, rediss://, unix://, redis+sentinel://, redis+cluster://); env GUARDEDJOB_REDIS_URL.")
	flag.StringVar(&o.redisSecret, "redis-secret", envOr("GUARDEDJOB_REDIS_SECRET", ""),
		"namespace/name of a Secret with the lock store's connection: key url, optional ca.crt, tls.crt, tls.key, username, password, insecureSkipVerify (read at start); env GUARDEDJOB_REDIS_SECRET.")
	flag.StringVar(&o.clusterName, "cluster-name", envOr("GUARDEDJOB_CLUSTER_NAME", ""),
		"Name of this cluster in lease holders; env GUARDEDJOB_CLUSTER_NAME. Defaults to one derived from the kube-system namespace UID.")
	flag.StringVar(&o.keyGrants, "key-grants", envOr("GUARDEDJOB_KEY_GRANTS", ""),
		"Key prefixes namespaces may use outside '<namespace>:', as namespace=prefix pairs: payments=lock:settlement,reports=shared:reports: (a prefix is taken out of every other namespace's default; one covering a whole namespace's default, such as shared:, is refused)")
	flag.StringVar(&o.guardImage, "guard-image", envOr("GUARDEDJOB_GUARD_IMAGE", ""),
		"Image of the pod guard sidecar of GuardedJobs with lock.podGuard (the manager's own image, which holds /guard); env GUARDEDJOB_GUARD_IMAGE. Unset: the image of this manager's own container, when it runs in a Pod with POD_NAME and POD_NAMESPACE set.")
	flag.StringVar(&o.storeAllow, "store-allow", envOr("GUARDEDJOB_STORE_ALLOW", ""),
		"Hosts that spec.lock.storeRef stores may have: name patterns, CIDRs, and cluster-ranges (the cluster's Service and Pod ranges, read from the API server), e.g. cluster-ranges or *.redis.example.com,10.20.0.0/16 (unset: any host); env GUARDEDJOB_STORE_ALLOW.")
	flag.BoolVar(&o.leaderElect, "leader-elect", false, "Enable leader election, so that one of several replicas is active.")
	flag.StringVar(&o.leaderElectionID, "leader-election-id", "guardedjob-manager.batch.guardedjob.dev", "Name of the leader election Lease; every shard (--watch-label-selector) needs its own.")
	flag.StringVar(&o.watchLabelSelector, "watch-label-selector", envOr("GUARDEDJOB_WATCH_LABEL_SELECTOR", ""),
		"Serve only the GuardedJobs whose labels match this selector (a shard): sharding.guardedjob.dev/key=a for shard a, !sharding.guardedjob.dev/key for the default shard; empty: every GuardedJob. Each shard needs its own --leader-election-id; env GUARDEDJOB_WATCH_LABEL_SELECTOR.")
	flag.DurationVar(&o.shardHandoverTimeout, "shard-handover-timeout", controllers.DefaultHandoverTimeout,
		"How long a shard that a GuardedJob left (relabelled) keeps renewing the leases of its runs for the new shard to take them over; then it stops those runs (before their leases could expire).")
	flag.BoolVar(&o.earlyGate, "early-gate", true,
		"Open a run's start gate before any status write records it, and leave that write to the next pass (the Job carries the run and is its record until status catches up), which takes it off the start of every run; false writes the record before the gate opens (docs/failure-semantics.md).")
	flag.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the manager's).")
	flag.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a non-leader waits before taking over.")
	flag.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader retries renewing before it gives up.")
	flag.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often leader election actions are retried.")
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address of the metrics endpoint; 0 disables it.")
	flag.BoolVar(&o.metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS to callers the API server authenticates and authorizes (get on the /metrics URL); false serves plain HTTP to anyone who can connect.")
	flag.StringVar(&o.metricsCertPath, "metrics-cert-path", "",
		"Directory holding the metrics server's certificate and key (a mounted cert-manager Secret, say), reloaded when they change; empty: a self-signed certificate made at start.")
	flag.StringVar(&o.metricsCertName, "metrics-cert-name", "tls.crt", "File name of the metrics server's certificate in --metrics-cert-path.")
	flag.StringVar(&o.metricsCertKey, "metrics-cert-key", "tls.key", "File name of the metrics server's key in --metrics-cert-path.")
	printVersion := flag.Bool("version", false, "Print the version and commit, and exit.")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz; 0 disables it.")
	flag.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "Address of Go's /debug/pprof/ profiles (plain HTTP, no authentication: bind it to localhost or a port-forward); 0 disables it.")
	// A run's pass waits on the API server for its writes (intent, fence, Job,
	// status) and on Redis once: 16 passes in flight keep about as many writes
	// in flight as the API server serves in parallel (docs/benchmarks.md).
	flag.IntVar(&o.maxConcurrentReconciles, "max-concurrent-reconciles", 16, "GuardedJobs reconciled in parallel (the stop controller uses at least 32 workers).")
	flag.Float64Var(&o.kubeAPIQPS, "kube-api-qps", 0,
		"Client-side limit on requests per second to the API server for the GuardedJob controller (the stop controller has a budget of its own); 0: none, the API server's priority and fairness applies.")
	flag.IntVar(&o.kubeAPIBurst, "kube-api-burst", 0, "Requests above --kube-api-qps allowed in a burst; 0: twice --kube-api-qps.")
	flag.Float64Var(&o.eventQPS, "event-qps", 50,
		"Events per second sent to the API server (a client of their own): when many runs start or stop at once their events follow at this pace instead of competing with the writes that start and stop them; 0: no limit.")
	flag.IntVar(&o.eventBurst, "event-burst", 100, "Events above --event-qps sent in a burst; 0: twice --event-qps.")
	flag.Float64Var(&o.stopRate, "stop-rate", 50,
		"Runs per second the manager can count on stopping (a Job delete and its Pods' deletes each) when many leases are at risk at once. When Redis stops answering for many runs, their stops start early enough to all be issued before their leases could expire at this rate; 0 assumes any number can be stopped at once.")
	flag.DurationVar(&o.redisTimeout, "redis-timeout", lockclient.DefaultTimeout, "Bound on every call to the lock store.")
	flag.DurationVar(&o.clockSkew, "clock-skew-allowance", 2*time.Second,
		"How far the clocks of the manager's replicas may differ. A lease resumed after a restart or a leader change counts its self-fence deadline from the run's recorded acquisition time less this allowance.")
	flag.StringVar(&o.memoryLimit, "memory-limit", envOr("GUARDEDJOB_MEMORY_LIMIT", ""),
		"The container's memory limit (a quantity: 256Mi, or bytes, as the manifests pass limits.memory through the Downward API); env GUARDEDJOB_MEMORY_LIMIT. The Go runtime's soft memory limit is set to 90% of it, so that garbage is collected sooner instead of taking the manager over its limit; GOMEMLIMIT, when set, wins. Empty: no soft limit.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	if *printVersion {
		fmt.Println(buildinfo.Resolve(version, commit))
		return
	}

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	if err := run(ctrl.SetupSignalHandler(), o, log); err != nil {
		log.Error(err, "Manager stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, log logr.Logger) error {
	if (o.redisURL == "") == (o.redisSecret == "") {
		return errors.New("exactly one of --redis-url (GUARDEDJOB_REDIS_URL) and --redis-secret (GUARDEDJOB_REDIS_SECRET) is required")
	}
	if err := checkStopRate(o.stopRate); err != nil {
		return err
	}
	soft, err := softMemoryLimit(o.memoryLimit, os.Getenv("GOMEMLIMIT"))
	if err != nil {
		return err
	}
	if soft > 0 {
		debug.SetMemoryLimit(soft)
		log.Info("Soft memory limit set", "bytes", soft, "memoryLimit", o.memoryLimit)
	}
	grants, err := keys.ParseGrants(o.keyGrants)
	if err != nil {
		return fmt.Errorf("--key-grants: %w", err)
	}
	storeAllow, err := lockclient.ParseAllowList(o.storeAllow)
	if err != nil {
		return fmt.Errorf("--store-allow: %w", err)
	}
	shard, err := controllers.ParseShardSelector(o.watchLabelSelector)
	if err != nil {
		return fmt.Errorf("--watch-label-selector: %w", err)
	}
	redis.SetLogger(redisLogger{log: ctrl.Log.WithName("redis")})

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(batchv1alpha1.AddToScheme(scheme))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = clientLimits(o.kubeAPIQPS, o.kubeAPIBurst)
	startClusterRanges(ctx, cfg, storeAllow, log)
	storeCfg := lockclient.Config{URL: o.redisURL, Timeout: o.redisTimeout}
	if o.redisSecret != "" {
		if storeCfg, err = storeConfigFromSecret(ctx, cfg, scheme, o.redisSecret, o.redisTimeout); err != nil {
			return err
		}
	}
	store, err := lockclient.Dial(storeCfg)
	if err != nil {
		return fmt.Errorf("lock store: %w", err)
	}
	defer func() { _ = store.Close() }()
	if o.clusterName == "" {
		if o.clusterName, err = defaultClusterName(ctx, cfg, scheme); err != nil {
			return err
		}
	}
	if o.guardImage == "" {
		if o.guardImage, err = ownImage(ctx, cfg, scheme, os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")); err != nil {
			return err
		}
	}
	metrics, metricsCert, err := metricsOptions(o)
	if err != nil {
		return err
	}
	// With leader election, every side effect asks the guard whether this
	// replica still leads; its watchdog runs for the life of the process, so
	// that a pause is seen whenever it happens.
	var guard *leadership.Guard
	var leaderLease resourcelock.Interface
	if o.leaderElect {
		guard = leadership.New(clock.RealClock{}, o.renewDeadline)
		if leaderLease, err = leaderLock(cfg, o.leaderElectionNamespace, o.leaderElectionID, o.renewDeadline, guard); err != nil {
			return err
		}
		go func() { _ = guard.Run(ctx) }()
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   controllers.CacheOptionsFor(shard),
		Metrics:                 metrics,
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        o.leaderElectionID,
		LeaderElectionNamespace: o.leaderElectionNamespace,
		// The lease lock as controller-runtime makes it, seen by the guard.
		LeaderElectionResourceLockInterface: leaderLease,
		LeaseDuration:                       &o.leaseDuration,
		RenewDeadline:                       &o.renewDeadline,
		RetryPeriod:                         &o.retryPeriod,
		// On SIGTERM, give the leadership up at once so the next leader resumes the
		// leases; this process renews them until then.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}

	if metricsCert != nil {
		// Reloads a renewed certificate (cert-manager rotates it in the mounted Secret).
		if err := mgr.Add(metricsCert); err != nil {
			return fmt.Errorf("watch the metrics certificate: %w", err)
		}
	}

	evts, err := newPacedEvents(ctx, cfg, scheme, o.eventQPS, o.eventBurst)
	if err != nil {
		return err
	}
	defer evts.shutdown()

	parts, err := controllers.Setup(mgr, controllers.ManagerOptions{
		Store: store, RESTConfig: cfg, ClusterName: o.clusterName, KeyGrants: grants, StoreAllow: storeAllow,
		GuardImage: o.guardImage, ClockSkew: o.clockSkew, Selector: shard,
		LeaderElection: o.leaderElect, LeaderLeaseDuration: o.leaseDuration, LeaderRetryPeriod: o.retryPeriod, LeaderElectionID: o.leaderElectionID,
		MaxConcurrentReconciles: o.maxConcurrentReconciles, StopRate: o.stopRate, HandoverTimeout: o.shardHandoverTimeout, EarlyGate: o.earlyGate,
		Recorder: evts.recorder("guardedjob-controller"), StopRecorder: evts.recorder("guardedjob-stop"),
		Guard: guard,
	})
	if err != nil {
		return err
	}
	keeper := parts.Keeper
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	// Not ready while the store does not answer; liveness never depends on Redis,
	// so an outage does not restart the manager and lose its lease state.
	if err := mgr.AddReadyzCheck("redis", func(req *http.Request) error { return store.Ping(req.Context()) }); err != nil {
		return err
	}

	// The keeper runs on its own context: renewals must not stop while the
	// manager's controllers shut down.
	keeperCtx, stopKeeper := context.WithCancel(context.Background())
	keeperDone := make(chan struct{})
	go func() {
		defer close(keeperDone)
		_ = keeper.Run(keeperCtx)
	}()
	defer func() {
		stopKeeper()
		<-keeperDone
	}()

	if storeAllow == nil {
		warnOpenStoreRefs(ctx, cfg, scheme, log)
	}
	build := buildinfo.Resolve(version, commit)
	if o.guardImage == "" {
		log.Info("No pod guard image (--guard-image): GuardedJobs with lock.podGuard stay Ready=False")
	}
	log.Info("Starting manager", "version", build.Version, "commit", build.Commit, "cluster", o.clusterName, "store", store.Identity(), "keyGrants", grants.String(),
		"storeAllow", storeAllow.String(), "leaderElection", o.leaderElect, "leaderElectionID", o.leaderElectionID, "shard", shard.String(),
		"guardImage", o.guardImage)
	err = mgr.Start(ctx)
	if err == nil || ctx.Err() != nil || !o.leaderElect || !strings.Contains(err.Error(), "leader election lost") {
		return err
	}
	return controllers.RenewOnly(ctx, keeper, func() bool { return apiReachable(cfg) }, o.retryPeriod, log)
}

// clientLimits turns --kube-api-qps and --kube-api-burst into a rest.Config's QPS
// and Burst. Without a limit (QPS 0) client-go's own default (5 per second) must
// not apply: a negative QPS turns the client-side limiter off.
func clientLimits(qps float64, burst int) (float32, int) {
	if qps <= 0 {
		return -1, 0
	}
	if burst <= 0 {
		burst = max(1, int(2*qps))
	}
	return float32(qps), burst
}

// checkStopRate refuses a --stop-rate that is not a number of runs per second:
// the keeper would otherwise plan stops from it.
func checkStopRate(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("--stop-rate %v: want runs per second, 0 or more (0: no limit assumed)", v)
	}
	return nil
}

// The metrics filter asks the API server who a scraper is and whether it may read
// /metrics.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// metricsOptions serves metrics over HTTPS, to callers the API server authenticates
// (TokenReview) and authorizes (SubjectAccessReview for get on the /metrics URL),
// unless --metrics-secure=false. The certificate is the one in --metrics-cert-path,
// watched for renewals by the returned watcher (which the manager must run), or a
// self-signed one. A --metrics-cert-path whose files cannot be read is an error at
// start, not a silent fall back to a self-signed certificate. HTTP/2 is off: its
// stream-reset floods (CVE-2023-44487, CVE-2023-39325) are not worth a metrics port.
func metricsOptions(o options) (metricsserver.Options, *certwatcher.CertWatcher, error) {
	if !o.metricsSecure {
		if o.metricsCertPath != "" {
			return metricsserver.Options{}, nil, errors.New("--metrics-cert-path needs --metrics-secure: with --metrics-secure=false metrics are plain HTTP")
		}
		return metricsserver.Options{BindAddress: o.metricsAddr}, nil, nil
	}
	opts := metricsserver.Options{
		BindAddress:    o.metricsAddr,
		SecureServing:  true,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
		TLSOpts:        []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
	if o.metricsCertPath == "" {
		return opts, nil, nil
	}
	watcher, err := certwatcher.New(filepath.Join(o.metricsCertPath, o.metricsCertName), filepath.Join(o.metricsCertPath, o.metricsCertKey))
	if err != nil {
		return metricsserver.Options{}, nil, fmt.Errorf("--metrics-cert-path: %w", err)
	}
	opts.TLSOpts = append(opts.TLSOpts, func(c *tls.Config) { c.GetCertificate = watcher.GetCertificate })
	return opts, watcher, nil
}

// apiReachable asks the API server for its version, briefly.
func apiReachable(cfg *restclient.Config) bool {
	c := restclient.CopyConfig(cfg)
	c.Timeout = 2 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(c)
	if err != nil {
		return false
	}
	_, err = dc.ServerVersion()
	return err == nil
}

// managerContainer is the manager's container in its Deployment (config/manager,
// the chart): its image is the guard's when --guard-image is not set.
const managerContainer = "manager"

// ownImage returns the image of the manager container of the Pod this process
// runs in (namespace and name from the downward API), or "" outside a Pod. It
// lists rather than gets, so that the manager's role needs no new verb.
func ownImage(ctx context.Context, cfg *restclient.Config, scheme *runtime.Scheme, namespace, name string) (string, error) {
	if namespace == "" || name == "" {
		return "", nil
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return "", fmt.Errorf("create client: %w", err)
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingFields{"metadata.name": name}); err != nil {
		return "", fmt.Errorf("read this manager's Pod %s/%s for the pod guard's image (set --guard-image instead): %w", namespace, name, err)
	}
	for _, p := range pods.Items {
		for _, ct := range p.Spec.Containers {
			if ct.Name == managerContainer {
				return ct.Image, nil
			}
		}
	}
	return "", nil
}

// defaultClusterName derives the cluster name from the kube-system namespace
// UID, which differs per cluster and survives manager restarts.
func defaultClusterName(ctx context.Context, cfg *restclient.Config, scheme *runtime.Scheme) (string, error) {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return "", fmt.Errorf("create client: %w", err)
	}
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: clustername.Namespace}, ns); err != nil {
		return "", fmt.Errorf("derive --cluster-name from the kube-system namespace (set --cluster-name instead): %w", err)
	}
	return clustername.FromNamespaceUID(string(ns.UID)), nil
}

// storeConfigFromSecret reads the lock store's connection from a Secret (see
// storeconfig.FromSecret for its keys).
func storeConfigFromSecret(ctx context.Context, cfg *restclient.Config, scheme *runtime.Scheme, ref string, timeout time.Duration) (lockclient.Config, error) {
	namespace, name, ok := strings.Cut(ref, "/")
	if !ok || namespace == "" || name == "" {
		return lockclient.Config{}, fmt.Errorf("--redis-secret %q must be namespace/name", ref)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return lockclient.Config{}, fmt.Errorf("create client: %w", err)
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret); err != nil {
		return lockclient.Config{}, fmt.Errorf("read --redis-secret %s: %w", ref, err)
	}
	storeCfg, err := storeconfig.FromSecret("--redis-secret "+ref, secret.Data)
	if err != nil {
		return lockclient.Config{}, err
	}
	if storeCfg.InsecureSkipVerify {
		ctrl.Log.WithName("setup").Info("WARNING: --redis-secret turns TLS server verification off (insecureSkipVerify): anyone on the network path can pose as the lock store; put its CA into ca.crt instead", "secret", ref)
	}
	storeCfg.Timeout = timeout
	return storeCfg, nil
}

// warnOpenStoreRefs warns when GuardedJobs name stores of their own while
// --store-allow is unset: a tenant can then point the manager at any host it
// reaches.
func warnOpenStoreRefs(ctx context.Context, cfg *restclient.Config, scheme *runtime.Scheme, log logr.Logger) {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return
	}
	list := &batchv1alpha1.GuardedJobList{}
	if err := c.List(ctx, list); err != nil {
		log.V(1).Info("Could not list GuardedJobs to check for storeRef", "error", err.Error())
		return
	}
	n := 0
	for i := range list.Items {
		if list.Items[i].Spec.Lock.StoreRef != nil {
			n++
		}
	}
	if n > 0 {
		log.Info("WARNING: GuardedJobs use spec.lock.storeRef but --store-allow is not set, so their stores may be any host the manager can reach; set --store-allow",
			"guardedJobsWithStoreRef", n)
	}
}

// redisLogger sends go-redis' internal messages (reconnects, pool errors) to the
// manager's log at debug level.
type redisLogger struct{ log logr.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.V(1).Info(fmt.Sprintf(format, v...))
}
