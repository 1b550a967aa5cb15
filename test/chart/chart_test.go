// Package chart_test renders the Helm chart in charts/guardedjob with several value
// sets and checks it against the kustomize install (config/default) where the two
// must agree: the same CRD, the same RBAC rules, the same manager container (args,
// ports, probes, security context, resources, the store only from a Secret), lints
// it, and installs, upgrades and uninstalls it on a real API server. helm and kubectl
// come from internal/testutil/bins ($HELM, and $KUBECTL or the kubectl beside the
// control plane).
package chart_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/guardedjob/guardedjob/internal/keys"
	"github.com/guardedjob/guardedjob/internal/testutil/bins"
)

const (
	release   = "guardedjob"
	namespace = "guardedjob-system"
	manager   = "guardedjob-manager"
	crdName   = "guardedjobs.batch.guardedjob.dev"
	// A helm built with go install does not know a cluster's version; render for the
	// one the project is tested against.
	kubeVersion = "1.37.2"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

func run(t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = repoRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(err.Error() + ": " + stderr.String())
	}
	return out, nil
}

// render runs helm template for the release guardedjob in guardedjob-system, with
// the CRD, and the given --set values.
func render(t *testing.T, set ...string) (manifests, error) {
	t.Helper()
	args := []string{"template", release, "charts/guardedjob", "--namespace", namespace, "--kube-version", kubeVersion}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := run(t, bins.Helm(t), args...)
	if err != nil {
		return nil, err
	}
	return decode(t, out), nil
}

func mustRender(t *testing.T, set ...string) manifests {
	t.Helper()
	ms, err := render(t, set...)
	if err != nil {
		t.Fatalf("helm template %v: %v", set, err)
	}
	return ms
}

func kustomize(t *testing.T) manifests {
	t.Helper()
	out, err := run(t, bins.Kubectl(t), "kustomize", "config/default")
	if err != nil {
		t.Fatalf("kubectl kustomize config/default: %v", err)
	}
	return decode(t, out)
}

type manifests []*unstructured.Unstructured

