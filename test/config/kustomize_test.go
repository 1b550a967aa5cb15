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

// Package config_test checks what an SRE deploys: every kustomize tree under config/
// renders, the default tree is the production shape the design asks for (two replicas
// with leader election, non-root, read-only root filesystem, no CPU limit, probes,
// credentials only from a Secret, RBAC bound to the manager's ServiceAccount), and the
// Dockerfile's build command builds the manager from exactly the files the image build
// is given. No Docker engine runs here, so the image build itself is not run.
package config_test

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/guardedjob/guardedjob/internal/testutil/bins"
)

const (
	systemNamespace = "guardedjob-system"
	managerName     = "guardedjob-manager"
	// The image the Deployment names; `make deploy` and `make build-installer` set
	// it through kustomize's images transformer, which matches this name.
	devImage = "guardedjob-manager:dev"
	// The build command of the Dockerfile (and of `make build`).
	buildCommand = `CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o manager ./cmd/manager`
	managerRole  = "guardedjob-manager-role"
	metricsPort  = 8443
)

// repoRoot is the directory holding go.mod, found upward from the test's directory.
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

// kustomize renders config/<dir> with `kubectl kustomize`, run from the repository
// root as a user would.
func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	cmd := exec.Command(bins.Kubectl(t), "kustomize", filepath.Join("config", dir))
	cmd.Dir = repoRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/%s: %v\n%s", dir, err, stderr.String())
	}
	return out
}

// decode splits multi-document YAML into objects.
func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode rendered YAML: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

type manifests []*unstructured.Unstructured

