package podguard

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// The guard's environment. The manager sets these on the guard container; the
// names are a contract between the manager and the guard images of one
// release and between releases (a Pod made by one manager version may be
// guarded by the image of the next).
const (
	// EnvKey is the lease key, as rendered for the run. Required.
	EnvKey = "GUARDEDJOB_GUARD_KEY"
	// EnvHolder is the run's holder: its token without the "#random" part.
	// Required; a value containing '#' is rejected (never pass the token).
	EnvHolder = "GUARDEDJOB_GUARD_HOLDER"
	// EnvTokenSHA256 is the SHA-256 of the run's whole token, 64 hex digits
	// (TokenSHA256). Required.
	EnvTokenSHA256 = "GUARDEDJOB_GUARD_TOKEN_SHA256"
	// EnvInterval is how often the guard reads the key, a Go duration ("4s").
	// Required; see ReadInterval.
	EnvInterval = "GUARDEDJOB_GUARD_INTERVAL"
	// EnvGrace is the Pod's termination grace period, a Go duration ("30s"):
	// the time between SIGTERM and SIGKILL when the guard stops the workload.
	// Required.
	EnvGrace = "GUARDEDJOB_GUARD_GRACE"
	// EnvMargin is how long before the lease could expire the workload must be
	// gone, a Go duration. Optional, DefaultMargin.
	EnvMargin = "GUARDEDJOB_GUARD_MARGIN"
	// EnvStoreDir is the directory the guard's store Secret is mounted at.
	// Optional, DefaultStoreDir.
	EnvStoreDir = "GUARDEDJOB_GUARD_STORE_DIR"
	// EnvStateDir is where the guard keeps its state across restarts of its
	// container: the file "ready" (the lease was confirmed; `guard probe`
	// checks it) and "stopped" (the guard stopped the workload; a restarted
	// guard stops it again at once). It must be an emptyDir mounted only into
	// the guard container: whoever can write there can open the gate.
	// Optional, DefaultStateDir.
	EnvStateDir = "GUARDEDJOB_GUARD_STATE_DIR"
	// EnvTerminationMessagePath is where the guard writes why it stopped; it
	// must match the container's terminationMessagePath. Optional,
	// DefaultTerminationMessagePath.
	EnvTerminationMessagePath = "GUARDEDJOB_GUARD_TERMINATION_MESSAGE_PATH"
	// EnvLogLevel set to "debug" logs every read. Optional.
	EnvLogLevel = "GUARDEDJOB_GUARD_LOG_LEVEL"
)

// Defaults and fixed paths.
const (
	// BinaryPath is the guard binary in the manager image.
	BinaryPath = "/guard"
	// ContainerName, StoreVolumeName and StateVolumeName are the names the
	// guard's container and volumes have in a guarded Pod (docs/pod-guard.md).
	ContainerName   = "guardedjob-guard"
	StoreVolumeName = "guardedjob-guard-store"
	StateVolumeName = "guardedjob-guard-state"
	// ProbeArg is the argument that makes the guard binary the startup probe:
	// exec [BinaryPath, ProbeArg].
	ProbeArg = "probe"
	// DefaultMargin covers the difference between Redis' clock and the
	// node's, and the time a killed process takes to be gone.
	DefaultMargin = 2 * time.Second
	// DefaultStoreDir is where the guard reads its store Secret's files.
	DefaultStoreDir = "/var/run/guardedjob/guard-store"
	// DefaultStateDir is the guard's own emptyDir.
	DefaultStateDir = "/var/run/guardedjob/guard-state"
	// DefaultTerminationMessagePath is the kubelet's default.
	DefaultTerminationMessagePath = "/dev/termination-log"
	// MinInterval and MaxInterval bound EnvInterval.
	MinInterval = 100 * time.Millisecond
	MaxInterval = time.Hour
)

// Settings is the guard's configuration: what the manager puts into the
// guard container's environment (Environment) and what the guard reads from
// it (FromEnv).
type Settings struct {
	Key         string
	Holder      string
	TokenSHA256 [sha256.Size]byte
	Interval    time.Duration
	Grace       time.Duration
	Margin      time.Duration
	StoreDir    string
	StateDir    string
	// TerminationMessagePath is where the reason for a stop is written.
	TerminationMessagePath string
}

// TokenSHA256 returns the hash of a lease token that the guard compares the
// key's value with.
func TokenSHA256(token string) [sha256.Size]byte { return sha256.Sum256([]byte(token)) }

