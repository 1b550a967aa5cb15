// Package bench measures the lease client against the raw Redis floor and against
// peer lock libraries (bsm/redislock, redsync). It is a module of its own so that
// the peers stay out of the operator's go.mod; its path lies under the operator's
// module path, so it may import internal/lockclient. The benchmarks are in
// peers_test.go; cmd/peerbench runs them against one pinned redis-server and
// computes the ratios. docs/benchmarks.md has the figures.
package bench

// Concurrencies are the worker counts each client is measured at.
var Concurrencies = []int{1, 8, 64}

// Cases are the measured clients as "<benchmark>/<client>" (the benchmark's name
// without its Benchmark prefix).
var Cases = []string{
	"Lock/raw", "Lock/raw-fence", "Lock/ours", "Lock/ours-strict", "Lock/redislock", "Lock/redsync",
	"Renew/raw", "Renew/ours",
}

// A Comparison is a throughput ratio: ops/s of Case over ops/s of Base. Target, when
// not zero, is the ratio Case must reach at TargetConcurrency.
type Comparison struct {
	Case, Base string
	Target     float64
}

// TargetConcurrency is the worker count the targets are set for.
const TargetConcurrency = 8

// Comparisons are the ratios reported for every concurrency and round.
var Comparisons = []Comparison{
	{Case: "Lock/ours", Base: "Lock/raw-fence", Target: 0.95},
	{Case: "Lock/ours", Base: "Lock/redislock", Target: 1.05},
	{Case: "Lock/ours", Base: "Lock/redsync", Target: 1.35},
	{Case: "Lock/ours", Base: "Lock/raw"},
	{Case: "Lock/ours-strict", Base: "Lock/raw-fence"},
	{Case: "Lock/ours-strict", Base: "Lock/redislock"},
	{Case: "Renew/ours", Base: "Renew/raw", Target: 0.95},
}
