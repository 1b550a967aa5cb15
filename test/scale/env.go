package main

// The benchmark's world: a control plane from envtest (etcd + kube-apiserver with an
// audit log), kube-controller-manager, redis-server and the manager binary, each a
// process on loopback stopped by its PID.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/testproc"
)

// The users whose requests the audit log records: the manager and
// kube-controller-manager. The benchmark's own requests are not recorded.
const (
	managerUser = "guardedjob-manager"
	kcmUser     = "bench-kube-controller-manager"
)

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(batchv1alpha1.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}()

// usage is what /proc says about a process: CPU seconds (user + system) and the
// current and peak resident set.
type usage struct {
	CPU       time.Duration
	RSS, Peak int64 // bytes
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

func procUsage(pid int) (usage, error) {
	var u usage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	if len(fields) < 13 {
		return u, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	u.CPU = time.Duration(utime+stime) * time.Second / clockTicks
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			u.RSS = kb << 10
		case "VmHWM":
			u.Peak = kb << 10
		}
	}
	return u, sc.Err()
}

// poll calls fn every interval until it returns true or an error, or timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, what string, fn func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := fn()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// world is everything one benchmark run started.
type world struct {
	dir    string
	assets string
	root   string

	env     *envtest.Environment
	admin   *rest.Config
	client  client.Client
	audit   *auditLog
	redis   *redisServer
	manager *testproc.Proc
	metrics string // the manager's metrics URL
	pprof   string // the manager's /debug/pprof base URL, when it serves it
	kcm     *testproc.Proc
	kcmKube string
	mgrKube string
	started bool
	apiPID  int // kube-apiserver's, once apiServerCPU found it
}

