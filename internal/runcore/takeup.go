package runcore

import (
	"fmt"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/runtoken"
)

// Orphan is what take-up learns of a busy key's value before it reads anything
// else: whether the value is a token this manager minted for this GuardedJob's
// run, and whose.
type Orphan struct {
	// Value is the key's value.
	Value string
	// JobName is the Job the token was minted for; Holder is the value as a
	// holder.
	JobName, Holder string
}

// Identity is what the identity heartbeat says of the name this manager runs
// under in one store.
type Identity struct {
	// Duplicate: another manager claims the name.
	Duplicate bool
	// Settled: the heartbeat has shown for a few beats that no other manager
	// claims it.
	Settled bool
}

// TakeUp is the judgement of take-up, before the live read of the Job: a busy
// key whose value is a token minted under this manager's name for this
// GuardedJob (identity) and not held by any run status records is an orphan of
// a pass that acquired and then died before its Job or its status write. It is
// taken up (the run becomes its holder) only when this manager is the only one
// under its name, and the lease ledger (leases) does not know the lease: a
// lease the ledger records was recorded once, and a released or left-to-expire
// one belongs to a run that ended. ledger says what the ledger (status.leases)
// knows of a holder, for a message, or "". own is the token minted for this
// pass.
// ok is false when the value is not such a token at all (no refusal to
// report); refused says why an orphan is not taken up.
func TakeUp(value, own string, identity runtoken.Run, id Identity, active []batchv1alpha1.ActiveRun, ledger func(holder string) string) (o Orphan, ok bool, refused string) {
	jobName, minted := runtoken.MintedFor(value, identity)
	if !minted || value == own {
		return Orphan{}, false, ""
	}
	o = Orphan{Value: value, JobName: jobName, Holder: leasetoken.HolderOf(value)}
	if id.Duplicate {
		return o, true, "a token minted under this cluster's name, while another manager claims that name: never taken up"
	}
	if !id.Settled {
		return o, true, "a token minted under this cluster's name, taken up only once this manager's identity heartbeat has shown for a few beats that no other manager claims that name"
	}
	for i := range active {
		if active[i].Token == value || active[i].JobName == jobName {
			return o, true, "the lease of this GuardedJob's active run " + jobName
		}
	}
	if why := ledger(o.Holder); why != "" {
		return o, true, why
	}
	return o, true, ""
}

// JobRefusal is take-up's judgement after the live read of the Job the
// orphan's token was minted for: a Job of that name means the run was
// recorded once and its status lost, and take-up is only for a lease that
// never had a Job. It returns why the orphan is not taken up, or "".
func (o Orphan) JobRefusal(jobExists bool) string {
	if !jobExists {
		return ""
	}
	return fmt.Sprintf("the lease of Job %s, which exists: its run was recorded once, and its status lost", o.JobName)
}
