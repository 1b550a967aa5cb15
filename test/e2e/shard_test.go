package e2e

// TestShardMove moves GuardedJobs between shards of one cluster while their runs
// are in flight, with whole manager binaries, kube-controller-manager and kwok. The
// default shard (--watch-label-selector=!sharding.guardedjob.dev/key) starts two
// runs. Shard b is stopped (SIGSTOP: failing over, far behind) when one object is
// relabelled for it, and stays stopped for longer than the lease's ttl; the other
// object is relabelled for a shard that does not exist. Make before break: the
// default shard keeps renewing the first run's lease until shard b, let go again,
// holds it, and stops the second run (before its lease could expire) when no shard
// took it over within --shard-handover-timeout. Then the default shard is killed for
// good. Checked from outside, with a competitor retrying SET NX on both keys every
// 100 ms: the first key holds its run's token without a gap until the run ends, its
// Pod is never deleted and gets no second, the run succeeds in shard b; the second
// run's Pod is stopped, and the competitor gets its key only after that Pod is gone.
// Run it with `make test-e2e-shard` (E2E_SHARD=1).

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
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
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
const shardRunFor = 60 * time.Second

// handoverTimeout is the default shard's --shard-handover-timeout.
const handoverTimeout = 35 * time.Second

func TestShardMove(t *testing.T) {
	if os.Getenv("E2E_SHARD") != "1" {
		t.Skip("the shard move test runs with `make test-e2e-shard` (E2E_SHARD=1)")
	}
	t.Parallel()
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
	byDefault, stopDefault := startShard("default-shard", "--watch-label-selector=!"+batchv1alpha1.ShardLabel,
		"--shard-handover-timeout="+handoverTimeout.String())
	shardB, _ := startShard("shard-b", "--watch-label-selector="+batchv1alpha1.ShardLabel+"=b",
		"--leader-election-id=guardedjob-manager-shard-b.batch.guardedjob.dev")
	logs := func() string {
		return fmt.Sprintf("--- default shard\n%s\n--- shard b\n%s", stackTrace.ReplaceAllString(byDefault.tail(30), ""), stackTrace.ReplaceAllString(shardB.tail(30), ""))
	}

	newGJ := func(name string) *batchv1alpha1.GuardedJob {
		gj := workload(0)
		gj.Name = name
		gj.Spec.Schedule = "0 0 1 1 *"
		gj.Spec.StartingDeadlineSeconds = ptr.To(int64(300))
		gj.Spec.Lock.Key = namespace + ":" + name
		gj.Spec.JobTemplate.Spec.Template.Annotations = map[string]string{runForAnnotation: shardRunFor.String(), failAnnotation: "false"}
		if err := poll(ctx, 30*time.Second, "create GuardedJob "+name, func() error { return c.client.Create(ctx, gj) }); err != nil {
			t.Fatal(err)
		}
		return gj
	}
	patchGJ := func(name, what, patch string) {
		t.Helper()
		if err := poll(ctx, 30*time.Second, what, func() error {
			return c.client.Patch(ctx, &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}},
				client.RawPatch(types.MergePatchType, []byte(patch)))
		}); err != nil {
			t.Fatal(err)
		}
	}
	// runningRun triggers a run of gj and waits until its Pod runs.
	runningRun := func(gj *batchv1alpha1.GuardedJob) (batchv1alpha1.ActiveRun, corev1.Pod) {
		t.Helper()
		patchGJ(gj.Name, "trigger a run", fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, batchv1alpha1.RunNowAnnotation, time.Now().UTC().Format(time.RFC3339)))
		var run batchv1alpha1.ActiveRun
		var pod corev1.Pod
		if err := poll(ctx, 90*time.Second, "the run's Pod running", func() error {
			cur := &batchv1alpha1.GuardedJob{}
			if err := c.client.Get(ctx, client.ObjectKeyFromObject(gj), cur); err != nil {
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
			pod = pods.Items[0]
			return nil
		}); err != nil {
			t.Fatalf("%v\n%s", err, logs())
		}
		if v := rdb.Get(ctx, gj.Spec.Lock.Key).Val(); v != run.Token {
			t.Fatalf("the lock key holds %q, not the run's token", v)
		}
		return run, pod
	}
	gj, stranded := newGJ("moved"), newGJ("stranded")
	key := client.ObjectKeyFromObject(gj)
	run, _ := runningRun(gj)
	strandedRun, strandedPod := runningRun(stranded)

	// A competitor, as another process would, takes a key the moment it is free.
	type won struct {
		key string
		at  time.Time
	}
	wins := make(chan won, 2)
	compete := func(key string, until <-chan struct{}) {
		go func() {
			for {
				select {
				case <-until:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if ok, err := rdb.SetNX(ctx, key, "competitor", time.Minute).Result(); err == nil && ok {
					wins <- won{key, time.Now()}
					return
				}
			}
		}()
	}
	stopMovedRival := make(chan struct{})
	compete(gj.Spec.Lock.Key, stopMovedRival)
	compete(stranded.Spec.Lock.Key, ctx.Done())

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

	// Shard b stalls (SIGSTOP) before the object is moved to it, and the other
	// object goes to a shard that does not exist.
	shardB.signal(syscall.SIGSTOP)
	movedAt := time.Now()
	patchGJ(gj.Name, "move the GuardedJob to shard b", fmt.Sprintf(`{"metadata":{"labels":{%q:"b"}}}`, batchv1alpha1.ShardLabel))
	patchGJ(stranded.Name, "move the other GuardedJob to shard c", fmt.Sprintf(`{"metadata":{"labels":{%q:"c"}}}`, batchv1alpha1.ShardLabel))

	// Longer than a ttl with shard b stalled: the default shard keeps both leases.
	time.Sleep(ttl + renewInterval)
	shardB.signal(syscall.SIGCONT)
	if err := poll(ctx, handoverTimeout-ttl-renewInterval, "shard b holds the moved run's lease, and the default shard lets go", func() error {
		cur := &batchv1alpha1.GuardedJob{}
		if err := c.client.Get(ctx, key, cur); err != nil {
			return err
		}
		if cur.Status.Shard != batchv1alpha1.ShardLabel+"=b" {
			return fmt.Errorf("status.shard is %q", cur.Status.Shard)
		}
		p := byDefault.current()
		if p == nil || !strings.Contains(testproc.TailFile(p.LogPath, 400), "Handed the leases of a GuardedJob over to its new shard") {
			return errors.New("the default shard has not handed over yet")
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, logs())
	}
	t.Logf("shard b, let go %s after the relabel, holds the moved run's lease", time.Since(movedAt).Round(time.Millisecond))
	close(stopMovedRival)

	// Past the hand-over timeout the default shard stops the stranded run, and its
	// lease goes only once the run's Pod is gone.
	var strandedGone time.Time
	if err := poll(ctx, handoverTimeout+time.Minute, "the stranded run's Pod stopped and gone", func() error {
		p := &corev1.Pod{}
		err := c.client.Get(ctx, client.ObjectKeyFromObject(&strandedPod), p)
		if err == nil {
			return fmt.Errorf("Pod %s still there (deleted: %v)", p.Name, p.DeletionTimestamp != nil)
		}
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		strandedGone = time.Now()
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, logs())
	}
	t.Logf("the stranded run's Pod was stopped and gone %s after the relabel (hand-over timeout %s)", strandedGone.Sub(movedAt).Round(time.Millisecond), handoverTimeout)
	if strandedGone.Sub(movedAt) < handoverTimeout {
		t.Errorf("the stranded run was stopped %s after the relabel, before the hand-over timeout", strandedGone.Sub(movedAt))
	}

	// The old shard goes for good a few seconds later: from now on only shard b can
	// keep the lease.
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

	for len(wins) > 0 {
		w := <-wins
		switch {
		case w.key == gj.Spec.Lock.Key:
			t.Errorf("the competitor got the moved run's key %s after the relabel, while its Pod ran", w.at.Sub(movedAt).Round(time.Millisecond))
		case w.at.Before(strandedGone):
			t.Errorf("the competitor got the stranded run's key %s before its Pod was gone", strandedGone.Sub(w.at).Round(time.Millisecond))
		}
	}
	_ = strandedRun
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
	if strandedGone.Sub(movedAt) > handoverTimeout+ttl {
		t.Errorf("the stranded run's Pod went %s after the relabel: not stopped in time after the %s hand-over timeout", strandedGone.Sub(movedAt), handoverTimeout)
	}
	if len(deleted) > 0 {
		t.Errorf("the run's Pod was deleted while it ran: %v", deleted)
	}
	jobs := &batchv1.JobList{}
	if err := c.client.List(ctx, jobs, client.InNamespace(namespace), client.MatchingLabels{batchv1alpha1.GuardedJobLabel: gj.Name}); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 1 || jobs.Items[0].UID != run.JobUID {
		t.Errorf("Jobs of the moved GuardedJob: %d, want only the run's %s\n%s\n%s", len(jobs.Items), run.JobName, eventsAbout(ctx, c.client, gj.Name), logs())
	}
	t.Logf("moved run %s: lowest PTTL %s, ended %s after the move", run.JobName, minPTTL, endedAt.Sub(movedAt).Round(time.Second))
}

// eventsAbout lists the namespace's events about a GuardedJob and its Jobs, for a
// failure's message.
func eventsAbout(ctx context.Context, c client.Client, name string) string {
	list := &eventsv1.EventList{}
	if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return "events: " + err.Error()
	}
	var b strings.Builder
	for _, e := range list.Items {
		if strings.HasPrefix(e.Regarding.Name, name) {
			fmt.Fprintf(&b, "%s %s %s/%s %s: %s\n", e.CreationTimestamp.Format(time.RFC3339), e.ReportingInstance, e.Regarding.Kind, e.Regarding.Name, e.Reason, e.Note)
		}
	}
	return b.String()
}
