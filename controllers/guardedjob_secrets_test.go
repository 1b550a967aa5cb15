package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/secrets"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// A tenant's store Secret whose URL holds a hostile password, written raw or
// percent-encoded, in every URL form: nothing in the GuardedJob's status or in
// its events holds any 3-character fragment of the password. A URL that is
// accepted logs in with exactly that password (the lease is in the tenant's
// Redis); one that is not says what to fix.
func TestHostileStorePasswordsNeverReachStatusOrEvents(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	tenant := redisserver.Start(t, redisserver.WithPassword("Adm1n-pw"))
	admin := tenant.Client(t)
	closed := closedAddr(t)

	type story struct {
		gj       *batchv1alpha1.GuardedJob
		password string
		invalid  bool // the URL is rejected up front
		live     bool // the URL names the tenant's Redis with a working login
	}
	var stories []story
	add := func(password, url string, live bool) {
		i := len(stories)
		name := fmt.Sprintf("hostile-%d", i)
		h.g.Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns},
			StringData: map[string]string{"url": url},
		})).To(Succeed())
		gj := h.guardedJob(name, "{"+name+"}") // one hash slot, for the Cluster form
		gj.Spec.Lock.StoreRef = &batchv1alpha1.StoreReference{Name: name}
		_, err := lockclient.Dial(lockclient.Config{URL: url})
		stories = append(stories, story{gj: h.create(gj), password: password, invalid: err != nil, live: live && err == nil})
	}
	for i, pw := range secrets.Hostile {
		user := fmt.Sprintf("tenant%d", i)
		if pw.Value != "" { // go-redis sends no AUTH for an empty password
			h.g.Expect(admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">"+pw.Value, "~*", "+@all").Err()).To(Succeed())
		}
		for _, enc := range []func(string) string{func(s string) string { return s }, secrets.Encode} {
			p := enc(pw.Value)
			add(pw.Value, "redis://"+user+":"+p+"@"+tenant.Addr()+"/0", pw.Value != "")
			if pw.Name == "every delimiter" || pw.Name == "4 KiB" {
				add(pw.Value, "rediss://"+user+":"+p+"@"+closed, false)
				add(pw.Value, "unix://"+user+":"+p+"@/nonexistent/redis.sock?db=1", false)
				add(pw.Value, "redis+sentinel://"+user+":"+p+"@"+closed+"/mymaster?sentinelPassword="+p, false)
				add(pw.Value, "redis+cluster://"+user+":"+p+"@"+closed+","+closed, false)
				add(pw.Value, "redis+redlock://"+user+":"+p+"@"+closed+","+closed+","+closed, false)
				add(pw.Value, "redis://"+user+":"+p+"@"+closed+"/0?minReplicaAcks=1&replicaAckTimeout=100ms", false)
			}
		}
	}
	for _, s := range stories {
		h.trigger(s.gj)
	}

	for i, s := range stories {
		g := NewWithT(t)
		cur := &batchv1alpha1.GuardedJob{}
		switch {
		case s.invalid:
			g.Eventually(func() *metav1.Condition {
				cur = h.get(s.gj)
				return findCond(cur.Status.Conditions, batchv1alpha1.ReadyCondition)
			}).
				WithTimeout(20*time.Second).Should(And(Not(BeNil()), HaveField("Reason", batchv1alpha1.StoreSecretInvalidReason),
				HaveField("Message", ContainSubstring("percent-encode"))), "story %d", i)
		case s.live:
			g.Eventually(func() string {
				cur = h.get(s.gj)
				if len(cur.Status.Active) == 0 || cur.Status.Active[0].Fence == 0 {
					return ""
				}
				return cur.Status.Active[0].Token
			}).WithTimeout(20*time.Second).ShouldNot(BeEmpty(), "story %d", i)
			g.Expect(admin.Get(ctx, "{"+s.gj.Name+"}").Val()).To(Equal(cur.Status.Active[0].Token), "the lease is in the tenant's Redis")
		default:
			g.Eventually(func() *metav1.Condition {
				cur = h.get(s.gj)
				return findCond(cur.Status.Conditions, batchv1alpha1.StoreReachableCondition)
			}).WithTimeout(20*time.Second).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse)), "story %d", i)
		}
		status, err := json.Marshal(cur.Status)
		g.Expect(err).NotTo(HaveOccurred())
		events := strings.Join(h.events(s.gj), "\n")
		g.Expect(secrets.Leaks(string(status), s.password)).To(BeEmpty(), "story %d status: %s", i, status)
		g.Expect(secrets.Leaks(events, s.password)).To(BeEmpty(), "story %d events: %s", i, events)
	}
}
