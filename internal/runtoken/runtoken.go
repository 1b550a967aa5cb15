// Package runtoken mints the lease token of a run and recognises one it minted.
//
// A token is "<cluster>/<namespace>/<job>#<random>" (the Redis contract). A run
// takes its lease before anything records it, so a manager that dies in between
// leaves a lease no status names; the next manager must recognise that lease as
// the same run's, and nothing else as such. It may also find the run's Job, whose
// run annotation anyone who may edit Jobs can change, and must then know what
// started the run from something only the manager writes. The random part is
// therefore three thirds: 64 random bits; 64 bits derived from the cluster name,
// the GuardedJob's UID and the occurrence (the run's identity); and 64 bits
// derived from what started the run (its start). The Job name takes the first 6
// hex digits of the random third and the occurrence's minute.
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
	// Start is what started the run, in a canonical form (runcore.StartOf): the
	// token attests it (StartedBy), but does not identify the run by it.
	Start string
}

// Mint returns a new token for a run of r, and its Job name.
func Mint(r Run) (token, jobName string, err error) {
	random, err := leasetoken.NewRandom()
	if err != nil {
		return "", "", err
	}
	token, jobName = MintFrom(r, random[:16])
	return token, jobName, nil
}

// MintFrom returns the token for a run of r whose random part starts with
// random (16 lower-case hex digits), and its Job name: Mint with the
// randomness given, for a caller that must replay (a seeded simulation).
func MintFrom(r Run, random string) (token, jobName string) {
	random = random + binding(r) + attestation(r.Start)
	jobName = JobName(r.Name, r.Occurrence, random)
	return leasetoken.Format(leasetoken.FormatHolder(r.Cluster, r.Namespace, jobName), random), jobName
}

// MintedFor says whether token was minted by Mint for r (by this cluster, for this
// object and occurrence, whatever started it), and returns its Job name. A token
// of the previous scheme (32 digits, no start) is recognised too.
func MintedFor(token string, r Run) (jobName string, ok bool) {
	i := strings.LastIndexByte(token, '#')
	if i < 0 {
		return "", false
	}
	holder, random := token[:i], token[i+1:]
	if len(random) != 32 && len(random) != 48 || random[16:32] != binding(r) {
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

// StartedBy says whether token, minted for a run, attests start as what started
// it. A token of the previous scheme attests nothing.
func StartedBy(token, start string) bool {
	random := token[strings.LastIndexByte(token, '#')+1:]
	return len(random) == 48 && random[32:] == attestation(start)
}

// attestation is the third of the random part that ties a token to what started
// its run.
func attestation(start string) string {
	sum := sha256.Sum256([]byte("start\x00" + start))
	return hex.EncodeToString(sum[:8])
}

// binding is the third of the random part that ties a token to its run.
func binding(r Run) string {
	sum := sha256.Sum256([]byte(r.Cluster + "\x00" + r.Namespace + "\x00" + r.Name + "\x00" + r.UID + "\x00" + strconv.FormatInt(r.Occurrence.Unix(), 10)))
	return hex.EncodeToString(sum[:8])
}
