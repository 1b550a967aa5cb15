package runcore_test

import (
	"strings"
	"testing"
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/runtoken"
)

// TestTakeUpOnlyAnOrphanNoRecordKnows: the judgement of take-up, without an
// API server or a store. A busy key's token minted by this manager for this
// GuardedJob is taken up only when no other manager claims the name, no active
// run holds it, and the lease ledger does not know it: a lease left to expire
// by a run that ended (its Pods may still run where the API server does not
// show them) is never taken up by the next run, nor is one whose Job exists
// (its run was recorded once).
func TestTakeUpOnlyAnOrphanNoRecordKnows(t *testing.T) {
	id := runtoken.Run{Cluster: "cluster-a", Namespace: "payments", Name: "payout", UID: "uid-1",
		Occurrence: time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)}
	mint := func(r runtoken.Run) (string, string) {
		token, job, err := runtoken.Mint(r)
		if err != nil {
			t.Fatal(err)
		}
		return token, job
	}
	orphan, job := mint(id)
	own, _ := mint(id)
	holder := leasetoken.HolderOf(orphan)
	settled := runcore.Identity{Settled: true}
	other := id
	other.Cluster = "cluster-b"
	foreign, _ := mint(other)
	// What the lease ledger says of a holder (LedgerSays).
	rec := func(says string) func(string) string {
		return func(h string) string {
			if h == holder {
				return says
			}
			return ""
		}
	}
	nothing := rec("")
	for _, c := range []struct {
		name   string
		value  string
		id     runcore.Identity
		active []batchv1alpha1.ActiveRun
		ledger func(string) string
		orphan bool
		// jobExists: the live read finds the Job the orphan's token was
		// minted for.
		jobExists bool
		refused   string // a part of the refusal, "" when taken up
	}{
		{name: "another cluster's token", value: foreign, id: settled},
		{name: "this pass's own token", value: own, id: settled},
		{name: "an orphan nothing records", value: orphan, id: settled, orphan: true},
		{name: "while another manager claims the name", value: orphan, id: runcore.Identity{Duplicate: true, Settled: true}, orphan: true, refused: "another manager claims that name"},
		{name: "before the identity heartbeat settled", value: orphan, id: runcore.Identity{}, orphan: true, refused: "identity heartbeat"},
		{name: "the lease of an active run", value: orphan, id: settled, active: []batchv1alpha1.ActiveRun{{JobName: job}}, orphan: true, refused: "active run " + job},
		{name: "a live lease in the ledger", value: orphan, id: settled, ledger: rec("the lease of this GuardedJob's active run " + job), orphan: true, refused: "active run"},
		{name: "an orphan whose Job exists", value: orphan, id: settled, jobExists: true, orphan: true, refused: "Job " + job + ", which exists"},
		{name: "a lease the ledger knows", value: orphan, id: settled, ledger: rec("the lease of this GuardedJob's run " + job + ", which ended and left it to expire on purpose"), orphan: true, refused: "left it to expire on purpose"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ledger := c.ledger
			if ledger == nil {
				ledger = nothing
			}
			o, ok, refused := runcore.TakeUp(c.value, own, id, c.id, c.active, ledger)
			if ok && refused == "" {
				refused = o.JobRefusal(c.jobExists)
			}
			if ok != c.orphan {
				t.Fatalf("orphan %v, want %v", ok, c.orphan)
			}
			if c.refused == "" && refused != "" || !strings.Contains(refused, c.refused) {
				t.Fatalf("refused %q, want %q", refused, c.refused)
			}
			if ok && (o.JobName != job || o.Holder != holder || o.Value != c.value) {
				t.Fatalf("orphan %+v, want Job %s of holder %s", o, job, holder)
			}
		})
	}
}
