package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// request sets annotations on gj in one patch, as the plugin does.
func (h *harness) request(gj *batchv1alpha1.GuardedJob, kv map[string]string) {
	h.t.Helper()
	h.g.Eventually(func() error {
		cur := &batchv1alpha1.GuardedJob{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(gj), cur); err != nil {
			return err
		}
		patch := client.MergeFrom(cur.DeepCopy())
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		for k, v := range kv {
			cur.Annotations[k] = v
		}
		return k8s.Patch(context.Background(), cur, patch)
	}).Should(Succeed())
}

// requestValue is a fresh request value by the manager's clock.
func (h *harness) requestValue() string {
	h.clock.Step(time.Millisecond) // every request value differs
	return h.clock.Now().UTC().Format(time.RFC3339Nano)
}

// inspect asks for a store view and returns the answer.
func (h *harness) inspect(gj *batchv1alpha1.GuardedJob) *batchv1alpha1.StoreView {
	h.t.Helper()
	value := h.requestValue()
	h.request(gj, map[string]string{batchv1alpha1.InspectNowAnnotation: value})
	var view *batchv1alpha1.StoreView
	h.g.Eventually(func() string {
		view = h.get(gj).Status.StoreView
		if view == nil {
			return ""
		}
		return view.Request
	}).Should(Equal(value))
	return view
}

// unlock asks for an unlock and returns the outcome.
func (h *harness) unlock(gj *batchv1alpha1.GuardedJob, value, key, holder string) *batchv1alpha1.UnlockRecord {
	h.t.Helper()
	h.request(gj, map[string]string{batchv1alpha1.UnlockAnnotation: value,
		batchv1alpha1.UnlockKeyAnnotation: key, batchv1alpha1.UnlockHolderAnnotation: holder})
	var rec *batchv1alpha1.UnlockRecord
	h.g.Eventually(func() string {
		rec = h.get(gj).Status.LastUnlock
		if rec == nil {
			return ""
		}
		return rec.Request
	}).Should(Equal(value))
	return rec
}

