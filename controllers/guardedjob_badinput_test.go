package controllers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/secrets"
)

// Every kind of bad input gets a precise answer: rejected at apply time with a
// readable message, or Ready=False (or a failed run) with a reason and a message
// that says what to fix. Meanwhile a good object in the same namespace keeps
// running, and the manager neither panics nor stops.
//
// The store passwords the manager receives (in a Secret's password, in its URL
// percent-encoded, in its URL as written) are hostile, and no fragment of them
// shows in status, events, the manager's log or its metrics.
func TestBadInputMatrix(t *testing.T) {
	h := newHarnessAlone(t)
	logs := &logBuffer{}
	h.logger = zap.New(zap.WriteTo(logs), zap.UseDevMode(true), zap.Level(zapcore.DebugLevel))
	metrics := h.serveMetrics()
	h.start()
	ctx := context.Background()
	// Passwords the manager is given: one right, the others wrong.
	right, wrong, wrongInURL, unencodedInURL := hostile(t, "every delimiter"), hostile(t, "a question mark"), hostile(t, "at signs"), hostile(t, "a hash")
	pwProtected := redisserver.Start(t, redisserver.WithPassword(right))
	secret := func(name string, data map[string]string) {
		h.g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}, StringData: data})).To(Succeed())
	}
	secret("no-url", map[string]string{"password": "x"})
	secret("garbled-url", map[string]string{"url": "http://redis.example:6379"})
	secret("garbled-ca", map[string]string{"url": "rediss://127.0.0.1:6380", "ca.crt": "not a certificate"})
	secret("right-login", map[string]string{"url": "redis://" + pwProtected.Addr(), "password": right})
	secret("wrong-login", map[string]string{"url": "redis://" + pwProtected.Addr(), "password": wrong})
	secret("wrong-login-in-url", map[string]string{"url": "redis://:" + secrets.Encode(wrongInURL) + "@" + pwProtected.Addr()})
	secret("unencoded-login-in-url", map[string]string{"url": "redis://:" + unencodedInURL + "@" + pwProtected.Addr()})
	secret("unreachable", map[string]string{"url": "redis://127.0.0.1:1"})
	h.g.Expect(h.rdb.HSet(ctx, h.ns+":hash", "field", "value").Err()).To(Succeed())
	h.g.Expect(pwProtected.Client(t).HSet(ctx, "tenant:hash", "field", "value").Err()).To(Succeed())

	type want struct {
		applyError string // rejected by the API server, with this in the message
		reason     string // else: Ready=False with this reason...
		message    string // ...and this in the message
		condition  string // or: this condition False (default Ready)
		lastRun    batchv1alpha1.RunResult
		event      string // a Warning event with this reason
	}
	cases := []struct {
		name   string
		mutate func(*batchv1alpha1.GuardedJob)
		want   want
	}{
		{"a cron that does not parse", func(g *batchv1alpha1.GuardedJob) { g.Spec.Schedule = "every day" }, want{reason: "InvalidSchedule", message: "every day"}},
		{"a six-field cron", func(g *batchv1alpha1.GuardedJob) { g.Spec.Schedule = "0 0 0 * * *" }, want{reason: "InvalidSchedule", message: "5 fields"}},
		{"a schedule that never fires", func(g *batchv1alpha1.GuardedJob) { g.Spec.Schedule = "0 0 30 2 *" }, want{reason: "InvalidSchedule", message: "never"}},
		{"TZ= inside the schedule", func(g *batchv1alpha1.GuardedJob) { g.Spec.Schedule = "TZ=UTC 0 0 * * *" }, want{applyError: "set spec.timeZone instead"}},
		{"an unknown time zone", func(g *batchv1alpha1.GuardedJob) { g.Spec.TimeZone = "Mars/Olympus_Mons" }, want{reason: "InvalidTimeZone", message: "Mars/Olympus_Mons"}},
		{"the manager's local zone", func(g *batchv1alpha1.GuardedJob) { g.Spec.TimeZone = "Local" }, want{applyError: "Local"}},
		{"a template syntax error", func(g *batchv1alpha1.GuardedJob) { g.Spec.Lock.Key = "{{ .Namespace" }, want{reason: "InvalidTemplate", message: "spec.lock.key"}},
		{"an undefined function", func(g *batchv1alpha1.GuardedJob) { g.Spec.Lock.Key = `{{ env "HOME" }}` }, want{reason: "InvalidTemplate", message: "env"}},
		{"a field that does not exist", func(g *batchv1alpha1.GuardedJob) { g.Spec.Lock.Key = "{{ .Namespace }}:{{ .Secret }}" }, want{reason: "InvalidTemplate", message: "Secret"}},
		{"a loop in a template", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.Lock.Key = "{{ range .Namespace }}x{{ end }}"
		}, want{reason: "InvalidTemplate", message: "range"}},
		{"a key that renders empty", func(g *batchv1alpha1.GuardedJob) { g.Spec.Lock.Key = "{{ if false }}x{{ end }}" }, want{reason: "InvalidKey", message: "empty"}},
		{"a 10 KB key", func(g *batchv1alpha1.GuardedJob) { g.Spec.Lock.Key = g.Namespace + ":" + strings.Repeat("k", 10*1024) }, want{applyError: "spec.lock.key"}},
		{"a key that renders past 512 bytes", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.Lock.Key = g.Namespace + `:{{ printf "%0600d" 1 }}`
		}, want{reason: "InvalidKey", message: "512"}},
		{"whitespace in the key", func(g *batchv1alpha1.GuardedJob) { g.Spec.Lock.Key = g.Namespace + ":daily settlement" }, want{reason: "InvalidKey", message: "whitespace"}},
		{"a newline in the key", func(g *batchv1alpha1.GuardedJob) { g.Spec.Lock.Key = g.Namespace + ":daily\nsettlement" }, want{reason: "InvalidKey", message: "whitespace"}},
		{"a key outside the namespace prefix", func(g *batchv1alpha1.GuardedJob) { g.Spec.Lock.Key = "lock:settlement" }, want{reason: "KeyNotAllowed", message: "--key-grants"}},
		{"an occurrence key equal to the lock key", func(g *batchv1alpha1.GuardedJob) { g.Spec.Lock.OccurrenceKey = "{{ .Key }}" }, want{reason: "InvalidKey", message: "different keys"}},
		{"a missing store Secret", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "absent"}
		}, want{reason: "StoreSecretNotFound", message: "absent"}},
		{"a store Secret without url", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "no-url"}
		}, want{reason: "StoreSecretInvalid", message: `no key "url"`}},
		{"a store Secret with a garbled url", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "garbled-url"}
		}, want{reason: "StoreSecretInvalid", message: "the scheme is not one of redis, rediss"}},
		{"a store Secret with a garbled CA", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "garbled-ca"}
		}, want{reason: "StoreSecretInvalid", message: "no PEM certificate"}},
		{"a hash stored at the lock key in a store the manager logs in to", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "right-login"}
			g.Spec.Lock.Key = "tenant:hash"
		}, want{reason: "StoreKeyWrongType", message: "holds a hash, not a string", lastRun: batchv1alpha1.RunResultFailed}},
		{"a wrong Redis password", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "wrong-login"}
		}, want{condition: batchv1alpha1.StoreReachableCondition, reason: "StoreUnavailable", message: "WRONGPASS"}},
		{"a wrong Redis password in the url", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "wrong-login-in-url"}
		}, want{condition: batchv1alpha1.StoreReachableCondition, reason: "StoreUnavailable", message: "WRONGPASS"}},
		{"a password in the url that is not percent-encoded", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "unencoded-login-in-url"}
		}, want{reason: "StoreSecretInvalid", message: "must be percent-encoded"}},
		{"an unreachable Redis", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "unreachable"}
		}, want{condition: batchv1alpha1.StoreReachableCondition, reason: "StoreUnavailable", message: "127.0.0.1:1"}},
		{"a hash stored at the lock key", func(g *batchv1alpha1.GuardedJob) { g.Spec.Lock.Key = g.Namespace + ":hash" }, want{reason: "StoreKeyWrongType", message: "holds a hash, not a string", lastRun: batchv1alpha1.RunResultFailed}},
		{"a lease shorter than the Pods' grace period", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(120))
		}, want{reason: "UnsafeLeaseTiming", message: "use lock.ttl >= 147s"}},
		{"a ttl under 5s", func(g *batchv1alpha1.GuardedJob) { g.Spec.Lock.TTL = &metav1.Duration{Duration: time.Second} }, want{applyError: "at least 5s"}},
		{"FailOpen with Strict fencing", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.Lock.StoreFailurePolicy = batchv1alpha1.FailOpen
			g.Spec.Fencing = &batchv1alpha1.FencingSpec{Policy: batchv1alpha1.FencingStrict}
		}, want{applyError: "cannot be combined"}},
		{"a name too long for its Job names", func(g *batchv1alpha1.GuardedJob) { g.Name = strings.Repeat("n", 46) }, want{applyError: "at most 45 characters"}},
		{"a Job template the API server rejects", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Name = "Not_A_DNS_Label"
		}, want{lastRun: batchv1alpha1.RunResultFailed, event: "JobRejected"}},
		{"OnFailure with fencing", func(g *batchv1alpha1.GuardedJob) {
			g.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		}, want{event: batchv1alpha1.NoPodFailurePolicyReason}},
	}

	type created struct {
		gj *batchv1alpha1.GuardedJob
		w  want
	}
	var objs []created
	for i, tc := range cases {
		gj := h.guardedJob("bad-"+itoa(int64(i)), "")
		gj.Spec.Lock.Key = h.ns + ":bad-" + itoa(int64(i))
		gj.Annotations = map[string]string{batchv1alpha1.RunNowAnnotation: time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339)}
		tc.mutate(gj)
		err := k8s.Create(ctx, gj)
		if tc.want.applyError != "" {
			h.g.Expect(err).To(MatchError(ContainSubstring(tc.want.applyError)), tc.name)
			continue
		}
		h.g.Expect(err).NotTo(HaveOccurred(), tc.name)
		objs = append(objs, created{gj, tc.want})
	}
	good := h.guardedJob("good", h.ns+":good")
	good.Annotations = map[string]string{batchv1alpha1.RunNowAnnotation: time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339)}
	h.create(good)
	h.clock.SetTime(time.Now().Add(3 * time.Second))

	for _, o := range objs {
		name := o.gj.Name
		w := o.w
		if w.reason != "" {
			cond := w.condition
			if cond == "" {
				cond = batchv1alpha1.ReadyCondition
			}
			h.g.Eventually(func() *metav1.Condition { return findCond(h.get(o.gj).Status.Conditions, cond) }).WithTimeout(20*time.Second).Should(And(
				Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", w.reason), HaveField("Message", ContainSubstring(w.message))),
				"%s (%s)", name, w.reason)
		}
		if w.lastRun != "" {
			h.g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(o.gj).Status.LastRun }).WithTimeout(20*time.Second).Should(And(
				Not(BeNil()), HaveField("Result", w.lastRun)), name)
		}
		if w.event != "" {
			h.g.Eventually(func() []string { return h.events(o.gj) }).WithTimeout(20*time.Second).Should(ContainElement(HavePrefix(w.event+":")), name)
		}
		if w.reason != "" && w.condition == "" {
			h.g.Eventually(func() []string { return h.events(o.gj) }).Should(ContainElement(HavePrefix(w.reason+":")), "a Warning event for %s", name)
		}
	}
	// The good object ran beside all of them.
	h.g.Eventually(func() []batchv1.Job {
		list := &batchv1.JobList{}
		h.g.Expect(k8s.List(ctx, list, client.InNamespace(h.ns), client.MatchingLabels{batchv1alpha1.GuardedJobLabel: "good"})).To(Succeed())
		return list.Items
	}).Should(HaveLen(1))

	// Nothing the manager shows holds a fragment of a password it was given.
	var statuses []string
	for _, o := range append(objs, created{gj: good}) {
		st, err := json.Marshal(h.get(o.gj).Status)
		h.g.Expect(err).NotTo(HaveOccurred())
		statuses = append(statuses, string(st))
	}
	h.g.Eventually(metrics.scrape).ShouldNot(BeNil())
	shown := map[string]string{
		"status":  strings.Join(statuses, "\n"),
		"events":  strings.Join(h.eventsAll(), "\n"),
		"log":     logs.String(),
		"metrics": metrics.last,
	}
	h.g.Expect(shown["log"]).To(And(ContainSubstring("unencoded-login-in-url"), ContainSubstring("must be percent-encoded")),
		"the log holds what the manager said about the objects")
	h.g.Expect(shown["metrics"]).To(ContainSubstring(`name="bad-`), "the metrics hold series of the bad objects")
	for what, text := range shown {
		for _, pw := range []string{right, wrong, wrongInURL, unencodedInURL} {
			h.g.Expect(secrets.Leaks(text, pw)).To(BeEmpty(), "fragments of a store password in the %s:\n%s", what, text)
		}
	}
}

// hostile returns the value of the named password of secrets.Hostile.
func hostile(t *testing.T, name string) string {
	t.Helper()
	for _, p := range secrets.Hostile {
		if p.Name == name {
			return p.Value
		}
	}
	t.Fatalf("no hostile password named %q", name)
	return ""
}

// logBuffer collects a manager's log; the manager writes from many goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
