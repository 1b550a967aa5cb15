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

// Package crd_test checks the generated GuardedJob CRD against a real API server: the
// samples are accepted, invalid manifests are rejected with a message a person can act
// on, the schema defaults agree with the Go accessors, and a full status is accepted.
package crd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	gjv1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

var (
	// k8sClient talks to the package's API server; nil when KUBEBUILDER_ASSETS is unset.
	k8sClient client.Client
	// restConfig reaches the same API server, for requests the client cannot make.
	restConfig *rest.Config
	scheme     = runtime.NewScheme()
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		// Every test skips; `make test` always sets KUBEBUILDER_ASSETS.
		return m.Run()
	}
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := gjv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start envtest: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
		}
	}()
	restConfig = cfg
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "create client: %v\n", err)
		return 1
	}
	return m.Run()
}

func requireAPIServer(t *testing.T) {
	t.Helper()
	if k8sClient == nil {
		t.Fatal("KUBEBUILDER_ASSETS is unset: run the tests with `make test`, which builds kube-apiserver and etcd")
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ensureNamespace creates a namespace unless it exists.
func ensureNamespace(ctx context.Context, g Gomega, name string) {
	err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		g.Expect(err).NotTo(HaveOccurred())
	}
}

// readSamples decodes every object of every YAML file in config/samples except the
// kustomization.
func readSamples(g Gomega) map[string][]*unstructured.Unstructured {
	dir := filepath.Join("..", "..", "config", "samples")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	samples := map[string][]*unstructured.Unstructured{}
	for _, file := range files {
		if filepath.Base(file) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(file)
		g.Expect(err).NotTo(HaveOccurred())
		decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			obj := map[string]any{}
			err := decoder.Decode(&obj)
			if errors.Is(err, io.EOF) {
				break
			}
			g.Expect(err).NotTo(HaveOccurred(), file)
			if len(obj) == 0 {
				continue
			}
			samples[filepath.Base(file)] = append(samples[filepath.Base(file)], &unstructured.Unstructured{Object: obj})
		}
	}
	return samples
}

func TestSamplesAreAccepted(t *testing.T) {
	requireAPIServer(t)
	g := NewWithT(t)
	ctx := testContext(t)

	samples := readSamples(g)
	g.Expect(samples).To(HaveKey("batch_v1alpha1_guardedjob_daily_settlement.yaml"))
	g.Expect(samples).To(HaveKey("batch_v1alpha1_guardedjob_hourly_report.yaml"))
	g.Expect(samples).To(HaveKey("store-secret.yaml"))

	guardedJobs := 0
	for file, objs := range samples {
		for _, obj := range objs {
			if ns := obj.GetNamespace(); ns != "" {
				ensureNamespace(ctx, g, ns)
			}
			if obj.GetKind() == "Namespace" {
				ensureNamespace(ctx, g, obj.GetName())
				continue
			}
			g.Expect(k8sClient.Create(ctx, obj)).To(Succeed(), "%s: %s %s", file, obj.GetKind(), obj.GetName())
			if obj.GetKind() != "GuardedJob" {
				continue
			}
			guardedJobs++
			// The stored object decodes into the Go types (durations parse, enums match).
			var gj gjv1.GuardedJob
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), &gj)).To(Succeed())
			g.Expect(gj.Spec.Lock.Key).NotTo(BeEmpty())
			g.Expect(gj.Spec.Lock.RenewIntervalOrDefault()).To(BeNumerically("<", gj.Spec.Lock.TTLOrDefault()))
		}
	}
	g.Expect(guardedJobs).To(Equal(2))
}

// validGuardedJob returns a minimal valid GuardedJob as unstructured content.
func validGuardedJob(name string) map[string]any {
	obj := map[string]any{}
	err := yaml.Unmarshal([]byte(`
apiVersion: batch.guardedjob.dev/v1alpha1
kind: GuardedJob
metadata:
  namespace: default
spec:
  schedule: "*/5 * * * *"
  lock:
    key: "default:report"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: main
            image: busybox:1.36
`), &obj)
	if err != nil {
		panic(err)
	}
	obj["metadata"].(map[string]any)["name"] = name
	return obj
}

