package main_test

import (
	"bufio"
	"context"
	"crypto/sha1" //nolint:gosec // Redis names a script by its SHA-1
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// TestADeposedLeaderSendsNothingButRenewalsOfItsOwnLeases: the leader of a
// pair is paused (SIGSTOP) while it runs a FailOpen run; the other replica
// takes over, resumes the lease, and the run completes: its done-marker is
// written and its key deleted. Then the old leader wakes up, with a cache and a
// keeper from before the pause, and goes on until it notices that it no longer
// leads and exits. In that time it must send nothing but renewals of its own
// leases (and leader-election lease attempts): no store write that takes the
// released key back, no Job, status or event write, no delete. Each replica
// talks to the API server as a user of its own (the audit log tells them
// apart) and to Redis as an ACL user of its own (MONITOR and CLIENT LIST do).
func TestADeposedLeaderSendsNothingButRenewalsOfItsOwnLeases(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	bin := buildManager(t)
	audit := filepath.Join(t.TempDir(), "audit.log")
	cp := startControlPlaneWithAudit(t, audit)
	srv := redisserver.Start(t)
	rdb := srv.Client(t)
	urls := map[string]string{}
	for _, user := range []string{"replica-a", "replica-b"} {
		g.Expect(rdb.Do(ctx, "ACL", "SETUSER", user, "on", ">pw-"+user, "~*", "&*", "+@all").Err()).To(Succeed())
		urls[user] = fmt.Sprintf("redis://%s:pw-%s@%s", user, user, srv.Addr())
	}

	first := startManager(t, bin, leaderArgs(cp.userKubeconfig(t, "replica-a"), urls["replica-a"])...)
	g.Eventually(first.logs.String).WithTimeout(30 * time.Second).Should(ContainSubstring("Successfully acquired lease"))
	second := startManager(t, bin, leaderArgs(cp.userKubeconfig(t, "replica-b"), urls["replica-b"])...)

	gj := haGuardedJob("deposed")
	gj.Spec.Lock.StoreFailurePolicy = batchv1alpha1.FailOpen // its renewals would take an absent key back
	token := runningRun(t, cp.client, gj)
	key := "default:deposed"
	// The events it recorded while it led are sent by a background broadcaster:
	// let them arrive before the pause, so that none is taken for a write it
	// decided after its wake.
	events := func() int {
		list := &corev1.EventList{}
		g.Expect(cp.client.List(ctx, list, client.InNamespace("default"))).To(Succeed())
		return len(list.Items)
	}
	g.Eventually(func() bool {
		before := events()
		time.Sleep(time.Second)
		return events() == before
	}).WithTimeout(30 * time.Second).Should(BeTrue())

	g.Expect(first.cmd.Process.Signal(syscall.SIGSTOP)).To(Succeed())
	g.Eventually(second.logs.String).WithTimeout(30*time.Second).Should(ContainSubstring(`"Resumed leases"`), "second:\n%s", second.logs)
	// The run completes under the new leader: marker written, key deleted.
	_, _, jobName, _ := leasetoken.ParseHolder(token)
	job := &batchv1.Job{}
	g.Expect(cp.client.Get(ctx, client.ObjectKey{Namespace: "default", Name: jobName}, job)).To(Succeed())
	completeJob(t, cp.client, job)
	g.Eventually(func() *batchv1alpha1.RunRecord {
		cur := &batchv1alpha1.GuardedJob{}
		_ = cp.client.Get(ctx, client.ObjectKeyFromObject(gj), cur)
		return cur.Status.LastRun
	}).Should(And(Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultSucceeded)))
	g.Expect(rdb.Exists(ctx, key).Val()).To(BeZero(), "the new leader released the key")
	statusBefore := &batchv1alpha1.GuardedJob{}
	g.Expect(cp.client.Get(ctx, client.ObjectKeyFromObject(gj), statusBefore)).To(Succeed())

	// Watch what the old leader sends from its wake until it has exited.
	mon := srv.Monitor(t)
	woke := time.Now()
	g.Expect(first.cmd.Process.Signal(syscall.SIGCONT)).To(Succeed())
	g.Eventually(first.exited).WithTimeout(60*time.Second).Should(BeClosed(), "the deposed leader exits:\n%s", first.logs)
	time.Sleep(time.Second) // anything still on its way arrives
	mon.Stop()

	g.Expect(rdb.Exists(ctx, key).Val()).To(BeZero(), "the key the new leader released was never written back")
	renew := scriptSHA(t, "renew.lua")
	var storeWrites []string
	sent := 0
	for _, c := range mon.Commands() {
		user := mon.User(c.Addr)
		if c.At.Before(woke) || user == "replica-b" || user == "default" || c.Addr == "lua" {
			continue // the new leader, the test itself, or a script's own commands (its call is judged)
		}
		// A connection of no known user was gone before the last CLIENT LIST,
		// which ran after the old leader exited while everyone else was still
		// connected: it was the old leader's, opened and closed between two
		// reads. Its commands are judged as the old leader's.
		if user != "replica-a" && user != "" {
			storeWrites = append(storeWrites, "from a connection of user "+user+": "+strings.Join(c.Args, " "))
			continue
		}
		sent++
		if why := notARenewal(c.Args, renew); why != "" {
			storeWrites = append(storeWrites, why)
		}
	}
	g.Expect(storeWrites).To(BeEmpty(), "the deposed leader's store commands after its wake")
	g.Expect(sent).To(BeNumerically(">", 0), "the old leader's commands after its wake were seen at all")

	var apiWrites []string
	for _, e := range readAudit(t, audit) {
		if e.User.Username != "replica-a" || e.Received.Before(woke) {
			continue
		}
		switch {
		case e.Verb == "get" || e.Verb == "list" || e.Verb == "watch":
		case e.ObjectRef != nil && e.ObjectRef.APIGroup == "coordination.k8s.io" && e.ObjectRef.Resource == "leases":
			// its attempts to renew its leader-election lease
		default:
			apiWrites = append(apiWrites, e.Verb+" "+e.resource())
		}
	}
	g.Expect(apiWrites).To(BeEmpty(), "the deposed leader's API writes after its wake")
	statusAfter := &batchv1alpha1.GuardedJob{}
	g.Expect(cp.client.Get(ctx, client.ObjectKeyFromObject(gj), statusAfter)).To(Succeed())
	g.Expect(statusAfter.Status.LastRun).To(Equal(statusBefore.Status.LastRun), "its status is as the new leader left it")
	g.Expect(cp.client.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{})).To(Succeed(), "the finished Job is kept")
	t.Logf("the deposed leader sent %d store commands after its wake, none a write", sent)
}

