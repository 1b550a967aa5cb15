package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/bins"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/testproc"
)

// TestEverySampleRunsUnderTheDefaultInstall is what a new user does on day one: apply
// config/samples to a cluster with the manager installed as config/default or the
// chart installs it (two replicas' flags: leader election on, the default
// --store-allow, metrics and probes), with only what the samples say they need (the
// key grant daily-settlement names). Every GuardedJob in config/samples must become
// Ready and, triggered with run-now, complete a run: Jobs really run here
// (kube-controller-manager, kube-scheduler, kwok as the kubelet).
func TestEverySampleRunsUnderTheDefaultInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster; skipped with -short")
	}
	ctx := t.Context()
	root := repoRoot(t)
	dir := t.TempDir()
	build := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-control-plane.sh"), "--demo")
	var progress bytes.Buffer
	build.Stderr = &progress
	out, err := build.Output()
	if err != nil {
		t.Fatalf("hack/build-control-plane.sh --demo: %v\n%s", err, progress.String())
	}
	kubectl := filepath.Join(strings.TrimSpace(string(out)), "kubectl")
	c, err := startCluster(ctx, "samples", filepath.Join(dir, "cluster"), controlPlaneBinaries{dir: strings.TrimSpace(string(out))}, root)
	if c != nil {
		t.Cleanup(c.stop)
	}
	if err != nil {
		t.Fatal(err)
	}

	samples := sampleGuardedJobs(t, root, kubectl)
	// What config/default and the chart give the manager container: the first
	// Deployment is the manager's; env with a literal value (the chart's key grants).
	installs := []struct {
		name      string
		container corev1.Container
		// env is what the user adds, as the samples ask.
		env map[string]string
	}{
		{name: "config/default", container: managerContainer(t, command(t, root, kubectl, "kustomize", "config/default")),
			env: map[string]string{"GUARDEDJOB_KEY_GRANTS": "payments=lock:settlement"}},
		{name: "the chart", container: managerContainer(t, command(t, root, bins.Helm(t), "template", "guardedjob", "charts/guardedjob",
			"--namespace", "guardedjob-system", "--kube-version", "1.37.2",
			"--set", "redis.existingSecret=guardedjob-redis", "--set", "keyGrants.payments[0]=lock:settlement"))},
	}
	applied := false
	for i, in := range installs {
		t.Run("installed by "+in.name, func(t *testing.T) {
			redis := redisserver.Start(t)
			args := managerArgs(t, in.container, c)
			t.Setenv("GUARDEDJOB_REDIS_URL", "redis://"+redis.Addr()+"/0")
			for k, v := range in.env {
				t.Setenv(k, v)
			}
			t.Logf("manager %s", strings.Join(args, " "))
			mgr, err := testproc.Start(fmt.Sprintf("manager-%d", i), filepath.Join(dir, fmt.Sprintf("manager-%d.log", i)), bins.Manager(t), args...)
			if err != nil {
				t.Fatal(err)
			}
			defer mgr.Stop(20 * time.Second)
			if !applied {
				// As the user does it, with their own kubectl and credentials.
				command(t, root, kubectl, "--kubeconfig", c.adminKubeconfig, "apply", "-k", "config/samples")
				applied = true
			}
			for _, s := range samples {
				key := client.ObjectKeyFromObject(s)
				ready := func() error {
					cur := &batchv1alpha1.GuardedJob{}
					if err := c.client.Get(ctx, key, cur); err != nil {
						return err
					}
					for _, cond := range cur.Status.Conditions {
						if cond.Type == batchv1alpha1.ReadyCondition {
							if cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == cur.Generation {
								return nil
							}
							return fmt.Errorf("Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
						}
					}
					return errors.New("no Ready condition yet")
				}
				if err := poll(ctx, 90*time.Second, key.String()+" Ready", ready); err != nil {
					t.Fatalf("%v\nmanager log:\n%s", err, mgr.Tail(30))
				}
			}
			// The default --store-allow read the cluster's ranges with the manager's
			// own role (config/rbac): the Service range of this API server.
			if slices.ContainsFunc(args, func(a string) bool {
				return strings.HasPrefix(a, "--store-allow=") && strings.Contains(a, "cluster-ranges")
			}) {
				if err := poll(ctx, 30*time.Second, "the cluster's ranges in the manager's log", func() error {
					logs, err := os.ReadFile(mgr.LogPath)
					switch {
					case err != nil:
						return err
					case strings.Contains(string(logs), "Could not read the cluster's address ranges"):
						return errors.New("could not read them")
					case !strings.Contains(string(logs), `"serviceRanges":"10.96.0.0/16"`):
						return errors.New("not yet")
					}
					return nil
				}); err != nil {
					t.Fatalf("%v\n%s", err, mgr.Tail(30))
				}
			}
			// Each sample's latest occurrence, now; its Pods finish in kwok's 8 s.
			before := map[client.ObjectKey]string{}
			for _, s := range samples {
				cur := &batchv1alpha1.GuardedJob{}
				if err := c.client.Get(ctx, client.ObjectKeyFromObject(s), cur); err != nil {
					t.Fatal(err)
				}
				if cur.Status.LastRun != nil {
					before[client.ObjectKeyFromObject(s)] = cur.Status.LastRun.JobName
				}
				patch := client.MergeFrom(cur.DeepCopy())
				metav1.SetMetaDataAnnotation(&cur.ObjectMeta, batchv1alpha1.RunNowAnnotation, time.Now().UTC().Format(time.RFC3339))
				if err := c.client.Patch(ctx, cur, patch); err != nil {
					t.Fatal(err)
				}
			}
			for _, s := range samples {
				key := client.ObjectKeyFromObject(s)
				done := func() error {
					cur := &batchv1alpha1.GuardedJob{}
					if err := c.client.Get(ctx, key, cur); err != nil {
						return err
					}
					last := cur.Status.LastRun
					switch {
					case last == nil || last.JobName == before[key]:
						return fmt.Errorf("no run yet (active: %d)", len(cur.Status.Active))
					case last.Result != batchv1alpha1.RunResultSucceeded:
						return fmt.Errorf("run %s ended %s: %s", last.JobName, last.Result, last.Message)
					}
					// Completed, marked done, lease released.
					job := &batchv1.Job{}
					if err := c.client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: last.JobName}, job); err != nil {
						return fmt.Errorf("the run's Job %s: %w", last.JobName, err)
					}
					if job.Status.Succeeded < 1 {
						return fmt.Errorf("the run's Job %s has no succeeded Pod", last.JobName)
					}
					if n := redis.Client(t).Exists(ctx, s.Spec.Lock.Key).Val(); n != 0 {
						return fmt.Errorf("lock %s still held", s.Spec.Lock.Key)
					}
					return nil
				}
				if err := poll(ctx, 90*time.Second, key.String()+" completes a run", done); err != nil {
					t.Fatalf("%v\nmanager log:\n%s", err, mgr.Tail(30))
				}
			}
			// What the user sees once every sample has run.
			t.Logf("kubectl get guardedjobs -A -o wide:\n%s", command(t, root, kubectl, "--kubeconfig", c.adminKubeconfig, "get", "guardedjobs", "-A", "-o", "wide"))
		})
	}
}