// set sets a nested field, creating the maps on the way.
func set(obj map[string]any, value any, path ...string) {
	for _, p := range path[:len(path)-1] {
		next, ok := obj[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			obj[p] = next
		}
		obj = next
	}
	obj[path[len(path)-1]] = value
}

// del removes a nested field.
func del(obj map[string]any, path ...string) {
	unstructured.RemoveNestedField(obj, path...)
}

func TestInvalidGuardedJobsAreRejected(t *testing.T) {
	requireAPIServer(t)
	tests := []struct {
		name   string
		mutate func(obj map[string]any)
		// want are substrings of the API server's error message.
		want []string
	}{
		{
			name:   "a missing schedule is rejected",
			mutate: func(o map[string]any) { del(o, "spec", "schedule") },
			want:   []string{"spec.schedule: Required value"},
		},
		{
			name:   "an empty schedule is rejected",
			mutate: func(o map[string]any) { set(o, "", "spec", "schedule") },
			want:   []string{"spec.schedule", "at least 1 chars long"},
		},
		{
			name:   "a zone inside the schedule is rejected",
			mutate: func(o map[string]any) { set(o, "CRON_TZ=Asia/Taipei 5 0 * * *", "spec", "schedule") },
			want:   []string{"schedule must not contain TZ= or CRON_TZ=: set spec.timeZone instead"},
		},
		{
			name:   "the manager's Local zone is rejected",
			mutate: func(o map[string]any) { set(o, "Local", "spec", "timeZone") },
			want:   []string{"timeZone must be an IANA zone name"},
		},
		{
			name:   "a starting deadline of zero is rejected",
			mutate: func(o map[string]any) { set(o, int64(0), "spec", "startingDeadlineSeconds") },
			want:   []string{"spec.startingDeadlineSeconds", "greater than or equal to 1"},
		},
		{
			name:   "an unknown concurrencyPolicy is rejected",
			mutate: func(o map[string]any) { set(o, "Sometimes", "spec", "concurrencyPolicy") },
			want:   []string{"spec.concurrencyPolicy", `Unsupported value: "Sometimes"`, `"Forbid", "Replace", "Allow"`},
		},
		{
			name:   "an unknown onBusy is rejected",
			mutate: func(o map[string]any) { set(o, "Wait", "spec", "lock", "onBusy") },
			want:   []string{"spec.lock.onBusy", `Unsupported value: "Wait"`, `"Skip", "Retry"`},
		},
		{
			name:   "an unknown storeFailurePolicy is rejected",
			mutate: func(o map[string]any) { set(o, "FailSoft", "spec", "lock", "storeFailurePolicy") },
			want:   []string{"spec.lock.storeFailurePolicy", `Unsupported value: "FailSoft"`},
		},
		{
			name:   "an unknown fencing policy is rejected",
			mutate: func(o map[string]any) { set(o, "Loose", "spec", "fencing", "policy") },
			want:   []string{"spec.fencing.policy", `Unsupported value: "Loose"`, `"None", "Inject", "Strict"`},
		},
		{
			name:   "an unknown onDelete is rejected",
			mutate: func(o map[string]any) { set(o, "Orphan", "spec", "onDelete") },
			want:   []string{"spec.onDelete", `Unsupported value: "Orphan"`},
		},
		{
			name:   "a negative successfulJobsHistoryLimit is rejected",
			mutate: func(o map[string]any) { set(o, int64(-1), "spec", "successfulJobsHistoryLimit") },
			want:   []string{"spec.successfulJobsHistoryLimit", "greater than or equal to 0"},
		},
		{
			name:   "a negative failedJobsHistoryLimit is rejected",
			mutate: func(o map[string]any) { set(o, int64(-1), "spec", "failedJobsHistoryLimit") },
			want:   []string{"spec.failedJobsHistoryLimit", "greater than or equal to 0"},
		},
		{
			name:   "a missing lock key is rejected",
			mutate: func(o map[string]any) { del(o, "spec", "lock", "key") },
			want:   []string{"spec.lock.key: Required value"},
		},
		{
			name:   "an empty lock key is rejected",
			mutate: func(o map[string]any) { set(o, "", "spec", "lock", "key") },
			want:   []string{"spec.lock.key", "at least 1 chars long"},
		},
		{
			name:   "an empty occurrenceKey is rejected",
			mutate: func(o map[string]any) { set(o, "", "spec", "lock", "occurrenceKey") },
			want:   []string{"spec.lock.occurrenceKey", "at least 1 chars long"},
		},
		{
			name:   "a ttl of one second is rejected",
			mutate: func(o map[string]any) { set(o, "1s", "spec", "lock", "ttl") },
			want:   []string{"spec.lock.ttl", "lock.ttl must be at least 5s"},
		},
		{
			name:   "a ttl that is not a Go duration is rejected",
			mutate: func(o map[string]any) { set(o, "1d", "spec", "lock", "ttl") },
			want:   []string{"spec.lock.ttl", "lock.ttl must be a duration such as 60s, 5m or 1h30m"},
		},
		{
			name: "a renewInterval equal to the ttl is rejected",
			mutate: func(o map[string]any) {
				set(o, "30s", "spec", "lock", "ttl")
				set(o, "30s", "spec", "lock", "renewInterval")
			},
			want: []string{"spec.lock.renewInterval", "lock.renewInterval must be shorter than lock.ttl"},
		},
		{
			name:   "a renewInterval longer than the default ttl is rejected",
			mutate: func(o map[string]any) { set(o, "90s", "spec", "lock", "renewInterval") },
			want:   []string{"spec.lock.renewInterval", "lock.renewInterval must be shorter than lock.ttl (ttl defaults to 60s)"},
		},
		{
			name: "a scheduleJitter as long as the starting deadline is rejected",
			mutate: func(o map[string]any) {
				set(o, int64(60), "spec", "startingDeadlineSeconds")
				set(o, "1m", "spec", "scheduleJitter")
			},
			want: []string{"spec.scheduleJitter", "scheduleJitter must be shorter than startingDeadlineSeconds"},
		},
		{
			name:   "a scheduleJitter past the default starting deadline is rejected",
			mutate: func(o map[string]any) { set(o, "6m", "spec", "scheduleJitter") },
			want:   []string{"spec.scheduleJitter", "scheduleJitter must be shorter than startingDeadlineSeconds (default 300)"},
		},
		{
			name:   "a scheduleJitter that is not a duration is rejected",
			mutate: func(o map[string]any) { set(o, "soon", "spec", "scheduleJitter") },
			want:   []string{"spec.scheduleJitter", "scheduleJitter must be a duration such as 30s or 5m"},
		},
		{
			name: "a busy retry cap below its first wait is rejected",
			mutate: func(o map[string]any) {
				set(o, map[string]any{"initial": "30s", "max": "10s"}, "spec", "lock", "busyRetry")
			},
			want: []string{"spec.lock.busyRetry.max", "lock.busyRetry.max must be at least lock.busyRetry.initial"},
		},
		{
			name:   "a busy retry first wait below one second is rejected",
			mutate: func(o map[string]any) { set(o, map[string]any{"initial": "500ms"}, "spec", "lock", "busyRetry") },
			want:   []string{"spec.lock.busyRetry.initial", "lock.busyRetry.initial must be at least 1s"},
		},
		{
			name:   "a busy retry cap above an hour is rejected",
			mutate: func(o map[string]any) { set(o, map[string]any{"max": "2h"}, "spec", "lock", "busyRetry") },
			want:   []string{"spec.lock.busyRetry.max", "lock.busyRetry.max must be between 1s and 1h"},
		},
		{
			name:   "a renewInterval below one second is rejected",
			mutate: func(o map[string]any) { set(o, "500ms", "spec", "lock", "renewInterval") },
			want:   []string{"spec.lock.renewInterval", "lock.renewInterval must be at least 1s"},
		},
		{
			name:   "a negative renewInterval is rejected",
			mutate: func(o map[string]any) { set(o, "-5s", "spec", "lock", "renewInterval") },
			want:   []string{"spec.lock.renewInterval", "lock.renewInterval must be a duration such as 20s or 1m"},
		},
		{
			name:   "a maxHold shorter than the ttl is rejected",
			mutate: func(o map[string]any) { set(o, "30s", "spec", "lock", "maxHold") },
			want:   []string{"spec.lock.maxHold", "lock.maxHold must be longer than lock.ttl"},
		},
		{
			name: "a maxHold equal to the ttl is rejected",
			mutate: func(o map[string]any) {
				set(o, "2m", "spec", "lock", "ttl")
				set(o, "120s", "spec", "lock", "maxHold")
			},
			want: []string{"spec.lock.maxHold", "lock.maxHold must be longer than lock.ttl"},
		},
		{
			name:   "a ttl longer than the default maxHold is rejected",
			mutate: func(o map[string]any) { set(o, "25h", "spec", "lock", "ttl") },
			want:   []string{"spec.lock.maxHold", "lock.maxHold must be longer than lock.ttl (defaults: maxHold 24h, ttl 60s)"},
		},
		{
			name:   "a maxHold longer than a year is rejected",
			mutate: func(o map[string]any) { set(o, "9000h", "spec", "lock", "maxHold") },
			want:   []string{"spec.lock.maxHold", "lock.maxHold must be at most 8760h (a year)"},
		},
		{
			name:   "a keepAfterSuccess that overflows a Go duration is rejected",
			mutate: func(o map[string]any) { set(o, "99999999999h", "spec", "lock", "keepAfterSuccess") },
			want:   []string{"spec.lock.keepAfterSuccess", "lock.keepAfterSuccess must be at most 8760h (a year)"},
		},
		{
			name:   "a storeRef without a name is rejected",
			mutate: func(o map[string]any) { set(o, map[string]any{}, "spec", "lock", "storeRef") },
			want:   []string{"spec.lock.storeRef.name: Required value"},
		},
		{
			name: "Strict fencing with FailOpen is rejected",
			mutate: func(o map[string]any) {
				set(o, "FailOpen", "spec", "lock", "storeFailurePolicy")
				set(o, "Strict", "spec", "fencing", "policy")
			},
			want: []string{"spec.fencing.policy", "fencing.policy Strict cannot be combined with lock.storeFailurePolicy FailOpen: a run without a lease has no fence"},
		},
		{
			name: "a pod guard with FailOpen is rejected",
			mutate: func(o map[string]any) {
				set(o, "FailOpen", "spec", "lock", "storeFailurePolicy")
				set(o, map[string]any{"secretRef": map[string]any{"name": "guard-redis"}}, "spec", "lock", "podGuard")
			},
			want: []string{"spec.lock.podGuard", "lock.podGuard cannot be combined with lock.storeFailurePolicy FailOpen"},
		},
		{
			name:   "a pod guard without a Secret is rejected",
			mutate: func(o map[string]any) { set(o, map[string]any{}, "spec", "lock", "podGuard") },
			want:   []string{"spec.lock.podGuard.secretRef: Required value"},
		},
		{
			name: "a pod guard margin that is not a duration is rejected",
			mutate: func(o map[string]any) {
				set(o, map[string]any{"secretRef": map[string]any{"name": "g"}, "margin": "soon"}, "spec", "lock", "podGuard")
			},
			want: []string{"spec.lock.podGuard.margin", "lock.podGuard.margin must be a duration such as 2s"},
		},
		{
			name:   "an env name starting with a digit is rejected",
			mutate: func(o map[string]any) { set(o, "1FENCE", "spec", "fencing", "envName") },
			want:   []string{"spec.fencing.envName", "fencing.envName must be a C identifier"},
		},
		{
			name:   "an env name with a dash is rejected",
			mutate: func(o map[string]any) { set(o, "MY-FENCE", "spec", "fencing", "envName") },
			want:   []string{"spec.fencing.envName", "fencing.envName must be a C identifier"},
		},
		{
			name:   "an empty fence key is rejected",
			mutate: func(o map[string]any) { set(o, "", "spec", "fencing", "key") },
			want:   []string{"spec.fencing.key", "at least 1 chars long"},
		},
		{
			name:   "a missing jobTemplate is rejected",
			mutate: func(o map[string]any) { del(o, "spec", "jobTemplate") },
			want:   []string{"spec.jobTemplate: Required value"},
		},
		{
			name: "a Pod restartPolicy of Always is rejected",
			mutate: func(o map[string]any) {
				set(o, "Always", "spec", "jobTemplate", "spec", "template", "spec", "restartPolicy")
			},
			want: []string{"spec.jobTemplate", "jobTemplate.spec.template.spec.restartPolicy must be Never or OnFailure"},
		},
		{
			name:   "a Pod template without restartPolicy is rejected",
			mutate: func(o map[string]any) { del(o, "spec", "jobTemplate", "spec", "template", "spec", "restartPolicy") },
			want:   []string{"jobTemplate.spec.template.spec.restartPolicy must be Never or OnFailure"},
		},
		{
			// The Job API's descriptions are trimmed from the CRD, its schema is not.
			name: "a container without a name is rejected",
			mutate: func(o map[string]any) {
				set(o, []any{map[string]any{"image": "busybox:1.36"}}, "spec", "jobTemplate", "spec", "template", "spec", "containers")
			},
			want: []string{"spec.jobTemplate.spec.template.spec.containers[0].name: Required value"},
		},
		{
			name:   "a Job parallelism that is not a number is rejected",
			mutate: func(o map[string]any) { set(o, "many", "spec", "jobTemplate", "spec", "parallelism") },
			want:   []string{"spec.jobTemplate.spec.parallelism", "must be of type integer"},
		},
		{
			name:   "a name of 46 characters is rejected",
			mutate: func(o map[string]any) { set(o, strings.Repeat("n", 46), "metadata", "name") },
			want:   []string{"metadata.name must be at most 45 characters: Job names append -<minutes>-<6 hex>"},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := testContext(t)
			obj := validGuardedJob(fmt.Sprintf("invalid-%d", i))
			tt.mutate(obj)
			err := k8sClient.Create(ctx, &unstructured.Unstructured{Object: obj})
			g.Expect(err).To(HaveOccurred())
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid error, got %v", err)
			t.Logf("rejected: %v", err)
			for _, want := range tt.want {
				g.Expect(err.Error()).To(ContainSubstring(want))
			}
		})
	}
}