// inspect-now: the manager reads exactly the GuardedJob's keys and writes what
// it saw into status.storeView, holders only, telling whose each holder is.
func TestInspectNowShowsWhatTheStoreHoldsForTheGuardedJobsKeys(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	g := h.g
	key := h.ns + ":settle"
	gj := h.create(h.guardedJob("settle", key))
	// Yearly: the current occurrence is January 1 of this year.
	due := time.Date(h.clock.Now().UTC().Year(), 1, 1, 0, 0, 0, 0, time.UTC)
	marker := key + ":done:" + strconv.FormatInt(due.Unix(), 10)

	t.Run("another cluster's lease, the fence and the done-marker of the current occurrence", func(t *testing.T) {
		g.Expect(h.rdb.Set(ctx, key, "cluster-b/"+h.ns+"/settle-1-abcdef#secretrandompart", 30*time.Second).Err()).To(Succeed())
		g.Expect(h.rdb.Set(ctx, key+":fence", 7, 0).Err()).To(Succeed())
		g.Expect(h.rdb.Set(ctx, marker, "cluster-b/"+h.ns+"/settle-0-aaaaaa#othersecret", time.Hour).Err()).To(Succeed())
		before := h.clock.Now()
		view := h.inspect(gj)
		g.Expect(view.Error).To(BeEmpty())
		g.Expect(view.Store).To(Equal(h.store.Identity()))
		g.Expect(view.Entries).To(HaveLen(1))
		e := view.Entries[0]
		g.Expect(e.JobName).To(BeEmpty())
		g.Expect(e.ScheduledTime.Time).To(BeTemporally("==", due))
		g.Expect(e.Lock.Key).To(Equal(key))
		g.Expect(e.Lock.Holder).To(Equal("cluster-b/" + h.ns + "/settle-1-abcdef"))
		g.Expect(e.Lock.Whose).To(Equal(batchv1alpha1.LockWhoseOtherCluster))
		g.Expect(e.Lock.NoExpiry).To(BeFalse())
		g.Expect(e.Lock.ExpiresAt.Time).To(BeTemporally(">=", before.Add(28*time.Second).Truncate(time.Second)))
		g.Expect(e.Lock.ExpiresAt.Time).To(BeTemporally("<=", h.clock.Now().Add(31*time.Second)))
		g.Expect(e.Fence).To(Equal(&batchv1alpha1.StoreFenceView{Key: key + ":fence", Value: 7}))
		g.Expect(e.DoneMarker).To(Equal(&batchv1alpha1.StoreDoneMarkerView{Key: marker, Holder: "cluster-b/" + h.ns + "/settle-0-aaaaaa"}))

		raw, err := json.Marshal(h.get(gj).Status)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(raw)).NotTo(ContainSubstring("secret"), "no token in status")
	})

	t.Run("a foreign holder without expiry, and an absent marker", func(t *testing.T) {
		g.Expect(h.rdb.Set(ctx, key, "batch-host-7", 0).Err()).To(Succeed())
		g.Expect(h.rdb.Del(ctx, marker).Err()).To(Succeed())
		e := h.inspect(gj).Entries[0]
		g.Expect(e.Lock).To(Equal(batchv1alpha1.StoreLockView{Key: key, Holder: "batch-host-7", Whose: batchv1alpha1.LockWhoseForeign, NoExpiry: true}))
		g.Expect(e.DoneMarker.Holder).To(BeEmpty())
	})

	t.Run("a run of this GuardedJob: its recorded keys, and the lease is its own", func(t *testing.T) {
		g.Expect(h.rdb.Del(ctx, key).Err()).To(Succeed())
		h.trigger(gj)
		h.waitRecorded(gj)
		run := h.get(gj).Status.Active[0]
		view := h.inspect(gj)
		g.Expect(view.Entries).To(HaveLen(1))
		e := view.Entries[0]
		g.Expect(e.JobName).To(Equal(run.JobName))
		g.Expect(e.Lock.Holder).To(Equal(run.Holder))
		g.Expect(e.Lock.Whose).To(Equal(batchv1alpha1.LockWhoseThisGuardedJob))
		g.Expect(e.Fence.Value).To(Equal(run.Fence))
		g.Expect(e.DoneMarker.Key).To(Equal(run.OccurrenceKey))
		raw, err := json.Marshal(view)
		g.Expect(err).NotTo(HaveOccurred())
		random := run.Token[strings.LastIndexByte(run.Token, '#')+1:]
		g.Expect(string(raw)).NotTo(ContainSubstring(random), "the run's token stays in status.active")
	})

	t.Run("a value that is not a time is answered with an error", func(t *testing.T) {
		h.request(gj, map[string]string{batchv1alpha1.InspectNowAnnotation: "now please"})
		g.Eventually(func() *batchv1alpha1.StoreView { return h.get(gj).Status.StoreView }).Should(And(
			HaveField("Request", "now please"), HaveField("Error", ContainSubstring("RFC 3339")), HaveField("Entries", BeEmpty())))
	})
}

// A GuardedJob whose keys leave its namespace's grants gets an error answer and
// the store is not read; a store that does not answer gives an error answer
// within the call timeout, never a hang.
func TestInspectNowNeverReadsKeysOutsideTheGrantsAndNeverHangs(t *testing.T) {
	h := newHarness(t)
	proxy := h.storeViaProxy()
	h.start()
	ctx := context.Background()
	g := h.g

	foreign := h.create(h.guardedJob("foreign", "payments:settlement"))
	g.Expect(h.rdb.Set(ctx, "payments:settlement", "cluster-b/payments/settle-1-abcdef#x", time.Minute).Err()).To(Succeed())
	view := h.inspect(foreign)
	g.Expect(view.Error).To(And(ContainSubstring("KeyNotAllowed"), ContainSubstring("payments:settlement")))
	g.Expect(view.Entries).To(BeEmpty())
	g.Expect(fmt.Sprint(view)).NotTo(ContainSubstring("cluster-b"), "nothing of the key's value")

	gj := h.create(h.guardedJob("mine", h.ns+":mine"))
	g.Expect(h.inspect(gj).Error).To(BeEmpty())
	proxy.Blackhole()
	start := time.Now()
	view = h.inspect(gj)
	g.Expect(view.Error).To(ContainSubstring("the store did not answer"))
	g.Expect(time.Since(start)).To(BeNumerically("<", 10*time.Second))
}