// startControlPlaneWithAudit is startControlPlane with an audit log of every
// request's completion (user, verb, resource) at path.
func startControlPlaneWithAudit(t *testing.T, path string) *controlPlane {
	t.Helper()
	policy := filepath.Join(t.TempDir(), "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [\"RequestReceived\", \"ResponseStarted\"]\nrules:\n- level: Metadata\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return startControlPlaneWith(t, func(env *envtest.Environment) {
		env.ControlPlane.GetAPIServer().Configure().Set("audit-policy-file", policy).Set("audit-log-path", path)
	})
}

// userKubeconfig writes a kubeconfig of a user of its own, with every right.
func (cp *controlPlane) userKubeconfig(t *testing.T, name string) string {
	t.Helper()
	user, err := cp.env.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// completeJob plays the Job controller: the Job succeeded, and its Pods are gone.
func completeJob(t *testing.T, c client.Client, job *batchv1.Job) {
	t.Helper()
	now := metav1.Now()
	job.Status.StartTime, job.Status.CompletionTime, job.Status.Succeeded = &now, &now, 1
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	if err := c.Status().Update(context.Background(), job); err != nil {
		t.Fatal(err)
	}
}

// notARenewal says what a command of a deposed leader does beyond reading and
// renewing its own leases (renew.lua without taking an absent key back), or "".
func notARenewal(args []string, renewSHA string) string {
	if len(args) == 0 {
		return ""
	}
	switch name := strings.ToUpper(args[0]); name {
	case "GET", "MGET", "PTTL", "PING", "HELLO", "AUTH", "CLIENT", "INFO", "SCRIPT", "EXISTS", "SELECT", "READONLY", "COMMAND", "CONFIG":
		return ""
	case "EVALSHA", "EVAL":
		if name == "EVALSHA" && len(args) == 7 && args[1] == renewSHA && args[6] == "0" {
			return ""
		}
		if name == "EVALSHA" && len(args) > 1 && args[1] == renewSHA {
			return "a renewal that takes an absent key back: " + strings.Join(args, " ")
		}
		return "a script other than renew.lua: " + strings.Join(args, " ")
	default:
		return strings.Join(args, " ")
	}
}

func scriptSHA(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "internal", "lockclient", "lua", name))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(b) //nolint:gosec // Redis names a script by its SHA-1
	return hex.EncodeToString(sum[:])
}

// auditEvent is the part of an audit.k8s.io/v1 Event the test reads.
type auditEvent struct {
	Verb string `json:"verb"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		APIGroup    string `json:"apiGroup"`
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	Received time.Time `json:"requestReceivedTimestamp"`
}

func (e auditEvent) resource() string {
	if e.ObjectRef == nil {
		return "(no object)"
	}
	r := e.ObjectRef.Resource
	if e.ObjectRef.APIGroup != "" {
		r += "." + e.ObjectRef.APIGroup
	}
	if e.ObjectRef.Subresource != "" {
		r += "/" + e.ObjectRef.Subresource
	}
	return r
}

func readAudit(t *testing.T, path string) []auditEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}
