package lockclient

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guardedjob/guardedjob/internal/testutil/secrets"
)

// FuzzStoreURL: no URL panics the parser; a URL it accepts reads the same after
// its credentials are percent-encoded again; and a password (marked "~~", a pair
// no host, database or master name may hold) never reaches an error or the
// redacted form.
func FuzzStoreURL(f *testing.F) {
	for _, s := range [][3]string{
		{"redis://u:", "p", "@127.0.0.1:6379/0"},
		{"redis://:", "a/b?c#d@e:f%", "@h:1"},
		{"rediss+sentinel://:", "x@y", "@s-0,s-1:26380/mymaster/2?sentinelPassword=q@r"},
		{"redis+cluster://u:", "Mx/?#@:%Kv9", "@[::1]:7000,n-1:7001"},
		{"unix://u:", "pw", "@/run/redis.sock?db=3"},
		{"redis://", "h", ":6379"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, prefix, secret, suffix string) {
		raw := prefix + "~~" + secret + suffix
		p, err := splitURL(raw)
		redacted := Redact(raw)
		if err != nil {
			if strings.Contains(err.Error(), "~~") {
				t.Fatalf("error quotes the URL: %v", err)
			}
			if redacted != "<invalid URL>" {
				t.Fatalf("Redact shows %q for a URL the parser rejects", redacted)
			}
			return
		}
		if p.scheme != "unix" && strings.Contains(redacted, "~~") {
			t.Fatalf("Redact shows part of the userinfo: %q", redacted)
		}
		if p.scheme == "unix" && strings.Contains(p.path, "@/") {
			return // with credentials, the last "@/" ends them: such a socket path needs a URL without
		}
		scheme := p.scheme
		if p.mode != "" {
			scheme += "+" + p.mode
		}
		rebuilt := scheme + "://" + secrets.Encode(p.user) + ":" + secrets.Encode(p.password) + "@" + strings.Join(p.hosts, ",") + p.path
		if p.scheme == "unix" {
			rebuilt = "unix://" + secrets.Encode(p.user) + ":" + secrets.Encode(p.password) + "@" + p.path + "?db=" + strconv.Itoa(p.db)
		}
		q, err := splitURL(rebuilt)
		if err != nil {
			t.Fatalf("re-encoded URL rejected: %v", err)
		}
		if q.user != p.user || q.password != p.password || q.identity() != p.identity() || q.db != p.db || q.master != p.master {
			t.Fatalf("re-encoded URL reads differently: %+v vs %+v", q, p)
		}
	})
}

// replyFrom builds a reply of any shape go-redis can return for EVAL from b.
func replyFrom(b []byte) []any {
	var out []any
	for len(b) > 0 && len(out) < 6 {
		var v any
		v, b = valueFrom(b, 0)
		out = append(out, v)
	}
	return out
}

func valueFrom(b []byte, depth int) (any, []byte) {
	op, b := b[0], b[1:]
	take := func(n int) []byte {
		n = min(n, len(b))
		v := b[:n]
		b = b[n:]
		return v
	}
	switch op % 8 {
	case 0:
		var buf [8]byte
		copy(buf[:], take(8))
		return int64(binary.LittleEndian.Uint64(buf[:])), b
	case 1:
		return int64(op>>3) - 8, b
	case 2:
		return string(take(int(op >> 4))), b
	case 3:
		return []string{"ok", "busy", "done", ""}[op>>6], b
	case 4:
		if depth > 2 {
			return nil, b
		}
		var list []any
		for range op >> 5 {
			if len(b) == 0 {
				break
			}
			var v any
			v, b = valueFrom(b, depth+1)
			list = append(list, v)
		}
		return list, b
	case 5:
		return math.Float64frombits(uint64(op)), b
	case 6:
		return op&0x10 != 0, b
	default:
		return errors.New("ERR " + string(take(3))), b
	}
}

// FuzzScriptReplies: whatever the scripts reply, parsing it gives a lease or an
// error, never a panic, and a reply that is not one of the scripts' documented
// shapes is a store error, never a verdict that the lease is lost.
func FuzzScriptReplies(f *testing.F) {
	for _, seed := range [][]byte{
		{3, 1 << 3, 1, 1},               // {"ok", ...}
		{3 | 1<<6, 2 | 1<<4, 'h', 0x41}, // {"busy", "h", ...}
		{1 | 9<<3},                      // {1}
		{1 | 8<<3, 2 | 2<<4, 'a', 'b'},  // {0, "ab"}
		{},
		{4 | 3<<5, 7, 'x', 'y', 'z'},
	} {
		f.Add(seed)
	}
	req := AcquireRequest{Keys: Keys{Lock: "l", Occurrence: "o", Fence: "f"}, Token: "c/n/j#r", TTL: time.Minute, Policy: FenceInject}
	f.Fuzz(func(t *testing.T, b []byte) {
		res := replyFrom(b)
		l, err := acquireResult(req, res, time.Unix(0, 0))
		if err == nil && (l.Token != req.Token || len(res) != 4) {
			t.Fatalf("acquire accepted %v as %+v", res, l)
		}
		checkVerdict(t, "renew", res, renewResult("l", res, true), isReply(res, 0, true))
		_, err = completeResult("l", res)
		checkVerdict(t, "complete", res, err, len(res) == 2 && res[0] == int64(0))
		checkVerdict(t, "release", res, releaseResult("l", res), isReply(res, 0, true))
	})
}

// checkVerdict fails unless a "not held" verdict came from a reply saying so.
func checkVerdict(t *testing.T, op string, res []any, err error, notHeldShape bool) {
	t.Helper()
	if errors.Is(err, ErrNotHeld) && !notHeldShape {
		t.Fatalf("%s read %v as not held", op, res)
	}
}