// startControlPlane starts etcd and kube-apiserver (with an audit log of the
// manager's and kube-controller-manager's requests), installs the CRD, and writes
// kubeconfigs for the manager (bound to config/rbac's role) and for
// kube-controller-manager.
func (w *world) startControlPlane(ctx context.Context) error {
	policy := filepath.Join(w.dir, "audit-policy.yaml")
	auditPath := filepath.Join(w.dir, "audit.log")
	// Metadata is enough for verb, resource, name and timestamps; only the
	// response's completion is recorded, once per request.
	if err := os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  users: ["`+managerUser+`", "`+kcmUser+`"]
- level: None
`), 0o600); err != nil {
		return err
	}
	w.env = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(w.root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: w.assets,
	}
	apiLog, err := os.Create(filepath.Join(w.dir, "kube-apiserver.log"))
	if err != nil {
		return err
	}
	api := w.env.ControlPlane.GetAPIServer()
	api.Out, api.Err = apiLog, apiLog
	// A loaded machine starts it slowly.
	api.StartTimeout = 2 * time.Minute
	api.Configure().
		Set("audit-policy-file", policy).
		Set("audit-log-path", auditPath)
	cfg, err := w.env.Start()
	if err != nil {
		return fmt.Errorf("start envtest: %w", err)
	}
	w.started = true
	w.admin = rest.CopyConfig(cfg)
	// The benchmark's own client is not limited on the client side: the API server's
	// priority and fairness is the only limit, as for the floor's writers.
	w.admin.QPS, w.admin.Burst = -1, 0
	if w.client, err = client.New(w.admin, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	w.audit = newAuditLog(auditPath)

	mgrUser, err := w.env.AddUser(envtest.User{Name: managerUser, Groups: []string{"system:authenticated"}}, nil)
	if err != nil {
		return err
	}
	if w.mgrKube, err = writeKubeconfig(w.dir, "manager", mgrUser); err != nil {
		return err
	}
	kcm, err := w.env.AddUser(envtest.User{Name: kcmUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	if w.kcmKube, err = writeKubeconfig(w.dir, "kcm", kcm); err != nil {
		return err
	}
	// The manager runs with the ClusterRole the manifests ship.
	data, err := os.ReadFile(filepath.Join(w.root, "config", "rbac", "role.yaml"))
	if err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		return fmt.Errorf("config/rbac/role.yaml: %w", err)
	}
	objs := []client.Object{role, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "guardedjob-manager"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: managerUser}},
	}}
	for _, ns := range []string{nsFloor, nsCron, nsGJ, nsIdle} {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	for _, o := range objs {
		if err := w.client.Create(ctx, o); err != nil {
			return fmt.Errorf("create %s: %w", o.GetName(), err)
		}
	}
	return nil
}

func writeKubeconfig(dir, name string, u *envtest.AuthenticatedUser) (string, error) {
	data, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}

// startKCM starts kube-controller-manager with only the CronJob controller, with
// its default client limits unless extra says otherwise.
func (w *world) startKCM(ctx context.Context, extra ...string) error {
	p, err := testproc.Start("kube-controller-manager", filepath.Join(w.dir, "kube-controller-manager.log"),
		filepath.Join(w.assets, "kube-controller-manager"),
		append([]string{"--kubeconfig=" + w.kcmKube, "--controllers=cronjob-controller", "--leader-elect=false", "--secure-port=0"}, extra...)...)
	if err != nil {
		return err
	}
	w.kcm = p
	// It is up once it has listed CronJobs; give it a moment and check it lives.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(3 * time.Second):
	}
	if p.Exited() {
		return fmt.Errorf("kube-controller-manager exited:\n%s", p.Tail(20))
	}
	return nil
}

// redisServer is one redis-server on loopback without persistence.
type redisServer struct {
	*testproc.Proc
	addr string
}

func (w *world) startRedis(ctx context.Context, name string) (*redisServer, error) {
	port, err := testproc.FreePort()
	if err != nil {
		return nil, err
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (hack/ensure-redis.sh installs it): %w", err)
	}
	p, err := testproc.Start(name, filepath.Join(w.dir, name+".log"), bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", w.dir)
	if err != nil {
		return nil, err
	}
	s := &redisServer{Proc: p, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer func() { _ = rdb.Close() }()
	if err := poll(ctx, 20*time.Second, 50*time.Millisecond, name, func() (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("%s exited:\n%s", name, p.Tail(20))
		}
		return rdb.Ping(ctx).Err() == nil, nil
	}); err != nil {
		p.Kill()
		return nil, err
	}
	return s, nil
}

// startManager starts the manager binary against the control plane and Redis,
// with its metrics on a loopback port.
func (w *world) startManager(ctx context.Context, bin string, extra []string, pprof bool) error {
	port, err := testproc.FreePort()
	if err != nil {
		return err
	}
	w.metrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	args := []string{
		"--kubeconfig=" + w.mgrKube, "--redis-url=redis://" + w.redis.addr, "--cluster-name=bench",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port), "--metrics-secure=false",
		"--health-probe-bind-address=0",
		// As the manifests deploy it: the container's limit, whose 90% is the
		// Go runtime's soft memory limit.
		"--memory-limit=256Mi",
	}
	if pprof {
		pp, err := testproc.FreePort()
		if err != nil {
			return err
		}
		w.pprof = fmt.Sprintf("http://127.0.0.1:%d", pp)
		args = append(args, fmt.Sprintf("--pprof-bind-address=127.0.0.1:%d", pp))
	}
	args = append(args, extra...)
	p, err := testproc.Start("manager", filepath.Join(w.dir, "manager.log"), bin, args...)
	if err != nil {
		return err
	}
	w.manager = p
	return poll(ctx, 60*time.Second, 200*time.Millisecond, "the manager's metrics endpoint", func() (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("manager exited:\n%s", p.Tail(30))
		}
		_, err := w.scrape(ctx)
		return err == nil, nil
	})
}

// scrape returns the manager's metrics as "name{labels}" -> value.
func (w *world) scrape(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.metrics, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// sumMetric adds every series of a metric whose labels contain all of match.
func sumMetric(m map[string]float64, name string, match ...string) float64 {
	var sum float64
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		ok := true
		for _, s := range match {
			if !strings.Contains(k, s) {
				ok = false
			}
		}
		if ok {
			sum += v
		}
	}
	return sum
}

// stop stops everything in the reverse order of its start.
func (w *world) stop() {
	for _, p := range []*testproc.Proc{w.manager, w.kcm} {
		if p != nil {
			p.Stop(10 * time.Second)
		}
	}
	if w.redis != nil {
		w.redis.Kill()
	}
	if w.started {
		if err := w.env.Stop(); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "stop control plane:", err)
		}
	}
}

func numCPU() int { return goruntime.NumCPU() }

// adminRaw is the admin client's config for non-resource paths.
func (w *world) adminRaw() *rest.Config {
	cfg := rest.CopyConfig(w.admin)
	cfg.GroupVersion = nil
	cfg.APIPath = ""
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	return cfg
}

// apiServerCPU is the CPU time kube-apiserver has used so far. envtest does not
// say which process it started: it is the kube-apiserver whose arguments name this
// run's work directory (its audit log).
func (w *world) apiServerCPU() (time.Duration, error) {
	if w.apiPID == 0 {
		dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
		if err != nil {
			return 0, err
		}
		for _, f := range dirs {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			args := strings.Split(string(b), "\x00")
			if filepath.Base(args[0]) == "kube-apiserver" && strings.Contains(string(b), "="+filepath.Join(w.dir, "audit.log")) {
				w.apiPID, _ = strconv.Atoi(filepath.Base(filepath.Dir(f)))
				break
			}
		}
		if w.apiPID == 0 {
			return 0, errors.New("kube-apiserver's process not found")
		}
	}
	u, err := procUsage(w.apiPID)
	return u.CPU, err
}
