package controllers_test

// Stories of the pod guard (lock.podGuard) on the manager's side: the Pods it
// builds, what it does when a guard stopped its workload, and why a guarded run
// that did not end cleanly leaves its lease to expire. The guard process itself is
// tested in cmd/guard; a Pod cut off and force-deleted in a real cluster in test/e2e.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/podguard"
)

// guardSecret creates the pod guard's store Secret of the harness' namespace.
func (h *harness) guardSecret(name string) {
	h.t.Helper()
	h.g.Expect(k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns},
		StringData: map[string]string{"url": h.redis.URL(), "username": "guard", "password": "guard-secret-pw"},
	})).To(Succeed())
}

// guardedJob is h.guardedJob with a pod guard, its Pods running as user 1000.
func (h *harness) guardedJobWithPodGuard(name, key string) *batchv1alpha1.GuardedJob {
	gj := h.guardedJob(name, key)
	gj.Spec.Lock.PodGuard = &batchv1alpha1.PodGuardSpec{SecretRef: batchv1alpha1.StoreReference{Name: "guard-redis"}}
	gj.Spec.Lock.TTL = &metav1.Duration{Duration: 20 * time.Second}
	gj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: 2 * time.Second}
	spec := &gj.Spec.JobTemplate.Spec.Template.Spec
	spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(1000))}
	gj.Spec.JobTemplate.Spec.BackoffLimit = ptr.To(int32(3))
	return gj
}

// guardExits plays the kubelet: the Pod's guard container stopped the workload and
// exited with code and message, and was restarted.
func (h *harness) guardExits(pod *corev1.Pod, code int32, msg string) {
	h.t.Helper()
	h.g.Eventually(func() error {
		cur := &corev1.Pod{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), cur); err != nil {
			return err
		}
		now := metav1.Now()
		cur.Status.Phase = corev1.PodRunning
		cur.Status.InitContainerStatuses = []corev1.ContainerStatus{{
			Name: podguard.ContainerName, Image: testGuardImage, ImageID: testGuardImage, RestartCount: 1, Ready: false,
			Started:              ptr.To(true),
			State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", Message: msg, StartedAt: now, FinishedAt: now}},
		}}
		return k8s.Status().Update(context.Background(), cur)
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

func TestAGuardedRunsPodsCarryTheGuardAndItsStatusSaysSo(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.guardSecret("guard-redis")
	key := h.ns + ":guarded"
	gj := h.guardedJobWithPodGuard("guarded", key)
	job, pod := h.runningJob(gj)
	g := h.g

	run := h.get(gj).Status.Active[0]
	g.Expect(run.PodGuard).NotTo(BeNil(), "status.active shows the run is guarded")
	g.Expect(run.PodGuard.Image).To(Equal(testGuardImage))
	g.Expect(run.PodGuard.SecretName).To(Equal("guard-redis"))
	g.Expect(run.PodGuard.RunAsUser).To(HaveValue(Equal(int64(1000))), "the workload's user, so the guard may signal it")

	spec := job.Spec.Template.Spec
	g.Expect(spec.ShareProcessNamespace).To(HaveValue(BeTrue()))
	g.Expect(spec.InitContainers).NotTo(BeEmpty())
	guard := spec.InitContainers[0]
	g.Expect(guard.Name).To(Equal(podguard.ContainerName))
	g.Expect(guard.Image).To(Equal(testGuardImage))
	g.Expect(guard.RestartPolicy).To(HaveValue(Equal(corev1.ContainerRestartPolicyAlways)))
	sum := sha256.Sum256([]byte(run.Token))
	g.Expect(guard.Env).To(ContainElements(
		corev1.EnvVar{Name: podguard.EnvKey, Value: key},
		corev1.EnvVar{Name: podguard.EnvHolder, Value: run.Holder},
		corev1.EnvVar{Name: podguard.EnvTokenSHA256, Value: hex.EncodeToString(sum[:])},
	))
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		for _, e := range c.Env {
			g.Expect(e.Value).NotTo(Equal(run.Token), "no Pod ever gets the token")
		}
	}
	g.Expect(job.Spec.BackoffLimit).To(HaveValue(Equal(int32(0))), "a guarded run's Pods are never replaced within the run")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(
		HavePrefix(batchv1alpha1.PodGuardSettingsReason + ": Job " + job.Name + ": backoffLimit 3 replaced by 0")))

	// A run that completed cleanly releases its lease and marks its occurrence.
	h.kubeletRemoves(pod)
	h.complete(job)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(20 * time.Second).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultSucceeded), HaveField("PodGuarded", true)))
	_, err := h.rdb.Get(context.Background(), key).Result()
	g.Expect(err).To(MatchError(ContainSubstring("redis: nil")), "released")
	g.Expect(h.rdb.Exists(context.Background(), run.OccurrenceKey).Val()).To(Equal(int64(1)), "the occurrence is marked done")
}