// decode reads rendered documents strictly: a key given twice in one mapping (which
// some YAML parsers reject and others read as the last one) fails the test.
func decode(t *testing.T, data []byte) manifests {
	t.Helper()
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs manifests
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("read rendered YAML: %v", err)
		}
		var m map[string]any
		if err := yaml.UnmarshalStrict(doc, &m); err != nil {
			t.Fatalf("decode rendered YAML: %v\n%s", err, doc)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

func (ms manifests) find(kind, name string) *unstructured.Unstructured {
	for _, o := range ms {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func (ms manifests) kinds() []string {
	var out []string
	for _, o := range ms {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	return out
}

// get converts the object of a kind and name to its typed form, failing if absent.
func get[T any](t *testing.T, ms manifests, kind, name string, into *T) *T {
	t.Helper()
	o := ms.find(kind, name)
	if o == nil {
		t.Fatalf("no %s %q in %v", kind, name, ms.kinds())
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatalf("convert %s %s: %v", kind, name, err)
	}
	return into
}

func managerContainer(t *testing.T, ms manifests) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	dep := get(t, ms, "Deployment", manager, &appsv1.Deployment{})
	if len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(dep.Spec.Template.Spec.Containers))
	}
	return dep, dep.Spec.Template.Spec.Containers[0]
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func TestChartLints(t *testing.T) {
	helm := bins.Helm(t)
	for _, set := range [][]string{
		{"redis.existingSecret=guardedjob-redis"},
		{"redis.url=rediss://user:pw@redis.example:6380/0", "metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
			"metrics.grafanaDashboard.enabled=true", "metrics.clusterLabel=region"},
		{"redis.existingSecret=s", "metrics.tls.certManager.enabled=true", "metrics.serviceMonitor.enabled=true", "crds.enabled=false"},
	} {
		args := []string{"lint", "--strict", "--kube-version", kubeVersion, "charts/guardedjob"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if out, err := run(t, helm, args...); err != nil {
			t.Errorf("helm lint %v: %v\n%s", set, err, out)
		}
	}
}

// TestChartAgreesWithKustomize: installed with the chart's defaults and an existing
// Secret, the manager is the same as config/default installs.
func TestChartAgreesWithKustomize(t *testing.T) {
	g := NewWithT(t)
	chart := mustRender(t, "redis.existingSecret=guardedjob-redis")
	kust := kustomize(t)

	// The CRD is the generated one, byte for byte in meaning.
	chartCRD, kustCRD := chart.find("CustomResourceDefinition", crdName), kust.find("CustomResourceDefinition", crdName)
	g.Expect(chartCRD).NotTo(BeNil(), "the chart templates the CRD (crds.enabled)")
	g.Expect(kustCRD).NotTo(BeNil())
	g.Expect(chartCRD.Object["spec"]).To(Equal(kustCRD.Object["spec"]), "CRD spec differs: run make manifests")

	// The same rules in every role, under the same names.
	for _, name := range []string{"guardedjob-manager-role", "guardedjob-editor-role", "guardedjob-viewer-role", "guardedjob-metrics-reader"} {
		c, k := get(t, chart, "ClusterRole", name, &rbacv1.ClusterRole{}), get(t, kust, "ClusterRole", name, &rbacv1.ClusterRole{})
		g.Expect(c.Rules).To(Equal(k.Rules), "ClusterRole %s", name)
		for l, v := range k.Labels {
			if strings.HasPrefix(l, "rbac.authorization.k8s.io/aggregate-to-") {
				g.Expect(c.Labels).To(HaveKeyWithValue(l, v), "ClusterRole %s", name)
			}
		}
	}
	c, k := get(t, chart, "Role", "guardedjob-leader-election-role", &rbacv1.Role{}), get(t, kust, "Role", "guardedjob-leader-election-role", &rbacv1.Role{})
	g.Expect(c.Rules).To(Equal(k.Rules))
	g.Expect(c.Namespace).To(Equal(namespace))
	for _, kind := range []string{"ClusterRoleBinding/guardedjob-manager-rolebinding", "RoleBinding/guardedjob-leader-election-rolebinding"} {
		kind, name, _ := strings.Cut(kind, "/")
		cb, kb := chart.find(kind, name), kust.find(kind, name)
		g.Expect(cb).NotTo(BeNil(), "%s %s", kind, name)
		g.Expect(cb.Object["roleRef"]).To(Equal(kb.Object["roleRef"]), "%s %s", kind, name)
		g.Expect(cb.Object["subjects"]).To(Equal(kb.Object["subjects"]), "%s %s", kind, name)
	}
	get(t, chart, "ServiceAccount", manager, &corev1.ServiceAccount{})

	// The manager Deployment.
	cDep, cc := managerContainer(t, chart)
	kDep, kc := managerContainer(t, kust)
	g.Expect(cDep.Spec.Replicas).To(Equal(kDep.Spec.Replicas))
	g.Expect(cDep.Spec.Template.Spec.SecurityContext).To(Equal(kDep.Spec.Template.Spec.SecurityContext))
	g.Expect(cDep.Spec.Template.Spec.TerminationGracePeriodSeconds).To(Equal(kDep.Spec.Template.Spec.TerminationGracePeriodSeconds))
	g.Expect(cDep.Spec.Template.Spec.ServiceAccountName).To(Equal(kDep.Spec.Template.Spec.ServiceAccountName))
	g.Expect(labels.SelectorFromSet(cDep.Spec.Selector.MatchLabels).Matches(labels.Set(cDep.Spec.Template.Labels))).To(BeTrue())
	g.Expect(cc.Args).To(ContainElements(kc.Args), "every argument of the kustomize install")
	g.Expect(cc.Ports).To(Equal(kc.Ports))
	g.Expect(cc.LivenessProbe).To(Equal(kc.LivenessProbe))
	g.Expect(cc.ReadinessProbe).To(Equal(kc.ReadinessProbe))
	g.Expect(cc.SecurityContext).To(Equal(kc.SecurityContext))
	g.Expect(cc.Resources).To(Equal(kc.Resources))
	g.Expect(env(cc, "GUARDEDJOB_REDIS_URL")).To(Equal(env(kc, "GUARDEDJOB_REDIS_URL")))
	g.Expect(cc.Image).To(Equal("guardedjob-manager:"+chartMeta(t).AppVersion), "image.tag defaults to the chart's appVersion")

	// Service and PDB.
	cSvc, kSvc := get(t, chart, "Service", manager+"-metrics", &corev1.Service{}), get(t, kust, "Service", manager+"-metrics", &corev1.Service{})
	g.Expect(cSvc.Spec.Ports).To(Equal(kSvc.Spec.Ports))
	g.Expect(labels.SelectorFromSet(cSvc.Spec.Selector).Matches(labels.Set(cDep.Spec.Template.Labels))).To(BeTrue(), "metrics Service selects the manager")
	cPDB, kPDB := get(t, chart, "PodDisruptionBudget", manager, &policyv1.PodDisruptionBudget{}), get(t, kust, "PodDisruptionBudget", manager, &policyv1.PodDisruptionBudget{})
	g.Expect(cPDB.Spec.MinAvailable).To(Equal(kPDB.Spec.MinAvailable))
	g.Expect(cPDB.Spec.UnhealthyPodEvictionPolicy).To(Equal(kPDB.Spec.UnhealthyPodEvictionPolicy))
	g.Expect(labels.SelectorFromSet(cPDB.Spec.Selector.MatchLabels).Matches(labels.Set(cDep.Spec.Template.Labels))).To(BeTrue())

	// Everything namespaced lands in the release namespace.
	for _, o := range chart {
		switch o.GetKind() {
		case "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding":
		default:
			g.Expect(o.GetNamespace()).To(Equal(namespace), "%s %s", o.GetKind(), o.GetName())
		}
	}
}

// TestChartValues renders value sets a user would choose and checks what each changes.
func TestChartValues(t *testing.T) {
	t.Run("redis.url becomes a Secret the manager reads; the URL is in no argument or env value", func(t *testing.T) {
		g := NewWithT(t)
		const url = "rediss://guardedjob:s3cret@redis.example:6380/0"
		ms := mustRender(t, "redis.url="+url)
		secret := get(t, ms, "Secret", "guardedjob-redis", &corev1.Secret{})
		g.Expect(string(secret.Data["url"])).To(Equal(url))
		dep, c := managerContainer(t, ms)
		ref := env(c, "GUARDEDJOB_REDIS_URL")
		g.Expect(ref).NotTo(BeNil())
		g.Expect(ref.ValueFrom.SecretKeyRef.Name).To(Equal("guardedjob-redis"))
		g.Expect(ref.ValueFrom.SecretKeyRef.Key).To(Equal("url"))
		for _, o := range ms {
			if o.GetKind() == "Secret" {
				continue
			}
			b, _ := o.MarshalJSON()
			g.Expect(string(b)).NotTo(ContainSubstring("s3cret"), "%s %s holds the password", o.GetKind(), o.GetName())
		}
		g.Expect(dep.Spec.Template.Annotations).To(HaveKey("checksum/redis-secret"), "a new URL restarts the manager")
	})

	t.Run("readWholeSecret passes the Secret's name, not its URL", func(t *testing.T) {
		g := NewWithT(t)
		_, c := managerContainer(t, mustRender(t, "redis.existingSecret=store", "redis.readWholeSecret=true"))
		g.Expect(c.Args).To(ContainElement("--redis-secret=" + namespace + "/store"))
		g.Expect(env(c, "GUARDEDJOB_REDIS_URL")).To(BeNil(), "the manager takes exactly one of the two")
	})

	t.Run("the store is required, and only one way", func(t *testing.T) {
		g := NewWithT(t)
		_, err := render(t)
		g.Expect(err).To(MatchError(ContainSubstring("set redis.existingSecret (a Secret with key url) or redis.url")))
		_, err = render(t, "redis.existingSecret=a", "redis.url=redis://b:6379")
		g.Expect(err).To(MatchError(ContainSubstring("set only one of redis.existingSecret and redis.url")))
	})

	t.Run("cluster name and key grants reach the manager in its flag syntax", func(t *testing.T) {
		g := NewWithT(t)
		_, c := managerContainer(t, mustRender(t, "redis.existingSecret=s", "clusterName=prod-eu-1",
			"keyGrants.reports[0]=shared:reports:", "keyGrants.payments[0]=lock:settlement", "keyGrants.payments[1]=lock:payout"))
		g.Expect(env(c, "GUARDEDJOB_CLUSTER_NAME")).To(Equal(&corev1.EnvVar{Name: "GUARDEDJOB_CLUSTER_NAME", Value: "prod-eu-1"}))
		grants := env(c, "GUARDEDJOB_KEY_GRANTS")
		g.Expect(grants).NotTo(BeNil())
		parsed, err := keys.ParseGrants(grants.Value)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(parsed).To(Equal(keys.Grants{"payments": {"lock:payout", "lock:settlement"}, "reports": {"shared:reports:"}}))
	})

	t.Run("one replica without leader election has no PDB and no Lease role", func(t *testing.T) {
		g := NewWithT(t)
		ms := mustRender(t, "redis.existingSecret=s", "replicaCount=1", "leaderElection.enabled=false")
		dep, c := managerContainer(t, ms)
		g.Expect(*dep.Spec.Replicas).To(BeEquivalentTo(1))
		g.Expect(c.Args).NotTo(ContainElement(HavePrefix("--leader-elect")))
		g.Expect(ms.find("PodDisruptionBudget", manager)).To(BeNil(), "a PDB over one replica blocks every drain")
		g.Expect(ms.find("Role", "guardedjob-leader-election-role")).To(BeNil())
	})

	t.Run("leader election timings are passed on", func(t *testing.T) {
		g := NewWithT(t)
		_, c := managerContainer(t, mustRender(t, "redis.existingSecret=s", "leaderElection.leaseDuration=30s"))
		g.Expect(c.Args).To(ContainElements("--leader-elect", "--leader-elect-lease-duration=30s"))
	})

	t.Run("image by tag or digest", func(t *testing.T) {
		g := NewWithT(t)
		_, c := managerContainer(t, mustRender(t, "redis.existingSecret=s", "image.repository=registry.example/gj", "image.tag=1.2.3"))
		g.Expect(c.Image).To(Equal("registry.example/gj:1.2.3"))
		_, c = managerContainer(t, mustRender(t, "redis.existingSecret=s", "image.repository=registry.example/gj", "image.digest=sha256:abc"))
		g.Expect(c.Image).To(Equal("registry.example/gj@sha256:abc"))
	})

	t.Run("plain HTTP metrics only when asked, and the monitor follows", func(t *testing.T) {
		g := NewWithT(t)
		ms := mustRender(t, "redis.existingSecret=s", "metrics.secure=false", "metrics.serviceMonitor.enabled=true")
		_, c := managerContainer(t, ms)
		g.Expect(c.Args).To(ContainElement("--metrics-secure=false"))
		mon := ms.find("ServiceMonitor", manager+"-metrics")
		g.Expect(mon).NotTo(BeNil())
		eps, _, _ := unstructured.NestedSlice(mon.Object, "spec", "endpoints")
		g.Expect(eps).To(ConsistOf(HaveKeyWithValue("scheme", "http")))
		g.Expect(ms.find("ClusterRole", "guardedjob-metrics-reader")).To(BeNil())
	})

	t.Run("ServiceMonitor and PrometheusRule select what exists", func(t *testing.T) {
		g := NewWithT(t)
		ms := mustRender(t, "redis.existingSecret=s", "metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true")
		svc := get(t, ms, "Service", manager+"-metrics", &corev1.Service{})
		mon := ms.find("ServiceMonitor", manager+"-metrics")
		g.Expect(mon).NotTo(BeNil())
		sel, _, _ := unstructured.NestedStringMap(mon.Object, "spec", "selector", "matchLabels")
		g.Expect(labels.SelectorFromSet(sel).Matches(labels.Set(svc.Labels))).To(BeTrue(), "monitor %v, Service labels %v", sel, svc.Labels)
		eps, _, _ := unstructured.NestedSlice(mon.Object, "spec", "endpoints")
		g.Expect(eps).To(ConsistOf(And(HaveKeyWithValue("port", "metrics"), HaveKeyWithValue("scheme", "https"),
			HaveKeyWithValue("honorLabels", true))), "the per-GuardedJob series keep their namespace label")
		jobLabel, _, _ := unstructured.NestedString(mon.Object, "spec", "jobLabel")
		g.Expect(svc.Labels).To(HaveKeyWithValue(jobLabel, "guardedjob"), "the targets' job is guardedjob, whatever the release is called (GuardedJobManagerDown)")
		rule := ms.find("PrometheusRule", manager)
		g.Expect(rule).NotTo(BeNil())
		b, _ := rule.MarshalJSON()
		for _, metric := range []string{"guardedjob_object_runs_total", "guardedjob_failing_leases", `up{job=\"guardedjob\"}`} {
			g.Expect(string(b)).To(ContainSubstring(metric))
		}
		g.Expect(string(b)).To(ContainSubstring("{{ $value | humanize }}"), "Prometheus, not Helm, fills in the alert's values")
		g.Expect(string(b)).To(ContainSubstring("/blob/v"+chartMeta(t).AppVersion+"/docs/operations.md#"), "runbooks of the chart's release")
		g.Expect(string(b)).To(ContainSubstring("by (cluster, namespace, name)"))
		b, _ = mustRender(t, "redis.existingSecret=s", "metrics.prometheusRule.enabled=true", "metrics.clusterLabel=region").
			find("PrometheusRule", manager).MarshalJSON()
		g.Expect(string(b)).To(And(ContainSubstring("by (region, namespace, name)"), Not(ContainSubstring("by (cluster"))), "metrics.clusterLabel renames the cluster label")
		g.Expect(mustRender(t, "redis.existingSecret=s").find("ServiceMonitor", manager+"-metrics")).To(BeNil(), "off by default: it needs the Prometheus Operator's CRDs")
	})

	t.Run("the Grafana dashboard is a ConfigMap for the sidecar, when asked for", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(mustRender(t, "redis.existingSecret=s").find("ConfigMap", "guardedjob-dashboard")).To(BeNil(), "off by default")
		cm := get(t, mustRender(t, "redis.existingSecret=s", "metrics.grafanaDashboard.enabled=true"), "ConfigMap", "guardedjob-dashboard", &corev1.ConfigMap{})
		g.Expect(cm.Labels).To(HaveKeyWithValue("grafana_dashboard", "1"))
		g.Expect(cm.Namespace).To(Equal(namespace))
		var dashboard struct {
			UID    string `json:"uid"`
			Panels []struct {
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		g.Expect(json.Unmarshal([]byte(cm.Data["guardedjob.json"]), &dashboard)).To(Succeed())
		g.Expect(dashboard.UID).To(Equal("guardedjob"))
		g.Expect(dashboard.Panels).NotTo(BeEmpty())

		cm = get(t, mustRender(t, "redis.existingSecret=s", "metrics.grafanaDashboard.enabled=true", "metrics.grafanaDashboard.label=dashboards",
			"metrics.grafanaDashboard.labelValue=guardedjob", "metrics.grafanaDashboard.namespace=monitoring",
			"metrics.grafanaDashboard.annotations.grafana_folder=Batch", "metrics.clusterLabel=region"), "ConfigMap", "guardedjob-dashboard", &corev1.ConfigMap{})
		g.Expect(cm.Labels).To(HaveKeyWithValue("dashboards", "guardedjob"))
		g.Expect(cm.Labels).NotTo(HaveKey("grafana_dashboard"))
		g.Expect(cm.Namespace).To(Equal("monitoring"), "where Grafana's sidecar looks")
		g.Expect(cm.Annotations).To(HaveKeyWithValue("grafana_folder", "Batch"))
		g.Expect(cm.Data["guardedjob.json"]).To(And(ContainSubstring(`region=~\"$cluster\"`), Not(ContainSubstring(`cluster=~`))),
			"the queries use metrics.clusterLabel, and the variable $cluster")
	})

	t.Run("pod security context, resources and extra args are the user's", func(t *testing.T) {
		g := NewWithT(t)
		dep, c := managerContainer(t, mustRender(t, "redis.existingSecret=s", "podSecurityContext.runAsUser=1000",
			"resources.limits.memory=512Mi", "extraArgs[0]=--zap-log-level=debug"))
		g.Expect(*dep.Spec.Template.Spec.SecurityContext.RunAsUser).To(BeEquivalentTo(1000))
		g.Expect(c.Resources.Limits.Memory().String()).To(Equal("512Mi"))
		g.Expect(c.Args).To(ContainElement("--zap-log-level=debug"))
	})

	t.Run("the API client limit, reconcile concurrency and stop rate become flags only when set", func(t *testing.T) {
		g := NewWithT(t)
		_, c := managerContainer(t, mustRender(t, "redis.existingSecret=s"))
		for _, a := range c.Args {
			g.Expect(a).NotTo(Or(HavePrefix("--kube-api-"), HavePrefix("--max-concurrent-reconciles"), HavePrefix("--stop-rate")), "the manager's defaults apply")
		}
		_, c = managerContainer(t, mustRender(t, "redis.existingSecret=s", "kubeAPI.qps=200", "kubeAPI.burst=400", "maxConcurrentReconciles=8", "stopRate=120"))
		g.Expect(c.Args).To(ContainElements("--kube-api-qps=200", "--kube-api-burst=400", "--max-concurrent-reconciles=8", "--stop-rate=120"))
	})

	t.Run("sharding.shards adds a manager Deployment per shard, each with its own selector and leader election", func(t *testing.T) {
		g := NewWithT(t)
		_, c := managerContainer(t, mustRender(t, "redis.existingSecret=s"))
		for _, a := range c.Args {
			g.Expect(a).NotTo(Or(HavePrefix("--watch-label-selector"), HavePrefix("--leader-election-id")), "without shards the manager serves every GuardedJob")
		}

		ms := mustRender(t, "redis.existingSecret=s", "sharding.shards={payments,reports}")
		deps := map[string]*appsv1.Deployment{}
		for _, name := range []string{manager, manager + "-shard-payments", manager + "-shard-reports"} {
			deps[name] = get(t, ms, "Deployment", name, &appsv1.Deployment{})
		}
		args := func(name string) []string { return deps[name].Spec.Template.Spec.Containers[0].Args }
		g.Expect(args(manager)).To(ContainElement("--watch-label-selector=!sharding.guardedjob.dev/key"), "the default shard: unlabelled GuardedJobs")
		g.Expect(args(manager)).NotTo(ContainElement(HavePrefix("--leader-election-id")), "the default shard keeps the election it had before shards were added")
		g.Expect(args(manager + "-shard-payments")).To(ContainElements(
			"--watch-label-selector=sharding.guardedjob.dev/key=payments", "--leader-election-id=guardedjob-manager-shard-payments.batch.guardedjob.dev"))
		g.Expect(args(manager + "-shard-reports")).To(ContainElements(
			"--watch-label-selector=sharding.guardedjob.dev/key=reports", "--leader-election-id=guardedjob-manager-shard-reports.batch.guardedjob.dev"))
		svc := get(t, ms, "Service", manager+"-metrics", &corev1.Service{})
		for name, dep := range deps {
			g.Expect(*dep.Spec.Replicas).To(Equal(int32(2)), name)
			g.Expect(dep.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--leader-elect"), name)
			g.Expect(labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels))).To(BeTrue(), "the metrics Service selects %s", name)
			pdb := get(t, ms, "PodDisruptionBudget", name, &policyv1.PodDisruptionBudget{})
			for other, o := range deps {
				own := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels).Matches(labels.Set(o.Spec.Template.Labels))
				budget := labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(labels.Set(o.Spec.Template.Labels))
				g.Expect(own).To(Equal(name == other), "Deployment %s selects the Pods of %s", name, other)
				g.Expect(budget).To(Equal(name == other), "PodDisruptionBudget %s selects the Pods of %s", name, other)
			}
		}
		_, err := render(t, "redis.existingSecret=s", "sharding.shards={Payments}")
		g.Expect(err).To(MatchError(ContainSubstring("at '/sharding/shards/0': 'Payments' does not match pattern")))
		_, err = render(t, "redis.existingSecret=s", "sharding.shards={a,a}")
		g.Expect(err).To(MatchError(ContainSubstring("/sharding/shards")))
	})

	t.Run("a misspelt or mistyped value is refused, at any depth", func(t *testing.T) {
		g := NewWithT(t)
		for set, want := range map[string]string{
			"redis.existingsecret=s":             "at '/redis': additional properties 'existingsecret' not allowed",
			"replicacount=3":                     "at '': additional properties 'replicacount' not allowed",
			"metrics.serviceMonitor.enable=true": "at '/metrics/serviceMonitor': additional properties 'enable' not allowed",
			"serviceAccount.nmae=x":              "at '/serviceAccount': additional properties 'nmae' not allowed",
			"replicaCount=0":                     "at '/replicaCount': minimum: got 0, want 1",
			"leaderElection.leaseDuration=15":    "at '/leaderElection/leaseDuration': got number, want string",
			"image.pullPolicy=Sometimes":         "at '/image/pullPolicy': value must be one of",
			"crds.enabled=yes":                   "at '/crds/enabled': got string, want boolean",
			"metrics.clusterLabel=k8s-cluster":   "at '/metrics/clusterLabel': 'k8s-cluster' does not match pattern",
			"metrics.grafanaDashboard.lable=x":   "at '/metrics/grafanaDashboard': additional properties 'lable' not allowed",
		} {
			_, err := render(t, "redis.existingSecret=s", set)
			g.Expect(err).To(MatchError(ContainSubstring(want)), set)
		}
	})

	t.Run("more than one replica needs leader election", func(t *testing.T) {
		g := NewWithT(t)
		_, err := render(t, "redis.existingSecret=s", "leaderElection.enabled=false")
		g.Expect(err).To(MatchError(ContainSubstring("replicaCount is 2 with leaderElection.enabled false: every replica would reconcile the same GuardedJobs at once")))
		_, err = render(t, "redis.existingSecret=s", "leaderElection.enabled=false", "replicaCount=1")
		g.Expect(err).NotTo(HaveOccurred())
	})

	t.Run("a ServiceAccount of the user's is bound and run as, and not created", func(t *testing.T) {
		g := NewWithT(t)
		ms := mustRender(t, "redis.existingSecret=s", "serviceAccount.create=false", "serviceAccount.name=ops-manager")
		g.Expect(ms.find("ServiceAccount", manager)).To(BeNil())
		g.Expect(ms.find("ServiceAccount", "ops-manager")).To(BeNil())
		dep, _ := managerContainer(t, ms)
		g.Expect(dep.Spec.Template.Spec.ServiceAccountName).To(Equal("ops-manager"))
		for _, b := range []struct{ kind, name string }{{"ClusterRoleBinding", "guardedjob-manager-rolebinding"}, {"RoleBinding", "guardedjob-leader-election-rolebinding"}} {
			o := ms.find(b.kind, b.name)
			g.Expect(o).NotTo(BeNil(), b.name)
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			g.Expect(subjects).To(ConsistOf(And(HaveKeyWithValue("name", "ops-manager"), HaveKeyWithValue("namespace", namespace))), b.name)
		}
		_, err := render(t, "redis.existingSecret=s", "serviceAccount.create=false")
		g.Expect(err).To(MatchError(ContainSubstring("serviceAccount.create is false: set serviceAccount.name")))

		ms = mustRender(t, "redis.existingSecret=s", "serviceAccount.name=custom")
		get(t, ms, "ServiceAccount", "custom", &corev1.ServiceAccount{})
		dep, _ = managerContainer(t, ms)
		g.Expect(dep.Spec.Template.Spec.ServiceAccountName).To(Equal("custom"))
	})

	t.Run("fullnameOverride names every object", func(t *testing.T) {
		g := NewWithT(t)
		ms := mustRender(t, "redis.url=redis://r:6379", "fullnameOverride=gj")
		dep := get(t, ms, "Deployment", "gj-manager", &appsv1.Deployment{})
		g.Expect(dep.Spec.Template.Spec.ServiceAccountName).To(Equal("gj-manager"))
		get(t, ms, "ClusterRole", "gj-manager-role", &rbacv1.ClusterRole{})
		get(t, ms, "Secret", "gj-redis", &corev1.Secret{})
		get(t, ms, "Service", "gj-manager-metrics", &corev1.Service{})
		for _, o := range ms {
			if o.GetKind() != "CustomResourceDefinition" {
				g.Expect(o.GetName()).To(HavePrefix("gj-"), "%s %s", o.GetKind(), o.GetName())
			}
		}
	})

	t.Run("the CRD is the release's and kept on uninstall, unless told otherwise", func(t *testing.T) {
		g := NewWithT(t)
		crd := mustRender(t, "redis.existingSecret=s").find("CustomResourceDefinition", crdName)
		g.Expect(crd).NotTo(BeNil())
		g.Expect(crd.GetAnnotations()).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))
		g.Expect(crd.GetAnnotations()).To(HaveKey("controller-gen.kubebuilder.io/version"), "the generated annotations stay")
		g.Expect(crd.GetLabels()).To(HaveKeyWithValue("app.kubernetes.io/instance", release))
		crd = mustRender(t, "redis.existingSecret=s", "crds.keep=false").find("CustomResourceDefinition", crdName)
		g.Expect(crd).NotTo(BeNil())
		g.Expect(crd.GetAnnotations()).NotTo(HaveKey("helm.sh/resource-policy"))
		g.Expect(mustRender(t, "redis.existingSecret=s", "crds.enabled=false").find("CustomResourceDefinition", crdName)).To(BeNil())
	})

	t.Run("a metrics certificate is served, and the ServiceMonitor verifies it", func(t *testing.T) {
		// certFrom returns the Secret the manager's --metrics-cert-path is mounted from.
		certFrom := func(g Gomega, ms manifests) string {
			dep, c := managerContainer(t, ms)
			var dir string
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--metrics-cert-path="); ok {
					dir = v
				}
			}
			if dir == "" {
				return ""
			}
			i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir })
			g.Expect(i).To(BeNumerically(">=", 0), "nothing mounted at %s", dir)
			g.Expect(c.VolumeMounts[i].ReadOnly).To(BeTrue())
			v := slices.IndexFunc(dep.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[i].Name })
			g.Expect(v).To(BeNumerically(">=", 0))
			g.Expect(dep.Spec.Template.Spec.Volumes[v].Secret).NotTo(BeNil())
			return dep.Spec.Template.Spec.Volumes[v].Secret.SecretName
		}
		tlsConfig := func(ms manifests) map[string]any {
			mon := ms.find("ServiceMonitor", manager+"-metrics")
			NewWithT(t).Expect(mon).NotTo(BeNil())
			eps, _, _ := unstructured.NestedSlice(mon.Object, "spec", "endpoints")
			c, _, _ := unstructured.NestedMap(eps[0].(map[string]any), "tlsConfig")
			return c
		}
		const serviceDNS = manager + "-metrics." + namespace + ".svc"

		t.Run("issued by cert-manager", func(t *testing.T) {
			g := NewWithT(t)
			ms := mustRender(t, "redis.existingSecret=s", "metrics.tls.certManager.enabled=true", "metrics.serviceMonitor.enabled=true")
			secret := certFrom(g, ms)
			g.Expect(secret).NotTo(BeEmpty(), "the manager serves the issued certificate")
			cert := ms.find("Certificate", "guardedjob-metrics-cert")
			g.Expect(cert).NotTo(BeNil())
			g.Expect(cert.Object["spec"]).To(And(HaveKeyWithValue("secretName", secret),
				HaveKeyWithValue("dnsNames", ContainElement(serviceDNS))))
			issuer := ms.find("Issuer", "guardedjob-selfsigned-issuer")
			g.Expect(issuer).NotTo(BeNil())
			g.Expect(issuer.Object["spec"]).To(HaveKey("selfSigned"))
			g.Expect(cert.Object["spec"]).To(HaveKeyWithValue("issuerRef", map[string]any{"name": "guardedjob-selfsigned-issuer", "kind": "Issuer"}))
			g.Expect(tlsConfig(ms)).To(Equal(map[string]any{
				"serverName": serviceDNS,
				"ca":         map[string]any{"secret": map[string]any{"name": secret, "key": "ca.crt"}},
			}), "verified against the Secret's CA, no insecureSkipVerify")
		})

		t.Run("issued by the user's issuer", func(t *testing.T) {
			g := NewWithT(t)
			ms := mustRender(t, "redis.existingSecret=s", "metrics.tls.certManager.enabled=true",
				"metrics.tls.certManager.issuerRef.name=corp-ca", "metrics.tls.certManager.issuerRef.kind=ClusterIssuer")
			g.Expect(ms.find("Issuer", "guardedjob-selfsigned-issuer")).To(BeNil())
			g.Expect(ms.find("Certificate", "guardedjob-metrics-cert").Object["spec"]).To(
				HaveKeyWithValue("issuerRef", map[string]any{"name": "corp-ca", "kind": "ClusterIssuer"}))
		})

		t.Run("from the user's Secret", func(t *testing.T) {
			g := NewWithT(t)
			ms := mustRender(t, "redis.existingSecret=s", "metrics.tls.existingSecret=metrics-tls", "metrics.serviceMonitor.enabled=true")
			g.Expect(certFrom(g, ms)).To(Equal("metrics-tls"))
			g.Expect(ms.find("Certificate", "guardedjob-metrics-cert")).To(BeNil())
			g.Expect(tlsConfig(ms)).To(HaveKeyWithValue("ca", map[string]any{"secret": map[string]any{"name": "metrics-tls", "key": "ca.crt"}}))
			g.Expect(tlsConfig(ms)).NotTo(HaveKey("insecureSkipVerify"))
		})

		t.Run("none: a self-signed certificate the ServiceMonitor cannot verify", func(t *testing.T) {
			g := NewWithT(t)
			ms := mustRender(t, "redis.existingSecret=s", "metrics.serviceMonitor.enabled=true")
			g.Expect(certFrom(g, ms)).To(BeEmpty())
			g.Expect(tlsConfig(ms)).To(Equal(map[string]any{"insecureSkipVerify": true}))
		})

		t.Run("mistakes are refused", func(t *testing.T) {
			g := NewWithT(t)
			_, err := render(t, "redis.existingSecret=s", "metrics.tls.existingSecret=x", "metrics.tls.certManager.enabled=true")
			g.Expect(err).To(MatchError(ContainSubstring("set only one of metrics.tls.existingSecret and metrics.tls.certManager.enabled")))
			_, err = render(t, "redis.existingSecret=s", "metrics.tls.existingSecret=x", "metrics.secure=false")
			g.Expect(err).To(MatchError(ContainSubstring("metrics.tls gives a certificate, but metrics.secure is false")))
			_, err = render(t, "redis.existingSecret=s", "metrics.tls.certManager.issuerRef.kind=Vault")
			g.Expect(err).To(MatchError(ContainSubstring("at '/metrics/tls/certManager/issuerRef/kind'")))
		})
	})

	t.Run("another release name prefixes every object", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run(t, bins.Helm(t), "template", "ops", "charts/guardedjob", "--namespace", "ops", "--kube-version", kubeVersion, "--set", "redis.url=redis://r:6379")
		g.Expect(err).NotTo(HaveOccurred())
		ms := decode(t, out)
		crb := get(t, ms, "ClusterRoleBinding", "ops-guardedjob-manager-rolebinding", &rbacv1.ClusterRoleBinding{})
		g.Expect(crb.RoleRef.Name).To(Equal("ops-guardedjob-manager-role"))
		g.Expect(crb.Subjects).To(ConsistOf(HaveField("Namespace", "ops")))
		dep := get(t, ms, "Deployment", "ops-guardedjob-manager", &appsv1.Deployment{})
		g.Expect(dep.Spec.Template.Spec.ServiceAccountName).To(Equal("ops-guardedjob-manager"))
		get(t, ms, "Secret", "ops-guardedjob-redis", &corev1.Secret{})
		g.Expect(env(dep.Spec.Template.Spec.Containers[0], "GUARDEDJOB_REDIS_URL").ValueFrom.SecretKeyRef.Name).To(Equal("ops-guardedjob-redis"))
	})
}

