// Package runtoken mints the lease token of a run and recognises one it minted.
//
// A token is "<cluster>/<namespace>/<job>#<random>" (the Redis contract). A run
// takes its lease before anything records it, so a manager that dies in between
// leaves a lease no status names; the next manager must recognise that lease as
// the same run's, and nothing else as such. The random part is therefore two
// halves: 64 random bits, and 64 bits derived from the cluster name, the
// GuardedJob's UID and the occurrence. The Job name takes the first 6 hex digits
// of the random half and the occurrence's minute, as before.
package runtoken

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
)

// Run names what a token is minted for.
type Run struct {
	Cluster, Namespace, Name, UID string
	Occurrence                    time.Time
}

// Mint returns a new token for a run of r, and its Job name.
func Mint(r Run) (token, jobName string, err error) {
	random, err := leasetoken.NewRandom()
	if err != nil {
		return "", "", err
	}
	random = random[:16] + binding(r)
	jobName = JobName(r.Name, r.Occurrence, random)
	return leasetoken.Format(leasetoken.FormatHolder(r.Cluster, r.Namespace, jobName), random), jobName, nil
}

// MintedFor says whether token was minted by Mint for r (by this cluster, for this
// object and occurrence), and returns its Job name.
func MintedFor(token string, r Run) (jobName string, ok bool) {
	i := strings.LastIndexByte(token, '#')
	if i < 0 {
		return "", false
	}
	holder, random := token[:i], token[i+1:]
	if len(random) != 32 || random[16:] != binding(r) {
		return "", false
	}
	if _, err := hex.DecodeString(random); err != nil {
		return "", false
	}
	jobName = JobName(r.Name, r.Occurrence, random)
	if holder != leasetoken.FormatHolder(r.Cluster, r.Namespace, jobName) {
		return "", false
	}
	return jobName, true
}

// JobName returns the name of the Job of a run of gjName at scheduled:
// "<gjName>-<scheduled Unix minutes>-<first 6 characters of random>". random is the
// run's lower-case hex random part. With gjName at most 45 characters the name fits
// the 63 characters of a label value (the Job controller labels Pods with it).
func JobName(gjName string, scheduled time.Time, random string) string {
	if len(random) > 6 {
		random = random[:6]
	}
	return gjName + "-" + strconv.FormatInt(scheduled.Unix()/60, 10) + "-" + random
}

// binding is the half of the random part that ties a token to its run.
func binding(r Run) string {
	sum := sha256.Sum256([]byte(r.Cluster + "\x00" + r.Namespace + "\x00" + r.Name + "\x00" + r.UID + "\x00" + strconv.FormatInt(r.Occurrence.Unix(), 10)))
	return hex.EncodeToString(sum[:8])
}