func TestAGuardThatStoppedItsWorkloadStopsTheRunAndLeavesItsLeaseToExpire(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.guardSecret("guard-redis")
	ctx := context.Background()
	key := h.ns + ":guardstop"
	gj := h.guardedJobWithPodGuard("guardstop", key)
	job, pod := h.runningJob(gj)
	g := h.g

	const why = "lease " + "x" + " not confirmed for 9.8s (store unreachable: dial tcp: i/o timeout)"
	h.guardExits(pod, podguard.ExitDeadline, why)
	g.Eventually(func() bool { return h.jobDeleted(job) }).WithTimeout(10*time.Second).Should(BeTrue(), "the run is stopped: no Pod of it may start again")
	g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(
		HavePrefix(batchv1alpha1.GuardStoppedReason + ": Stopping " + job.Name + ": the pod guard of Pod " + pod.Name + " stopped its workload: " + why)))

	// The Pod goes; the lease is not released but left to expire: the manager stops
	// renewing it.
	h.kubeletRemoves(pod)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(20 * time.Second).Should(And(
		Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultGuardStopped), HaveField("Message", ContainSubstring("left to expire"))))
	first, err := h.rdb.PTTL(ctx, key).Result()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first).To(BeNumerically(">", 0), "the key is still there: it was not deleted")
	g.Consistently(func() time.Duration { return h.rdb.PTTL(ctx, key).Val() }).WithTimeout(5*time.Second).WithPolling(200*time.Millisecond).
		Should(BeNumerically("<=", first), "nobody renews it any more")
}

func TestAGuardedRunWhosePodVanishedLeavesItsLeaseToExpireWhileAnUnguardedOneReleases(t *testing.T) {
	ctx := context.Background()
	// The Pod is force-deleted (its node cut off: nothing says its containers
	// stopped) and the Job controller fails the Job.
	vanish := func(guarded bool) (*harness, string, string) {
		h := newHarness(t)
		h.start()
		h.guardSecret("guard-redis")
		key := h.ns + ":vanished"
		gj := h.guardedJob("vanished", key)
		if guarded {
			gj = h.guardedJobWithPodGuard("vanished", key)
		}
		job, pod := h.runningJob(gj)
		h.g.Expect(k8s.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
		h.fail(job)
		h.g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).WithTimeout(20 * time.Second).Should(And(
			Not(BeNil()), HaveField("Result", batchv1alpha1.RunResultFailed)))
		return h, key, h.get(gj).Status.LastRun.Message
	}

	h, key, msg := vanish(true)
	h.g.Expect(msg).To(ContainSubstring("left to expire"))
	pttl, err := h.rdb.PTTL(ctx, key).Result()
	h.g.Expect(err).NotTo(HaveOccurred())
	h.g.Expect(pttl).To(BeNumerically(">", 0), "the guarded run's key expires by itself, after its guard stopped the Pod")

	h, key, _ = vanish(false)
	_, err = h.rdb.Get(ctx, key).Result()
	h.g.Expect(err).To(MatchError(ContainSubstring("redis: nil")), "without a guard only the fence protects downstream writes (docs/failure-semantics.md)")
}

func TestAPodGuardNeedsItsImageItsSecretAndRoomInTheLease(t *testing.T) {
	h := newHarness(t)
	h.noGuardImage = true
	h.start()
	g := h.g
	ready := func(gj *batchv1alpha1.GuardedJob) func() *metav1.Condition {
		return func() *metav1.Condition {
			return findCond(h.get(gj).Status.Conditions, batchv1alpha1.ReadyCondition)
		}
	}

	noImage := h.create(h.guardedJobWithPodGuard("noimage", h.ns+":noimage"))
	h.guardSecret("guard-redis")
	g.Eventually(ready(noImage)).Should(And(Not(BeNil()), HaveField("Reason", batchv1alpha1.PodGuardUnavailableReason),
		HaveField("Message", ContainSubstring("--guard-image"))))

	h.stop()
	h.noGuardImage = false
	h.start()
	noSecret := h.guardedJobWithPodGuard("nosecret", h.ns+":nosecret")
	noSecret.Spec.Lock.PodGuard.SecretRef.Name = "missing"
	h.create(noSecret)
	g.Eventually(ready(noSecret)).Should(And(Not(BeNil()), HaveField("Reason", batchv1alpha1.StoreSecretNotFoundReason),
		HaveField("Message", ContainSubstring("lock.podGuard.secretRef: Secret "+h.ns+"/missing was not found"))))

	// ttl 20s - renewInterval 2s - grace 17s - margin 2s leaves the guard less than 2s.
	tight := h.guardedJobWithPodGuard("tight", h.ns+":tight")
	tight.Spec.JobTemplate.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(17))
	tight.Spec.Lock.TTL = &metav1.Duration{Duration: 28 * time.Second}
	tight.Spec.Lock.RenewInterval = &metav1.Duration{Duration: 2 * time.Second}
	tight.Spec.Lock.PodGuard.Margin = &metav1.Duration{Duration: 8 * time.Second}
	h.create(tight)
	g.Eventually(ready(tight)).Should(And(Not(BeNil()), HaveField("Reason", batchv1alpha1.UnsafeLeaseTimingReason),
		HaveField("Message", HavePrefix("lock.podGuard: a pod guard needs"))))
	g.Expect(noImage.Status.Active).To(BeEmpty())
}
