package e2e

// TestShardMove moves a GuardedJob between two shards of one cluster while its run
// is in flight, with whole manager binaries, kube-controller-manager and kwok: the
// default shard (--watch-label-selector=!sharding.guardedjob.dev/key) starts the run,
// the object is relabelled for shard b, and the default shard is then killed for
// good. Checked from outside: the lock key holds the run's token without a gap until
// the run ends, the run's Pod is never deleted and gets no second, the run succeeds
// in shard b. Run it with `make test-e2e-shard` (E2E_SHARD=1).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/bins"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/testproc"
)

// shardRunFor is how long kwok runs the moved run's Pod: long enough for the move,
// the old shard's death and more than a ttl after it.
const shardRunFor = 45 * time.Second

func TestShardMove(t *testing.T) {
	if os.Getenv("E2E_SHARD") != "1" {
		t.Skip("the shard move test runs with `make test-e2e-shard` (E2E_SHARD=1)")
	}
	root := repoRoot(t)
	dir := t.TempDir()
	ctx := t.Context()
	build := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-control-plane.sh"), "--demo")
	var progress bytes.Buffer
	build.Stderr = &progress
	out, err := build.Output()
	if err != nil {
		t.Fatalf("hack/build-control-plane.sh --demo: %v\n%s", err, progress.String())
	}
	cp := controlPlaneBinaries{dir: strings.TrimSpace(string(out))}
	managerBin := bins.Manager(t)

	rs := redisserver.Start(t)
	rdb := rs.Client(t)
	c, err := startCluster(ctx, "cluster-a", filepath.Join(dir, "cluster-a"), cp, root)
	if c != nil {
		t.Cleanup(c.stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	px, err := startProxy(rs.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.redisProxy = px
	t.Cleanup(px.Close)

	rec := newRecorder(1)
	startShard := func(name string, extra ...string) (*replica, func()) {
		r := &replica{
			name: name, cluster: c, bin: managerBin, dir: filepath.Join(dir, "managers"), rec: rec,
			stopCh: make(chan struct{}), done: make(chan struct{}),
			args: append([]string{
				"--kubeconfig=" + c.managerConfig, "--redis-url=redis://" + px.Addr() + "/0", "--cluster-name=" + c.name,
				"--leader-elect", "--leader-election-namespace=" + c.electionNamespace,
				"--leader-elect-lease-duration=" + leaderLease.String(), "--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=1s",
				"--metrics-bind-address=0", "--health-probe-bind-address=0",
			}, extra...),
		}
		if err := os.MkdirAll(r.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		go r.supervise()
		stop := sync.OnceFunc(r.stop)
		t.Cleanup(stop)
		return r, stop
	}
	byDefault, stopDefault := startShard("default-shard", "--watch-label-selector=!"+batchv1alpha1.ShardLabel)
	shardB, _ := startShard("shard-b", "--watch-label-selector="+batchv1alpha1.ShardLabel+"=b",
		"--leader-election-id=guardedjob-manager-shard-b.batch.guardedjob.dev")
	logs := func() string {
		return fmt.Sprintf("--- default shard\n%s\n--- shard b\n%s", stackTrace.ReplaceAllString(byDefault.tail(30), ""), stackTrace.ReplaceAllString(shardB.tail(30), ""))
	}

	gj := workload(0)
	gj.Name = "moved"
	gj.Spec.Schedule = "0 0 1 1 *"
	gj.Spec.StartingDeadlineSeconds = ptr.To(int64(300))
	gj.Spec.Lock.Key = namespace + ":moved"
	gj.Spec.JobTemplate.Spec.Template.Annotations = map[string]string{runForAnnotation: shardRunFor.String(), failAnnotation: "false"}
	if err := poll(ctx, 30*time.Second, "create the GuardedJob", func() error { return c.client.Create(ctx, gj) }); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(gj)
	patchGJ := func(what, patch string) {
		t.Helper()
		if err := poll(ctx, 30*time.Second, what, func() error {
			return c.client.Patch(ctx, &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: gj.Name, Namespace: namespace}},
				client.RawPatch(types.MergePatchType, []byte(patch)))
		}); err != nil {
			t.Fatal(err)
		}
	}
	patchGJ("trigger a run", fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, batchv1alpha1.RunNowAnnotation, time.Now().UTC().Format(time.RFC3339)))

	// The default shard starts the run; wait until its Pod runs.
	var run batchv1alpha1.ActiveRun
	if err := poll(ctx, 90*time.Second, "the run's Pod running", func() error {
		cur := &batchv1alpha1.GuardedJob{}
		if err := c.client.Get(ctx, key, cur); err != nil {
			return err
		}
		if len(cur.Status.Active) != 1 || cur.Status.Active[0].JobUID == "" {
			return errors.New("no recorded run yet")
		}
		run = cur.Status.Active[0]
		pods := &corev1.PodList{}
		if err := c.client.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{batchv1.JobNameLabel: run.JobName}); err != nil {
			return err
		}
		if len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return fmt.Errorf("%d Pods, not one running", len(pods.Items))
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, logs())
	}
	if v := rdb.Get(ctx, gj.Spec.Lock.Key).Val(); v != run.Token {
		t.Fatalf("the lock key holds %q, not the run's token", v)
	}

	// From here to the run's end: the key holds the run's token, always; the run's
	// Pods are recorded (one expected, never deleted before it ends).
	var (
		mu       sync.Mutex
		gaps     []string
		minPTTL  = time.Hour
		podNames = map[string]bool{}
		deleted  []string
	)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for watchCtx.Err() == nil {
			pipe := rdb.TxPipeline()
			get, pttl := pipe.Get(watchCtx, gj.Spec.Lock.Key), pipe.PTTL(watchCtx, gj.Spec.Lock.Key)
			_, _ = pipe.Exec(watchCtx)
			pods := &corev1.PodList{}
			listErr := c.client.List(watchCtx, pods, client.InNamespace(namespace), client.MatchingLabels{batchv1alpha1.GuardedJobLabel: gj.Name})
			mu.Lock()
			// Once the Pod has succeeded the run may be released at any moment.
			finished := false
			for _, p := range pods.Items {
				finished = finished || p.Status.Phase == corev1.PodSucceeded
			}
			if watchCtx.Err() == nil && listErr == nil && !finished {
				if v := get.Val(); v != run.Token && v != "" {
					gaps = append(gaps, time.Now().Format(time.RFC3339Nano)+" held by "+v)
				} else if v == "" {
					gaps = append(gaps, time.Now().Format(time.RFC3339Nano)+" absent")
				} else {
					minPTTL = min(minPTTL, pttl.Val())
				}
			}
			if listErr == nil {
				for _, p := range pods.Items {
					podNames[p.Name] = true
					if p.DeletionTimestamp != nil && p.Status.Phase == corev1.PodRunning {
						deleted = append(deleted, p.Name)
					}
				}
			}
			mu.Unlock()
			select {
			case <-watchCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	movedAt := time.Now()
	patchGJ("move the GuardedJob to shard b", fmt.Sprintf(`{"metadata":{"labels":{%q:"b"}}}`, batchv1alpha1.ShardLabel))
	if err := poll(ctx, ttl-renewInterval, "shard b resumes the moved run's lease", func() error {
		p := shardB.current()
		if p == nil || !strings.Contains(testproc.TailFile(p.LogPath, 200), "Resumed the leases of a GuardedJob new to this manager") {
			return errors.New("not yet")
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, logs())
	}
	t.Logf("shard b resumed the lease %s after the relabel", time.Since(movedAt).Round(time.Millisecond))

	// The old shard goes for good a few seconds later: from now on only shard b can
	// keep the lease, for longer than a ttl.
	time.Sleep(2 * renewInterval)
	stopDefault()
	t.Logf("default shard stopped %s after the relabel", time.Since(movedAt).Round(time.Millisecond))

	// The run ends on its own (kwok lets the Pod succeed) and shard b completes it.
	var last *batchv1alpha1.RunRecord
	if err := poll(ctx, shardRunFor+time.Minute, "the run recorded as ended", func() error {
		cur := &batchv1alpha1.GuardedJob{}
		if err := c.client.Get(ctx, key, cur); err != nil {
			return err
		}
		if cur.Status.LastRun == nil || cur.Status.LastRun.JobName != run.JobName {
			return errors.New("not yet")
		}
		last = cur.Status.LastRun
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, logs())
	}
	stopWatch()
	<-watchDone
	endedAt := time.Now()

	if last.Result != batchv1alpha1.RunResultSucceeded {
		t.Errorf("the moved run ended %s (%s), want Succeeded", last.Result, last.Message)
	}
	if time.Since(movedAt) < ttl+2*renewInterval {
		t.Errorf("the run ended %s after the move: too soon to show that shard b kept the lease", endedAt.Sub(movedAt))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(gaps) > 0 {
		t.Errorf("the lock key did not hold the run's token throughout: %v", gaps)
	}
	if minPTTL < ttl-renewInterval-slack {
		t.Errorf("the lease ran down to %s (ttl %s, renewed every %s)", minPTTL, ttl, renewInterval)
	}
	if len(podNames) != 1 {
		t.Errorf("Pods of the moved GuardedJob: %v, want the run's one", podNames)
	}
	if len(deleted) > 0 {
		t.Errorf("the run's Pod was deleted while it ran: %v", deleted)
	}
	jobs := &batchv1.JobList{}
	if err := c.client.List(ctx, jobs, client.InNamespace(namespace), client.MatchingLabels{batchv1alpha1.GuardedJobLabel: gj.Name}); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 1 || jobs.Items[0].UID != run.JobUID {
		t.Errorf("Jobs of the moved GuardedJob: %d, want only the run's %s", len(jobs.Items), run.JobName)
	}
	t.Logf("moved run %s: lowest PTTL %s, ended %s after the move", run.JobName, minPTTL, endedAt.Sub(movedAt).Round(time.Second))
}