// EnvVar is one environment variable of the guard container.
type EnvVar struct{ Name, Value string }

// Environment returns the variables that make the guard run with s, for the
// guard container's env. Paths left empty are left to the guard's defaults.
func (s Settings) Environment() []EnvVar {
	env := []EnvVar{
		{EnvKey, s.Key},
		{EnvHolder, s.Holder},
		{EnvTokenSHA256, hex.EncodeToString(s.TokenSHA256[:])},
		{EnvInterval, s.Interval.String()},
		{EnvGrace, s.Grace.String()},
		{EnvMargin, s.Margin.String()},
	}
	for _, v := range []EnvVar{{EnvStoreDir, s.StoreDir}, {EnvStateDir, s.StateDir}, {EnvTerminationMessagePath, s.TerminationMessagePath}} {
		if v.Value != "" {
			env = append(env, v)
		}
	}
	return env
}

// FromEnv reads and checks the settings. Its error lists every problem, one
// per line, naming the variable; it never quotes the token hash.
func FromEnv(getenv func(string) string) (Settings, error) {
	s := Settings{
		Key:                    getenv(EnvKey),
		Holder:                 getenv(EnvHolder),
		Margin:                 DefaultMargin,
		StoreDir:               orDefault(getenv(EnvStoreDir), DefaultStoreDir),
		StateDir:               orDefault(getenv(EnvStateDir), DefaultStateDir),
		TerminationMessagePath: orDefault(getenv(EnvTerminationMessagePath), DefaultTerminationMessagePath),
	}
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
	}
	switch err := lockclient.ValidateKey(s.Key); {
	case s.Key == "":
		bad(EnvKey, "not set: the lease key to confirm")
	case err != nil:
		bad(EnvKey, "%v", err)
	}
	switch {
	case s.Holder == "":
		bad(EnvHolder, "not set: the run's holder, <cluster>/<namespace>/<job>")
	case strings.Contains(s.Holder, "#"):
		// Never echo it: it may be a whole token.
		bad(EnvHolder, "contains '#': pass the holder (the token's part before '#'), never the token")
	case len(s.Holder) > lockclient.MaxKeyLength || strings.IndexFunc(s.Holder, unicode.IsControl) >= 0:
		bad(EnvHolder, "longer than %d bytes or holds a control character", lockclient.MaxKeyLength)
	}
	switch sum, err := hex.DecodeString(getenv(EnvTokenSHA256)); {
	case getenv(EnvTokenSHA256) == "":
		bad(EnvTokenSHA256, "not set: the SHA-256 of the run's token, 64 hex digits")
	case err != nil || len(sum) != sha256.Size:
		bad(EnvTokenSHA256, "not 64 hex digits")
	default:
		copy(s.TokenSHA256[:], sum)
	}
	duration := func(name string, dst *time.Duration, required bool, lo, hi time.Duration) {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			if required {
				bad(name, "not set: a duration such as 4s")
			}
			return
		}
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			bad(name, "%q is not a duration such as 4s or 1m30s", v)
		case d < lo || d > hi:
			bad(name, "%s is outside %s..%s", d, lo, hi)
		default:
			*dst = d
		}
	}
	duration(EnvInterval, &s.Interval, true, MinInterval, MaxInterval)
	duration(EnvGrace, &s.Grace, true, 0, 24*time.Hour)
	duration(EnvMargin, &s.Margin, false, 0, time.Hour)
	if len(errs) > 0 {
		return Settings{}, errors.Join(errs...)
	}
	return s, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// ReadInterval returns a guard read interval for a lease of ttl renewed every
// renewInterval, in a Pod with termination grace period grace, and the
// guard's margin; an error when the lease leaves the guard too little time.
//
// After the manager renews, a confirmation lets the workload run until the
// renewal's expiry less margin and grace; the manager's next renewal comes
// renewInterval later. The guard must read between the two, so its reads must
// come more often than ttl - renewInterval - grace - margin (the headroom),
// with room for a slow read: the interval is half the headroom, at most
// renewInterval.
func ReadInterval(ttl, renewInterval, grace, margin time.Duration) (time.Duration, error) {
	headroom := ttl - renewInterval - grace - margin
	if headroom < 2*time.Second {
		return 0, fmt.Errorf("a pod guard needs ttl - renewInterval - terminationGracePeriodSeconds - margin (%s) of at least 2s, got %s: raise ttl or lower renewInterval or the grace period",
			margin, headroom)
	}
	return min(headroom/2, renewInterval), nil
}
