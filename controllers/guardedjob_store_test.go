package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

func TestAStoreRefRunsTheLeaseInTheTenantsOwnRedisWithAnyKey(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	const password = "tenant-secret-pw"
	tenant := redisserver.Start(t, redisserver.WithPassword(password))
	tenantRDB := tenant.Client(t)

	gj := h.guardedJob("tenant", "lock:tenant-settlement") // outside the namespace prefix: fine in its own store
	gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "tenant-redis"}
	h.create(gj)
	h.trigger(gj)
	g := h.g
	g.Eventually(func() *metav1.Condition { return findCond(h.get(gj).Status.Conditions, batchv1alpha1.ReadyCondition) }).Should(And(
		Not(BeNil()), HaveField("Reason", batchv1alpha1.StoreSecretNotFoundReason),
		HaveField("Message", ContainSubstring("Secret "+h.ns+"/tenant-redis was not found"))))
	g.Expect(h.jobs()).To(BeEmpty())

	g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-redis", Namespace: h.ns},
		StringData: map[string]string{"url": "redis://" + tenant.Addr(), "password": password},
	})).To(Succeed())
	// A new trigger value (a second later), and a pass that reads the Secret now.
	h.clock.SetTime(time.Now().Add(time.Second))
	h.annotate(gj, h.clock.Now().UTC().Format(time.RFC3339))

	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	st := h.get(gj).Status
	g.Expect(tenantRDB.Get(ctx, "lock:tenant-settlement").Result()).To(Equal(st.Active[0].Token))
	g.Expect(h.rdb.Exists(ctx, "lock:tenant-settlement").Result()).To(BeZero(), "nothing in the manager's own store")
	g.Expect(st.Active[0].Store).To(Equal("secret:" + h.ns + "/tenant-redis:redis://" + tenant.Addr()))
	g.Expect(findCond(st.Conditions, batchv1alpha1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
	for _, e := range h.events(gj) {
		g.Expect(e).NotTo(ContainSubstring(password))
	}

	h.complete(&job)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultSucceeded)))
	g.Expect(tenantRDB.Exists(ctx, "lock:tenant-settlement").Result()).To(BeZero())
	g.Expect(tenantRDB.Keys(ctx, "lock:tenant-settlement:done:*").Result()).To(HaveLen(1))
}

func TestKeysOutsideTheNamespaceNeedAGrantInTheManagersStore(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.create(h.guardedJob("outside", "lock:settlement"))
	h.trigger(gj)
	g := h.g
	g.Eventually(func() *metav1.Condition { return findCond(h.get(gj).Status.Conditions, batchv1alpha1.ReadyCondition) }).Should(And(
		Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", batchv1alpha1.KeyNotAllowedReason),
		HaveField("Message", ContainSubstring("--key-grants="+h.ns+"=lock:settlement"))))
	g.Consistently(func() []batchv1.Job { return h.jobs() }).WithTimeout(2 * time.Second).Should(BeEmpty())
	g.Expect(h.rdb.Keys(context.Background(), "[^_]*").Result()).To(BeEmpty(),
		"no Redis call for a key that is not allowed (only the manager's own identity heartbeat, _guardedjob:...)")
}

func TestStoreSafeSaysWhenRedisCanLoseLeases(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.create(h.guardedJob("safety", h.ns+":safety"))
	g := h.g
	// The test Redis has no persistence: done-markers and fence counters would not
	// survive a restart.
	g.Eventually(func() *metav1.Condition {
		return findCond(h.get(gj).Status.Conditions, batchv1alpha1.StoreSafeCondition)
	}).Should(And(
		Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", batchv1alpha1.PersistenceDisabledReason)))

	lru := redisserver.Start(t, redisserver.WithArgs("--maxmemory-policy", "allkeys-lru"))
	g.Expect(k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "lru", Namespace: h.ns}, StringData: map[string]string{"url": "redis://" + lru.Addr()},
	})).To(Succeed())
	evicting := h.guardedJob("evicting", "any:key")
	evicting.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "lru"}
	h.create(evicting)
	g.Eventually(func() *metav1.Condition {
		return findCond(h.get(evicting).Status.Conditions, batchv1alpha1.StoreSafeCondition)
	}).Should(And(
		Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", batchv1alpha1.EvictionEnabledReason),
		HaveField("Message", ContainSubstring("allkeys-lru"))))
}

