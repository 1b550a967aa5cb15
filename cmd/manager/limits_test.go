package main

import (
	"math"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
)

func TestClientLimits(t *testing.T) {
	for _, tc := range []struct {
		name      string
		qps       float64
		burst     int
		wantQPS   float32
		wantBurst int
	}{
		{name: "no --kube-api-qps turns the client-side limiter off instead of client-go's 5 per second", wantQPS: -1},
		{name: "a negative qps is no limit too", qps: -3, burst: 7, wantQPS: -1},
		{name: "a qps without a burst allows twice the qps in a burst", qps: 50, wantQPS: 50, wantBurst: 100},
		{name: "a small qps still allows one request", qps: 0.2, wantQPS: 0.2, wantBurst: 1},
		{name: "an explicit burst is kept", qps: 50, burst: 60, wantQPS: 50, wantBurst: 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			qps, burst := clientLimits(tc.qps, tc.burst)
			g.Expect(qps).To(Equal(tc.wantQPS))
			g.Expect(burst).To(Equal(tc.wantBurst))
		})
	}
}

func TestStopRateMustBeARateOrZero(t *testing.T) {
	g := NewWithT(t)
	for _, ok := range []float64{0, 0.5, 50, 1000} {
		g.Expect(checkStopRate(ok)).To(Succeed(), "%v", ok)
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		g.Expect(checkStopRate(bad)).To(MatchError(ContainSubstring("--stop-rate")), "%v", bad)
	}
}

func TestWatchLabelSelectorMustParse(t *testing.T) {
	g := NewWithT(t)
	for _, bad := range []string{"sharding.guardedjob.dev/key in (a", "=a", "key=@", "a b"} {
		err := run(t.Context(), options{redisURL: "redis://127.0.0.1:1", watchLabelSelector: bad}, logr.Discard())
		g.Expect(err).To(MatchError(HavePrefix("--watch-label-selector: ")), "%q", bad)
	}
}
