package controllers_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// totalConnections returns a function that reads how many connections srv has
// accepted (its own client's one included).
func totalConnections(t *testing.T, srv *redisserver.Server) func() string {
	t.Helper()
	rdb := srv.Client(t)
	return func() string {
		for _, line := range strings.Split(rdb.Info(context.Background(), "stats").Val(), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
				return v
			}
		}
		return "?"
	}
}

// With --store-allow, a storeRef whose host is outside the list is Ready=False
// StoreNotAllowed and its store never sees a connection; a host inside it runs.
func TestAStoreOutsideStoreAllowGetsNoConnection(t *testing.T) {
	h := newHarness(t)
	var err error
	h.storeAllow, err = lockclient.ParseAllowList("localhost") // names only: no IP literal
	h.g.Expect(err).NotTo(HaveOccurred())
	h.start()
	ctx := context.Background()
	tenant := redisserver.Start(t)
	received := totalConnections(t, tenant)
	before := received()
	_, port, _ := strings.Cut(tenant.Addr(), ":")

	for name, url := range map[string]string{"by-ip": "redis://" + tenant.Addr(), "by-name": "redis://localhost:" + port} {
		h.g.Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}, StringData: map[string]string{"url": url},
		})).To(Succeed())
	}
	denied := h.guardedJob("denied", "{denied}")
	denied.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "by-ip"}
	h.create(denied)
	h.trigger(denied)
	g := h.g
	g.Eventually(func() *metav1.Condition {
		return findCond(h.get(denied).Status.Conditions, batchv1alpha1.ReadyCondition)
	}).
		WithTimeout(20 * time.Second).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse),
		HaveField("Reason", batchv1alpha1.StoreNotAllowedReason), HaveField("Message", ContainSubstring("--store-allow"))))
	g.Eventually(func() []string { return h.events(denied) }).WithTimeout(10 * time.Second).Should(ContainElement(HavePrefix("StoreNotAllowed:")))
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(2 * time.Second).Should(BeEmpty())
	g.Expect(received()).To(Equal(before), "no connection to a store outside --store-allow")

	allowed := h.guardedJob("allowed", "{allowed}")
	allowed.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "by-name"}
	h.create(allowed)
	h.trigger(allowed)
	h.waitJobs(1)
	g.Expect(tenant.Client(t).Get(ctx, "{allowed}").Val()).To(HavePrefix("cluster-a/" + h.ns + "/allowed-"))
}

// A GuardedJob can only name a Secret of its own namespace: neither a Secret of
// the same name elsewhere nor a path-like name reaches another namespace's store.
func TestAStoreRefNeverReadsAnotherNamespacesSecret(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	victim := redisserver.Start(t)
	received := totalConnections(t, victim)
	before := received()
	other := h.ns + "-victim"
	h.g.Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}})).To(Succeed())
	h.g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "victim-store", Namespace: other},
		StringData: map[string]string{"url": "redis://" + victim.Addr()},
	})).To(Succeed())

	g := h.g
	for name, ref := range map[string]string{
		"same-name": "victim-store",
		"path":      "../" + other + "/secrets/victim-store",
		"slash":     other + "/victim-store",
	} {
		gj := h.guardedJob(name, "{"+name+"}")
		gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: ref}
		h.create(gj)
		h.trigger(gj)
		want := batchv1alpha1.StoreSecretInvalidReason
		if name == "same-name" {
			want = batchv1alpha1.StoreSecretNotFoundReason
		}
		g.Eventually(func() *metav1.Condition { return findCond(h.get(gj).Status.Conditions, batchv1alpha1.ReadyCondition) }).
			WithTimeout(20*time.Second).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", want)), name)
	}
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(2 * time.Second).Should(BeEmpty())
	g.Expect(received()).To(Equal(before), "the other namespace's store saw no connection")
}

// A store whose user has exactly the ACL docs/security.md gives (no CONFIG):
// a run goes through to Succeeded, and StoreSafe reads Unknown, not False.
func TestARunWithTheDocumentedRedisACL(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	tenant := redisserver.Start(t, redisserver.WithPassword("Adm1n-pw"))
	admin := tenant.Client(t)
	doc, err := os.ReadFile("../docs/security.md")
	h.g.Expect(err).NotTo(HaveOccurred())
	var acl []any
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "ACL SETUSER guardedjob ") {
			for _, f := range strings.Fields(strings.Replace(line, ">PASSWORD", ">acl-Pw7", 1)) {
				acl = append(acl, f)
			}
		}
	}
	h.g.Expect(acl).NotTo(BeEmpty(), "docs/security.md gives the ACL line")
	h.g.Expect(admin.Do(ctx, acl...).Err()).To(Succeed())
	h.g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "acl-store", Namespace: h.ns},
		StringData: map[string]string{"url": "redis://guardedjob:acl-Pw7@" + tenant.Addr()},
	})).To(Succeed())

	gj := h.guardedJob("acl", "lock:acl")
	gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "acl-store"}
	h.create(gj)
	h.trigger(gj)
	g := h.g
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	h.complete(&job)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(20 * time.Second).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultSucceeded)))
	g.Expect(admin.Keys(ctx, "lock:acl:done:*").Val()).To(HaveLen(1))
	g.Eventually(func() *metav1.Condition {
		return findCond(h.get(gj).Status.Conditions, batchv1alpha1.StoreSafeCondition)
	}).
		WithTimeout(10 * time.Second).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionUnknown),
		HaveField("Reason", batchv1alpha1.ConfigUnknownReason)))
}

