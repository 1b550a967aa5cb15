package lockclient_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/testutil/redisserver"
	"github.com/guardedjob/guardedjob/internal/testutil/tcpproxy"
)

// pings is how many PINGs the server has executed.
func pings(g Gomega, rdb *redis.Client) int {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	g.Expect(err).NotTo(HaveOccurred())
	m := regexp.MustCompile(`cmdstat_ping:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	g.Expect(err).NotTo(HaveOccurred())
	return n
}

// A call may take as long as its configured timeout: the client's socket
// deadlines (go-redis defaults to 5s) never cut it shorter, so a slow answer is
// waited for instead of the call being sent again.
func TestACallAnsweredWithinALongTimeoutIsSentOnceAndWaitedFor(t *testing.T) {
	g := NewWithT(t)
	srv := redisserver.Start(t)
	rdb := srv.Client(t)
	proxy := tcpproxy.Start(t, srv.Addr())
	c, err := lockclient.Dial(lockclient.Config{URL: "redis://" + proxy.Addr(), Timeout: 12 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	g.Expect(c.Ping(ctx)).To(Succeed())

	before := pings(g, rdb)
	proxy.HoldReplies()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.Ping(ctx) }()
	time.Sleep(7 * time.Second) // the reply is held for longer than go-redis' default socket timeout
	proxy.UnholdReplies()
	select {
	case err := <-done:
		g.Expect(err).NotTo(HaveOccurred(), "a reply 7s late is within the 12s timeout")
		g.Expect(time.Since(start)).To(BeNumerically(">=", 7*time.Second))
		g.Expect(pings(g, rdb)-before).To(Equal(1), "the call was sent once")
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not return after its reply was delivered")
	}
}
