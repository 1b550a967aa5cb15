package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/bins"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// syncBuffer is a bytes.Buffer safe for a process writing while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Waits that fit a loaded 2-core machine; safety bounds are asserted explicitly,
// never through this timeout.
func init() { SetDefaultEventuallyTimeout(30 * time.Second) }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// world is a real API server with the CRD, a real Redis holding the manager's
// store, and the manager binary running against both.
type world struct {
	kubeconfig string
	k8s        client.Client
	redis      *redisserver.Server
	password   string
	managerLog *syncBuffer
	// stopManager kills the manager (by its PID) and waits for it.
	stopManager func()
}

const (
	storeSecret = "guardedjob-system/guardedjob-redis"
	clusterName = "cluster-a"
)

func startWorld(t *testing.T) *world {
	t.Helper()
	g := NewWithT(t)
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds kube-apiserver and etcd")
	}
	env := &envtest.Environment{
		CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")}, ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kc, err := user.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	w := &world{kubeconfig: filepath.Join(t.TempDir(), "kubeconfig"), password: "plugin-test-s3cret", managerLog: &syncBuffer{}}
	g.Expect(os.WriteFile(w.kubeconfig, kc, 0o600)).To(Succeed())

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(batchv1alpha1.AddToScheme(scheme))
	w.k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())

	w.redis = redisserver.Start(t, redisserver.WithPassword(w.password))
	ctx := context.Background()
	g.Expect(w.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "guardedjob-system"}})).To(Succeed())
	g.Expect(w.k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "guardedjob-redis", Namespace: "guardedjob-system"},
		StringData: map[string]string{"url": "redis://" + w.redis.Addr(), "password": w.password},
	})).To(Succeed())

	mgr := exec.Command(bins.Manager(t), "--kubeconfig", w.kubeconfig, "--redis-secret", storeSecret, "--cluster-name", clusterName,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--leader-elect=false")
	mgr.Stdout, mgr.Stderr = w.managerLog, w.managerLog
	g.Expect(mgr.Start()).To(Succeed())
	exited := make(chan struct{})
	go func() { _ = mgr.Wait(); close(exited) }()
	var once sync.Once
	w.stopManager = func() { once.Do(func() { _ = mgr.Process.Kill(); <-exited }) }
	t.Cleanup(w.stopManager)
	return w
}

// plugin runs the plugin's Main in-process as a user would run the command, with
// the given stdin and environment.
func (w *world) plugin(stdin string, env map[string]string, args ...string) (code int, stdout, stderr string) {
	return w.pluginReading(strings.NewReader(stdin), env, args...)
}

func (w *world) pluginReading(stdin io.Reader, env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	args = append(args, "--kubeconfig", w.kubeconfig)
	code = Main(context.Background(), args, stdin, &out, &errOut, func(k string) string { return env[k] })
	return code, out.String(), errOut.String()
}

// answerAfter is a user who answers while something else happens: before the
// first answer is read, it runs meanwhile.
type answerAfter struct {
	meanwhile func()
	answers   io.Reader
	once      sync.Once
}

func (a *answerAfter) Read(p []byte) (int, error) {
	a.once.Do(a.meanwhile)
	return a.answers.Read(p)
}

// job returns the GuardedJob's Job of the given name once it exists.
func (w *world) job(g Gomega, name string) *batchv1.Job {
	job := &batchv1.Job{}
	g.Eventually(func() error {
		return w.k8s.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, job)
	}).WithTimeout(30 * time.Second).Should(Succeed())
	return job
}

// complete plays the Job controller: the Job succeeded. The manager may still be
// opening the Job's start gate, so, like the Job controller, it writes onto the
// latest copy.
func (w *world) complete(g Gomega, job *batchv1.Job) {
	ctx := context.Background()
	g.Eventually(func() error {
		if err := w.k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return err
		}
		now := metav1.Now()
		job.Status = batchv1.JobStatus{StartTime: &now, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}}
		return w.k8s.Status().Update(ctx, job)
	}).Should(Succeed())
}

