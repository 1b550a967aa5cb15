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

// TestFaults checks GuardedJob's promise from outside while things break: two local
// clusters share one Redis, the same GuardedJobs run in both, faults are injected at
// random from a printed seed, and the history of every Pod is checked afterwards
// (checker.go). A run proves something only if its faults hit running Pods: it fails
// unless at least one fault per 45 s of the fault period did (Fault.Hit). Run it with
// `make test-e2e`. Environment:
//
//	E2E_FAULTS=1             run the test (make test-e2e sets it; plain go test skips it)
//	E2E_SEED=N               replay the fault schedule of a printed seed
//	E2E_FAULT_SECONDS=180    how long faults are injected
//	E2E_QUIET_SECONDS=45     the quiet period after them, in which every key must succeed
//	E2E_COMPOUND_FAULTS=0    leave out the compound faults: a manager restarted while
//	                         cut off from Redis, and a leader killed while its API server
//	                         is slow (on by default)
//	E2E_DIR=path             keep logs, state and the history (history.json) there instead
//	                         of in a temporary directory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/bins"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/testproc"
)

const (
	namespace = "e2e"
	keys      = 3
	schedule  = "@every 6s"
	// Lease timing: ttl - renewInterval (13s) > leader lease + retry period + 5s (12s),
	// and ttl >= renewInterval + Pod grace + 5s.
	ttl           = 16 * time.Second
	renewInterval = 3 * time.Second
	podGrace      = 2 * time.Second
	leaderLease   = 6 * time.Second
	// slack is the time the stop path may take on a loaded 2-core machine, beyond the
	// renewal that finds the lease gone and the Pod's grace period.
	slack = 5 * time.Second
	// slowAPI is the delay the slow-api-resume fault adds to every chunk sent either
	// way through an API server's proxy: about 200 ms per request, the latency the
	// leader handover margin (5s) is designed for. Much slower API servers can
	// delay the election itself past the lease; the lease timing rule assumes they
	// answer.
	slowAPI = 100 * time.Millisecond
	// restartDelay is the harness' restart back-off, like a Deployment's.
	restartDelay = time.Second
	// Pod outcome and run time, picked per Pod and handed to kwok through the demo's
	// stage annotations (hack/demo/kwok-stages.yaml).
	runForAnnotation = "demo.guardedjob.dev/run-for"
	failAnnotation   = "demo.guardedjob.dev/fail"
	failShare        = 0.25
	longShare        = 0.2
	// hitEvery: the run fails unless at least one fault per hitEvery of the fault
	// period hit a running Pod (Fault.Hit): 4 with the default 180 s, where runs on a
	// busy 2-core machine saw 8 of 13, 10 of 14 and 10 of 13 faults hit.
	hitEvery = 45 * time.Second
	// precondition is how long the harness waits for what a fault needs (a leader in
	// each cluster, a long run, a held key) before it fails the test.
	precondition = 90 * time.Second
)