// unlock: the manager deletes the GuardedJob's own lock key or current
// done-marker while it still has the holder the user saw, refuses the lease of a
// run that may still be working, and says what it did in status and events.
func TestUnlockRequests(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	g := h.g
	key := h.ns + ":settle"
	gj := h.create(h.guardedJob("settle", key))

	t.Run("a stale foreign lock is deleted, with a ManualUnlock event", func(t *testing.T) {
		g.Expect(h.rdb.Set(ctx, key, "batch-host-7", 0).Err()).To(Succeed())
		rec := h.unlock(gj, h.requestValue(), "", "batch-host-7")
		g.Expect(rec.Result).To(Equal(batchv1alpha1.UnlockDeleted), rec.Message)
		g.Expect(rec.Key).To(Equal(key), "the one lock key, when none is named")
		g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero())
		g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(
			And(HavePrefix("ManualUnlock: Deleted lock "+key+" held by batch-host-7"), ContainSubstring(batchv1alpha1.UnlockAnnotation))))
	})

	t.Run("a lock that changed hands is left alone", func(t *testing.T) {
		g.Expect(h.rdb.Set(ctx, key, "batch-host-8", 0).Err()).To(Succeed())
		rec := h.unlock(gj, h.requestValue(), key, "batch-host-7")
		g.Expect(rec.Result).To(Equal(batchv1alpha1.UnlockChanged))
		g.Expect(rec.FoundHolder).To(Equal("batch-host-8"))
		g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal("batch-host-8"))
		g.Expect(h.rdb.Del(ctx, key).Err()).To(Succeed())
		g.Expect(h.unlock(gj, h.requestValue(), key, "batch-host-8").Result).To(Equal(batchv1alpha1.UnlockAbsent))
	})

	t.Run("requests that are refused", func(t *testing.T) {
		g.Expect(h.rdb.Set(ctx, h.ns+":other", "batch-host-7", 0).Err()).To(Succeed())
		for name, tc := range map[string]struct{ value, key, holder, why string }{
			"another key":           {h.requestValue(), h.ns + ":other", "batch-host-7", "neither a lock key nor the current done-marker"},
			"a request long ago":    {h.clock.Now().Add(-time.Hour).UTC().Format(time.RFC3339), key, "batch-host-7", "more than 10m0s from the manager's clock"},
			"no holder":             {h.requestValue(), key, "", batchv1alpha1.UnlockHolderAnnotation + " is not set"},
			"a value not a time":    {"yesterday", key, "batch-host-7", "RFC 3339"},
			"a done-marker's fence": {h.requestValue(), key + ":fence", "x", "neither a lock key"},
		} {
			rec := h.unlock(gj, tc.value, tc.key, tc.holder)
			g.Expect(rec.Result).To(Equal(batchv1alpha1.UnlockRefused), name)
			g.Expect(rec.Message).To(ContainSubstring(tc.why), name)
		}
		g.Expect(h.rdb.Get(ctx, h.ns+":other").Val()).To(Equal("batch-host-7"))
		g.Eventually(func() []string { return h.events(gj) }).Should(ContainElement(HavePrefix("UnlockRefused: Refused " + batchv1alpha1.UnlockAnnotation)))
	})

	t.Run("the current occurrence's done-marker, when named", func(t *testing.T) {
		due := time.Date(h.clock.Now().UTC().Year(), 1, 1, 0, 0, 0, 0, time.UTC)
		marker := key + ":done:" + strconv.FormatInt(due.Unix(), 10)
		g.Expect(h.rdb.Set(ctx, marker, "cluster-b/"+h.ns+"/settle-0-aaaaaa#x", time.Hour).Err()).To(Succeed())
		rec := h.unlock(gj, h.requestValue(), marker, "cluster-b/"+h.ns+"/settle-0-aaaaaa")
		g.Expect(rec.Result).To(Equal(batchv1alpha1.UnlockDeleted), rec.Message)
		g.Expect(h.rdb.Exists(ctx, marker).Val()).To(BeZero())
	})

	t.Run("never the lease of this GuardedJob's active run", func(t *testing.T) {
		h.trigger(gj)
		h.waitRecorded(gj)
		run := h.get(gj).Status.Active[0]
		rec := h.unlock(gj, h.requestValue(), key, run.Holder)
		g.Expect(rec.Result).To(Equal(batchv1alpha1.UnlockRefused))
		g.Expect(rec.Message).To(ContainSubstring("the active run " + run.JobName + " of this GuardedJob"))
		g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(run.Token))
	})

	t.Run("never a GuardedJob lease with time to live, whatever the ledger says of it", func(t *testing.T) {
		run := h.get(gj).Status.Active[0]
		h.fail(&h.waitJobs(1)[0])
		g.Eventually(func() string {
			if lr := h.get(gj).Status.LastRun; lr != nil {
				return lr.JobName
			}
			return ""
		}).Should(Equal(run.JobName))
		g.Expect(h.get(gj).Status.Leases).To(ContainElement(And(HaveField("Holder", run.Holder), HaveField("State", batchv1alpha1.LeaseReleased))))
		// Written back by someone (a stale process): the script refuses it while it lives.
		g.Expect(h.rdb.Set(ctx, key, run.Token, 30*time.Second).Err()).To(Succeed())
		rec := h.unlock(gj, h.requestValue(), key, run.Holder)
		g.Expect(rec.Result).To(Equal(batchv1alpha1.UnlockRefused))
		g.Expect(rec.Message).To(ContainSubstring("a GuardedJob lease that expires by itself in"))
		g.Expect(h.rdb.Get(ctx, key).Val()).To(Equal(run.Token))
		// With no expiry it would never go by itself: then it may be unlocked.
		g.Expect(h.rdb.Persist(ctx, key).Err()).To(Succeed())
		rec = h.unlock(gj, h.requestValue(), key, run.Holder)
		g.Expect(rec.Result).To(Equal(batchv1alpha1.UnlockDeleted), rec.Message)
		g.Expect(h.rdb.Exists(ctx, key).Val()).To(BeZero())
	})

	t.Run("never the lease of another GuardedJob's run this manager renews", func(t *testing.T) {
		shared := h.ns + ":shared"
		other := h.create(h.guardedJob("other", shared))
		mine := h.create(h.guardedJob("mine", shared))
		h.trigger(other)
		h.waitRecorded(other)
		run := h.get(other).Status.Active[0]
		rec := h.unlock(mine, h.requestValue(), shared, run.Holder)
		g.Expect(rec.Result).To(Equal(batchv1alpha1.UnlockRefused))
		g.Expect(rec.Message).To(ContainSubstring("a run whose lease this manager renews"))
		g.Expect(h.rdb.Get(ctx, shared).Val()).To(Equal(run.Token))
		view := h.inspect(mine)
		g.Expect(view.Entries[0].Lock.Whose).To(Equal(batchv1alpha1.LockWhoseThisCluster))
	})
}