// TLS verification is on unless the store's Secret turns it off explicitly, and
// then every run acquired there gets a Warning.
func TestSkippingTLSVerificationIsAnExplicitOptInWithAWarning(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	tlsSrv := redisserver.Start(t, redisserver.WithTLS())
	for name, data := range map[string]map[string]string{
		"verified": {"url": "rediss://" + tlsSrv.Addr()},
		"insecure": {"url": "rediss://" + tlsSrv.Addr(), "insecureSkipVerify": "true"},
		"garbled":  {"url": "rediss://" + tlsSrv.Addr(), "insecureSkipVerify": "yes"},
	} {
		h.g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}, StringData: data})).To(Succeed())
	}
	gjs := map[string]*batchv1alpha1.GuardedJob{}
	for _, name := range []string{"verified", "insecure", "garbled"} {
		gj := h.guardedJob(name, "lock:"+name)
		gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: name}
		gjs[name] = h.create(gj)
		h.trigger(gj)
	}
	g := h.g
	g.Eventually(func() []string { return h.events(gjs["insecure"]) }).WithTimeout(20 * time.Second).Should(ContainElement(And(
		HavePrefix("InsecureStore:"), ContainSubstring("turns TLS server verification off"))))
	g.Expect(tlsSrv.Client(t).Get(ctx, "lock:insecure").Val()).To(HavePrefix("cluster-a/" + h.ns + "/insecure-"))

	g.Eventually(func() *metav1.Condition {
		return findCond(h.get(gjs["verified"]).Status.Conditions, batchv1alpha1.StoreReachableCondition)
	}).WithTimeout(20 * time.Second).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse),
		HaveField("Message", ContainSubstring("certificate"))))
	g.Eventually(func() *metav1.Condition {
		return findCond(h.get(gjs["garbled"]).Status.Conditions, batchv1alpha1.ReadyCondition)
	}).
		WithTimeout(20 * time.Second).Should(And(Not(BeNil()), HaveField("Reason", batchv1alpha1.StoreSecretInvalidReason),
		HaveField("Message", ContainSubstring(`insecureSkipVerify must be "true" or "false"`))))
	for _, name := range []string{"verified", "garbled"} {
		g.Expect(h.events(gjs[name])).NotTo(ContainElement(HavePrefix("InsecureStore:")), name)
	}
}

// A Sentinel inside --store-allow that announces a master outside it: the master
// never sees a connection, and the object says why.
func TestAMasterASentinelAnnouncesOutsideStoreAllowGetsNoConnection(t *testing.T) {
	h := newHarness(t)
	var err error
	h.storeAllow, err = lockclient.ParseAllowList("localhost") // the Sentinel by name; it announces 127.0.0.1
	h.g.Expect(err).NotTo(HaveOccurred())
	h.start()
	ctx := context.Background()
	master := redisserver.Start(t)
	sentinel := redisserver.StartSentinel(t, master, "mymaster")
	received := totalConnections(t, master)
	before := received()
	_, port, _ := strings.Cut(sentinel.Addr(), ":")
	h.g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sentinel", Namespace: h.ns},
		StringData: map[string]string{"url": "redis+sentinel://localhost:" + port + "/mymaster"},
	})).To(Succeed())
	gj := h.guardedJob("announced", "{announced}")
	gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "sentinel"}
	h.create(gj)
	h.trigger(gj)

	g := h.g
	g.Eventually(func() *metav1.Condition { return findCond(h.get(gj).Status.Conditions, batchv1alpha1.ReadyCondition) }).
		WithTimeout(20 * time.Second).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse),
		HaveField("Reason", batchv1alpha1.StoreNotAllowedReason), HaveField("Message", ContainSubstring("--store-allow"))))
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(2 * time.Second).Should(BeEmpty())
	g.Expect(received()).To(Equal(before), "no connection to the announced master")
}
