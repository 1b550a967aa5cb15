package lockclient

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Tristate is a yes/no answer that may be unknown (CONFIG forbidden by ACL or by a
// managed service).
type Tristate string

// Tristate values.
const (
	Yes     Tristate = "Yes"
	No      Tristate = "No"
	Unknown Tristate = "Unknown"
)

// StoreInfo describes the properties of a Redis deployment that decide whether it
// can lose a lease silently.
type StoreInfo struct {
	// Role is "master" or "slave" as INFO replication reports it.
	Role string
	// Replicas is the number of connected replicas.
	Replicas int
	// MaxMemoryPolicy is the eviction policy; anything but "noeviction" may evict a
	// lease or a fence counter under memory pressure.
	MaxMemoryPolicy string
	// AOF says whether append-only persistence is on.
	AOF Tristate
	// RDB says whether snapshots are configured (CONFIG GET save).
	RDB Tristate
}

// Persistent says whether data survives a restart.
func (s StoreInfo) Persistent() Tristate {
	switch {
	case s.AOF == Yes || s.RDB == Yes:
		return Yes
	case s.AOF == No && s.RDB == No:
		return No
	default:
		return Unknown
	}
}

// Safety judges the store: Yes with an empty reason, or No/Unknown with a reason a
// person can act on. needPersistence is true when Strict fencing or done-markers
// depend on data surviving a restart.
func (s StoreInfo) Safety(needPersistence bool) (Tristate, string) {
	if s.MaxMemoryPolicy != "" && s.MaxMemoryPolicy != "noeviction" {
		return No, fmt.Sprintf("maxmemory-policy is %s: Redis may evict leases, done-markers and fence counters under memory pressure; set it to noeviction", s.MaxMemoryPolicy)
	}
	if s.MaxMemoryPolicy == "" {
		return Unknown, "maxmemory-policy could not be read"
	}
	if needPersistence {
		switch s.Persistent() {
		case No:
			return No, "persistence is off (no AOF, no RDB snapshots): a restart loses done-markers and fence counters; enable appendonly"
		case Unknown:
			return Unknown, "persistence could not be checked (CONFIG GET is not allowed): make sure AOF or RDB snapshots are on"
		}
	}
	return Yes, ""
}

// StoreInfo reads INFO and, where allowed, CONFIG GET save. A CONFIG that ACLs or a
// managed service forbid yields Unknown rather than an error.
func (c *Client) StoreInfo(ctx context.Context) (StoreInfo, error) {
	if c.redlock != nil {
		return c.redlock.storeInfo(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	info, err := c.rdb.Info(ctx, "replication", "memory", "persistence").Result()
	if err != nil {
		return StoreInfo{}, &StoreError{Op: "info", Err: err}
	}
	fields := parseInfo(info)
	si := StoreInfo{
		Role:            fields["role"],
		MaxMemoryPolicy: fields["maxmemory_policy"],
		AOF:             Unknown,
		RDB:             Unknown,
	}
	si.Replicas, _ = strconv.Atoi(fields["connected_slaves"])
	switch fields["aof_enabled"] {
	case "1":
		si.AOF = Yes
	case "0":
		si.AOF = No
	}
	if save, err := c.rdb.ConfigGet(ctx, "save").Result(); err == nil {
		if v, ok := save["save"]; ok {
			si.RDB = Yes
			if strings.TrimSpace(v) == "" {
				si.RDB = No
			}
		}
	}
	return si, nil
}

func parseInfo(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}