// TestChartInstallsOnARealAPIServer installs, upgrades and uninstalls the chart with
// helm against a real kube-apiserver, which validates every object it renders, and
// checks that uninstalling keeps the CRD (and so every GuardedJob): crds.keep.
func TestChartInstallsOnARealAPIServer(t *testing.T) {
	g := NewWithT(t)
	k8s, kubeconfig := apiServer(t)
	helm := helmRunner(t, kubeconfig)
	ctx := context.Background()

	// A misspelt value is refused before anything is created.
	out, err := helm("install", release, "charts/guardedjob", "-n", namespace, "--create-namespace", "--set", "redis.existingsecret=guardedjob-redis")
	g.Expect(err).To(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring("additional properties 'existingsecret' not allowed"))
	list, err := helm("list", "-A", "-q")
	g.Expect(err).NotTo(HaveOccurred(), list)
	g.Expect(strings.TrimSpace(list)).To(BeEmpty(), "no release was recorded")

	out, err = helm("install", release, "charts/guardedjob", "-n", namespace, "--create-namespace",
		"--set", "redis.url=redis://127.0.0.1:6379", "--set", "clusterName=test", "--set", "keyGrants.payments[0]=lock:settlement")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring("STATUS: deployed"))

	dep := &appsv1.Deployment{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: manager}, dep)).To(Succeed())
	g.Expect(*dep.Spec.Replicas).To(BeEquivalentTo(2))
	role := &rbacv1.ClusterRole{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "guardedjob-manager-role"}, role)).To(Succeed())
	g.Expect(role.Rules).To(Equal(get(t, kustomize(t), "ClusterRole", "guardedjob-manager-role", &rbacv1.ClusterRole{}).Rules))
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "guardedjob-redis"}, &corev1.Secret{})).To(Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: manager}, &policyv1.PodDisruptionBudget{})).To(Succeed())
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
	g.Expect(crd.Annotations).To(HaveKeyWithValue("meta.helm.sh/release-name", release), "the CRD is part of the release")
	g.Expect(crd.Annotations).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))

	out, err = helm("upgrade", release, "charts/guardedjob", "-n", namespace, "--reset-then-reuse-values", "--set", "replicaCount=3")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: manager}, dep)).To(Succeed())
	g.Expect(*dep.Spec.Replicas).To(BeEquivalentTo(3))
	g.Expect(dep.Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "GUARDEDJOB_CLUSTER_NAME", Value: "test"}), "--reset-then-reuse-values keeps the values of the install")

	out, err = helm("uninstall", release, "-n", namespace)
	g.Expect(err).NotTo(HaveOccurred(), out)
	err = k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: manager}, dep)
	g.Expect(err == nil && dep.DeletionTimestamp != nil || apierrors.IsNotFound(err)).To(BeTrue(), "the manager is removed: %v", err)
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed(), "crds.keep keeps the CRD, so GuardedJobs survive an uninstall")
	g.Expect(crd.DeletionTimestamp).To(BeNil())
}

