package runcore_test

import (
	"errors"
	"strings"
	"testing"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// TestNoGateOpensBeforeTheLeaseIsConfirmedAfterIt: step open, for the Job's
// start gate and for the scheduling gates of a queued Job's Pods. The first
// effect is always the confirmation, and only a confirmed lease opens the gate.
func TestNoGateOpensBeforeTheLeaseIsConfirmedAfterIt(t *testing.T) {
	run := &batchv1alpha1.ActiveRun{Key: "payments:payout"}
	for gate, name := range map[runcore.Gate]string{runcore.JobGate: "the Job's start gate", runcore.PodGates: "the Pods' scheduling gates"} {
		t.Run(name, func(t *testing.T) {
			for what, c := range map[string]struct {
				answer runcore.Confirmation
				want   runcore.OpenEffect
				lost   string // a part of the stop's message
			}{
				"the lease is held":          {want: runcore.OpenTheGate},
				"the store does not answer":  {answer: runcore.Confirmation{Err: errors.New("i/o timeout")}, want: runcore.RetryConfirm},
				"another holder has the key": {answer: runcore.Confirmation{NotHeld: true, Holder: "cluster-b/payout-1"}, want: runcore.StopLockLost, lost: "it is held by cluster-b/payout-1"},
				"the key is gone":            {answer: runcore.Confirmation{NotHeld: true}, want: runcore.StopLockLost, lost: "the key is gone"},
			} {
				m := runcore.NewOpening(run, gate)
				if m.Next() != runcore.ConfirmLease {
					t.Fatalf("%s: the first effect is %v, not the lease's confirmation", what, m.Next())
				}
				m.Deliver(c.answer)
				if m.Next() != c.want {
					t.Errorf("%s: after the answer %v, want %v", what, m.Next(), c.want)
				}
				if c.lost != "" && (!strings.Contains(m.LostMessage(), c.lost) || !strings.HasPrefix(m.LostMessage(), "lock payments:payout was lost before")) {
					t.Errorf("%s: the stop says %q", what, m.LostMessage())
				}
			}
		})
	}
}