// sampleGuardedJobs returns every GuardedJob of config/samples and checks that the
// samples' kustomization applies each of them. A sample that needs something the
// test does not make (a store of its own) fails the test, so that it gets it.
func sampleGuardedJobs(t *testing.T, root, kubectl string) []*batchv1alpha1.GuardedJob {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "config", "samples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var inFiles, applied []string
	var out []*batchv1alpha1.GuardedJob
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range decodeAll(t, raw) {
			if o.GetKind() == "GuardedJob" {
				inFiles = append(inFiles, o.GetNamespace()+"/"+o.GetName())
			}
		}
	}
	for _, o := range decodeAll(t, command(t, root, kubectl, "kustomize", "config/samples")) {
		if o.GetKind() != "GuardedJob" {
			continue
		}
		gj := &batchv1alpha1.GuardedJob{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, gj); err != nil {
			t.Fatal(err)
		}
		if gj.Spec.Lock.StoreRef != nil {
			t.Fatalf("sample %s/%s uses spec.lock.storeRef: make this test create its store (a Secret, and a Redis the default --store-allow admits)", gj.Namespace, gj.Name)
		}
		applied = append(applied, gj.Namespace+"/"+gj.Name)
		out = append(out, gj)
	}
	slices.Sort(inFiles)
	slices.Sort(applied)
	if len(out) == 0 || !slices.Equal(inFiles, applied) {
		t.Fatalf("config/samples holds the GuardedJobs %v, its kustomization applies %v", inFiles, applied)
	}
	return out
}

// managerContainer returns the manager container of the first Deployment in a
// rendered install.
func managerContainer(t *testing.T, manifests []byte) corev1.Container {
	t.Helper()
	for _, o := range decodeAll(t, manifests) {
		if o.GetKind() != "Deployment" {
			continue
		}
		d := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
			t.Fatal(err)
		}
		for _, ct := range d.Spec.Template.Spec.Containers {
			if ct.Name == "manager" {
				return ct
			}
		}
	}
	t.Fatal("no Deployment with a manager container")
	return corev1.Container{}
}

// managerArgs are the container's args for a manager process on this machine: the
// listeners on free loopback ports instead of the Pod's, and what a Pod gets from
// its cluster (the kubeconfig, the namespace of the leader election Lease). The
// container's literal env values are set for the process too.
func managerArgs(t *testing.T, ct corev1.Container, c *cluster) []string {
	t.Helper()
	args := []string{"--kubeconfig=" + c.managerConfig, "--leader-election-namespace=" + c.electionNamespace}
	for _, a := range ct.Args {
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--health-probe-bind-address", "--metrics-bind-address":
			port, err := testproc.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			a = fmt.Sprintf("%s=127.0.0.1:%d", name, port)
		case "--leader-election-namespace", "--kubeconfig":
			t.Fatalf("the install sets %s itself", a)
		}
		args = append(args, a)
	}
	if !slices.Contains(args, "--leader-elect") {
		t.Fatalf("the install runs the manager without leader election: %v", ct.Args)
	}
	for _, e := range ct.Env {
		if e.Value != "" {
			t.Setenv(e.Name, e.Value)
		}
	}
	return args
}

// command runs a program in the repository and returns its standard output.
func command(t *testing.T, root, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// decodeAll splits a multi-document YAML stream into objects.
func decodeAll(t *testing.T, raw []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*unstructured.Unstructured
	for {
		o := &unstructured.Unstructured{}
		if err := dec.Decode(&o.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if len(o.Object) > 0 {
			out = append(out, o)
		}
	}
	return out
}