// helmRunner runs helm against kubeconfig from the repository root, with its state
// in a directory of the test's, not in the user's home.
func helmRunner(t *testing.T, kubeconfig string) func(args ...string) (string, error) {
	helm := bins.Helm(t)
	home := t.TempDir()
	return func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(helm, append(args, "--kubeconfig", kubeconfig)...)
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

// apiServer starts a real API server for one test and returns a client and a
// kubeconfig file for an administrator of it.
func apiServer(t *testing.T) (client.Client, string) {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds kube-apiserver and etcd")
	}
	g := NewWithT(t)
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kc, err := user.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, kc, 0o600)).To(Succeed())
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	return k8s, kubeconfig
}

// kubectl runs kubectl against kubeconfig from the repository root.
func kubectl(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bins.Kubectl(t), append(args, "--kubeconfig", kubeconfig)...)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestChartCRDsApplyClientSide applies the chart's CRDs, as helm template renders
// them, the way a GitOps tool's default sync does: a client-side kubectl apply,
// which keeps a copy of the object in its last-applied annotation (at most 256
// KiB). Applied again, nothing changes.
func TestChartCRDsApplyClientSide(t *testing.T) {
	g := NewWithT(t)
	_, kubeconfig := apiServer(t)
	out, err := run(t, bins.Helm(t), "template", release, "charts/guardedjob", "--namespace", namespace, "--kube-version", kubeVersion,
		"--set", "redis.existingSecret=s", "--show-only", "templates/crds.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(decode(t, out).kinds()).To(ConsistOf("CustomResourceDefinition/"+crdName,
		"CustomResourceDefinition/guardedjobruns.batch.guardedjob.dev", "CustomResourceDefinition/guardedjobbackfills.batch.guardedjob.dev",
		"CustomResourceDefinition/guardedjobinspects.batch.guardedjob.dev", "CustomResourceDefinition/guardedjobunlocks.batch.guardedjob.dev"))
	crds := filepath.Join(t.TempDir(), "crds.yaml")
	g.Expect(os.WriteFile(crds, out, 0o644)).To(Succeed())
	applied, err := kubectl(t, kubeconfig, "apply", "-f", crds)
	g.Expect(err).NotTo(HaveOccurred(), applied)
	lines := func(verb string) string {
		out := ""
		// In the order of their files' names (the chart globs files/crds/).
		for _, name := range []string{"guardedjobbackfills.batch.guardedjob.dev", "guardedjobinspects.batch.guardedjob.dev", "guardedjobruns.batch.guardedjob.dev", crdName, "guardedjobunlocks.batch.guardedjob.dev"} {
			out += "customresourcedefinition.apiextensions.k8s.io/" + name + " " + verb + "\n"
		}
		return out
	}
	g.Expect(applied).To(Equal(lines("created")))
	applied, err = kubectl(t, kubeconfig, "apply", "-f", crds)
	g.Expect(err).NotTo(HaveOccurred(), applied)
	g.Expect(applied).To(Equal(lines("unchanged")))
}