func (ms manifests) of(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range ms {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// one finds the only object of a kind and name and converts it to the typed object.
func one[T any](t *testing.T, ms manifests, kind, name string, into *T) *T {
	t.Helper()
	var found *unstructured.Unstructured
	for _, o := range ms.of(kind) {
		if o.GetName() == name {
			if found != nil {
				t.Fatalf("two %s objects named %q", kind, name)
			}
			found = o
		}
	}
	if found == nil {
		t.Fatalf("no %s named %q in the rendered manifests", kind, name)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(found.Object, into); err != nil {
		t.Fatalf("convert %s %s: %v", kind, name, err)
	}
	return into
}

// TestKustomizeTreesRender renders every tree a user may apply.
func TestKustomizeTreesRender(t *testing.T) {
	for _, dir := range []string{"default", "crd", "rbac", "manager", "prometheus", "grafana", "samples"} {
		t.Run(dir, func(t *testing.T) {
			objs := decode(t, kustomize(t, dir))
			if len(objs) == 0 {
				t.Fatalf("config/%s renders no objects", dir)
			}
			for _, o := range objs {
				if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
					t.Errorf("config/%s: object without apiVersion, kind or name: %v", dir, o.Object)
				}
			}
		})
	}
}

// TestDefaultDeployment checks the manager Deployment against the design: the shape
// an SRE expects in production.
func TestDefaultDeployment(t *testing.T) {
	raw := kustomize(t, "default")
	ms := manifests(decode(t, raw))

	dep := one(t, ms, "Deployment", managerName, &appsv1.Deployment{})
	if dep.Namespace != systemNamespace {
		t.Errorf("Deployment namespace %q, want %q", dep.Namespace, systemNamespace)
	}
	if dep.Spec.Replicas == nil {
		t.Error("replicas unset, want 2 (leader election with a standby)")
	} else if *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2 (leader election with a standby)", *dep.Spec.Replicas)
	}
	pod := dep.Spec.Template.Spec
	sel, err := labels.ValidatedSelectorFromSet(dep.Spec.Selector.MatchLabels)
	if err != nil || len(dep.Spec.Selector.MatchExpressions) != 0 {
		t.Fatalf("Deployment selector: %v %v", err, dep.Spec.Selector)
	}
	if !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("Deployment selector %v does not match its Pod labels %v", sel, dep.Spec.Template.Labels)
	}
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds < 15 {
		t.Errorf("terminationGracePeriodSeconds %v: the leader needs time to give up leadership", pod.TerminationGracePeriodSeconds)
	}
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("Pod securityContext.runAsNonRoot is not true: %+v", pod.SecurityContext)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != devImage {
		t.Errorf("image %q, want %s", c.Image, devImage)
	}

	for _, arg := range []string{"--leader-elect", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8443"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %q lack %q", c.Args, arg)
		}
	}

	sc := c.SecurityContext
	if sc == nil {
		t.Error("container has no securityContext")
	} else {
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Error("readOnlyRootFilesystem is not true")
		}
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Error("container runAsNonRoot is not true")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Error("allowPrivilegeEscalation is not false")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) != 0 {
			t.Errorf("capabilities %+v, want drop ALL and add none", sc.Capabilities)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Error("container is privileged")
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("seccompProfile %+v, want RuntimeDefault", sc.SeccompProfile)
		}
	}

	// A throttled manager renews late: requests, a memory limit, no CPU limit.
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Errorf("CPU limit %v set: a throttled manager renews its leases late", c.Resources.Limits.Cpu())
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit")
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
	}

	// Probes: /healthz for liveness (never Redis), /readyz for readiness, both on the
	// port the manager serves them on.
	probePort := func(name string, p *corev1.Probe, path string) {
		t.Helper()
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe is not an HTTP probe: %+v", name, p)
			return
		}
		if p.HTTPGet.Path != path {
			t.Errorf("%s probe path %q, want %q", name, p.HTTPGet.Path, path)
		}
		if port := containerPort(c, p.HTTPGet.Port.String()); port != 8081 {
			t.Errorf("%s probe port %s resolves to %d, want 8081 (--health-probe-bind-address)", name, p.HTTPGet.Port.String(), port)
		}
	}
	probePort("liveness", c.LivenessProbe, "/healthz")
	probePort("readiness", c.ReadinessProbe, "/readyz")
	if port := containerPort(c, "metrics"); port != metricsPort {
		t.Errorf("container port named metrics is %d, want %d (--metrics-bind-address)", port, metricsPort)
	}
	// Metrics are HTTPS with authn/authz unless a flag turns that off.
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-secure") }) {
		t.Errorf("args %q set --metrics-secure; the default (HTTPS with authn/authz) is the production shape", c.Args)
	}

	// The Redis URL only from a Secret; no credential in the manifests.
	var redisURL *corev1.EnvVar
	for i, e := range c.Env {
		if e.Name == "GUARDEDJOB_REDIS_URL" {
			redisURL = &c.Env[i]
		}
		if strings.Contains(e.Value, "redis://") || strings.Contains(e.Value, "rediss://") {
			t.Errorf("env %s holds a Redis URL literally; it must come from a Secret", e.Name)
		}
	}
	for _, a := range c.Args {
		if strings.Contains(a, "redis://") || strings.Contains(a, "rediss://") {
			t.Errorf("arg %q holds a Redis URL; it must come from a Secret", a)
		}
	}
	if redisURL == nil || redisURL.ValueFrom == nil || redisURL.ValueFrom.SecretKeyRef == nil {
		t.Errorf("GUARDEDJOB_REDIS_URL is not read from a Secret: %+v", redisURL)
	} else if ref := redisURL.ValueFrom.SecretKeyRef; ref.Name != "guardedjob-redis" || ref.Key != "url" {
		t.Errorf("GUARDEDJOB_REDIS_URL from Secret %s key %s, want guardedjob-redis key url", ref.Name, ref.Key)
	}

	// Runs as the manager's ServiceAccount, which the output creates.
	if pod.ServiceAccountName != managerName {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, managerName)
	}
	sa := one(t, ms, "ServiceAccount", managerName, &corev1.ServiceAccount{})
	if sa.Namespace != systemNamespace {
		t.Errorf("ServiceAccount namespace %q, want %q", sa.Namespace, systemNamespace)
	}

	// Voluntary disruptions leave one replica running.
	pdb := one(t, ms, "PodDisruptionBudget", managerName, &policyv1.PodDisruptionBudget{})
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget minAvailable %v, want 1", pdb.Spec.MinAvailable)
	}
	if pdb.Spec.Selector == nil || !labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("PodDisruptionBudget selector %v does not select the manager's Pods", pdb.Spec.Selector)
	}
	// A replica that is unready because Redis is down must not block a node drain.
	if p := pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
		t.Errorf("PodDisruptionBudget unhealthyPodEvictionPolicy %v, want AlwaysAllow", p)
	}

	// The metrics Service reaches the container's metrics port.
	svc := one(t, ms, "Service", "guardedjob-manager-metrics", &corev1.Service{})
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("metrics Service selector %v does not select the manager's Pods", svc.Spec.Selector)
	}
	if i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }); i < 0 {
		t.Errorf("metrics Service has no port named metrics: %+v", svc.Spec.Ports)
	} else if p := svc.Spec.Ports[i]; p.Port != metricsPort || containerPort(c, p.TargetPort.String()) != metricsPort {
		t.Errorf("metrics Service port %d -> %s, want %d -> the container's %d", p.Port, p.TargetPort.String(), metricsPort, metricsPort)
	}
}

