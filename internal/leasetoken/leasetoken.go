// Package leasetoken is the form of a lease value a GuardedJob manager writes,
// "<cluster>/<namespace>/<job>#<random>": its holder part, which status, events
// and logs may show, and its random part, which only status.active holds. It is
// pure (no store, no clock), so that the protocol's decisions can read tokens.
package leasetoken

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
)

// randomBytes is the size of a token's random part: 128 bits, more than enough
// that two runs never share a token.
const randomBytes = 16

// NewRandom returns a fresh random token part: 32 lower-case hex digits.
func NewRandom() (string, error) {
	b := make([]byte, randomBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Format joins a holder and a random part into a token.
func Format(holder, random string) string { return holder + "#" + random }

// FormatHolder returns the readable holder name "<cluster>/<namespace>/<job>".
func FormatHolder(cluster, namespace, job string) string {
	return cluster + "/" + namespace + "/" + job
}

// HolderOf returns the part of a token before '#': the part that is safe to show in
// status, events and logs. A value written by a foreign client without '#' is
// returned whole.
func HolderOf(token string) string {
	if i := strings.LastIndexByte(token, '#'); i >= 0 {
		return token[:i]
	}
	return token
}

// ParseHolder splits a lease value a GuardedJob manager wrote,
// "<cluster>/<namespace>/<job>#<random>", into the parts of its holder. ok is
// false for any other value: a foreign holder.
func ParseHolder(value string) (cluster, namespace, job string, ok bool) {
	holder := HolderOf(value)
	if holder == value {
		return "", "", "", false
	}
	return SplitHolder(holder)
}

// SplitHolder splits a holder, "<cluster>/<namespace>/<job>" (a token without its
// random part, as status and events show it), into its parts. ok is false for
// any other holder: a foreign one.
func SplitHolder(holder string) (cluster, namespace, job string, ok bool) {
	parts := strings.Split(holder, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" || strings.Contains(holder, "#") {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}