// chartMeta reads charts/guardedjob/Chart.yaml.
func chartMeta(t *testing.T) struct{ Version, AppVersion string } {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "charts", "guardedjob", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &meta); err != nil {
		t.Fatal(err)
	}
	return struct{ Version, AppVersion string }{meta.Version, meta.AppVersion}
}

// previousChart is chart 0.1.0 as `helm package` made it from the commit before the
// CRD became a template. It is kept packaged, not rendered from git history at test
// time, because CI's checkout may be shallow and because the package is exactly what
// a user of that version installed.
const previousChart = "test/chart/testdata/guardedjob-0.1.0.tgz"

// docCommands returns the shell commands in docs/upgrade.md's sh blocks, with
// continued lines joined and comments and extra spaces dropped.
func docCommands(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "upgrade.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	inBlock, cont := false, ""
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inBlock = true
		case strings.HasPrefix(line, "```"):
			inBlock = false
		case inBlock:
			if i := strings.Index(line, " #"); i >= 0 {
				line = line[:i]
			}
			if strings.HasSuffix(line, "\\") {
				cont += strings.TrimSuffix(line, "\\") + " "
				continue
			}
			if cmd := strings.Join(strings.Fields(cont+line), " "); cmd != "" {
				cmds = append(cmds, cmd)
			}
			cont = ""
		}
	}
	return cmds
}

