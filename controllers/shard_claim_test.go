package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
)

// A GuardedJob moved into this shard with a run whose lease this shard does not
// renew yet (its store could not be resolved here): the shard it came from
// lets go of the lease as soon as status.shard names this one, so the claim
// waits until every lease-holding run of this cluster is tracked, or the lease
// would be renewed by nobody.
func TestShardClaimsAHandOverOnlyOnceItRenewsEveryRun(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	store := dialTestStore(t, srv.Addr(), time.Second)
	r := &GuardedJobReconciler{ClusterName: "cluster-a", Selector: labels.SelectorFromSet(labels.Set{"shard": "b"}), Keeper: lockclient.NewKeeper(store)}
	gj := &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Name: "settle", Namespace: "payments", UID: "uid-1"}}
	run := batchv1alpha1.ActiveRun{
		JobName: "settle-1", Cluster: "cluster-a", OwnerUID: "uid-1", Token: "cluster-a/settle-1#abc", Key: "payments:settle",
		TTL: metav1.Duration{Duration: time.Minute}, RenewInterval: metav1.Duration{Duration: 20 * time.Second}, Phase: batchv1alpha1.RunPhaseRunning,
	}
	intent := batchv1alpha1.ActiveRun{JobName: "settle-2", Cluster: "cluster-a", OwnerUID: "uid-1", Token: "cluster-a/settle-2#def", Phase: batchv1alpha1.RunPhaseAcquiring}
	gj.Status.Active = []batchv1alpha1.ActiveRun{run, intent}
	gj.Status.Shard = "shard=a"

	r.claimShard(context.Background(), gj)
	g.Expect(gj.Status.Shard).To(Equal("shard=a"), "a run this shard does not renew keeps the old shard renewing it")

	g.Expect(r.Keeper.Track(r.trackRequest(gj, &gj.Status.Active[0], store, time.Now()))).To(Succeed())
	r.claimShard(context.Background(), gj)
	g.Expect(gj.Status.Shard).To(Equal("shard=b"), "every lease-holding run is renewed here (a run still acquiring holds none)")
}
