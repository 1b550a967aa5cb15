/*
Copyright 2026 The GuardedJob Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package e2e

// The fault test's harness: processes started and stopped by PID, loopback TCP proxies
// that can be cut or slowed, and local control planes built from those.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/testproc"
)

// ---------------------------------------------------------------------------------
// Processes

// ---------------------------------------------------------------------------------
// Proxies

// proxy forwards loopback TCP connections to target. Cut closes every connection and
// refuses new ones (accepted and closed at once) until Restore; SetLatency delays
// every chunk forwarded in either direction, like a slow server.
type proxy struct {
	target string
	l      net.Listener

	mu      sync.Mutex
	cut     bool
	latency time.Duration
	conns   map[net.Conn]struct{}
}

func startProxy(target string) (*proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{target: target, l: l, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

func (p *proxy) Addr() string { return p.l.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d := p.latency
			p.mu.Unlock()
			if d > 0 {
				time.Sleep(d) // the injected slowness itself
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Cut closes every open connection and refuses new ones until Restore.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

func (p *proxy) Close() {
	_ = p.l.Close()
	p.Cut()
}

// ---------------------------------------------------------------------------------
// Control planes

// controlPlaneBinaries is where hack/build-control-plane.sh --demo puts its binaries.
type controlPlaneBinaries struct{ dir string }

func (b controlPlaneBinaries) path(name string) string { return filepath.Join(b.dir, name) }

// cluster is one local control plane: etcd, kube-apiserver behind a proxy that every
// client (the components, the managers and the test) goes through,
// kube-controller-manager, kube-scheduler and kwok playing the kubelet of one node.
type cluster struct {
	name     string
	dir      string
	procs    []*testproc.Proc // in start order
	apiProxy *proxy
	// redisProxy is the way of this cluster's managers to Redis (set by the test).
	redisProxy *proxy
	// electionNamespace holds the managers' leader election Lease, as in config/rbac.
	electionNamespace string

	admin            *rest.Config
	client           client.Client
	clientset        kubernetes.Interface
	managerConfig    string // kubeconfig of the manager's user
	adminKubeconfig  string
	stopOnce         sync.Once
	apiserverAddress string
}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(batchv1alpha1.AddToScheme(s))
	return s
}()

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startCluster starts a control plane in dir. On error, what was started is stopped.
func startCluster(ctx context.Context, name, dir string, bins controlPlaneBinaries, root string) (c *cluster, err error) {
	c = &cluster{name: name, dir: dir}
	defer func() {
		if err != nil {
			c.stop()
			err = fmt.Errorf("cluster %s: %w", name, err)
		}
	}()
	for _, d := range []string{"logs", "pki", "etcd"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return c, err
		}
	}
	pki := filepath.Join(dir, "pki")
	if err := writePKI(pki); err != nil {
		return c, err
	}
	adminToken, managerToken := randomHex(24), randomHex(24)
	// token,user,uid,"groups": the admin (the test and the components) is in
	// system:masters; the manager is a plain user bound to config/rbac's roles.
	tokens := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n%s,guardedjob-manager,guardedjob-manager,\"system:authenticated\"\n", adminToken, managerToken)
	if err := os.WriteFile(filepath.Join(pki, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return c, err
	}

	logf := func(n string) string { return filepath.Join(dir, "logs", n+".log") }
	start := func(n, bin string, args ...string) error {
		p, err := testproc.Start(name+"/"+n, logf(n), bin, args...)
		if err != nil {
			return err
		}
		c.procs = append(c.procs, p)
		return nil
	}
	// The ports were free a moment before etcd and the API server bind them;
	// another process may take one first. Such a start is tried again on fresh
	// ports.
	for attempt := 1; ; attempt++ {
		err := c.startStoreAndAPIServer(ctx, bins, pki, start)
		if err == nil {
			break
		}
		if !errors.Is(err, errAddrInUse) || attempt == startAttempts {
			return c, err
		}
		fmt.Fprintf(os.Stderr, "cluster %s: %v\nstarting etcd and kube-apiserver again on fresh ports\n", name, err)
		for _, p := range c.procs {
			p.Stop(10 * time.Second)
		}
		c.procs = nil
		if err := os.RemoveAll(filepath.Join(dir, "etcd")); err != nil {
			return c, err
		}
		if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o700); err != nil {
			return c, err
		}
	}
	if c.apiProxy, err = startProxy(c.apiserverAddress); err != nil {
		return c, err
	}
	c.adminKubeconfig = filepath.Join(dir, "admin.kubeconfig")
	c.managerConfig = filepath.Join(dir, "manager.kubeconfig")
	if err := writeKubeconfig(c.adminKubeconfig, c.apiProxy.Addr(), filepath.Join(pki, "ca.crt"), "admin", adminToken); err != nil {
		return c, err
	}
	if err := writeKubeconfig(c.managerConfig, c.apiProxy.Addr(), filepath.Join(pki, "ca.crt"), "guardedjob-manager", managerToken); err != nil {
		return c, err
	}
	if c.admin, err = clientcmd.BuildConfigFromFlags("", c.adminKubeconfig); err != nil {
		return c, err
	}
	c.admin.QPS, c.admin.Burst = 100, 200
	if c.client, err = client.New(c.admin, client.Options{Scheme: scheme}); err != nil {
		return c, err
	}
	if c.clientset, err = kubernetes.NewForConfig(c.admin); err != nil {
		return c, err
	}
	if err := poll(ctx, 90*time.Second, "kube-apiserver /readyz", func() error {
		return c.clientset.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	}); err != nil {
		return c, fmt.Errorf("%w\n%s", err, c.logTails(10))
	}

	if err := start("kube-controller-manager", bins.path("kube-controller-manager"),
		"--kubeconfig="+c.adminKubeconfig, "--secure-port=0", "--leader-elect=false",
		"--controllers=job-controller,node-lifecycle-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,pod-garbage-collector-controller",
		"--service-account-private-key-file="+filepath.Join(pki, "sa.key"), "--root-ca-file="+filepath.Join(pki, "ca.crt"),
		"--use-service-account-credentials=false"); err != nil {
		return c, err
	}
	if err := start("kube-scheduler", bins.path("kube-scheduler"),
		"--kubeconfig="+c.adminKubeconfig, "--secure-port=0", "--leader-elect=false"); err != nil {
		return c, err
	}
	if err := start("kwok", bins.path("kwok"),
		"--kubeconfig="+c.adminKubeconfig, "--config="+filepath.Join(root, "hack", "demo", "kwok-stages.yaml"),
		"--manage-all-nodes=true", "--node-port=0", "--node-ip=127.0.0.1"); err != nil {
		return c, err
	}
	return c, c.setUp(ctx, root)
}

// startAttempts is how many times a control plane's etcd and API server are
// started on fresh ports when one of their ports was taken.
const startAttempts = 3

var errAddrInUse = errors.New("a port was taken before it was bound")

// startStoreAndAPIServer starts etcd and kube-apiserver on ports free a moment
// ago and waits until the API server serves on its port: errAddrInUse when
// either found a port taken.
func (c *cluster) startStoreAndAPIServer(ctx context.Context, bins controlPlaneBinaries, pki string, start func(n, bin string, args ...string) error) error {
	ports := make([]int, 3)
	for i := range ports {
		var err error
		if ports[i], err = testproc.FreePort(); err != nil {
			return err
		}
	}
	etcdPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	// The logs are appended to (an earlier attempt, an earlier run in E2E_DIR):
	// this attempt reads only what was written after their sizes now.
	before := map[string]int64{}
	for _, n := range []string{"etcd", "kube-apiserver"} {
		path := filepath.Join(c.dir, "logs", n+".log")
		if fi, err := os.Stat(path); err == nil {
			before[path] = fi.Size()
		}
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	if err := start("etcd", bins.path("etcd"), "--name", c.name, "--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", c.name+"="+peerURL, "--log-level", "warn", "--unsafe-no-fsync"); err != nil {
		return err
	}
	c.apiserverAddress = fmt.Sprintf("127.0.0.1:%d", apiPort)
	if err := start("kube-apiserver", bins.path("kube-apiserver"),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", apiPort),
		"--etcd-servers="+etcdURL,
		"--tls-cert-file="+filepath.Join(pki, "apiserver.crt"), "--tls-private-key-file="+filepath.Join(pki, "apiserver.key"),
		"--client-ca-file="+filepath.Join(pki, "ca.crt"),
		"--token-auth-file="+filepath.Join(pki, "tokens.csv"), "--anonymous-auth=false",
		"--authorization-mode=RBAC",
		"--service-account-key-file="+filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(pki, "sa.key"),
		"--service-account-issuer=https://"+c.apiserverAddress,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=none",
		"--allow-privileged=false"); err != nil {
		return err
	}
	// The API server's own log says it bound its port; a connection to the
	// port could reach whatever took it.
	serving := []byte("Serving securely on " + c.apiserverAddress + "\n")
	apiserver := c.procs[len(c.procs)-1]
	logSince := func(p *testproc.Proc) []byte {
		log, _ := os.ReadFile(p.LogPath)
		return log[min(before[p.LogPath], int64(len(log))):]
	}
	tail := func(p *testproc.Proc) string {
		lines := strings.Split(strings.TrimRight(string(logSince(p)), "\n"), "\n")
		return strings.Join(lines[max(len(lines)-20, 0):], "\n")
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		for _, p := range c.procs {
			if p.Exited() {
				if bytes.Contains(logSince(p), []byte("address already in use")) {
					return fmt.Errorf("%s: %w\n%s", p.Name, errAddrInUse, tail(p))
				}
				return fmt.Errorf("%s exited\n%s", p.Name, tail(p))
			}
		}
		if bytes.Contains(logSince(apiserver), serving) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after 90s waiting for kube-apiserver to serve on %s\n%s", c.apiserverAddress, tail(apiserver))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setUp registers the node, the namespaces, the CRD and the manager's RBAC, and waits
// until Pods can be scheduled in namespace e2e.
func (c *cluster) setUp(ctx context.Context, root string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        "kwok-node-0",
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		Labels: map[string]string{"kubernetes.io/arch": "amd64", "kubernetes.io/hostname": "kwok-node-0",
			"kubernetes.io/os": "linux", "type": "kwok"},
	}}
	// The CRD and the manager's roles come from the checkout; the bindings name the
	// roles as the manifests do.
	var manifests []*unstructured.Unstructured
	for _, f := range []string{"config/crd/bases/batch.guardedjob.dev_guardedjobs.yaml", "config/rbac/role.yaml", "config/rbac/leader_election_role.yaml",
		"config/crd/bases/batch.guardedjob.dev_guardedjobruns.yaml", "config/crd/bases/batch.guardedjob.dev_guardedjobbackfills.yaml",
		"config/crd/bases/batch.guardedjob.dev_guardedjobinspects.yaml", "config/crd/bases/batch.guardedjob.dev_guardedjobunlocks.yaml"} {
		o, err := readManifest(filepath.Join(root, f))
		if err != nil {
			return err
		}
		manifests = append(manifests, o)
	}
	managerRole, electionRole := manifests[1], manifests[2]
	c.electionNamespace = electionRole.GetNamespace()
	manager := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "guardedjob-manager"}}
	objs := []client.Object{
		node,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: electionRole.GetNamespace()}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "guardedjob-manager"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: managerRole.GetName()},
			Subjects:   manager,
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "guardedjob-leader-election", Namespace: electionRole.GetNamespace()},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: electionRole.GetName()},
			Subjects:   manager,
		},
	}
	for _, m := range manifests {
		objs = append(objs, m)
	}
	for _, o := range objs {
		if err := poll(ctx, 30*time.Second, "create "+o.GetName(), func() error {
			err := c.client.Create(ctx, o)
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}); err != nil {
			return err
		}
	}
	checks := []struct {
		what string
		fn   func() error
	}{
		{"node kwok-node-0 Ready and untainted", func() error {
			n := &corev1.Node{}
			if err := c.client.Get(ctx, client.ObjectKey{Name: "kwok-node-0"}, n); err != nil {
				return err
			}
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && len(n.Spec.Taints) == 0 {
					return nil
				}
			}
			return errors.New("not yet")
		}},
		{"the default ServiceAccount of namespace " + namespace, func() error {
			return c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "default"}, &corev1.ServiceAccount{})
		}},
		{"the GuardedJob CRD served", func() error {
			return c.client.List(ctx, &batchv1alpha1.GuardedJobList{}, client.InNamespace(namespace))
		}},
	}
	for _, check := range checks {
		if err := poll(ctx, 90*time.Second, check.what, check.fn); err != nil {
			return fmt.Errorf("%w\n%s", err, c.logTails(10))
		}
	}
	return nil
}

func (c *cluster) logTails(n int) string {
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "--- %s (last %d lines)\n%s\n", p.Name, n, p.Tail(n))
	}
	return b.String()
}

// stop stops the processes in the reverse order of their start.
func (c *cluster) stop() {
	c.stopOnce.Do(func() {
		for i := len(c.procs) - 1; i >= 0; i-- {
			c.procs[i].Stop(10 * time.Second)
		}
		if c.apiProxy != nil {
			c.apiProxy.Close()
		}
	})
}

// readManifest reads a one-object YAML file as an unstructured object.
func readManifest(path string) (*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	doc := strings.TrimPrefix(strings.TrimSpace(string(data)), "---")
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return u, nil
}

func writeKubeconfig(path, server, ca, user, token string) error {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://%s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: %s
current-context: e2e
`, server, ca, user, token, user)
	return os.WriteFile(path, []byte(cfg), 0o600)
}

// writePKI writes a CA, a serving certificate for 127.0.0.1 signed by it, and a
// service account signing key pair, all ECDSA P-256.
func writePKI(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "guardedjob-e2e-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	files := map[string]func() ([]byte, string, error){
		"ca.crt":        func() ([]byte, string, error) { return caDER, "CERTIFICATE", nil },
		"apiserver.crt": func() ([]byte, string, error) { return srvDER, "CERTIFICATE", nil },
		"apiserver.key": func() ([]byte, string, error) {
			b, err := x509.MarshalECPrivateKey(srvKey)
			return b, "EC PRIVATE KEY", err
		},
		"sa.key": func() ([]byte, string, error) {
			b, err := x509.MarshalECPrivateKey(saKey)
			return b, "EC PRIVATE KEY", err
		},
		"sa.pub": func() ([]byte, string, error) {
			b, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
			return b, "PUBLIC KEY", err
		},
	}
	for name, f := range files {
		der, typ, err := f()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// poll calls fn until it succeeds or the timeout passes.
func poll(ctx context.Context, timeout time.Duration, what string, fn func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = fn(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s: %w", timeout, what, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