// A GuardedJob being deleted (onDelete: Wait) still answers for the keys of its
// runs, which go on until they end.
func TestInspectNowWhileTheGuardedJobIsDeleted(t *testing.T) {
	h := newHarness(t)
	h.start()
	g := h.g
	gj := h.guardedJob("waiting", h.ns+":waiting")
	gj.Spec.OnDelete = batchv1alpha1.OnDeleteWait
	h.create(gj)
	h.trigger(gj)
	h.waitRecorded(gj)
	run := h.get(gj).Status.Active[0]
	g.Expect(k8s.Delete(context.Background(), gj)).To(Succeed())
	view := h.inspect(gj)
	g.Expect(view.Error).To(BeEmpty())
	g.Expect(view.Entries).To(ConsistOf(HaveField("Lock", HaveField("Holder", run.Holder))))
	g.Expect(view.Entries[0].Lock.Whose).To(Equal(batchv1alpha1.LockWhoseThisGuardedJob))
	g.Expect(h.unlock(gj, h.requestValue(), "", run.Holder).Result).To(Equal(batchv1alpha1.UnlockRefused))
	h.complete(&h.jobs()[0])
	g.Eventually(func() bool { return h.gone(gj) }).WithTimeout(20 * time.Second).Should(BeTrue())
}
