package e2e

// TestPodGuardStopsTheWorkloadOfAForceDeletedPodBeforeItsKeyCouldExpire plays the
// one case no manager can handle through the API: a Pod whose node is cut off from
// the control plane, force-deleted while its containers still run. A real control
// plane (kube-controller-manager's Job controller, kwok as the node) and the real
// manager run the GuardedJob; this test plays the cut-off node's kubelet for the one
// Pod: it starts the real guard binary with the environment and Secret the manager
// put into the Pod, beside a stand-in workload, in a PID namespace of their own (the
// Pod's shared process namespace). Then the Pod is force-deleted. The workload must
// be gone before the lease's key could expire, and nobody may take the key before.
// Run with `make test-e2e` (E2E_FAULTS=1); needs root for unshare.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/podguard"
	"github.com/guardedjob/guardedjob/internal/testutil/bins"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/testproc"
)

func TestPodGuardStopsTheWorkloadOfAForceDeletedPodBeforeItsKeyCouldExpire(t *testing.T) {
	if os.Getenv("E2E_FAULTS") != "1" {
		t.Skip("runs with `make test-e2e` (E2E_FAULTS=1)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the guard runs in a PID namespace of its own (unshare)")
	}
	t.Parallel()
	ctx := t.Context()
	root := repoRoot(t)
	dir := t.TempDir()
	out, err := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-control-plane.sh"), "--demo").Output()
	if err != nil {
		t.Fatalf("hack/build-control-plane.sh --demo: %v", err)
	}
	c, err := startCluster(ctx, "cluster-a", filepath.Join(dir, "cluster-a"), controlPlaneBinaries{dir: strings.TrimSpace(string(out))}, root)
	if c != nil {
		t.Cleanup(c.stop)
	}
	if err != nil {
		t.Fatal(err)
	}

	// The guard logs in with a user that may only read the namespace's keys, as
	// docs/security.md says; the manager with the default user.
	redis := redisserver.Start(t)
	rdb := redis.Client(t)
	const guardPassword = "guard-e2e-Pw7"
	if err := rdb.Do(ctx, "ACL", "SETUSER", "guardedjob-guard-e2e", "on", ">"+guardPassword, "resetchannels", "resetkeys",
		"%R~"+namespace+":*", "-@all", "+get", "+pttl", "+multi", "+exec").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "guard-redis", Namespace: namespace},
		StringData: map[string]string{"url": "redis://" + redis.Addr(), "username": "guardedjob-guard-e2e", "password": guardPassword},
	}); err != nil {
		t.Fatal(err)
	}
	mgr, err := testproc.Start("manager", filepath.Join(dir, "manager.log"), bins.Manager(t),
		"--kubeconfig="+c.managerConfig, "--redis-url=redis://"+redis.Addr()+"/0", "--cluster-name=cluster-a",
		"--guard-image=registry.example/guardedjob-manager:e2e", "--metrics-bind-address=0", "--health-probe-bind-address=0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mgr.Stop(10 * time.Second) })

	const ttl, renewInterval = 16 * time.Second, 3 * time.Second
	key := namespace + ":guarded"
	gj := &batchv1alpha1.GuardedJob{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: namespace},
		Spec: batchv1alpha1.GuardedJobSpec{
			Schedule: "0 0 1 1 *", TimeZone: "UTC",
			// The failed run's Job goes at once: a Job of its name seen afterwards
			// was created again.
			FailedJobsHistoryLimit: ptr.To(int32(0)),
			Lock: batchv1alpha1.LockSpec{
				Key: key, TTL: &metav1.Duration{Duration: ttl}, RenewInterval: &metav1.Duration{Duration: renewInterval},
				MaxHold:  &metav1.Duration{Duration: 10 * time.Minute},
				PodGuard: &batchv1alpha1.PodGuardSpec{SecretRef: batchv1alpha1.StoreReference{Name: "guard-redis"}},
			},
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				Template: corev1.PodTemplateSpec{
					// kwok keeps the Pod running for ten minutes.
					ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{runForAnnotation: "600s"}},
					Spec: corev1.PodSpec{
						RestartPolicy:                 corev1.RestartPolicyNever,
						TerminationGracePeriodSeconds: ptr.To(int64(podGrace / time.Second)),
						SecurityContext:               &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(0))},
						Containers:                    []corev1.Container{{Name: "work", Image: "busybox:1.36", Command: []string{"sh", "-c", "sleep 600"}}},
					},
				},
			}},
		},
	}
	if err := c.client.Create(ctx, gj); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, 60*time.Second, "the GuardedJob Ready", func() error {
		cur := &batchv1alpha1.GuardedJob{}
		if err := c.client.Get(ctx, client.ObjectKeyFromObject(gj), cur); err != nil {
			return err
		}
		for _, cond := range cur.Status.Conditions {
			if cond.Type == batchv1alpha1.ReadyCondition && cond.Status == metav1.ConditionTrue {
				return nil
			}
			if cond.Type == batchv1alpha1.ReadyCondition {
				return fmt.Errorf("Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
		}
		return errors.New("no Ready condition yet")
	}); err != nil {
		t.Fatalf("%v\n%s", err, mgr.Tail(20))
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, batchv1alpha1.RunNowAnnotation, time.Now().UTC().Format(time.RFC3339))
	if err := c.client.Patch(ctx, gj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}

	// The run's Pod, running on the kwok node.
	var pod corev1.Pod
	if err := poll(ctx, 60*time.Second, "the run's Pod Running", func() error {
		pods := &corev1.PodList{}
		if err := c.client.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{batchv1alpha1.GuardedJobLabel: gj.Name}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("%d Pods, none Running", len(pods.Items))
	}); err != nil {
		t.Fatalf("%v\n%s", err, mgr.Tail(20))
	}

	// The node's kubelet would run the guard container as the Pod spec says: its
	// environment, the Secret mounted as files, and an emptyDir of its own.
	var guardSpec *corev1.Container
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == podguard.ContainerName {
			guardSpec = &pod.Spec.InitContainers[i]
		}
	}
	if guardSpec == nil || !ptr.Deref(pod.Spec.ShareProcessNamespace, false) {
		t.Fatalf("the run's Pod has no guard container or does not share its process namespace: %+v", pod.Spec)
	}
	storeDir, stateDir := filepath.Join(dir, "guard-store"), filepath.Join(dir, "guard-state")
	secret := &corev1.Secret{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "guard-redis"}, secret); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{storeDir, stateDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range secret.Data {
		if err := os.WriteFile(filepath.Join(storeDir, k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range guardSpec.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	endedFile := filepath.Join(dir, "workload-ended")
	env = append(env, podguard.EnvStoreDir+"="+storeDir, podguard.EnvStateDir+"="+stateDir,
		podguard.EnvTerminationMessagePath+"="+filepath.Join(dir, "termination-log"), "GUARD_BIN="+bins.Guard(t), "ENDED="+endedFile)
	// PID 1 of the stand-in Pod is the shell (the pause container); the workload
	// starts once the guard's startup gate opens, as the kubelet waits for the
	// guard's startup probe; its end is marked by the shell when it dies, with
	// builtins only (the file's modification time is the end): a process the
	// shell started then, such as date, could be caught by the guard's sweep.
	script := `"$GUARD_BIN" & g=$!
while [ ! -e "$GUARDEDJOB_GUARD_STATE_DIR/ready" ]; do sleep 0.1; done
sleep 100000 & w=$!
wait $w
printf 'ended\n' > "$ENDED"
wait $g`
	podLog := filepath.Join(dir, "pod.log")
	logf, err := os.Create(podLog)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logf.Close() }()
	node := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", script)
	node.Env, node.Stdout, node.Stderr = env, logf, logf
	node.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	nodeDone := make(chan struct{})
	go func() {
		_ = node.Wait() // killed at the end: its exit status says nothing
		close(nodeDone)
	}()
	t.Cleanup(func() {
		_ = node.Process.Kill()
		<-nodeDone
	})
	if err := poll(ctx, 30*time.Second, "the guard's first confirmation", func() error {
		_, err := os.Stat(filepath.Join(stateDir, "ready"))
		return err
	}); err != nil {
		t.Fatalf("%v\n%s", err, testproc.TailFile(podLog, 20))
	}

	// The node is cut off (its kubelet, kwok, stops: nothing reports on the Pod any
	// more), a person force-deletes the Pod, and the unreachable Node object is
	// deleted; kube-controller-manager's Pod garbage collector then removes the Pod
	// from the API, while its containers, as far as anyone knows, still run.
	for _, p := range c.procs {
		if strings.HasSuffix(p.Name, "/kwok") {
			p.Stop(10 * time.Second)
		}
	}
	kubectl := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bins.Kubectl(t), append([]string{"--kubeconfig=" + c.adminKubeconfig}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	kubectl("-n", namespace, "delete", "pod", pod.Name, "--force", "--grace-period=0", "--wait=false")
	kubectl("delete", "node", pod.Spec.NodeName, "--wait=false")
	deleted := time.Now()

	// Another cluster wants the same key and takes it the moment it is free, as its
	// manager would (SET NX). It must not get it while the workload still runs.
	const other = "cluster-b/" + namespace + "/guarded-1-abcdef#00000000000000000000000000000000"
	taken := make(chan time.Time, 1)
	go func() {
		for ctx.Err() == nil {
			if ok, err := rdb.SetNX(ctx, key, other, time.Minute).Result(); err == nil && ok {
				taken <- time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// The run fails (its Pod was disrupted) and leaves its lease to expire; the
	// moment that is recorded, someone asks for the occurrence to run now. The
	// new run must not take up the left lease (a token with the same binding):
	// that would recreate the Job of the same name, and the stranded Pod's guard
	// would keep confirming the token beside it.
	oldJob := pod.Labels[batchv1.JobNameLabel]
	rerun := make(chan error, 1)
	go func() {
		rerun <- poll(ctx, ttl+time.Minute, "the failed run recorded", func() error {
			cur := &batchv1alpha1.GuardedJob{}
			if err := c.client.Get(ctx, client.ObjectKeyFromObject(gj), cur); err != nil {
				return err
			}
			if r := cur.Status.LastRun; r == nil || r.JobName != oldJob || !strings.Contains(r.Message, "left to expire") {
				return errors.New("not yet")
			}
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, batchv1alpha1.RunNowAnnotation, time.Now().UTC().Add(time.Second).Format(time.RFC3339))
			return c.client.Patch(ctx, gj, client.RawPatch(types.MergePatchType, []byte(patch)))
		})
	}()
	sameName := make(chan string, 1)
	go func() {
		var firstUID types.UID
		for ctx.Err() == nil {
			job := &batchv1.Job{}
			if err := c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: oldJob}, job); err == nil {
				if firstUID == "" {
					firstUID = job.UID
				} else if job.UID != firstUID {
					sameName <- string(job.UID)
					return
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	// The latest lower bound of the key's expiry: a read's send time plus the PTTL
	// it answered, while the run still held it.
	var expiresBound time.Time
	holder := pod.Annotations[batchv1alpha1.HolderAnnotation]
	if err := poll(ctx, ttl+2*time.Minute, "the workload gone", func() error {
		sent := time.Now()
		if v, err := rdb.Get(ctx, key).Result(); err == nil && strings.HasPrefix(v, holder+"#") {
			if p, err := rdb.PTTL(ctx, key).Result(); err == nil && p > 0 {
				expiresBound = sent.Add(p)
			}
		}
		// The shell creates the file before it writes its line into it.
		if b, err := os.ReadFile(endedFile); err != nil || !strings.HasSuffix(string(b), "\n") {
			return errors.New("still running")
		}
		return nil
	}); err != nil {
		state, _ := exec.Command(bins.Kubectl(t), "--kubeconfig="+c.adminKubeconfig, "-n", namespace, "get", "pods,jobs,gj", "-o", "yaml").CombinedOutput()
		t.Fatalf("%v\nmanager:\n%s\npod:\n%s\nobjects:\n%s", err, mgr.Tail(15), testproc.TailFile(podLog, 20), state)
	}
	info, err := os.Stat(endedFile)
	if err != nil {
		t.Fatal(err)
	}
	ended := info.ModTime()
	var takenAt time.Time
	select {
	case takenAt = <-taken:
	case <-time.After(ttl + 10*time.Second):
		t.Fatalf("the other cluster never got key %s", key)
	}
	message, _ := os.ReadFile(filepath.Join(dir, "termination-log"))
	t.Logf("Pod force-deleted and its node deleted; the workload ended %s later, %s before the other cluster got the key (%s before the key could expire); the guard said: %s",
		ended.Sub(deleted).Round(time.Millisecond), takenAt.Sub(ended).Round(time.Millisecond), expiresBound.Sub(ended).Round(time.Millisecond),
		strings.TrimSpace(string(message)))
	if !ended.Before(takenAt) {
		t.Errorf("the other cluster got the key %s before the workload ended", ended.Sub(takenAt))
	}
	if expiresBound.IsZero() || !ended.Before(expiresBound) {
		t.Errorf("the workload ended after the key could have expired (%s)", expiresBound)
	}

	// What a user sees: the run failed and left its lease to expire (the ledger
	// says until when), and the run asked for right after found the key busy.
	if err := <-rerun; err != nil {
		t.Fatalf("%v\n%s", err, mgr.Tail(20))
	}
	if err := poll(ctx, 30*time.Second, "the run-now recorded", func() error {
		cur := &batchv1alpha1.GuardedJob{}
		if err := c.client.Get(ctx, client.ObjectKeyFromObject(gj), cur); err != nil {
			return err
		}
		left := false
		for _, l := range cur.Status.Leases {
			left = left || l.Holder == holder && l.State == batchv1alpha1.LeaseLeftToExpire && l.ExpiresBy != nil
		}
		if r := cur.Status.LastRun; r == nil || r.Result != batchv1alpha1.RunResultBusy || r.HeldBy != holder || !left {
			return fmt.Errorf("last run %+v, leases %+v, active %d", r, cur.Status.Leases, len(cur.Status.Active))
		}
		return nil
	}); err != nil {
		t.Errorf("%v\n%s", err, mgr.Tail(20))
	}
	select {
	case uid := <-sameName:
		t.Errorf("a Job named %s was created again (UID %s) for the left lease's token", oldJob, uid)
	default:
	}
	pods := &corev1.PodList{}
	if err := c.client.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{batchv1alpha1.GuardedJobLabel: gj.Name}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		t.Errorf("Pod %s (%s) was created for the run after its Pod was deleted: a guarded run's Pods are never replaced", p.Name, p.Status.Phase)
	}
}
