package lockclient

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// A script call is sent as EVALSHA and, when the store does not know the script
// (restarted, failed over), again as EVAL: what redis.Script.Run does. It is built
// here instead because Script.Run copies the keys and arguments into new slices and
// boxes every one into an interface, about ten allocations per call on a path that
// is CPU-bound on the client. go-redis writes a *string or *int64 argument as the
// value it points to (and routes Cluster calls by a *string key), so the arguments
// point into a pooled scriptCall and the call allocates only go-redis' own Cmd and
// its reply. (Cmd.String would print those arguments as addresses; nothing here logs
// commands, and a hook that keeps a Cmd past Process would need copies.)

// scriptDef is a script with its EVALSHA and EVAL arguments boxed once.
type scriptDef struct {
	sha, src any
}

var (
	acquireCall  = scriptDef{sha: acquireScript.Hash(), src: acquireSrc}
	renewCall    = scriptDef{sha: renewScript.Hash(), src: renewSrc}
	completeCall = scriptDef{sha: completeScript.Hash(), src: completeSrc}
	releaseCall  = scriptDef{sha: releaseScript.Hash(), src: releaseSrc}
	unlockCall   = scriptDef{sha: unlockScript.Hash(), src: unlockSrc}
)

// numKeysArg holds EVAL's key counts as strings: a Cluster client reads the count
// as a string to find the first key, and a non-string would be formatted on every
// call.
var numKeysArg = [...]any{"0", "1", "2", "3"}

// Room for the largest call, acquire: EVALSHA sha numkeys, 3 keys, 5 arguments.
const (
	maxScriptArgs = 11
	maxScriptStrs = 4
	maxScriptNums = 2
)

type scriptCall struct {
	def   scriptDef
	args  []any
	buf   [maxScriptArgs]any
	strs  [maxScriptStrs]string
	nums  [maxScriptNums]int64
	nkeys int
	nstrs int
	nnums int
}

var scriptCalls = sync.Pool{New: func() any { return new(scriptCall) }}

// newScriptCall returns an empty call of def; add the keys first, then the
// arguments, and call done once the reply has been read.
func newScriptCall(def scriptDef) *scriptCall {
	sc := scriptCalls.Get().(*scriptCall)
	sc.def = def
	sc.args = append(sc.buf[:0], "evalsha", def.sha, numKeysArg[0])
	return sc
}

// key adds a key; keys come before any other argument.
func (sc *scriptCall) key(k string) {
	sc.str(k)
	sc.nkeys++
	sc.args[2] = numKeysArg[sc.nkeys]
}

// keys returns the keys added so far.
func (sc *scriptCall) keys() []string { return sc.strs[:sc.nkeys] }

// str adds a string argument.
func (sc *scriptCall) str(s string) {
	sc.strs[sc.nstrs] = s
	sc.args = append(sc.args, &sc.strs[sc.nstrs])
	sc.nstrs++
}

// num adds an integer argument.
func (sc *scriptCall) num(n int64) {
	sc.nums[sc.nnums] = n
	sc.args = append(sc.args, &sc.nums[sc.nnums])
	sc.nnums++
}

// lit adds an argument that needs no copy (a constant).
func (sc *scriptCall) lit(v any) { sc.args = append(sc.args, v) }

// run sends the call and returns the script's array reply.
func (sc *scriptCall) run(ctx context.Context, rdb redis.UniversalClient) ([]any, error) {
	cmd := sc.cmd(ctx)
	_ = rdb.Process(ctx, cmd)
	if err := cmd.Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		sc.args[0], sc.args[1] = "eval", sc.def.src
		cmd = sc.cmd(ctx)
		_ = rdb.Process(ctx, cmd)
	}
	return cmd.Slice()
}

func (sc *scriptCall) cmd(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx, sc.args...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// done returns the call to the pool. go-redis is finished with the arguments once
// Process has returned, and the reply holds none of them.
func (sc *scriptCall) done() {
	*sc = scriptCall{}
	scriptCalls.Put(sc)
}
