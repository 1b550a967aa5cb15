package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/guardedjob/guardedjob/bench"
)

func TestFindResultReadsTheNamedLineWithOrWithoutTheGOMAXPROCSSuffix(t *testing.T) {
	out := `goos: linux
BenchmarkLock/ours/c=80         	   100	     999 ns/op	     1 B/op	      1 allocs/op
BenchmarkLock/ours/c=8          	  9184	  189671 ns/op	  65.72 client-us/op	  64.54 redis-us/op	  1278 B/op	     25 allocs/op
PASS
`
	m, ok := findResult(strings.NewReader(out), "BenchmarkLock/ours/c=8")
	if !ok || m.nsPerOp != 189671 || m.bytes != 1278 || m.allocs != 25 || m.clientUs != 65.72 || m.redisUs != 64.54 {
		t.Fatalf("got %+v, %v", m, ok)
	}
	m, ok = findResult(strings.NewReader(strings.ReplaceAll(out, "c=8 ", "c=8-2")), "BenchmarkLock/ours/c=8")
	if !ok || m.nsPerOp != 189671 {
		t.Fatalf("with suffix: got %+v, %v", m, ok)
	}
	if _, ok := findResult(strings.NewReader("FAIL\n"), "BenchmarkLock/ours/c=8"); ok {
		t.Fatal("found a result in output without one")
	}
}

func TestBenchPatternMatchesOnlyItsBenchmark(t *testing.T) {
	p := strings.Split(benchPattern("BenchmarkLock/ours/c=8"), "/")
	for i, name := range []string{"BenchmarkLock", "ours", "c=8"} {
		if !regexp.MustCompile(p[i]).MatchString(name) {
			t.Errorf("%s does not match %s", p[i], name)
		}
	}
	for i, other := range []string{"BenchmarkLockX", "ours-strict", "c=80"} {
		if regexp.MustCompile(p[i]).MatchString(other) {
			t.Errorf("%s matches %s", p[i], other)
		}
	}
}

func TestRatiosAreComputedWithinARound(t *testing.T) {
	r := results{}
	r.add(0, 8, "Lock/ours", measurement{nsPerOp: 100})
	r.add(0, 8, "Lock/raw-fence", measurement{nsPerOp: 110})
	r.add(1, 8, "Lock/ours", measurement{nsPerOp: 200})
	r.add(1, 8, "Lock/raw-fence", measurement{nsPerOp: 180})
	cmp := bench.Comparison{Case: "Lock/ours", Base: "Lock/raw-fence", Target: 0.95}
	r0, _ := r.ratio(0, 8, cmp)
	r1, _ := r.ratio(1, 8, cmp)
	if r0 != 1.1 || r1 != 0.9 {
		t.Fatalf("ratios %v %v, want 1.1 0.9", r0, r1)
	}
	r.add(0, 8, "Lock/ours", measurement{nsPerOp: 100, clientUs: 30, redisUs: 20})
	r.add(0, 8, "Lock/raw-fence", measurement{nsPerOp: 110, clientUs: 25, redisUs: 15})
	if c, _ := r.cpuRatio(0, 8, cmp); c != 0.8 {
		t.Fatalf("CPU ratio %v, want 0.8", c)
	}
	if got := target(cmp, 8, []float64{r0, r1, 1.0}); got != "≥ 0.95: median met (2 of 3 rounds)" {
		t.Fatalf("target: %q", got)
	}
}

func TestRotationPutsEveryCaseFirstOnce(t *testing.T) {
	first := map[string]bool{}
	for r := range len(bench.Cases) {
		first[rotate(bench.Cases, r)[0]] = true
	}
	if len(first) != len(bench.Cases) {
		t.Fatalf("first cases %v", first)
	}
}

func TestTableHeaderHasOneAlignmentCellPerColumn(t *testing.T) {
	var b strings.Builder
	tableHeader(printer(&b), "client", "ops/s round %d", 3, "allocs/op", "B/op")
	want := "| client | ops/s round 1 | ops/s round 2 | ops/s round 3 | allocs/op | B/op |\n|---|---:|---:|---:|---:|---:|\n"
	if b.String() != want {
		t.Fatalf("header:\n%s\nwant:\n%s", b.String(), want)
	}
}