func TestAllowWithAKeyThatIsTheSameForEveryOccurrenceGetsAWarning(t *testing.T) {
	h := newHarness(t)
	h.start()
	gj := h.guardedJob("allowfixed", h.ns+":allowfixed")
	gj.Spec.ConcurrencyPolicy = batchv1alpha1.AllowConcurrent
	h.create(gj)
	h.g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(And(
		HavePrefix("FixedKeyWithAllow:"), ContainSubstring("as with Forbid"))))
}

// A run in status.active that another cluster (or another object of the same name)
// recorded, as after restoring a backup, is never renewed or released here.
func TestARunRestoredFromAnotherClusterIsNeverRenewed(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	gj := h.create(h.guardedJob("restored", h.ns+":restored"))
	foreign := "cluster-elsewhere/" + h.ns + "/restored-29000000-abcdef#0123456789abcdef0123456789abcdef"
	h.g.Expect(h.rdb.Set(ctx, h.ns+":restored", foreign, 6*time.Second).Err()).To(Succeed())
	cur := h.get(gj)
	cur.Status.Active = []batchv1alpha1.ActiveRun{{
		JobName: "restored-29000000-abcdef", Phase: batchv1alpha1.RunPhaseRunning, ScheduledTime: metav1.Now(),
		Key: h.ns + ":restored", Token: foreign, Holder: "cluster-elsewhere/" + h.ns + "/restored-29000000-abcdef",
		Cluster: "cluster-elsewhere", OwnerUID: cur.UID, Fence: 7,
		TTL: metav1.Duration{Duration: 6 * time.Second}, RenewInterval: metav1.Duration{Duration: time.Second},
	}}
	h.g.Expect(k8s.Status().Update(ctx, cur)).To(Succeed())
	h.start()

	g := h.g
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		Not(BeNil()), HaveField("Message", ContainSubstring(`recorded by cluster "cluster-elsewhere"`))))
	g.Expect(h.get(gj).Status.Active).To(BeEmpty())
	// Nobody renews it: the key runs out on its own.
	g.Eventually(func() (int64, error) { return h.rdb.Exists(ctx, h.ns+":restored").Result() }).WithTimeout(10 * time.Second).Should(BeZero())
}

func TestARotatedStoreSecretIsUsedByTheNextRunAndTheOldClientIsClosed(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	tenant := redisserver.Start(t, redisserver.WithPassword("first-password"))
	admin := adminClient(t, tenant, "first-password")
	secret := h.storeSecret("rotating", tenant, "first-password")
	gj := h.guardedJob("rotating", "tenant:rotating")
	gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "rotating"}
	h.create(gj)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.complete(&job)
	h.g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(HaveField("Result", batchv1alpha1.RunResultSucceeded))
	before, err := storeClients(ctx, admin)
	h.g.Expect(err).NotTo(HaveOccurred())
	h.g.Expect(before).NotTo(BeEmpty())

	// Rotate: the server takes a new password, then the Secret gets it.
	h.g.Expect(admin.ConfigSet(ctx, "requirepass", "second-password").Err()).To(Succeed())
	admin = adminClient(t, tenant, "second-password")
	h.g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(secret), secret)).To(Succeed())
	secret.Data["password"] = []byte("second-password")
	h.g.Expect(k8s.Update(ctx, secret)).To(Succeed())
	h.clock.SetTime(time.Now().Add(2 * time.Second))
	h.annotate(gj, h.clock.Now().UTC().Format(time.RFC3339))

	// The next trigger of the same occurrence reaches Redis with the new password
	// (and finds the occurrence done)...
	h.g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(
		HaveField("Result", batchv1alpha1.RunResultSkipped), HaveField("Message", ContainSubstring("already done by"))))
	// ...and the client of the old Secret version, which holds no lease, is closed.
	connections := func() ([]string, error) { return storeClients(ctx, admin) }
	h.g.Eventually(connections).ShouldNot(ContainElements(before))
	for _, addr := range before {
		h.g.Expect(connections()).NotTo(ContainElement(addr))
	}
}