func envInt(t *testing.T, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

func TestFaults(t *testing.T) {
	if os.Getenv("E2E_FAULTS") != "1" {
		t.Skip("the fault test runs with `make test-e2e` (E2E_FAULTS=1)")
	}
	// make test-e2e runs its tests side by side: each has clusters of its own,
	// and most of their time is waiting on them.
	t.Parallel()
	seed := envInt(t, "E2E_SEED", time.Now().UnixNano()%1_000_000_007)
	faultFor := time.Duration(envInt(t, "E2E_FAULT_SECONDS", 180)) * time.Second
	quiet := time.Duration(envInt(t, "E2E_QUIET_SECONDS", 45)) * time.Second
	compound := os.Getenv("E2E_COMPOUND_FAULTS") != "0"
	t.Logf("seed %d (replay with E2E_SEED=%d); faults for %s, quiet for %s, compound faults %t", seed, seed, faultFor, quiet, compound)

	root := repoRoot(t)
	dir := os.Getenv("E2E_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Logf("logs and state in %s", dir)
	ctx := t.Context()
	started := time.Now()

	// Building the control plane takes minutes on a fresh machine (seconds once cached).
	build := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-control-plane.sh"), "--demo")
	var progress bytes.Buffer
	build.Stderr = &progress
	out, err := build.Output()
	if err != nil {
		t.Fatalf("hack/build-control-plane.sh --demo: %v\n%s", err, progress.String())
	}
	cp := controlPlaneBinaries{dir: strings.TrimSpace(string(out))}
	managerBin := bins.Manager(t)

	w := &world{t: t, dir: dir, rec: newRecorder(seed), rng: rand.New(rand.NewPCG(uint64(seed), 2))}
	w.redis = redisserver.Start(t)
	w.rdb = w.redis.Client(t)
	for i := range keys {
		w.rec.keyOf[gjName(i)] = lockKey(i)
		w.rec.h.Keys = append(w.rec.h.Keys, lockKey(i))
	}

	// The two control planes start in parallel.
	names := []string{"cluster-a", "cluster-b"}
	w.clusters = make([]*cluster, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			w.clusters[i], errs[i] = startCluster(ctx, name, filepath.Join(dir, name), cp, root)
		})
	}
	wg.Wait()
	for i := range names {
		if w.clusters[i] != nil {
			t.Cleanup(w.clusters[i].stop)
		}
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	t.Logf("two control planes up after %s", time.Since(started).Round(time.Second))

	// Two replicas in cluster-a, one in cluster-b. The replicas of a cluster share its
	// Redis proxy: they must be given the same store URL, as a Deployment's replicas
	// are, since a run records the store it uses. Cleanups run last-in first-out: the
	// managers stop before their proxies and the control planes.
	for _, spec := range []struct {
		c *cluster
		n int
	}{{w.clusters[0], 2}, {w.clusters[1], 1}} {
		px, err := startProxy(w.redis.Addr())
		if err != nil {
			t.Fatal(err)
		}
		spec.c.redisProxy = px
		t.Cleanup(px.Close)
		for i := range spec.n {
			r, err := newReplica(fmt.Sprintf("%s-%d", spec.c.name, i), spec.c, managerBin, dir, w.rec)
			if err != nil {
				t.Fatal(err)
			}
			w.replicas = append(w.replicas, r)
			t.Cleanup(r.stop)
		}
	}
	for _, c := range w.clusters {
		w.observe(ctx, c)
	}
	pollDone := w.pollRedis(ctx)
	t.Cleanup(pollDone)

	// The same manifests in both clusters, as a GitOps repository would apply them.
	for _, c := range w.clusters {
		for i := range keys {
			if err := poll(ctx, 30*time.Second, "create "+gjName(i), func() error { return c.client.Create(ctx, workload(i)) }); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("workload applied after %s: %d keys, %s, in both clusters", time.Since(started).Round(time.Second), keys, schedule)

	// Before any fault: every GuardedJob is Ready and runs start in both clusters.
	// Otherwise the faults would test nothing: say why at once.
	if err := poll(ctx, 90*time.Second, "every GuardedJob Ready and a run started in each cluster", func() error {
		return w.started(ctx)
	}); err != nil {
		for _, r := range w.replicas {
			t.Logf("--- %s (last 25 lines of its current log, without stack traces)\n%s", r.name, stackTrace.ReplaceAllString(r.tail(25), ""))
		}
		t.Fatal(err)
	}

	w.unlockProbe(ctx)

	lim := Limits{RenewInterval: renewInterval, PodGrace: podGrace, Slack: slack, CrashLoopExits: 3, CrashLoopWindow: time.Minute,
		MinHits: int(faultFor / hitEvery)}

	// Faults, one after the other, from a deck that holds every kind.
	kinds := []FaultKind{FaultManagerKill, FaultManagerPause, FaultRedisDataLoss, FaultKeyTheft, FaultAPIOutage, FaultRedisCut}
	if compound {
		kinds = append(kinds, FaultRestartCutOff, FaultSlowAPIResume)
	}
	faultsEnd := time.Now().Add(faultFor)
	var deck []FaultKind
	for time.Now().Before(faultsEnd) && ctx.Err() == nil {
		if len(deck) == 0 {
			deck = slices.Clone(kinds)
			w.rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		}
		kind := deck[0]
		deck = deck[1:]
		if kind.breaksLeases() {
			// The window in which two Pods may overlap assumes a manager that can act:
			// each cluster must have a leader when the lease breaks, and no other fault
			// may follow until the window has passed (that would be a compound fault).
			w.awaitLeaders(ctx)
		}
		w.inject(ctx, kind)
		gap := time.Duration(2000+w.rng.IntN(3000)) * time.Millisecond
		if kind.breaksLeases() {
			gap = lim.OverlapWindow()
		}
		w.wait(ctx, gap)
	}
	w.rec.mu.Lock()
	w.rec.h.QuietStart = time.Now()
	w.rec.mu.Unlock()
	t.Logf("faults stopped; quiet period of %s", quiet)
	w.wait(ctx, quiet)

	// Drain: suspend every GuardedJob; what runs must finish and release its lock.
	for _, c := range w.clusters {
		for i := range keys {
			if err := poll(ctx, 30*time.Second, "suspend "+gjName(i), func() error {
				return c.client.Patch(ctx, &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: gjName(i), Namespace: namespace}},
					client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`)))
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// What is left at the deadline is also reported by the checker, one line each.
	if err := poll(ctx, 60*time.Second, "every run finished and every lock released", func() error {
		running, locked, active := w.leftovers(ctx)
		if n := len(running) + len(locked) + len(active); n > 0 {
			return fmt.Errorf("%d left: %s", n, strings.Join(slices.Concat(running, locked, active), "; "))
		}
		return nil
	}); err != nil {
		t.Errorf("drain after the quiet period: %v", err)
	}
	running, locked, active := w.leftovers(ctx)
	// The control plane components are not restarted: one that died would leave the
	// history meaningless.
	for _, c := range w.clusters {
		for _, p := range c.procs {
			if p.Exited() {
				t.Errorf("%s exited during the test:\n%s", p.Name, p.Tail(20))
			}
		}
	}

	h := w.rec.history()
	h.LeftRunning, h.LeftLocked, h.LeftActive = running, locked, active
	if data, err := json.MarshalIndent(h, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "history.json"), data, 0o600)
	}
	res := Check(h, lim)
	t.Logf("fault test finished after %s:\n%s", time.Since(started).Round(time.Second), Summary(h, res))
	if len(res.Violations) > 0 {
		t.Logf("history:\n%s", Timeline(h))
		t.Logf("GuardedJobs at the end:\n%s", w.describe(ctx))
		for _, r := range w.replicas {
			t.Logf("--- %s (last 25 lines of its current log, without stack traces)\n%s", r.name, stackTrace.ReplaceAllString(r.tail(25), ""))
		}
		t.Errorf("%d violations (seed %d; replay with E2E_SEED=%d)", len(res.Violations), seed, seed)
	}
}

var stackTrace = regexp.MustCompile(`,"stacktrace":"[^"]*"`)

func gjName(i int) string  { return fmt.Sprintf("work-%d", i) }
func lockKey(i int) string { return namespace + ":" + gjName(i) }

// workload is the GuardedJob of key i: a run every few seconds, Strict fences, one
// Pod per run that kwok runs for a random time and lets succeed or fail.
func workload(i int) *batchv1alpha1.GuardedJob {
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	return &batchv1alpha1.GuardedJob{
		ObjectMeta: metav1.ObjectMeta{Name: gjName(i), Namespace: namespace},
		Spec: batchv1alpha1.GuardedJobSpec{
			Schedule: schedule, TimeZone: "UTC", StartingDeadlineSeconds: ptr.To(int64(5)),
			ConcurrencyPolicy:          batchv1alpha1.ForbidConcurrent,
			SuccessfulJobsHistoryLimit: ptr.To(int32(1)), FailedJobsHistoryLimit: ptr.To(int32(1)),
			Lock: batchv1alpha1.LockSpec{
				Key: lockKey(i), TTL: d(ttl), RenewInterval: d(renewInterval), MaxHold: d(2 * time.Minute),
				OnBusy: batchv1alpha1.OnBusySkip, StoreFailurePolicy: batchv1alpha1.FailClosed,
			},
			Fencing: &batchv1alpha1.FencingSpec{Policy: batchv1alpha1.FencingStrict},
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To(int32(0)),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy:                 corev1.RestartPolicyNever,
					TerminationGracePeriodSeconds: ptr.To(int64(podGrace / time.Second)),
					Containers:                    []corev1.Container{{Name: "work", Image: "busybox:1.36", Command: []string{"sh", "-c", "sleep 3"}}},
				}},
			}},
		},
	}
}

// ---------------------------------------------------------------------------------
// The world: clusters, Redis, managers, and what is recorded about them.

type world struct {
	t        *testing.T
	dir      string
	clusters []*cluster
	redis    *redisserver.Server
	rdb      *redis.Client
	replicas []*replica
	rec      *recorder
	rng      *rand.Rand // the fault schedule: only the test goroutine uses it
}

// wait lets d pass (a fault's duration, a gap between faults, the quiet period).
func (w *world) wait(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (w *world) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

func (w *world) pick(rs []*replica) *replica { return rs[w.rng.IntN(len(rs))] }

// leader returns the replica of c that leads, or any replica of c if none does.
func (w *world) leader(c *cluster) *replica {
	var all []*replica
	for _, r := range w.replicas {
		if r.cluster == c {
			all = append(all, r)
			if r.leads() {
				return r
			}
		}
	}
	return w.pick(all)
}

func (w *world) inject(ctx context.Context, kind FaultKind) {
	f := Fault{Kind: kind, At: time.Now()}
	switch kind {
	case FaultManagerKill:
		// Half of the time the leader of cluster-a, which has a standby to take over.
		r := w.pick(w.replicas)
		if w.rng.IntN(2) == 0 {
			r = w.leader(w.clusters[0])
		}
		f.Target, f.Cluster, f.Leader = r.name, r.cluster.name, r.leads()
		f.At = time.Now()
		r.kill()
	case FaultManagerPause:
		r := w.pick(w.replicas)
		f.Target, f.Cluster, f.Leader = r.name, r.cluster.name, r.leads()
		d := w.between(2*time.Second, 8*time.Second)
		f.At = time.Now()
		r.signal(syscall.SIGSTOP)
		w.wait(ctx, d)
		r.signal(syscall.SIGCONT)
	case FaultRedisDataLoss:
		f.Target = "redis"
		f.At = time.Now()
		w.redis.Restart(w.t)
	case FaultKeyTheft:
		// The foreign holder lets go soon, so that the next run can start beside a
		// victim that did not stop.
		f.Key, f.Victim, f.At = w.stealHeldKey(ctx, w.between(time.Second, 3*time.Second))
		f.Target = f.Key + " (held by " + f.Victim + ")"
	case FaultAPIOutage:
		c := w.clusters[w.rng.IntN(len(w.clusters))]
		f.Target, f.Cluster = c.name, c.name
		// Longer than the leader election lease: the leader loses leadership and
		// renews its leases alone (renew-only mode) until the API server answers.
		d := w.between(leaderLease+2*time.Second, leaderLease+6*time.Second)
		f.At = time.Now()
		c.apiProxy.Cut()
		w.wait(ctx, d)
		c.apiProxy.Restore()
	case FaultRedisCut:
		c := w.clusters[w.rng.IntN(len(w.clusters))]
		f.Target, f.Cluster = c.name, c.name
		d := w.between(2*time.Second, 10*time.Second)
		f.At = time.Now()
		c.redisProxy.Cut()
		w.wait(ctx, d)
		c.redisProxy.Restore()
	case FaultRestartCutOff:
		c := w.clusters[w.rng.IntN(len(w.clusters))]
		w.awaitLongRun(ctx, c)
		r := w.leader(c)
		f.Target, f.Cluster, f.Leader = r.name, c.name, r.leads()
		// Longer than the ttl: the lease expires unless the Pods are stopped first.
		d := w.between(ttl+2*time.Second, ttl+8*time.Second)
		f.At = time.Now()
		c.redisProxy.Cut()
		r.kill() // restarted after restartDelay, still cut off
		w.wait(ctx, d)
		c.redisProxy.Restore()
	case FaultSlowAPIResume:
		c := w.clusters[0]
		w.awaitLongRun(ctx, c)
		r := w.leader(c)
		f.Target, f.Cluster, f.Leader = r.name, c.name, r.leads()
		f.At = time.Now()
		c.apiProxy.SetLatency(slowAPI)
		r.kill() // the standby resumes the leases behind the slow API server
		w.wait(ctx, ttl+8*time.Second)
		c.apiProxy.SetLatency(0)
	}
	f.Until = time.Now()
	w.t.Logf("%s fault %s %s (%.1fs)", f.At.Format("15:04:05.0"), f.Kind, f.Target, f.Until.Sub(f.At).Seconds())
	w.rec.fault(f)
}

// awaitLeaders waits until each cluster has a leading manager, and fails the test
// if that takes longer than the precondition wait.
func (w *world) awaitLeaders(ctx context.Context) {
	err := poll(ctx, precondition, "a leader in each cluster", func() error {
		for _, c := range w.clusters {
			if !w.leader(c).leads() {
				return fmt.Errorf("no leader in %s", c.name)
			}
		}
		return nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

// awaitLongRun waits until a Pod runs in c that only renewals keep safe (its run
// time exceeds the ttl): the compound faults aim at such runs. Meanwhile the next
// Pod of c is given such a run time. It fails the test if that takes longer than the
// precondition wait.
func (w *world) awaitLongRun(ctx context.Context, c *cluster) {
	err := poll(ctx, precondition, "a long run in "+c.name, func() error {
		if !w.rec.longRunning(c.name) {
			w.rec.wantLong(c.name)
			return errors.New("none yet")
		}
		return nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

// steal replaces the token in KEYS[1] with ARGV[2] (for ARGV[3] ms) only while it is
// still ARGV[1]: the theft takes exactly the lease the harness saw.
var steal = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
end
return false`)

// stealHeldKey waits until a lock key is held by a run of either cluster whose Pod
// runs, then overwrites exactly that run's token with a foreign one that expires
// after thiefTTL. It returns the key, the victim (the run's holder) and when the
// theft was sent, and fails the test if no such run held a key for the precondition
// wait.
func (w *world) stealHeldKey(ctx context.Context, thiefTTL time.Duration) (key, victim string, at time.Time) {
	first := w.rng.IntN(keys)
	thief := "foreign/" + namespace + "/thief#" + randomHex(4)
	err := poll(ctx, precondition, "a lock key held by a run whose Pod runs", func() error {
		for j := range keys {
			k := lockKey((first + j) % keys)
			token, err := w.rdb.Get(ctx, k).Result()
			if err == redis.Nil {
				continue
			}
			if err != nil {
				return err
			}
			holder, _, _ := strings.Cut(token, "#")
			if !w.runHolder(holder) || !w.rec.podRunning(holder) {
				continue
			}
			sent := time.Now()
			switch err := steal.Run(ctx, w.rdb, []string{k}, token, thief, thiefTTL.Milliseconds()).Err(); {
			case err == redis.Nil: // released or taken over meanwhile
				continue
			case err != nil:
				return err
			}
			key, victim, at = k, holder, sent
			return nil
		}
		return errors.New("no lock key is held by a run whose Pod runs")
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return key, victim, at
}

// runHolder says whether holder (<cluster>/<namespace>/<job>) is a run of one of the
// test's clusters, not a thief.
func (w *world) runHolder(holder string) bool {
	for _, c := range w.clusters {
		if strings.HasPrefix(holder, c.name+"/"+namespace+"/") {
			return true
		}
	}
	return false
}

// observe records every Pod of namespace e2e in c, from a watch through c's API proxy:
// when that API server is unreachable, so is this view of it. New Pods get a random
// run time and outcome.
func (w *world) observe(ctx context.Context, c *cluster) {
	f := informers.NewSharedInformerFactoryWithOptions(c.clientset, 0, informers.WithNamespace(namespace))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			p := obj.(*corev1.Pod)
			w.rec.pod(c.name, p, false)
			if p.Status.Phase == corev1.PodPending && p.Annotations[runForAnnotation] == "" {
				go w.annotate(ctx, c, p)
			}
		},
		UpdateFunc: func(_, obj any) { w.rec.pod(c.name, obj.(*corev1.Pod), false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				w.rec.pod(c.name, p, true)
			}
		},
	})
	if err != nil {
		w.t.Fatal(err)
	}
	stop := make(chan struct{})
	f.Start(stop)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		close(stop)
		w.t.Fatalf("%s: Pod informer did not sync", c.name)
	}
	// After an outage the informer's watch comes back only after its back-off (many
	// seconds), and would see deletions late: a list every 250 ms sees them as soon as
	// the API server answers again.
	listDone := make(chan struct{})
	go func() {
		defer close(listDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			sent := time.Now()
			pods := &corev1.PodList{}
			if err := c.client.List(ctx, pods, client.InNamespace(namespace)); err != nil {
				continue
			}
			w.rec.gone(c.name, pods.Items, sent, time.Now())
		}
	}()
	w.t.Cleanup(func() { close(stop); f.Shutdown(); <-listDone })
}

// annotate picks the Pod's run time and outcome. A Pod missed (its API server cut off)
// runs for the stages' default time and succeeds.
func (w *world) annotate(ctx context.Context, c *cluster, p *corev1.Pod) {
	runFor, fail := w.rec.outcome(c.name)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`, runForAnnotation, runFor, failAnnotation, strconv.FormatBool(fail))
	// A new object: Patch writes the answer into it, and p belongs to the informer.
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
	_ = c.client.Patch(ctx, target, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// pollRedis records every change of holder of the lock keys, from a direct connection
// (the managers' proxies may be cut). It returns a function that stops it.
func (w *world) pollRedis(ctx context.Context) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	ks := make([]string, keys)
	for i := range ks {
		ks[i] = lockKey(i)
	}
	go func() {
		defer close(done)
		last := make([]string, keys)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			vals, err := w.rdb.MGet(ctx, ks...).Result()
			if err != nil {
				continue
			}
			now := time.Now()
			for i, v := range vals {
				s, _ := v.(string)
				holder, _, _ := strings.Cut(s, "#")
				if holder != last[i] && last[i] != "" {
					w.rec.release(Release{Key: ks[i], Holder: last[i], At: now})
				}
				last[i] = holder
			}
		}
	}()
	return func() { cancel(); <-done }
}

// describe lists each GuardedJob's conditions and last run, as kubectl describe would.
func (w *world) describe(ctx context.Context) string {
	var b strings.Builder
	for _, c := range w.clusters {
		gjs := &batchv1alpha1.GuardedJobList{}
		if err := c.client.List(ctx, gjs, client.InNamespace(namespace)); err != nil {
			fmt.Fprintf(&b, "%s: %v\n", c.name, err)
			continue
		}
		for _, gj := range gjs.Items {
			fmt.Fprintf(&b, "%s %s:", c.name, gj.Name)
			for _, cond := range gj.Status.Conditions {
				fmt.Fprintf(&b, " %s=%s(%s)", cond.Type, cond.Status, cond.Reason)
			}
			if r := gj.Status.LastRun; r != nil {
				fmt.Fprintf(&b, "; last run %s %s: %s", r.JobName, r.Result, r.Message)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// started fails unless every GuardedJob is Ready in both clusters and a Pod of each
// cluster has started.
func (w *world) started(ctx context.Context) error {
	for _, c := range w.clusters {
		gjs := &batchv1alpha1.GuardedJobList{}
		if err := c.client.List(ctx, gjs, client.InNamespace(namespace)); err != nil {
			return err
		}
		for _, gj := range gjs.Items {
			ready := meta.FindStatusCondition(gj.Status.Conditions, batchv1alpha1.ReadyCondition)
			if ready == nil || ready.Status != metav1.ConditionTrue {
				return fmt.Errorf("%s %s not Ready: %v", c.name, gj.Name, ready)
			}
		}
		if !w.rec.ranIn(c.name) {
			return fmt.Errorf("no Pod started in %s yet", c.name)
		}
	}
	return nil
}

// leftovers lists the Pods not finished, the lock keys held and the runs in status.
func (w *world) leftovers(ctx context.Context) (running, locked, active []string) {
	for _, c := range w.clusters {
		pods := &corev1.PodList{}
		if err := c.client.List(ctx, pods, client.InNamespace(namespace)); err != nil {
			running = append(running, fmt.Sprintf("%s: cannot list Pods: %v", c.name, err))
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				running = append(running, fmt.Sprintf("%s %s (%s)", c.name, p.Name, p.Status.Phase))
			}
		}
		gjs := &batchv1alpha1.GuardedJobList{}
		if err := c.client.List(ctx, gjs, client.InNamespace(namespace)); err != nil {
			active = append(active, fmt.Sprintf("%s: cannot list GuardedJobs: %v", c.name, err))
		}
		for _, gj := range gjs.Items {
			for _, a := range gj.Status.Active {
				active = append(active, fmt.Sprintf("%s %s: %s (%s)", c.name, gj.Name, a.JobName, a.Phase))
			}
		}
	}
	for i := range keys {
		v, err := w.rdb.Get(ctx, lockKey(i)).Result()
		switch {
		case err == redis.Nil:
		case err != nil:
			locked = append(locked, fmt.Sprintf("%s: %v", lockKey(i), err))
		default:
			holder, _, _ := strings.Cut(v, "#")
			locked = append(locked, lockKey(i)+" held by "+holder)
		}
	}
	return running, locked, active
}

// ---------------------------------------------------------------------------------
// Manager replicas

// replica is one manager process slot, restarted after any exit as a Deployment would.
type replica struct {
	name    string
	cluster *cluster
	bin     string
	args    []string
	dir     string
	rec     *recorder

	mu       sync.Mutex
	p        *testproc.Proc
	starts   int
	killing  bool // the harness is killing it: not an exit to record
	stopping bool
	stopCh   chan struct{}
	done     chan struct{}
}

func newReplica(name string, c *cluster, bin, dir string, rec *recorder) (*replica, error) {
	r := &replica{
		name: name, cluster: c, bin: bin, dir: filepath.Join(dir, "managers"), rec: rec,
		stopCh: make(chan struct{}), done: make(chan struct{}),
		args: []string{
			"--kubeconfig=" + c.managerConfig, "--redis-url=redis://" + c.redisProxy.Addr() + "/0", "--cluster-name=" + c.name,
			"--leader-elect", "--leader-election-namespace=" + c.electionNamespace,
			"--leader-elect-lease-duration=" + leaderLease.String(), "--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=1s",
			"--metrics-bind-address=0", "--health-probe-bind-address=0",
		},
	}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, err
	}
	go r.supervise()
	return r, nil
}

func (r *replica) supervise() {
	defer close(r.done)
	for {
		r.mu.Lock()
		if r.stopping {
			r.mu.Unlock()
			return
		}
		r.starts++
		p, err := testproc.Start(r.name, filepath.Join(r.dir, fmt.Sprintf("%s.%d.log", r.name, r.starts)), r.bin, r.args...)
		if err == nil {
			r.p = p
		}
		r.mu.Unlock()
		if err != nil {
			r.rec.exit(ManagerExit{Replica: r.name, At: time.Now(), Reason: err.Error()})
		} else {
			<-p.Done()
			r.mu.Lock()
			stopping, killed := r.stopping, r.killing
			r.killing = false
			r.mu.Unlock()
			if stopping {
				return
			}
			if !killed {
				tail := p.Tail(15)
				r.rec.exit(ManagerExit{Replica: r.name, At: time.Now(), Designed: designedExit.MatchString(tail), Reason: tail})
			}
		}
		select {
		case <-r.stopCh:
			return
		case <-time.After(restartDelay):
		}
	}
}

// designedExit matches the last words of renew-only mode (cmd/manager): leadership
// was lost and the API server answers (again), so the process exits and the leader
// resumes the leases.
var designedExit = regexp.MustCompile(`Leadership moved to another replica|exiting so that the leader resumes the leases`)

func (r *replica) current() *testproc.Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.p
}

// kill sends SIGKILL to the running process; the supervisor restarts it.
func (r *replica) kill() {
	r.mu.Lock()
	p := r.p
	if p == nil || p.Exited() {
		r.mu.Unlock()
		return
	}
	r.killing = true
	r.mu.Unlock()
	p.Kill()
}

func (r *replica) signal(sig syscall.Signal) {
	if p := r.current(); p != nil {
		p.Signal(sig)
	}
}

func (r *replica) leads() bool {
	p := r.current()
	return p != nil && !p.Exited() && strings.Contains(strings.ToLower(p.Tail(1000)), "successfully acquired lease")
}

func (r *replica) tail(n int) string {
	if p := r.current(); p != nil {
		return p.Tail(n)
	}
	return "(never started)"
}

func (r *replica) stop() {
	r.mu.Lock()
	r.stopping = true
	p := r.p
	r.mu.Unlock()
	close(r.stopCh)
	if p != nil {
		p.Stop(10 * time.Second)
	}
	<-r.done
}

// ---------------------------------------------------------------------------------
// The recorder

type podObs struct {
	cluster   string
	pod       *corev1.Pod
	firstSeen time.Time
	deletedAt time.Time
}

type recorder struct {
	mu    sync.Mutex
	h     History
	pods  map[types.UID]*podObs
	keyOf map[string]string // GuardedJob name -> lock key
	rng   *rand.Rand        // Pod outcomes
	long  map[string]bool   // clusters whose next Pod runs longer than the ttl
}

func newRecorder(seed int64) *recorder {
	return &recorder{h: History{Seed: seed}, pods: map[types.UID]*podObs{}, keyOf: map[string]string{},
		rng: rand.New(rand.NewPCG(uint64(seed), 1)), long: map[string]bool{}}
}

// wantLong makes the next Pod of cluster run longer than the ttl.
func (r *recorder) wantLong(cluster string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.long[cluster] = true
}

func (r *recorder) fault(f Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Faults = append(r.h.Faults, f)
}

func (r *recorder) exit(e ManagerExit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Exits = append(r.h.Exits, e)
}

func (r *recorder) release(rel Release) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Releases = append(r.h.Releases, rel)
}

// outcome picks the run time of a Pod of cluster and whether it fails. Most runs are
// short; some run long enough that a Pod left running after losing its lease would
// meet the next run.
func (r *recorder) outcome(cluster string) (runFor string, fail bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ms := 1000 + r.rng.IntN(3000)
	if r.rng.Float64() < longShare || r.long[cluster] {
		// Longer than the lease's ttl: only renewals keep it.
		ms = 18000 + r.rng.IntN(8000)
		delete(r.long, cluster)
	}
	return fmt.Sprintf("%dms", ms), r.rng.Float64() < failShare
}

func (r *recorder) pod(cluster string, p *corev1.Pod, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.pods[p.UID]
	if o == nil {
		o = &podObs{cluster: cluster, firstSeen: time.Now()}
		r.pods[p.UID] = o
	}
	o.pod = p.DeepCopy()
	if deleted && o.deletedAt.IsZero() {
		o.deletedAt = time.Now()
	}
}

// ranIn says whether a Pod of cluster has started.
func (r *recorder) ranIn(cluster string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.pods {
		if o.cluster == cluster && o.pod.Status.StartTime != nil {
			return true
		}
	}
	return false
}

// longRunning says whether a Pod of cluster runs now with a run time beyond the ttl.
func (r *recorder) longRunning(cluster string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.pods {
		d, err := time.ParseDuration(o.pod.Annotations[runForAnnotation])
		if o.cluster == cluster && o.deletedAt.IsZero() && o.pod.DeletionTimestamp == nil &&
			o.pod.Status.Phase == corev1.PodRunning && err == nil && d > ttl {
			return true
		}
	}
	return false
}

// podRunning says whether a Pod of the run of holder runs now, as last seen.
func (r *recorder) podRunning(holder string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.pods {
		if o.pod.Annotations[batchv1alpha1.HolderAnnotation] == holder && o.deletedAt.IsZero() &&
			o.pod.DeletionTimestamp == nil && o.pod.Status.Phase == corev1.PodRunning {
			return true
		}
	}
	return false
}

// gone marks the Pods of cluster seen before a list was sent, and not in its answer
// present, as deleted at (at the latest) now.
func (r *recorder) gone(cluster string, present []corev1.Pod, sent, now time.Time) {
	there := make(map[types.UID]bool, len(present))
	for _, p := range present {
		there[p.UID] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, o := range r.pods {
		if o.cluster == cluster && !there[uid] && o.deletedAt.IsZero() && o.firstSeen.Before(sent) {
			o.deletedAt = now
		}
	}
}

// history turns the observations into the checker's history.
func (r *recorder) history() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	h.Faults = slices.Clone(r.h.Faults)
	h.Exits = slices.Clone(r.h.Exits)
	h.Releases = slices.Clone(r.h.Releases)
	for _, o := range r.pods {
		if run, ok := podRun(o, r.keyOf); ok {
			h.Pods = append(h.Pods, run)
		}
	}
	return h
}

// podRun reads one Pod's run from its last observed state. A Pod that stopped without
// a terminal status (deleted while running) ended when its deletion was seen, or at its
// deletionTimestamp (the end of its grace period) if that is earlier: after an outage
// of its API server, the deletion is seen late, so this is the latest possible time.
func podRun(o *podObs, keyOf map[string]string) (PodRun, bool) {
	p := o.pod
	key, ok := keyOf[p.Labels[batchv1alpha1.GuardedJobLabel]]
	if !ok {
		return PodRun{}, false
	}
	run := PodRun{Cluster: o.cluster, Name: p.Name, Key: key, Holder: p.Annotations[batchv1alpha1.HolderAnnotation],
		Created: p.CreationTimestamp.Time, Result: "Running"}
	fence := p.Annotations[batchv1alpha1.FenceAnnotation]
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == batchv1alpha1.DefaultFenceEnvName {
				fence = e.Value
			}
		}
	}
	run.Fence, _ = strconv.ParseInt(fence, 10, 64)
	run.Sched, _ = time.Parse(time.RFC3339, p.Annotations[batchv1alpha1.ScheduledTimeAnnotation])
	if p.Status.StartTime != nil && p.Status.Phase != corev1.PodPending {
		run.Start = p.Status.StartTime.Time
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		run.Result = string(p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.FinishedAt.After(run.End) {
				run.End = t.FinishedAt.Time
			}
		}
		if run.End.IsZero() {
			run.End = o.deletedAt
		}
	default:
		if !o.deletedAt.IsZero() {
			run.Result = "Deleted"
			run.End = o.deletedAt
			if dt := p.DeletionTimestamp; dt != nil && dt.Before(&metav1.Time{Time: run.End}) {
				run.End = dt.Time
			}
		}
	}
	return run, true
}