// documented returns the fields of a command docs/upgrade.md gives, failing if the
// docs do not give it: the commands the upgrade test runs are the documented ones.
func documented(t *testing.T, cmd string) []string {
	t.Helper()
	if !slices.Contains(docCommands(t), cmd) {
		t.Fatalf("docs/upgrade.md does not give the command %q", cmd)
	}
	return strings.Fields(cmd)
}

// releaseChart is the chart (name-version) of the deployed release, as helm list
// says.
func releaseChart(t *testing.T, helm func(...string) (string, error)) string {
	t.Helper()
	out, err := helm("list", "-n", namespace, "-o", "json")
	if err != nil {
		t.Fatalf("helm list: %v: %s", err, out)
	}
	var releases []struct{ Name, Chart, Status string }
	if err := json.Unmarshal([]byte(out), &releases); err != nil {
		t.Fatalf("helm list: %v: %s", err, out)
	}
	if len(releases) != 1 || releases[0].Name != release || releases[0].Status != "deployed" {
		t.Fatalf("helm list: want the release %s deployed, got %+v", release, releases)
	}
	return releases[0].Chart
}

// A GuardedJob that must survive every upgrade and rollback.
func sampleGuardedJob(t *testing.T, k8s client.Client) *unstructured.Unstructured {
	t.Helper()
	gj := &unstructured.Unstructured{}
	gj.SetAPIVersion("batch.guardedjob.dev/v1alpha1")
	gj.SetKind("GuardedJob")
	gj.SetNamespace("default")
	gj.SetName("daily")
	gj.Object["spec"] = map[string]any{
		"schedule": "5 0 * * *",
		"lock":     map[string]any{"key": "default:daily"},
		"jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"restartPolicy": "Never",
			"containers":    []any{map[string]any{"name": "main", "image": "busybox:1.36"}},
		}}}},
	}
	ctx := context.Background()
	NewWithT(t).Eventually(func() error { return k8s.Create(ctx, gj) }).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(),
		"the CRD is established")
	return gj
}