func TestBoundaryValuesAreAccepted(t *testing.T) {
	requireAPIServer(t)
	tests := []struct {
		name   string
		mutate func(obj map[string]any)
	}{
		{
			name:   "a name of 45 characters is accepted",
			mutate: func(o map[string]any) { set(o, strings.Repeat("n", 45), "metadata", "name") },
		},
		{
			name: "the shortest lease timings are accepted",
			mutate: func(o map[string]any) {
				set(o, "5s", "spec", "lock", "ttl")
				set(o, "4.5s", "spec", "lock", "renewInterval")
				set(o, "5001ms", "spec", "lock", "maxHold")
			},
		},
		{
			name: "the longest maxHold and keepAfterSuccess are accepted",
			mutate: func(o map[string]any) {
				set(o, "8760h", "spec", "lock", "maxHold")
				set(o, "8759h59m59s", "spec", "lock", "keepAfterSuccess")
			},
		},
		{
			name: "a pod guard with FailClosed is accepted",
			mutate: func(o map[string]any) {
				set(o, map[string]any{"secretRef": map[string]any{"name": "guard-redis"}, "margin": "3s", "runAsUser": int64(1000)}, "spec", "lock", "podGuard")
			},
		},
		{
			name: "FailOpen with Inject fencing is accepted",
			mutate: func(o map[string]any) {
				set(o, "FailOpen", "spec", "lock", "storeFailurePolicy")
				set(o, "Inject", "spec", "fencing", "policy")
			},
		},
		{
			name: "FailClosed with Strict fencing and OnFailure Pods is accepted",
			mutate: func(o map[string]any) {
				set(o, "FailClosed", "spec", "lock", "storeFailurePolicy")
				set(o, "Strict", "spec", "fencing", "policy")
				set(o, "OnFailure", "spec", "jobTemplate", "spec", "template", "spec", "restartPolicy")
			},
		},
		{
			name: "zero history limits are accepted",
			mutate: func(o map[string]any) {
				set(o, int64(0), "spec", "successfulJobsHistoryLimit")
				set(o, int64(0), "spec", "failedJobsHistoryLimit")
			},
		},
		{
			name: "a scheduleJitter just under the starting deadline and the widest busy retry are accepted",
			mutate: func(o map[string]any) {
				set(o, int64(60), "spec", "startingDeadlineSeconds")
				set(o, "59.999s", "spec", "scheduleJitter")
				set(o, map[string]any{"initial": "1s", "max": "1h"}, "spec", "lock", "busyRetry")
			},
		},
		{
			name: "a lowercase env name and a storeRef are accepted",
			mutate: func(o map[string]any) {
				set(o, "_fence_1", "spec", "fencing", "envName")
				set(o, map[string]any{"name": "my-redis"}, "spec", "lock", "storeRef")
			},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := testContext(t)
			obj := validGuardedJob(fmt.Sprintf("boundary-%d", i))
			tt.mutate(obj)
			g.Expect(k8sClient.Create(ctx, &unstructured.Unstructured{Object: obj})).To(Succeed())
		})
	}
}