func activeJob(g Gomega, w *world) string {
	gj := &batchv1alpha1.GuardedJob{}
	g.Expect(w.k8s.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "settle"}, gj)).To(Succeed())
	g.Expect(gj.Status.Active).To(HaveLen(1))
	return gj.Status.Active[0].JobName
}

// The plugin against a real API server, a real Redis and the real manager: a run
// triggered and followed, its lock and done-marker seen in Redis, the locks table
// telling this GuardedJob, another cluster and a foreign process apart, and unlock
// deleting only what the user confirmed, with an event.
func TestPluginOperatesAGuardedJob(t *testing.T) {
	w := startWorld(t)
	g := NewWithT(t)
	ctx := context.Background()
	rdb := w.redis.Client(t)
	store := []string{"--redis-secret", storeSecret}

	t.Run("without store access, status asks the manager; a store that does not answer is named without its password", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(w.k8s.Create(ctx, &batchv1alpha1.GuardedJob{
			ObjectMeta: metav1.ObjectMeta{Name: "idle", Namespace: "default"},
			Spec: batchv1alpha1.GuardedJobSpec{Schedule: "@daily", Lock: batchv1alpha1.LockSpec{Key: "default:idle"},
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "w", Image: "busybox"}}}}}}},
		})).To(Succeed())
		code, stdout, stderr := w.plugin("", nil, "status", "idle", "-n", "default")
		g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s\nmanager:\n%s", stdout, stderr, w.managerLog)
		g.Expect(stdout).To(MatchRegexp(`Redis now \(read at [^)]+\):\n\s+lock\s+default:idle\s+free\n`))
		g.Expect(stdout).To(ContainSubstring("store: redis://" + w.redis.Addr()))

		// A store that does not answer: the error names it without its password.
		code, _, stderr = w.plugin("", map[string]string{"GUARDEDJOB_REDIS_URL": "redis://:" + w.password + "@127.0.0.1:1"}, "status", "idle", "-n", "default")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("inspect default:idle"))
		g.Expect(stderr).NotTo(ContainSubstring(w.password))

		code, _, stderr = w.plugin("", nil, "unlock", "idle", "-n", "default")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("pass --force"))
	})

	g.Expect(w.k8s.Create(ctx, &batchv1alpha1.GuardedJob{
		ObjectMeta: metav1.ObjectMeta{Name: "settle", Namespace: "default"},
		Spec: batchv1alpha1.GuardedJobSpec{
			Schedule: "@daily",
			Lock:     batchv1alpha1.LockSpec{Key: "default:settle"},
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "w", Image: "busybox"}},
				TerminationGracePeriodSeconds: ptr.To(int64(5)),
			}}}},
		},
	})).To(Succeed())

	var jobName string
	t.Run("run starts the occurrence due now and shows its Job", func(t *testing.T) {
		g := NewWithT(t)
		code, stdout, stderr := w.plugin("", nil, "run", "settle", "-n", "default", "--timeout", "60s")
		g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s\nmanager:\n%s", stdout, stderr, w.managerLog)
		jobName = activeJob(g, w)
		g.Expect(stdout).To(ContainSubstring("job.batch/" + jobName + " started"))
		g.Expect(stdout).To(ContainSubstring("fence 1"))
		w.job(g, jobName)
	})

	t.Run("status shows who holds the lock in Redis now", func(t *testing.T) {
		g := NewWithT(t)
		code, stdout, stderr := w.plugin("", nil, append([]string{"status", "settle", "-n", "default"}, store...)...)
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(MatchRegexp(`lock\s+default:settle\s+held by ` + clusterName + `/default/` + jobName + ` \(this GuardedJob \(` + jobName + `\)\), expires in \d`))
		g.Expect(stdout).To(MatchRegexp(`fence\s+default:settle:fence\s+1\n`))
		g.Expect(stdout).To(MatchRegexp(`done-marker\s+default:settle:done:\d+\s+absent`))
		g.Expect(stdout).To(ContainSubstring("LockAcquired"), "the GuardedJob's events")
		g.Expect(stdout + stderr).NotTo(ContainSubstring(w.password))

		// Asked of the manager, the same, with kubectl's flags before the command.
		code, stdout, stderr = w.plugin("", nil, "-n", "default", "status", "settle")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(MatchRegexp(`lock\s+default:settle\s+held by ` + clusterName + `/default/` + jobName + ` \(this GuardedJob \(` + jobName + `\)\), expires in \d`))
		g.Expect(stdout).To(MatchRegexp(`fence\s+default:settle:fence\s+1\n`))
		g.Expect(stdout).To(MatchRegexp(`done-marker\s+default:settle:done:\d+\s+absent`))
		gj := &batchv1alpha1.GuardedJob{}
		g.Expect(w.k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "settle"}, gj)).To(Succeed())
		raw, err := json.Marshal(gj)
		g.Expect(err).NotTo(HaveOccurred())
		random := gj.Status.Active[0].Token[strings.LastIndexByte(gj.Status.Active[0].Token, '#')+1:]
		g.Expect(stdout).NotTo(ContainSubstring(random), "the lease token is never shown")
		g.Expect(strings.Count(string(raw), random)).To(Equal(1), "the token is in status.active only")
	})

	t.Run("unlock never deletes the lock of a running run", func(t *testing.T) {
		g := NewWithT(t)
		code, stdout, _ := w.plugin("", nil, append([]string{"unlock", "settle", "-n", "default", "--force", "--yes"}, store...)...)
		g.Expect(code).To(Equal(0))
		g.Expect(stdout).To(ContainSubstring("held by the active run"))
		g.Expect(stdout).To(ContainSubstring("nothing to unlock"))
		g.Expect(rdb.Get(ctx, "default:settle").Val()).To(HavePrefix(clusterName + "/default/" + jobName + "#"))
	})

	t.Run("after the Job succeeds status shows the done-marker, and run again is skipped", func(t *testing.T) {
		g := NewWithT(t)
		w.complete(g, w.job(g, jobName))
		g.Eventually(func() string {
			_, stdout, _ := w.plugin("", nil, append([]string{"status", "settle", "-n", "default"}, store...)...)
			return stdout
		}).WithTimeout(30 * time.Second).Should(And(
			MatchRegexp(`lock\s+default:settle\s+free`),
			MatchRegexp(`done-marker\s+default:settle:done:\d+\s+done by `+clusterName+`/default/`+jobName),
			MatchRegexp(`Last occurrence done:\s+\S+Z by `+clusterName+`/default/`+jobName+` at `)))

		code, stdout, stderr := w.plugin("", nil, "run", "settle", "-n", "default", "--wait", "--timeout", "60s")
		g.Expect(code).To(Equal(1), "the run did not succeed: exit 1")
		g.Expect(stdout).To(ContainSubstring(": Skipped"))
		g.Expect(stderr).To(ContainSubstring("the run ended Skipped"))
	})

	t.Run("locks tells this GuardedJob, another cluster and a foreign process apart", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(rdb.Set(ctx, "default:settle", "cluster-b/payments/settle-1-abcdef#0123", time.Minute).Err()).To(Succeed())
		code, stdout, stderr := w.plugin("", nil, append([]string{"locks", "-A", "--cluster-name", clusterName}, store...)...)
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(MatchRegexp(`default\s+settle\s+default:settle\s+cluster-b/payments/settle-1-abcdef\s+cluster cluster-b\s+\d`))
		g.Expect(stdout).To(MatchRegexp(`default\s+idle\s+default:idle\s+-\s+-`))

		g.Expect(rdb.Set(ctx, "default:settle", "batch-host-7", 0).Err()).To(Succeed())
		_, stdout, _ = w.plugin("", nil, append([]string{"locks", "-n", "default"}, store...)...)
		g.Expect(stdout).To(MatchRegexp(`(?m)^settle\s+default:settle\s+batch-host-7\s+foreign process\s+never`), "no NAMESPACE column without -A, as kubectl get")

		// Asking the manager gives the same answer.
		code, stdout, stderr = w.plugin("", nil, "locks", "-n", "default")
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(MatchRegexp(`(?m)^settle\s+default:settle\s+batch-host-7\s+foreign process\s+never`))
	})

	t.Run("unlock deletes only what the user confirms, and records it", func(t *testing.T) {
		g := NewWithT(t)
		// Two candidates (the foreign lock, then the done-marker): keep the first, delete the second.
		code, stdout, stderr := w.plugin("n\ny\n", nil, append([]string{"unlock", "settle", "-n", "default", "--force"}, store...)...)
		g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		g.Expect(stdout).To(ContainSubstring("Delete lock default:settle (held by batch-host-7 (foreign process), no expiry"))
		g.Expect(stdout).To(ContainSubstring("kept default:settle"))
		g.Expect(stdout).To(MatchRegexp(`deleted done-marker default:settle:done:\d+`))
		g.Expect(rdb.Get(ctx, "default:settle").Val()).To(Equal("batch-host-7"))
		g.Expect(rdb.Keys(ctx, "default:settle:done:*").Val()).To(BeEmpty())

		g.Expect(stderr).NotTo(ContainSubstring("warning"))
		events := &eventsv1.EventList{}
		g.Expect(w.k8s.List(ctx, events, client.InNamespace("default"))).To(Succeed())
		g.Expect(events.Items).To(ContainElement(And(
			HaveField("Reason", batchv1alpha1.ManualUnlockReason),
			HaveField("Regarding.Name", "settle"),
			HaveField("Note", MatchRegexp(`Deleted done-marker default:settle:done:\d+ \(done by `+clusterName+`/default/`+jobName+`\)`)))))

		// Confirmed, the foreign lock goes too.
		code, stdout, _ = w.plugin("y\n", nil, append([]string{"unlock", "settle", "-n", "default", "--force"}, store...)...)
		g.Expect(code).To(Equal(0))
		g.Expect(stdout).To(ContainSubstring("deleted lock default:settle"))
		g.Expect(rdb.Exists(ctx, "default:settle").Val()).To(BeZero())
	})

	t.Run("unlock never deletes a value written after it was shown", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(rdb.Set(ctx, "default:settle", "batch-host-7", 0).Err()).To(Succeed())
		user := &answerAfter{
			meanwhile: func() { rdb.Set(ctx, "default:settle", "batch-host-8", 0) },
			answers:   strings.NewReader("y\n"),
		}
		code, stdout, _ := w.pluginReading(user, nil, append([]string{"unlock", "settle", "-n", "default", "--force"}, store...)...)
		g.Expect(code).To(Equal(1), "nothing was deleted")
		g.Expect(stdout).To(ContainSubstring("Delete lock default:settle (held by batch-host-7"))
		g.Expect(stdout).To(ContainSubstring("lock default:settle changed since it was shown (now batch-host-8): not deleted"))
		g.Expect(rdb.Get(ctx, "default:settle").Val()).To(Equal("batch-host-8"))
		g.Expect(rdb.Del(ctx, "default:settle").Err()).To(Succeed())
	})

	t.Run("a GuardedJob with its own store is looked up there", func(t *testing.T) {
		g := NewWithT(t)
		own := redisserver.Start(t)
		g.Expect(w.k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "own-redis", Namespace: "default"},
			StringData: map[string]string{"url": "redis://" + own.Addr()},
		})).To(Succeed())
		g.Expect(w.k8s.Create(ctx, &batchv1alpha1.GuardedJob{
			ObjectMeta: metav1.ObjectMeta{Name: "own", Namespace: "default"},
			Spec: batchv1alpha1.GuardedJobSpec{Schedule: "@daily",
				Lock: batchv1alpha1.LockSpec{Key: "shared:report", StoreRef: &batchv1alpha1.StoreReference{Name: "own-redis"}},
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "w", Image: "busybox"}}}}}}},
		})).To(Succeed())
		g.Expect(own.Client(t).Set(ctx, "shared:report", "cluster-b/reports/report-1-aaaaaa#77", time.Minute).Err()).To(Succeed())
		code, stdout, stderr := w.plugin("", nil, append([]string{"locks", "-n", "default"}, store...)...)
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(MatchRegexp(`(?m)^own\s+shared:report\s+cluster-b/reports/report-1-aaaaaa\s+cluster cluster-b`))
		g.Expect(stdout).To(MatchRegexp(`(?m)^settle\s+default:settle\s+-`), "the manager's store for the others")

		// --store-allow: a tenant's store outside it is not dialled; the manager's is.
		// One connection, held: the count then moves only when someone else dials
		// (a pooled client may dial again between two reads of its own).
		stats := own.Client(t).Conn()
		t.Cleanup(func() { _ = stats.Close() })
		connections := func() string {
			for _, line := range strings.Split(stats.Info(ctx, "stats").Val(), "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
					return v
				}
			}
			return "?"
		}
		before := connections()
		code, stdout, stderr = w.plugin("", nil, append([]string{"locks", "-A", "--store-allow", "10.0.0.0/8"}, store...)...)
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring("default/own: spec.lock.storeRef Secret default/own-redis: " + own.Addr() + " is outside --store-allow; not dialled"))
		g.Expect(stdout).To(MatchRegexp(`(?m)^default\s+settle\s+default:settle\s+-`))
		g.Expect(connections()).To(Equal(before), "no connection to a store outside --store-allow")
		code, stdout, stderr = w.plugin("", nil, append([]string{"locks", "-A", "--store-allow", "127.0.0.0/8"}, store...)...)
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(MatchRegexp(`(?m)^default\s+own\s+shared:report\s+cluster-b/reports/report-1-aaaaaa`))
		code, _, stderr = w.plugin("", nil, append([]string{"locks", "--store-allow", "not a host/99"}, store...)...)
		g.Expect(code).To(Equal(2))
		g.Expect(stderr).To(ContainSubstring("--store-allow"))
		// The manager's cluster-ranges would admit nothing here, silently: refused.
		code, _, stderr = w.plugin("", nil, append([]string{"locks", "-A", "--store-allow", "cluster-ranges"}, store...)...)
		g.Expect(code).To(Equal(2))
		g.Expect(stderr).To(ContainSubstring("--store-allow: cluster-ranges is the manager's; list the cluster's Service and Pod CIDRs instead"))
	})

	t.Run("status and unlock show custom done-marker and fence keys of an idle GuardedJob", func(t *testing.T) {
		g := NewWithT(t)
		// Yearly, so the latest occurrence is January 1 of this year (UTC).
		g.Expect(w.k8s.Create(ctx, &batchv1alpha1.GuardedJob{
			ObjectMeta: metav1.ObjectMeta{Name: "custom", Namespace: "default"},
			Spec: batchv1alpha1.GuardedJobSpec{Schedule: "0 0 1 1 *",
				Lock:    batchv1alpha1.LockSpec{Key: "default:custom", OccurrenceKey: `default:custom:done:{{ .ScheduledTime.Format "2006" }}`},
				Fencing: &batchv1alpha1.FencingSpec{Key: "default:fences:{{ .Name }}"},
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "w", Image: "busybox"}}}}}}},
		})).To(Succeed())
		marker := fmt.Sprintf("default:custom:done:%d", time.Now().UTC().Year())
		g.Expect(rdb.Set(ctx, marker, "cluster-b/default/custom-1-abcdef#ab", time.Hour).Err()).To(Succeed())
		g.Expect(rdb.Set(ctx, "default:fences:custom", 7, 0).Err()).To(Succeed())

		code, stdout, stderr := w.plugin("", nil, append([]string{"status", "custom", "-n", "default"}, store...)...)
		g.Expect(code).To(Equal(0), stderr)
		g.Expect(stdout).To(MatchRegexp(`fence\s+default:fences:custom\s+7\n`))
		g.Expect(stdout).To(MatchRegexp(`done-marker\s+` + marker + `\s+done by cluster-b/default/custom-1-abcdef`))

		code, stdout, stderr = w.plugin("y\n", nil, append([]string{"unlock", "custom", "-n", "default", "--force"}, store...)...)
		g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		g.Expect(stdout).To(ContainSubstring("deleted done-marker " + marker))
		g.Expect(rdb.Exists(ctx, marker).Val()).To(BeZero())
	})

	t.Run("a store Secret's insecureSkipVerify is read as the manager reads it", func(t *testing.T) {
		g := NewWithT(t)
		tlsSrv := redisserver.Start(t, redisserver.WithTLS())
		g.Expect(w.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tls"}})).To(Succeed())
		for name, insecure := range map[string]string{"insecure": "true", "garbled": "yes"} {
			g.Expect(w.k8s.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tls"},
				StringData: map[string]string{"url": "rediss://" + tlsSrv.Addr(), "insecureSkipVerify": insecure},
			})).To(Succeed())
			g.Expect(w.k8s.Create(ctx, &batchv1alpha1.GuardedJob{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tls"},
				Spec: batchv1alpha1.GuardedJobSpec{Schedule: "@daily",
					Lock: batchv1alpha1.LockSpec{Key: "shared:" + name, StoreRef: &batchv1alpha1.StoreReference{Name: name}},
					JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
						RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "w", Image: "busybox"}}}}}}},
			})).To(Succeed())
		}
		g.Expect(tlsSrv.Client(t).Set(ctx, "shared:insecure", "cluster-b/reports/report-1-aaaaaa#77", time.Minute).Err()).To(Succeed())
		code, stdout, stderr := w.plugin("", nil, append([]string{"locks", "-n", "tls"}, store...)...)
		g.Expect(code).To(Equal(1), "the garbled Secret's lock cannot be read")
		g.Expect(stdout).To(MatchRegexp(`(?m)^insecure\s+shared:insecure\s+cluster-b/reports/report-1-aaaaaa\s+cluster cluster-b`),
			"a self-signed certificate is accepted when the Secret says insecureSkipVerify: true")
		g.Expect(stderr).To(ContainSubstring("warning: spec.lock.storeRef Secret tls/insecure turns TLS server verification off"))
		g.Expect(stderr).To(ContainSubstring(`tls/garbled: spec.lock.storeRef Secret tls/garbled: insecureSkipVerify must be "true" or "false"`))
	})

	t.Run("run --wait follows a new run to its end", func(t *testing.T) {
		g := NewWithT(t)
		done := make(chan struct{})
		var code int
		var stdout, stderr string
		go func() {
			defer close(done)
			code, stdout, stderr = w.plugin("", nil, "run", "settle", "-n", "default", "--wait", "--timeout", "60s")
		}()
		var next string
		g.Eventually(func() string {
			gj := &batchv1alpha1.GuardedJob{}
			_ = w.k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "settle"}, gj)
			if len(gj.Status.Active) == 1 && gj.Status.Active[0].JobUID != "" {
				next = gj.Status.Active[0].JobName
			}
			return next
		}).WithTimeout(30*time.Second).ShouldNot(BeEmpty(), func() string {
			gj := &batchv1alpha1.GuardedJob{}
			_ = w.k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "settle"}, gj)
			return fmt.Sprintf("status: %+v\nannotations: %v", gj.Status, gj.Annotations)
		})
		g.Expect(next).NotTo(Equal(jobName))
		w.complete(g, w.job(g, next))
		g.Eventually(done).WithTimeout(60 * time.Second).Should(BeClosed())
		g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		g.Expect(stdout).To(ContainSubstring(fmt.Sprintf("run %s: Succeeded (fence 2)", next)))
		g.Expect(stdout).To(ContainSubstring(fmt.Sprintf("job.batch/%s: Complete", next)), "the Job is watched too")
	})

	t.Run("suspend and resume", func(t *testing.T) {
		g := NewWithT(t)
		code, stdout, _ := w.plugin("", nil, "suspend", "settle", "-n", "default")
		g.Expect(code).To(Equal(0))
		g.Expect(stdout).To(ContainSubstring("guardedjob default/settle suspended"))
		gj := &batchv1alpha1.GuardedJob{}
		g.Expect(w.k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "settle"}, gj)).To(Succeed())
		g.Expect(gj.Status.Pause).NotTo(BeNil())
		g.Expect(gj.Spec.Suspended()).To(BeFalse(), "the spec is the manifest's")
		code, _, _ = w.plugin("", nil, "resume", "settle", "-n", "default")
		g.Expect(code).To(Equal(0))
		g.Expect(w.k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "settle"}, gj)).To(Succeed())
		g.Expect(gj.Status.Pause).To(BeNil())
	})

	t.Run("-o json, yaml, name and wide go through kubectl's printers, --no-headers drops the header", func(t *testing.T) {
		g := NewWithT(t)
		code, stdout, stderr := w.plugin("", nil, "status", "settle", "-n", "default", "-o", "json")
		g.Expect(code).To(Equal(0), stderr)
		var printed batchv1alpha1.GuardedJob
		g.Expect(json.Unmarshal([]byte(stdout), &printed)).To(Succeed(), stdout)
		g.Expect(printed.Kind).To(Equal("GuardedJob"))
		g.Expect(printed.APIVersion).To(Equal(batchv1alpha1.GroupVersion.String()))
		g.Expect(printed.Status.StoreView).NotTo(BeNil(), "the manager's answer")
		g.Expect(printed.Status.StoreView.Entries).To(ContainElement(HaveField("Lock.Key", "default:settle")))

		code, stdout, _ = w.plugin("", nil, "status", "settle", "-n", "default", "-o", "yaml")
		g.Expect(code).To(Equal(0))
		g.Expect(stdout).To(And(ContainSubstring("kind: GuardedJob"), ContainSubstring("storeView:")))

		code, stdout, _ = w.plugin("", nil, "status", "settle", "-n", "default", "-o", "name")
		g.Expect(code).To(Equal(0))
		g.Expect(stdout).To(Equal("guardedjob.batch.guardedjob.dev/settle\n"))

		code, stdout, _ = w.plugin("", nil, "status", "settle", "-n", "default", "-o", "jsonpath={.status.storeView.entries[0].lock.key}")
		g.Expect(code).To(Equal(0))
		g.Expect(stdout).To(Equal("default:settle"))

		// The stores of the other subtests' GuardedJobs are gone: their lines are
		// missing, named on stderr, and the command fails; the others are shown.
		code, stdout, stderr = w.plugin("", nil, "locks", "-A", "-o", "wide")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(MatchRegexp(`could not read every lock:\n\s+default/own: the store did not answer: inspect shared:report: lock store unavailable: 127.0.0.1:\d+: unreachable`))
		g.Expect(stdout).To(MatchRegexp(`^NAMESPACE\s+GUARDEDJOB\s+KEY\s+HOLDER\s+WHERE\s+EXPIRES\s+FENCE\s+DONE-MARKER\s+DONE-BY\s+OBSERVED\s+STORE\n`))
		g.Expect(stdout).To(MatchRegexp(`(?m)^default\s+settle\s+default:settle\s+-\s+-\s+-\s+2\s+default:settle:done:\d+\s+`))

		_, stdout, _ = w.plugin("", nil, "locks", "-n", "default", "--no-headers")
		g.Expect(stdout).NotTo(ContainSubstring("GUARDEDJOB"))
		g.Expect(stdout).To(MatchRegexp(`(?m)^settle\s+default:settle\s`))

		_, stdout, _ = w.plugin("", nil, "locks", "-n", "default", "-o", "json")
		var list batchv1alpha1.GuardedJobList
		g.Expect(json.Unmarshal([]byte(stdout), &list)).To(Succeed(), stdout)
		g.Expect(list.Items).To(ContainElement(And(HaveField("Name", "settle"), HaveField("Kind", "GuardedJob"),
			HaveField("Status.StoreView.Entries", ContainElement(HaveField("Lock.Key", "default:settle"))))))

		code, _, stderr = w.plugin("", nil, "locks", "-o", "xml")
		g.Expect(code).To(Equal(2))
		g.Expect(stderr).To(ContainSubstring(`output format "xml"`))
	})

	t.Run("kubectl's kubeconfig flags, usage errors and help", func(t *testing.T) {
		g := NewWithT(t)
		code, _, stderr := w.plugin("", nil, "status", "settle", "--context", "nowhere")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(ContainSubstring(`context "nowhere" does not exist`))

		code, _, stderr = w.plugin("", nil, "--as", "nobody", "status", "settle", "-n", "default")
		g.Expect(code).To(Equal(1))
		g.Expect(stderr).To(HavePrefix(`Error from server (Forbidden): guardedjobs.batch.guardedjob.dev "settle" is forbidden: User "nobody" cannot get resource`))

		code, _, stderr = w.plugin("", nil, "status")
		g.Expect(code).To(Equal(2))
		g.Expect(stderr).To(ContainSubstring("usage: kubectl guardedjob status NAME"))
		code, _, stderr = w.plugin("", nil, "frobnicate")
		g.Expect(code).To(Equal(2))
		g.Expect(stderr).To(ContainSubstring(`unknown command "frobnicate"`))
		code, _, stderr = w.plugin("", nil, "status", "settle", "--no-such-flag")
		g.Expect(code).To(Equal(2))
		g.Expect(stderr).To(ContainSubstring("unknown flag: --no-such-flag"))
		code, stdout, _ := w.plugin("", nil, "--help")
		g.Expect(code).To(Equal(0))
		g.Expect(stdout).To(And(ContainSubstring("kubectl guardedjob [command]"), ContainSubstring("--as string"), ContainSubstring("--request-timeout")))
	})

	t.Run("shell completion completes GuardedJob names from the cluster", func(t *testing.T) {
		g := NewWithT(t)
		// The word being completed comes last, so the kubeconfig goes first.
		complete := func(args ...string) []string {
			var out, errOut bytes.Buffer
			code := Main(ctx, append([]string{"__complete", "--kubeconfig", w.kubeconfig}, args...), nil, &out, &errOut, func(string) string { return "" })
			g.Expect(code).To(Equal(0), errOut.String())
			return strings.Split(out.String(), "\n")
		}
		g.Expect(complete("-n", "default", "status", "")).To(ContainElements("custom", "idle", "own", "settle", ":4"))
		g.Expect(complete("unlock", "-n", "default", "se")).To(And(ContainElements("settle", ":4"), Not(ContainElement("idle"))))
		g.Expect(complete("status", "-n", "")).To(ContainElements("default", "guardedjob-system", "tls"))
		code, stdout, _ := w.plugin("", nil, "completion", "bash")
		g.Expect(code).To(Equal(0))
		g.Expect(stdout).To(ContainSubstring("__complete"))
	})

	g.Expect(w.managerLog.String()).NotTo(ContainSubstring(w.password))

	t.Run("without a manager, status says it got no answer, in time", func(t *testing.T) {
		g := NewWithT(t)
		w.stopManager()
		start := time.Now()
		code, stdout, stderr := w.plugin("", nil, "status", "settle", "-n", "default", "--timeout", "2s")
		g.Expect(code).To(Equal(1))
		g.Expect(time.Since(start)).To(BeNumerically("<", 20*time.Second))
		g.Expect(stdout).To(ContainSubstring("Redis now: not available: the manager did not answer within 2s (is it running?"))
		g.Expect(stderr).To(ContainSubstring("error: the manager did not answer within 2s"))
	})
}