// containerPort resolves a probe or Service target port (number or name) to a number.
func containerPort(c corev1.Container, port string) int32 {
	for _, p := range c.Ports {
		if p.Name == port || fmt.Sprint(p.ContainerPort) == port {
			return p.ContainerPort
		}
	}
	var n int32
	if _, err := fmt.Sscan(port, &n); err == nil {
		return n
	}
	return 0
}

// TestDefaultRBACAndCRD checks that the rendered RBAC grants the manager's
// ServiceAccount its roles, and that the CRD and namespace are included.
func TestDefaultRBACAndCRD(t *testing.T) {
	ms := manifests(decode(t, kustomize(t, "default")))

	one(t, ms, "CustomResourceDefinition", "guardedjobs.batch.guardedjob.dev", &unstructured.Unstructured{})
	one(t, ms, "Namespace", systemNamespace, &corev1.Namespace{})
	role := one(t, ms, "ClusterRole", managerRole, &rbacv1.ClusterRole{})

	isManagerSA := func(s rbacv1.Subject) bool {
		return s.Kind == rbacv1.ServiceAccountKind && s.Name == managerName && s.Namespace == systemNamespace
	}

	var bound bool
	for _, o := range ms.of("ClusterRoleBinding") {
		crb := &rbacv1.ClusterRoleBinding{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, crb); err != nil {
			t.Fatal(err)
		}
		if crb.RoleRef.Kind == "ClusterRole" && crb.RoleRef.Name == managerRole {
			bound = true
			if len(crb.Subjects) != 1 || !isManagerSA(crb.Subjects[0]) {
				t.Errorf("ClusterRoleBinding %s subjects %+v, want only ServiceAccount %s/%s", crb.Name, crb.Subjects, systemNamespace, managerName)
			}
		}
	}
	if !bound {
		t.Errorf("no ClusterRoleBinding for %s", managerRole)
	}

	// Leader election: a namespaced Role for Leases, bound to the same ServiceAccount.
	var leaderRole *rbacv1.Role
	for _, o := range ms.of("RoleBinding") {
		rb := &rbacv1.RoleBinding{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, rb); err != nil {
			t.Fatal(err)
		}
		if rb.Namespace != systemNamespace || rb.RoleRef.Kind != "Role" {
			continue
		}
		if len(rb.Subjects) != 1 || !isManagerSA(rb.Subjects[0]) {
			t.Errorf("RoleBinding %s subjects %+v, want only ServiceAccount %s/%s", rb.Name, rb.Subjects, systemNamespace, managerName)
		}
		leaderRole = one(t, ms, "Role", rb.RoleRef.Name, &rbacv1.Role{})
	}
	if leaderRole == nil {
		t.Fatal("no RoleBinding for the leader election Role")
	}
	if leaderRole.Namespace != systemNamespace {
		t.Errorf("leader election Role in namespace %q, want %q", leaderRole.Namespace, systemNamespace)
	}
	allows := func(rules []rbacv1.PolicyRule, group, resource string, verbs ...string) bool {
		for _, r := range rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) &&
				!slices.ContainsFunc(verbs, func(v string) bool { return !slices.Contains(r.Verbs, v) }) {
				return true
			}
		}
		return false
	}
	if !allows(leaderRole.Rules, "coordination.k8s.io", "leases", "get", "list", "watch", "create", "update", "patch", "delete") {
		t.Errorf("leader election Role does not grant Leases: %+v", leaderRole.Rules)
	}
	if !allows(leaderRole.Rules, "", "events", "create", "patch") {
		t.Errorf("leader election Role does not grant core events (leader election records with them): %+v", leaderRole.Rules)
	}

	// Users get GuardedJobs through the built-in edit and view roles.
	for name, label := range map[string]string{
		"guardedjob-editor-role": "rbac.authorization.k8s.io/aggregate-to-edit",
		"guardedjob-viewer-role": "rbac.authorization.k8s.io/aggregate-to-view",
	} {
		cr := one(t, ms, "ClusterRole", name, &rbacv1.ClusterRole{})
		if cr.Labels[label] != "true" {
			t.Errorf("ClusterRole %s lacks label %s=true", name, label)
		}
		if allows(cr.Rules, "batch.guardedjob.dev", "guardedjobs/status", "update") || allows(cr.Rules, "batch.guardedjob.dev", "guardedjobs/status", "patch") {
			t.Errorf("ClusterRole %s lets users write status, which only the manager writes", name)
		}
	}
	viewer := one(t, ms, "ClusterRole", "guardedjob-viewer-role", &rbacv1.ClusterRole{})
	for _, r := range viewer.Rules {
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("viewer role grants %q on %v", v, r.Resources)
			}
		}
	}

	// The manager's own role: what the metrics filter needs, and nothing the code
	// never calls.
	for _, need := range [][2]string{{"authentication.k8s.io", "tokenreviews"}, {"authorization.k8s.io", "subjectaccessreviews"}} {
		if !allows(role.Rules, need[0], need[1], "create") {
			t.Errorf("%s does not grant create on %s: the secure metrics endpoint cannot check callers", managerRole, need[1])
		}
	}
	if !allows(role.Rules, "batch", "jobs", "update") {
		t.Errorf("%s does not grant update on jobs: a run's start gate opens with one (an older role gets the patch instead)", managerRole)
	}
	for _, unused := range []struct{ group, resource, verb string }{
		{"batch", "jobs/finalizers", "update"},
		{"batch.guardedjob.dev", "guardedjobs", "update"}, {"", "pods", "get"},
	} {
		if allows(role.Rules, unused.group, unused.resource, unused.verb) {
			t.Errorf("%s grants %s on %s, which the manager never does", managerRole, unused.verb, unused.resource)
		}
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "namespaces") && !slices.Equal(r.ResourceNames, []string{"kube-system"}) {
			t.Errorf("%s grants %v on namespaces %v, want get on kube-system only", managerRole, r.Verbs, r.ResourceNames)
		}
	}
	reader := one(t, ms, "ClusterRole", "guardedjob-metrics-reader", &rbacv1.ClusterRole{})
	if len(reader.Rules) != 1 || !slices.Equal(reader.Rules[0].NonResourceURLs, []string{"/metrics"}) || !slices.Equal(reader.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("guardedjob-metrics-reader rules %+v, want get on /metrics only", reader.Rules)
	}

	// Every namespaced object lands in the manager's namespace.
	clusterScoped := map[string]bool{"Namespace": true, "CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true}
	for _, o := range ms {
		if !clusterScoped[o.GetKind()] && o.GetNamespace() != systemNamespace {
			t.Errorf("%s %s in namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), systemNamespace)
		}
	}
}

// TestServiceMonitorSelectsMetricsService checks that config/prometheus scrapes the
// Service config/manager creates.
func TestServiceMonitorSelectsMetricsService(t *testing.T) {
	mons := manifests(decode(t, kustomize(t, "prometheus"))).of("ServiceMonitor")
	if len(mons) != 1 {
		t.Fatalf("%d ServiceMonitors in config/prometheus, want 1", len(mons))
	}
	mon := mons[0]
	svc := one(t, manifests(decode(t, kustomize(t, "default"))), "Service", "guardedjob-manager-metrics", &corev1.Service{})

	matchLabels, _, err := unstructured.NestedStringMap(mon.Object, "spec", "selector", "matchLabels")
	if err != nil || len(matchLabels) == 0 {
		t.Fatalf("ServiceMonitor spec.selector.matchLabels: %v %v", matchLabels, err)
	}
	if !labels.SelectorFromSet(matchLabels).Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not match the metrics Service labels %v", matchLabels, svc.Labels)
	}
	if names, _, _ := unstructured.NestedStringSlice(mon.Object, "spec", "namespaceSelector", "matchNames"); len(names) > 0 && !slices.Contains(names, svc.Namespace) {
		t.Errorf("ServiceMonitor namespaceSelector %v excludes %s", names, svc.Namespace)
	}
	// GuardedJobManagerDown finds the manager by job="guardedjob".
	if jobLabel, _, _ := unstructured.NestedString(mon.Object, "spec", "jobLabel"); svc.Labels[jobLabel] != "guardedjob" {
		t.Errorf("ServiceMonitor jobLabel %q gives the metrics Service's targets the job %q, want guardedjob", jobLabel, svc.Labels[jobLabel])
	}
	endpoints, _, _ := unstructured.NestedSlice(mon.Object, "spec", "endpoints")
	if len(endpoints) == 0 {
		t.Fatal("ServiceMonitor has no endpoints")
	}
	for _, e := range endpoints {
		// The per-GuardedJob series keep their namespace label.
		if honor, _, _ := unstructured.NestedBool(e.(map[string]any), "honorLabels"); !honor {
			t.Errorf("ServiceMonitor endpoint without honorLabels: true")
		}
		port, _, _ := unstructured.NestedString(e.(map[string]any), "port")
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == port }) {
			t.Errorf("ServiceMonitor endpoint port %q is not a port of the metrics Service", port)
		}
	}
}