func TestSchemaDefaultsMatchTheGoAccessors(t *testing.T) {
	requireAPIServer(t)
	g := NewWithT(t)
	ctx := testContext(t)

	built := &gjv1.GuardedJob{
		ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: "default"},
		Spec: gjv1.GuardedJobSpec{
			Schedule: "@daily",
			Lock:     gjv1.LockSpec{Key: "default:defaults"},
		},
	}
	built.Spec.JobTemplate.Spec.Template.Spec = corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers:    []corev1.Container{{Name: "main", Image: "busybox:1.36"}},
	}
	unsent := built.DeepCopy()
	g.Expect(k8sClient.Create(ctx, built)).To(Succeed())

	var stored gjv1.GuardedJob
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(built), &stored)).To(Succeed())
	spec, lock := stored.Spec, stored.Spec.Lock

	// The schema wrote every static default ...
	g.Expect(spec.TimeZone).To(Equal(gjv1.DefaultTimeZone))
	g.Expect(spec.StartingDeadlineSeconds).To(Equal(ptr.To(gjv1.DefaultStartingDeadlineSeconds)))
	g.Expect(spec.Suspend).To(Equal(ptr.To(false)))
	g.Expect(spec.ConcurrencyPolicy).To(Equal(gjv1.ForbidConcurrent))
	g.Expect(spec.SuccessfulJobsHistoryLimit).To(Equal(ptr.To(gjv1.DefaultSuccessfulJobsHistoryLimit)))
	g.Expect(spec.FailedJobsHistoryLimit).To(Equal(ptr.To(gjv1.DefaultFailedJobsHistoryLimit)))
	g.Expect(spec.OnDelete).To(Equal(gjv1.OnDeleteStop))
	g.Expect(lock.OccurrenceKey).To(Equal(gjv1.DefaultOccurrenceKeyTemplate))
	g.Expect(lock.TTL).To(Equal(&metav1.Duration{Duration: gjv1.DefaultTTL}))
	g.Expect(lock.MaxHold).To(Equal(&metav1.Duration{Duration: gjv1.DefaultMaxHold}))
	g.Expect(lock.KeepAfterSuccess).To(Equal(&metav1.Duration{}))
	g.Expect(lock.OnBusy).To(Equal(gjv1.OnBusySkip))
	g.Expect(lock.StoreFailurePolicy).To(Equal(gjv1.FailClosed))
	g.Expect(spec.Fencing).To(Equal(&gjv1.FencingSpec{
		Policy:  gjv1.FencingInject,
		Key:     gjv1.DefaultFenceKeyTemplate,
		EnvName: gjv1.DefaultFenceEnvName,
	}))
	// ... but not renewInterval, which depends on ttl and lives only in Go.
	g.Expect(lock.RenewInterval).To(BeNil())

	// The accessors give the same answers with and without the schema's defaults.
	for _, s := range []*gjv1.GuardedJobSpec{&unsent.Spec, &stored.Spec} {
		g.Expect(s.TimeZoneOrDefault()).To(Equal(spec.TimeZone))
		g.Expect(s.StartingDeadline()).To(Equal(time.Duration(*spec.StartingDeadlineSeconds) * time.Second))
		g.Expect(s.Suspended()).To(Equal(*spec.Suspend))
		g.Expect(s.ConcurrencyPolicyOrDefault()).To(Equal(spec.ConcurrencyPolicy))
		g.Expect(s.SuccessfulHistoryLimit()).To(Equal(*spec.SuccessfulJobsHistoryLimit))
		g.Expect(s.FailedHistoryLimit()).To(Equal(*spec.FailedJobsHistoryLimit))
		g.Expect(s.OnDeleteOrDefault()).To(Equal(spec.OnDelete))
		g.Expect(s.Lock.OccurrenceKeyTemplate()).To(Equal(lock.OccurrenceKey))
		g.Expect(s.Lock.TTLOrDefault()).To(Equal(lock.TTL.Duration))
		g.Expect(s.Lock.RenewIntervalOrDefault()).To(Equal(lock.TTL.Duration / 3))
		g.Expect(s.Lock.MaxHoldOrDefault()).To(Equal(lock.MaxHold.Duration))
		g.Expect(s.Lock.KeepAfterSuccessOrDefault()).To(Equal(lock.KeepAfterSuccess.Duration))
		g.Expect(s.Lock.OnBusyOrDefault()).To(Equal(lock.OnBusy))
		g.Expect(s.Lock.StoreFailurePolicyOrDefault()).To(Equal(lock.StoreFailurePolicy))
		g.Expect(s.Fencing.PolicyOrDefault()).To(Equal(spec.Fencing.Policy))
		g.Expect(s.Fencing.KeyTemplate()).To(Equal(spec.Fencing.Key))
		g.Expect(s.Fencing.EnvNameOrDefault()).To(Equal(spec.Fencing.EnvName))
		g.Expect(s.PodGracePeriod()).To(Equal(gjv1.DefaultPodGracePeriod))
	}
}