// TestChartUpgradesFromThePreviousVersion installs chart 0.1.0 (the CRD in crds/)
// and upgrades it to this chart with the commands docs/upgrade.md gives, both ways
// it offers: the release takes the CRD over, or the user keeps managing it. A
// GuardedJob made under 0.1.0 survives each upgrade and rollback.
func TestChartUpgradesFromThePreviousVersion(t *testing.T) {
	installPrevious := func(t *testing.T) (client.Client, func(...string) (string, error), func(...string) (string, error)) {
		g := NewWithT(t)
		k8s, kubeconfig := apiServer(t)
		helm := helmRunner(t, kubeconfig)
		out, err := helm("install", release, previousChart, "-n", namespace, "--create-namespace",
			"--set", "redis.existingSecret=guardedjob-redis", "--set", "clusterName=test")
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(releaseChart(t, helm)).To(Equal("guardedjob-0.1.0"))
		sampleGuardedJob(t, k8s)
		return k8s, helm, func(args ...string) (string, error) { return kubectl(t, kubeconfig, args...) }
	}
	ctx := context.Background()
	stillThere := func(g Gomega, k8s client.Client) {
		gj := &unstructured.Unstructured{}
		gj.SetAPIVersion("batch.guardedjob.dev/v1alpha1")
		gj.SetKind("GuardedJob")
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "daily"}, gj)).To(Succeed(), "the GuardedJob made under chart 0.1.0 is still there")
		g.Expect(gj.GetDeletionTimestamp()).To(BeNil())
	}
	deployment := func(g Gomega, k8s client.Client) *appsv1.Deployment {
		dep := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: manager}, dep)).To(Succeed())
		return dep
	}

	t.Run("the release takes the CRD over", func(t *testing.T) {
		g := NewWithT(t)
		k8s, helm, _ := installPrevious(t)

		// Why the docs say what they say: --reuse-values keeps 0.1.0's defaults, which
		// lack the values this chart adds (serviceAccount.create: true, crds.*);
		// without --take-ownership Helm will not adopt the CRD.
		out, err := helm("upgrade", release, "charts/guardedjob", "-n", namespace, "--reuse-values", "--take-ownership")
		g.Expect(err).To(HaveOccurred(), out)
		g.Expect(out).To(ContainSubstring("serviceAccount.create is false"))
		out, err = helm("upgrade", release, "charts/guardedjob", "-n", namespace, "--reset-then-reuse-values")
		g.Expect(err).To(HaveOccurred(), out)
		g.Expect(out).To(ContainSubstring("exists and cannot be imported into the current release"))

		cmd := documented(t, "helm upgrade guardedjob charts/guardedjob -n guardedjob-system --reset-then-reuse-values --take-ownership")
		out, err = helm(cmd[1:]...)
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(releaseChart(t, helm)).To(Equal("guardedjob-" + chartMeta(t).Version))
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
		g.Expect(crd.Annotations).To(HaveKeyWithValue("meta.helm.sh/release-name", release), "the CRD is now the release's")
		g.Expect(crd.Annotations).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))
		g.Expect(crd.Labels).To(HaveKeyWithValue("helm.sh/chart", "guardedjob-"+chartMeta(t).Version))
		crd.ManagedFields = nil
		stored, err := json.Marshal(crd)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(len(stored)).To(BeNumerically("<", 200*1024), "the CRD is this chart's, not 0.1.0's with the Job API's descriptions left in")
		dep := deployment(g, k8s)
		g.Expect(dep.Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "GUARDEDJOB_CLUSTER_NAME", Value: "test"}), "the install's values are kept")
		stillThere(g, k8s)

		// The next upgrade is the plain documented one.
		cmd = documented(t, "helm upgrade guardedjob charts/guardedjob -n guardedjob-system --reset-then-reuse-values --set image.tag=0.2.0")
		out, err = helm(cmd[1:]...)
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(deployment(g, k8s).Spec.Template.Spec.Containers[0].Image).To(Equal("guardedjob-manager:0.2.0"))

		// Rolling back to 0.1.0, whose chart has no CRD template, keeps the CRD.
		out, err = helm("rollback", release, "1", "-n", namespace)
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
		g.Expect(crd.DeletionTimestamp).To(BeNil(), "crds.keep: a rollback does not delete the CRD")
		stillThere(g, k8s)
	})

	t.Run("the user keeps managing the CRD", func(t *testing.T) {
		g := NewWithT(t)
		k8s, helm, kubectl := installPrevious(t)

		// Helm's field manager owns the CRD's fields: a plain server-side apply of a
		// changed CRD conflicts.
		out, err := kubectl("apply", "--server-side", "-f", "charts/guardedjob/files/crds/")
		g.Expect(err).To(HaveOccurred(), out)
		g.Expect(out).To(ContainSubstring("conflict"))
		g.Expect(out).To(ContainSubstring(".spec.versions"))

		cmd := documented(t, "kubectl apply --server-side --force-conflicts -f charts/guardedjob/files/crds/")
		out, err = kubectl(cmd[1:]...)
		g.Expect(err).NotTo(HaveOccurred(), out)
		cmd = documented(t, "helm upgrade guardedjob charts/guardedjob -n guardedjob-system --reset-then-reuse-values --set crds.enabled=false")
		out, err = helm(cmd[1:]...)
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(releaseChart(t, helm)).To(Equal("guardedjob-" + chartMeta(t).Version))

		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
		g.Expect(crd.Annotations).NotTo(HaveKey("meta.helm.sh/release-name"), "the CRD is not the release's")
		var applied bool
		for _, f := range crd.ManagedFields {
			applied = applied || (f.Manager == "kubectl" && f.Operation == "Apply")
		}
		g.Expect(applied).To(BeTrue(), "kubectl's server-side apply owns the CRD's fields now")
		crd.ManagedFields = nil
		stored, err := json.Marshal(crd)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(len(stored)).To(BeNumerically("<", 200*1024), "the CRD is the applied one, not 0.1.0's with the Job API's descriptions left in")
		deployment(g, k8s)
		stillThere(g, k8s)
	})
}