// dockerfile reads the Dockerfile and returns it with its builder stage's COPY sources.
func dockerfile(t *testing.T, root string) (string, []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "COPY" || strings.HasPrefix(f[1], "--") {
			continue
		}
		sources = append(sources, f[1:len(f)-1]...)
	}
	return string(b), sources
}

// TestDockerfile checks the image's shape: a Go builder matching go.mod, the build
// command, a distroless non-root final stage.
func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	df, _ := dockerfile(t, root)

	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("no go line in go.mod")
	}
	if want := "golang:" + string(m[1]) + " AS builder"; !strings.Contains(df, want) {
		t.Errorf("Dockerfile does not build with %q (go.mod says go %s)", want, m[1])
	}
	// The image says which release it is: the final stage declares the build ARG
	// again (an ARG ends with its stage) and labels with it.
	final := df[strings.LastIndex(df, "\nFROM "):]
	if !regexp.MustCompile(`(?m)^ARG VERSION\b`).MatchString(final) {
		t.Error("the final stage does not declare ARG VERSION, so its label would be empty")
	}
	if !regexp.MustCompile(`org\.opencontainers\.image\.version="?\$\{?VERSION\}?"?`).MatchString(final) {
		t.Error("the final stage has no LABEL org.opencontainers.image.version=$VERSION")
	}
	mk := string(mustRead(t, filepath.Join(root, "Makefile")))
	for _, arg := range []string{"--build-arg VERSION=$(VERSION)", "--build-arg COMMIT=$(COMMIT)"} {
		if !strings.Contains(mk, arg) {
			t.Errorf("make docker-build does not pass %s", arg)
		}
	}

	for _, want := range []string{
		buildCommand,
		"FROM gcr.io/distroless/static:nonroot",
		"USER 65532:65532",
		`ENTRYPOINT ["/manager"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

// TestMakeBuildMatchesDockerfile checks that `make build` (what CI runs) uses the
// Dockerfile's compiler flags.
func TestMakeBuildMatchesDockerfile(t *testing.T) {
	root := repoRoot(t)
	df, _ := dockerfile(t, root)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`CGO_ENABLED=0 go build (.*?) -o \S+ \./cmd/manager`)
	want, got := re.FindStringSubmatch(df), re.FindStringSubmatch(string(mk))
	if want == nil {
		t.Fatal("no manager build command in the Dockerfile")
	}
	if got == nil {
		t.Fatal("no `CGO_ENABLED=0 go build ... -o ... ./cmd/manager` in the Makefile")
	}
	// The same version variable, spelled the make way and the Dockerfile way.
	if mkFlags := strings.NewReplacer("$(VERSION)", "${VERSION}", "$(COMMIT)", "${COMMIT}").Replace(got[1]); mkFlags != want[1] {
		t.Errorf("make build uses flags %q, the Dockerfile %q", got[1], want[1])
	}
}

// TestDockerBuildCommand runs the Dockerfile's build command on a copy of exactly the
// files the builder stage copies (less what .dockerignore drops), so a package added
// outside those directories, or a file .dockerignore hides, fails here and not at
// release time.
func TestDockerBuildCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the manager")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("go not found on PATH")
	}
	root := repoRoot(t)
	_, sources := dockerfile(t, root)
	for _, want := range []string{"go.mod", "go.sum", "cmd/"} {
		if !slices.Contains(sources, want) {
			t.Errorf("the Dockerfile does not COPY %s: %v", want, sources)
		}
	}

	// .dockerignore excludes everything, then re-includes what the Dockerfile copies.
	ignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var ignoreLines []string
	for _, l := range strings.Split(string(ignore), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			ignoreLines = append(ignoreLines, l)
		}
	}
	for _, src := range sources {
		if src == "." || src == "./" {
			continue
		}
		if !slices.Contains(ignoreLines, "!"+src) && !slices.Contains(ignoreLines, "!"+strings.TrimSuffix(src, "/")) {
			t.Errorf(".dockerignore does not re-include %s, which the Dockerfile copies", src)
		}
	}

	ctx := t.TempDir()
	for _, src := range sources {
		if err := copyContext(filepath.Join(root, src), filepath.Join(ctx, src)); err != nil {
			t.Fatalf("copy %s: %v", src, err)
		}
	}

	// The Dockerfile's RUN line, with the output moved into the temporary directory.
	out := filepath.Join(t.TempDir(), "manager")
	const version = "9.8.7-test"
	const commit = "0123456789abcdef0123456789abcdef01234567"
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w -X main.version="+version+" -X main.commit="+commit, "-o", out, "./cmd/manager")
	cmd.Dir = ctx
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOWORK=off", "GOFLAGS=-mod=readonly")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s (in a copy of the Docker build context): %v\n%s", buildCommand, err, b)
	}

	// Static (distroless/static has no libc), trimmed and stripped.
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the manager binary is dynamically linked")
		}
	}
	if s := f.Section(".symtab"); s != nil {
		t.Error("the manager binary has a symbol table; -ldflags=-s did not apply")
	}
	if s := f.Section(".debug_info"); s != nil {
		t.Error("the manager binary has DWARF; -ldflags=-w did not apply")
	}
	info, err := buildinfo.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	// (With -trimpath Go does not record -ldflags; the sections above prove them.)
	for k, v := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": "linux"} {
		if settings[k] != v {
			t.Errorf("build setting %s=%q, want %q", k, settings[k], v)
		}
	}
	if strings.Contains(string(mustRead(t, out)), ctx) {
		t.Errorf("the binary contains the build directory %s; -trimpath did not apply", ctx)
	}
	// The version the build stamped is what --version prints, with the commit (the
	// build context has no .git, so unknown unless the build stamps it).
	if b, err := exec.Command(out, "--version").CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != version+" (commit "+commit+")" {
		t.Errorf("manager --version printed %q (%v), want %q and commit %s", b, err, version, commit)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// copyContext copies a file or tree as the Docker build context would hold it:
// without the tests and testdata that .dockerignore drops.
func copyContext(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return os.MkdirAll(target, 0o755)
		}
		if strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// TestInstaller renders what `make build-installer` writes: one file with the CRD,
// RBAC, the Deployment, the metrics Service and the PDB, with the image set through
// kustomize's images transformer, and nothing left naming the development image.
func TestInstaller(t *testing.T) {
	kubectl := bins.Kubectl(t)
	root := repoRoot(t)
	mk := exec.Command("make", "-n", "build-installer", "VERSION=9.8.7", "IMAGE_REPO=registry.example:5000/team/guardedjob-manager")
	mk.Dir = root
	dry, err := mk.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build-installer: %v\n%s", err, dry)
	}
	if !strings.Contains(string(dry), "hack/render-manifests.sh registry.example:5000/team/guardedjob-manager:9.8.7 > dist/install.yaml") {
		t.Errorf("make build-installer VERSION=9.8.7 does not render with image registry.example:5000/team/guardedjob-manager:9.8.7:\n%s", dry)
	}

	for image, want := range map[string]string{
		"registry.example:5000/team/guardedjob-manager:9.8.7":     "registry.example:5000/team/guardedjob-manager:9.8.7",
		"registry.example/guardedjob-manager@sha256:0123456789ab": "registry.example/guardedjob-manager@sha256:0123456789ab",
		"registry.example:5000/guardedjob-manager":                "registry.example:5000/guardedjob-manager:latest",
	} {
		t.Run(image, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(root, "hack", "render-manifests.sh"), image)
			cmd.Dir = t.TempDir() // works from anywhere
			cmd.Env = append(os.Environ(), "KUBECTL="+kubectl)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			raw, err := cmd.Output()
			if err != nil {
				t.Fatalf("hack/render-manifests.sh %s: %v\n%s", image, err, stderr.String())
			}
			ms := manifests(decode(t, raw))
			dep := one(t, ms, "Deployment", managerName, &appsv1.Deployment{})
			if got := dep.Spec.Template.Spec.Containers[0].Image; got != want {
				t.Errorf("image %q, want %q", got, want)
			}
			if strings.Contains(string(raw), devImage) {
				t.Errorf("the installer still names %s", devImage)
			}
			one(t, ms, "CustomResourceDefinition", "guardedjobs.batch.guardedjob.dev", &unstructured.Unstructured{})
			one(t, ms, "ClusterRole", managerRole, &rbacv1.ClusterRole{})
			one(t, ms, "ClusterRoleBinding", "guardedjob-manager-rolebinding", &rbacv1.ClusterRoleBinding{})
			one(t, ms, "ServiceAccount", managerName, &corev1.ServiceAccount{})
			one(t, ms, "Service", "guardedjob-manager-metrics", &corev1.Service{})
			one(t, ms, "PodDisruptionBudget", managerName, &policyv1.PodDisruptionBudget{})
		})
	}
}

// kustomizeOverlay renders a kustomization of the given config/ trees and
// components, as a user's own overlay would combine them.
func kustomizeOverlay(t *testing.T, resources, components []string) []byte {
	t.Helper()
	dir := t.TempDir()
	var k strings.Builder
	for i, list := range [][]string{resources, components} {
		if len(list) == 0 {
			continue
		}
		k.WriteString([]string{"resources:\n", "components:\n"}[i])
		for _, d := range list {
			rel, err := filepath.Rel(dir, filepath.Join(repoRoot(t), "config", d))
			if err != nil {
				t.Fatal(err)
			}
			k.WriteString("- " + rel + "\n")
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins.Kubectl(t), "kustomize", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %v %v: %v\n%s", resources, components, err, stderr.String())
	}
	return out
}

// TestCertManagerComponent checks config/certmanager: the manager serves the
// certificate cert-manager issues for the metrics Service's names, and the
// ServiceMonitor verifies it against the Secret's CA; without it the ServiceMonitor
// cannot verify the self-signed certificate and says so by skipping verification.
func TestCertManagerComponent(t *testing.T) {
	ms := manifests(decode(t, kustomizeOverlay(t, []string{"default", "prometheus"}, []string{"certmanager"})))

	dep := one(t, ms, "Deployment", managerName, &appsv1.Deployment{})
	c := dep.Spec.Template.Spec.Containers[0]
	var certDir string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--metrics-cert-path="); ok {
			certDir = v
		}
	}
	if certDir == "" {
		t.Fatalf("args %q lack --metrics-cert-path", c.Args)
	}
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == certDir })
	if i < 0 {
		t.Fatalf("nothing is mounted at --metrics-cert-path %s: %+v", certDir, c.VolumeMounts)
	}
	if !c.VolumeMounts[i].ReadOnly {
		t.Error("the certificate is mounted writable")
	}
	vi := slices.IndexFunc(dep.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[i].Name })
	if vi < 0 || dep.Spec.Template.Spec.Volumes[vi].Secret == nil {
		t.Fatalf("the volume mounted at %s is not a Secret: %+v", certDir, dep.Spec.Template.Spec.Volumes)
	}
	secret := dep.Spec.Template.Spec.Volumes[vi].Secret.SecretName
	// The files are the ones the manager reads by default (--metrics-cert-name, --metrics-cert-key).
	if items := dep.Spec.Template.Spec.Volumes[vi].Secret.Items; len(items) != 0 {
		t.Errorf("the Secret volume maps its keys (%+v): the manager reads tls.crt and tls.key", items)
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-secure=false") }) {
		t.Error("a certificate with --metrics-secure=false")
	}

	// The Certificate fills that Secret, for the metrics Service's names.
	var cert *unstructured.Unstructured
	for _, o := range ms.of("Certificate") {
		if name, _, _ := unstructured.NestedString(o.Object, "spec", "secretName"); name == secret {
			cert = o
		}
	}
	if cert == nil {
		t.Fatalf("no Certificate writes the Secret %s", secret)
	}
	svc := one(t, ms, "Service", "guardedjob-manager-metrics", &corev1.Service{})
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	serviceName := svc.Name + "." + svc.Namespace + ".svc"
	if !slices.Contains(dnsNames, serviceName) {
		t.Errorf("Certificate dnsNames %v lack %s", dnsNames, serviceName)
	}
	issuerKind, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "kind")
	issuerName, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	issuer := one(t, ms, issuerKind, issuerName, &unstructured.Unstructured{})
	if issuer.GetNamespace() != cert.GetNamespace() || cert.GetNamespace() != systemNamespace {
		t.Errorf("Issuer in %q, Certificate in %q, want both in %s", issuer.GetNamespace(), cert.GetNamespace(), systemNamespace)
	}

	// The ServiceMonitor verifies the certificate against the Secret's CA, by a name
	// the certificate holds.
	mon := ms.of("ServiceMonitor")[0]
	endpoints, _, _ := unstructured.NestedSlice(mon.Object, "spec", "endpoints")
	tlsConfig, _, _ := unstructured.NestedMap(endpoints[0].(map[string]any), "tlsConfig")
	if skip, _, _ := unstructured.NestedBool(tlsConfig, "insecureSkipVerify"); skip {
		t.Error("the ServiceMonitor skips verifying a certificate it could verify")
	}
	if name, _, _ := unstructured.NestedString(tlsConfig, "ca", "secret", "name"); name != secret {
		t.Errorf("the ServiceMonitor's CA comes from Secret %q, want %s", name, secret)
	}
	if key, _, _ := unstructured.NestedString(tlsConfig, "ca", "secret", "key"); key != "ca.crt" {
		t.Errorf("the ServiceMonitor's CA key %q, want ca.crt", key)
	}
	if name, _, _ := unstructured.NestedString(tlsConfig, "serverName"); !slices.Contains(dnsNames, name) {
		t.Errorf("the ServiceMonitor's serverName %q is not among the certificate's names %v", name, dnsNames)
	}

	// Without it, config/prometheus has no certificate to verify.
	plain := manifests(decode(t, kustomize(t, "prometheus"))).of("ServiceMonitor")[0]
	endpoints, _, _ = unstructured.NestedSlice(plain.Object, "spec", "endpoints")
	if skip, _, _ := unstructured.NestedBool(endpoints[0].(map[string]any), "tlsConfig", "insecureSkipVerify"); !skip {
		t.Error("config/prometheus alone verifies a self-signed certificate it has no CA for")
	}
	// And the component renders without config/prometheus (its monitor patch then
	// matches nothing).
	one(t, manifests(decode(t, kustomizeOverlay(t, []string{"default"}, []string{"certmanager"}))), "Certificate", cert.GetName(), &unstructured.Unstructured{})
}

// TestDockerPushAndBuildx reads what make docker-push and make docker-buildx would
// run (no Docker engine here): docker-push pushes IMG; docker-buildx builds the
// Dockerfile for every platform of PLATFORMS, with the version stamped, and pushes
// the multi-platform image as IMG. The Dockerfile's builder runs on the build
// machine's platform and cross-compiles to the target's, so every platform builds
// without emulation.
func TestDockerPushAndBuildx(t *testing.T) {
	root := repoRoot(t)
	dry := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("make", append([]string{"-n", "--no-print-directory"}, args...)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := dry("docker-push", "VERSION=1.2.3", "IMAGE_REPO=registry.example:5000/gj"); strings.TrimSpace(out) != "docker push registry.example:5000/gj:1.2.3" {
		t.Errorf("make docker-push runs:\n%s\nwant docker push registry.example:5000/gj:1.2.3", out)
	}

	buildLine := func(out string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "docker buildx build") {
				return l
			}
		}
		t.Fatalf("make docker-buildx runs no docker buildx build:\n%s", out)
		return ""
	}
	build := buildLine(dry("docker-buildx", "VERSION=1.2.3", "IMAGE_REPO=registry.example:5000/gj"))
	const platforms = "linux/arm64,linux/amd64,linux/s390x,linux/ppc64le"
	for _, want := range []string{"--push", "--platform=" + platforms, "--build-arg VERSION=1.2.3", "--build-arg COMMIT=", "--tag registry.example:5000/gj:1.2.3"} {
		if !strings.Contains(build, want) {
			t.Errorf("docker buildx build line %q lacks %q", build, want)
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(build), " .") {
		t.Errorf("docker buildx build line %q does not build the repository's Dockerfile", build)
	}
	if build := buildLine(dry("docker-buildx", "PLATFORMS=linux/amd64")); !strings.Contains(build, "--platform=linux/amd64 ") {
		t.Errorf("PLATFORMS=linux/amd64 gives %q", build)
	}

	df, _ := dockerfile(t, root)
	for _, want := range []string{"FROM --platform=$BUILDPLATFORM golang:", "ARG TARGETARCH", "GOARCH=$TARGETARCH"} {
		if !strings.Contains(df, want) {
			t.Errorf("the Dockerfile lacks %q: a buildx build would compile under emulation or for the wrong platform", want)
		}
	}
	dist, err := exec.Command("go", "tool", "dist", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Split(platforms, ",") {
		if !slices.Contains(strings.Fields(string(dist)), p) {
			t.Errorf("Go cannot build for %s", p)
		}
	}
}