func TestFullStatusIsAccepted(t *testing.T) {
	requireAPIServer(t)
	g := NewWithT(t)
	ctx := testContext(t)

	gj := &gjv1.GuardedJob{}
	g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(validGuardedJob("status"), gj)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, gj)).To(Succeed())

	now := metav1.NewTime(time.Now().Truncate(time.Second))
	jobName := "status-29123456-5f3a9c"
	holder := "cluster-a/default/" + jobName
	gj.Status = gjv1.GuardedJobStatus{
		ObservedGeneration: gj.Generation,
		Conditions: []metav1.Condition{
			{Type: gjv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: gjv1.ScheduledReason, Message: "next run at ...", LastTransitionTime: now},
			{Type: gjv1.LockHeldCondition, Status: metav1.ConditionTrue, Reason: gjv1.LockAcquiredReason, LastTransitionTime: now},
			{Type: gjv1.StoreReachableCondition, Status: metav1.ConditionTrue, Reason: gjv1.StoreAvailableReason, LastTransitionTime: now},
			{Type: gjv1.StoreSafeCondition, Status: metav1.ConditionUnknown, Reason: gjv1.ConfigUnknownReason, LastTransitionTime: now},
		},
		NextScheduleTime:   &now,
		LastScheduleTime:   &now,
		LastSuccessfulTime: &now,
		LastFence:          34,
		Lock:               &gjv1.LockStatus{State: gjv1.LockStateHeld, Key: "default:report", Holder: holder, Fence: 34},
		LastRunNow:         "2026-11-30T10:00:00Z",
		Active: []gjv1.ActiveRun{
			{
				JobName:            jobName,
				JobUID:             "6f1c0b9e-8d1f-4a52-9d0e-3d1c5a7b2e10",
				Phase:              gjv1.RunPhaseRunning,
				ScheduledTime:      now,
				Key:                "default:report",
				OccurrenceKey:      "default:report:done:1750000000",
				FenceKey:           "default:report:fence",
				Store:              "default",
				Holder:             holder,
				Token:              holder + "#5f3a9c0d1e2f",
				Cluster:            "cluster-a",
				OwnerUID:           gj.UID,
				Fence:              34,
				AcquiredAt:         &now,
				TTL:                metav1.Duration{Duration: time.Minute},
				RenewInterval:      metav1.Duration{Duration: 20 * time.Second},
				MaxHold:            metav1.Duration{Duration: 24 * time.Hour},
				EnvName:            gjv1.DefaultFenceEnvName,
				FencingPolicy:      gjv1.FencingInject,
				StoreFailurePolicy: gjv1.FailClosed,
			},
			{
				JobName:       "status-29123457-0a1b2c",
				Phase:         gjv1.RunPhaseStopping,
				ScheduledTime: now,
				Unguarded:     true,
				StopReason:    "replaced by a newer run (concurrencyPolicy Replace)",
			},
		},
		LastRun: &gjv1.RunRecord{
			JobName:       "status-29123450-abcdef",
			ScheduledTime: &now,
			Key:           "default:report",
			Fence:         33,
			Result:        gjv1.RunResultBusy,
			HeldBy:        "cluster-b/default/status-29123450-123456",
			FinishedAt:    &now,
			Message:       "lock default:report is held by cluster-b/default/status-29123450-123456",
		},
	}
	want := gj.Status.DeepCopy()
	g.Expect(k8sClient.Status().Update(ctx, gj)).To(Succeed())

	var stored gjv1.GuardedJob
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(gj), &stored)).To(Succeed())
	g.Expect(stored.Status.Active).To(HaveLen(2))
	g.Expect(stored.Status.Active[0].Token).To(Equal(want.Active[0].Token))
	g.Expect(stored.Status.Active[0].TTL).To(Equal(want.Active[0].TTL))
	g.Expect(stored.Status.Lock).To(Equal(want.Lock))
	g.Expect(stored.Status.LastRun.Result).To(Equal(gjv1.RunResultBusy))

	// Two active runs with the same Job name break listType=map.
	stored.Status.Active = append(stored.Status.Active, stored.Status.Active[0])
	err := k8sClient.Status().Update(ctx, &stored)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("Duplicate value"))
}

