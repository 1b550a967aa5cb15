package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// unlockProbe checks, before the faults, that a tenant of one cluster cannot have
// its manager delete another cluster's live lease. The same GuardedJob is applied
// in both clusters (as GitOps would); cluster-b's runs and holds the key with a
// long Pod, cluster-a's (suspended) is asked to unlock that key, naming the holder
// its status.storeView shows. The manager must refuse, and cluster-b's Pod must go
// on. Then both objects are deleted and cluster-b's run stopped, so the fault
// history starts from the workload alone.
func (w *world) unlockProbe(ctx context.Context) {
	t := w.t
	t.Helper()
	a, b := w.clusters[0], w.clusters[1]
	const name = "unlock-probe"
	key := namespace + ":" + name
	probe := func(suspend bool) *batchv1alpha1.GuardedJob {
		return &batchv1alpha1.GuardedJob{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec: batchv1alpha1.GuardedJobSpec{
				Schedule: "0 0 1 1 *", TimeZone: "UTC", Suspend: ptr.To(suspend),
				Lock: batchv1alpha1.LockSpec{Key: key, TTL: &metav1.Duration{Duration: ttl}, RenewInterval: &metav1.Duration{Duration: renewInterval}},
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
					BackoffLimit: ptr.To(int32(0)),
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{runForAnnotation: "120s", failAnnotation: "false"}},
						Spec: corev1.PodSpec{
							RestartPolicy:                 corev1.RestartPolicyNever,
							TerminationGracePeriodSeconds: ptr.To(int64(podGrace / time.Second)),
							Containers:                    []corev1.Container{{Name: "work", Image: "busybox:1.36", Command: []string{"sleep", "120"}}},
						},
					},
				}},
			},
		}
	}
	annotate := func(c *cluster, kv map[string]string) {
		t.Helper()
		var pairs []string
		for k, v := range kv {
			pairs = append(pairs, fmt.Sprintf("%q:%q", k, v))
		}
		patch := `{"metadata":{"annotations":{` + strings.Join(pairs, ",") + `}}}`
		if err := poll(ctx, 30*time.Second, "annotate "+c.name+" "+name, func() error {
			return c.client.Patch(ctx, &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}},
				client.RawPatch(types.MergePatchType, []byte(patch)))
		}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(c *cluster) (*batchv1alpha1.GuardedJob, error) {
		gj := &batchv1alpha1.GuardedJob{}
		return gj, c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, gj)
	}
	for _, c := range []*cluster{a, b} {
		if err := poll(ctx, 30*time.Second, "create "+name+" in "+c.name, func() error { return c.client.Create(ctx, probe(c == a)) }); err != nil {
			t.Fatal(err)
		}
	}
	annotate(b, map[string]string{batchv1alpha1.RunNowAnnotation: time.Now().UTC().Format(time.RFC3339)})
	var pod corev1.Pod
	if err := poll(ctx, 60*time.Second, "cluster-b's probe run holding the key with a running Pod", func() error {
		if v := w.rdb.Get(ctx, key).Val(); !strings.HasPrefix(v, "cluster-b/") {
			return fmt.Errorf("key holds %q", v)
		}
		pods := &corev1.PodList{}
		if err := b.client.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{batchv1alpha1.GuardedJobLabel: name}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				pod = p
				return nil
			}
		}
		return errors.New("no Pod running")
	}); err != nil {
		t.Fatal(err)
	}
	value := w.rdb.Get(ctx, key).Val()

	// cluster-a's tenant looks, then pastes the holder it was shown.
	inspect := time.Now().UTC().Format(time.RFC3339Nano)
	annotate(a, map[string]string{batchv1alpha1.InspectNowAnnotation: inspect})
	var holder string
	if err := poll(ctx, 30*time.Second, "cluster-a's store view", func() error {
		gj, err := get(a)
		if err != nil {
			return err
		}
		v := gj.Status.StoreView
		if v == nil || v.Request != inspect || len(v.Entries) == 0 || v.Entries[0].Lock.Holder == "" {
			return fmt.Errorf("store view %+v", v)
		}
		holder = v.Entries[0].Lock.Holder
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	unlock := time.Now().UTC().Format(time.RFC3339Nano)
	annotate(a, map[string]string{batchv1alpha1.UnlockAnnotation: unlock, batchv1alpha1.UnlockKeyAnnotation: key, batchv1alpha1.UnlockHolderAnnotation: holder})
	var rec *batchv1alpha1.UnlockRecord
	if err := poll(ctx, 30*time.Second, "cluster-a's answer to the unlock", func() error {
		gj, err := get(a)
		if err != nil {
			return err
		}
		if rec = gj.Status.LastUnlock; rec == nil || rec.Request != unlock {
			return errors.New("no answer yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rec.Result != batchv1alpha1.UnlockRefused {
		t.Errorf("cluster-a's manager answered an unlock of cluster-b's live lease %s with %s: %s", holder, rec.Result, rec.Message)
	}
	time.Sleep(2 * renewInterval) // a lost lease would be found by cluster-b's next renewal
	if v := w.rdb.Get(ctx, key).Val(); v != value {
		t.Errorf("cluster-b's lease %s became %q", holder, v)
	}
	cur := &corev1.Pod{}
	if err := b.client.Get(ctx, client.ObjectKeyFromObject(&pod), cur); err != nil || cur.DeletionTimestamp != nil {
		t.Errorf("cluster-b's Pod %s was stopped (%v)", pod.Name, err)
	}
	t.Logf("an unlock from cluster-a of cluster-b's live lease %s: %s (%s); cluster-b's Pod untouched", holder, rec.Result, rec.Message)

	// Out of the way before the faults: both objects go, cluster-b's run is stopped.
	for _, c := range []*cluster{a, b} {
		if err := poll(ctx, 30*time.Second, "delete "+name+" in "+c.name, func() error {
			return client.IgnoreNotFound(c.client.Delete(ctx, &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := poll(ctx, 60*time.Second, "the probe gone", func() error {
		for _, c := range []*cluster{a, b} {
			if _, err := get(c); err == nil {
				return fmt.Errorf("%s still has %s", c.name, name)
			}
		}
		if w.rdb.Exists(ctx, key).Val() != 0 {
			return errors.New("its key is still held")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