func TestATenantStoreNoGuardedJobUsesAnyMoreIsDisconnected(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	first := redisserver.Start(t)
	second := redisserver.Start(t)
	for name, srv := range map[string]*redisserver.Server{"first": first, "second": second} {
		h.storeSecret(name, srv, "")
	}
	firstAdmin := adminClient(t, first, "")
	clients := func() (int, error) {
		addrs, err := storeClients(ctx, firstAdmin)
		return len(addrs), err
	}
	gj := h.guardedJob("uses-first", "tenant:first")
	gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "first"}
	h.create(gj)
	h.g.Eventually(clients).Should(BeNumerically(">=", 1), "StoreSafe reads the store's configuration")
	h.g.Expect(k8s.Delete(ctx, h.get(gj))).To(Succeed())
	h.g.Eventually(func() bool { return h.gone(gj) }).Should(BeTrue())

	// Later, a pass for another tenant store finds the first one idle.
	h.clock.Step(11 * time.Minute)
	other := h.guardedJob("uses-second", "tenant:second")
	other.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "second"}
	h.create(other)
	h.g.Eventually(clients).Should(BeZero())
}

// storeSecret creates the Secret name of the story's namespace that a
// storeRef names for srv (with password, unless empty), and returns it.
func (h *harness) storeSecret(name string, srv *redisserver.Server, password string) *corev1.Secret {
	h.t.Helper()
	data := map[string]string{"url": "redis://" + srv.Addr()}
	if password != "" {
		data["password"] = password
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}, StringData: data}
	h.g.Expect(k8s.Create(context.Background(), secret)).To(Succeed())
	return secret
}

// adminName names the test's own connections to a store, which storeClients
// leaves out.
const adminName = "test-admin"

// adminClient returns a client of srv that logs in with password and names its
// connections adminName.
func adminClient(t *testing.T, srv *redisserver.Server, password string) *redis.Client {
	t.Helper()
	o := srv.Options()
	o.Password = password
	o.ClientName = adminName
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// storeClients returns the addresses of the clients connected to admin's Redis
// other than admin's own. A failed CLIENT LIST is an error, never "no clients".
func storeClients(ctx context.Context, admin *redis.Client) ([]string, error) {
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLIENT LIST: %w", err)
	}
	var out []string
	for line := range strings.Lines(strings.TrimSpace(list)) {
		var name, addr string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "name="); ok {
				name = v
			} else if v, ok := strings.CutPrefix(f, "addr="); ok {
				addr = v
			}
		}
		if addr == "" {
			return nil, fmt.Errorf("CLIENT LIST: no addr= in %q", line)
		}
		if name != adminName {
			out = append(out, addr)
		}
	}
	return out, nil
}

// TestARunWhoseStoreCannotBeResolvedAfterARestartIsStoppedAndItsLeaseLeftToExpire:
// step stop_unresolved. A run holds its lease in a tenant's store; the manager
// restarts and the store's Secret is gone meanwhile. Its lease can be neither
// renewed nor released: the run is stopped (StoreUnavailable), and once its
// Pods are gone its Job loses the lease finalizer and the run ends with its
// lease left to expire in the tenant's store.
func TestARunWhoseStoreCannotBeResolvedAfterARestartIsStoppedAndItsLeaseLeftToExpire(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	tenant := redisserver.Start(t)
	tenantRDB := tenant.Client(t)
	secret := h.storeSecret("going", tenant, "")
	gj := h.guardedJob("unresolved", "lock:unresolved")
	gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: "going"}
	h.create(gj)
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	g := h.g
	token := h.get(gj).Status.Active[0].Token
	g.Expect(tenantRDB.Get(ctx, "lock:unresolved").Result()).To(Equal(token))

	h.stop()
	g.Expect(k8s.Delete(ctx, secret)).To(Succeed())
	h.start()

	g.Eventually(func() []string { return h.events(gj) }).WithTimeout(20 * time.Second).Should(ContainElement(And(
		HavePrefix("StoreUnavailable: Stopping "+job.Name), ContainSubstring("the run's store cannot be resolved"))))
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(20*time.Second).Should(And(Not(BeNil()),
		HaveField("JobName", job.Name), HaveField("Result", batchv1alpha1.RunResultStoreUnavailable),
		HaveField("Message", ContainSubstring("the lease was left to expire"))), "the run ends once its Pods are gone")
	g.Expect(h.get(gj).Status.Active).To(BeEmpty())
	g.Eventually(func() ([]string, error) {
		cur := &batchv1.Job{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(&job), cur)
		return cur.Finalizers, client.IgnoreNotFound(err)
	}).ShouldNot(ContainElement(batchv1alpha1.LeaseFinalizer), "the stopped Job lost its lease finalizer")
	g.Expect(tenantRDB.Get(ctx, "lock:unresolved").Result()).To(Equal(token), "left to expire, not released")
	ttl, err := tenantRDB.PTTL(ctx, "lock:unresolved").Result()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ttl).To(BeNumerically(">", 0), "it expires on its own")
}