// kubectl get gj prints the table the API server makes from the CRD's printer
// columns: ACTIVE counts the active runs (0 before any, not blank) and LOCK shows
// the lock's state; HOLDER and FENCE are only in -o wide.
func TestGetShowsActiveRunsAndTheLock(t *testing.T) {
	requireAPIServer(t)
	g := NewWithT(t)
	ctx := testContext(t)

	gj := &gjv1.GuardedJob{}
	g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(validGuardedJob("columns"), gj)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, gj)).To(Succeed())
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	// A status written before status.activeCount existed reads back with 0.
	gj.Status = gjv1.GuardedJobStatus{LastScheduleTime: &now, Lock: &gjv1.LockStatus{State: gjv1.LockStateFree}}
	g.Expect(k8sClient.Status().Update(ctx, gj)).To(Succeed())
	g.Expect(table(t, "columns")).To(And(HaveKeyWithValue("Active", BeNumerically("==", 0)), HaveKeyWithValue("Lock", "Free")))

	gj.Status.Active = []gjv1.ActiveRun{{JobName: "columns-29123456-5f3a9c", Phase: gjv1.RunPhaseRunning, ScheduledTime: now, Holder: "cluster-a/default/columns-29123456-5f3a9c", Fence: 7}}
	gj.Status.ActiveCount = 1
	gj.Status.LastFence = 7
	gj.Status.Lock = &gjv1.LockStatus{State: gjv1.LockStateHeld, Key: "default:columns", Holder: "cluster-a/default/columns-29123456-5f3a9c", Fence: 7}
	g.Expect(k8sClient.Status().Update(ctx, gj)).To(Succeed())
	row := table(t, "columns")
	g.Expect(row).To(And(HaveKeyWithValue("Active", BeNumerically("==", 1)), HaveKeyWithValue("Lock", "Held"),
		HaveKeyWithValue("Schedule", gj.Spec.Schedule), HaveKeyWithValue("Suspend", false)))
	g.Expect(row).To(And(HaveKeyWithValue("Holder", "cluster-a/default/columns-29123456-5f3a9c"), HaveKeyWithValue("Fence", BeNumerically("==", 7))),
		"the wide columns are in the table too; kubectl shows them with -o wide")
}

// table returns the cells of GuardedJob name's row in the table kubectl get
// receives, by column name.
func table(t *testing.T, name string) map[string]any {
	t.Helper()
	g := NewWithT(t)
	ctx := testContext(t)
	httpClient, err := rest.HTTPClientFor(restConfig)
	g.Expect(err).NotTo(HaveOccurred())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		strings.TrimSuffix(restConfig.Host, "/")+"/apis/batch.guardedjob.dev/v1alpha1/namespaces/default/guardedjobs/"+name, nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := httpClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), string(body))
	var tbl metav1.Table
	g.Expect(json.Unmarshal(body, &tbl)).To(Succeed())
	g.Expect(tbl.Rows).To(HaveLen(1))
	out := map[string]any{}
	for i, c := range tbl.ColumnDefinitions {
		out[c.Name] = tbl.Rows[0].Cells[i]
	}
	return out
}
