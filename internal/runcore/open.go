package runcore

import batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"

// Gate is a gate a run's work waits at until the manager opens it.
type Gate int

const (
	// JobGate is the Job's start gate: the Job is suspended (jobbuild.Gated).
	JobGate Gate = iota
	// PodGates are the lease's scheduling gates on the Pods of a Job a queue
	// started (jobbuild.PodGated).
	PodGates
)

// OpenEffect is the one effect an Opening needs now.
type OpenEffect int

const (
	// ConfirmLease renews the run's lease with a call sent after what the
	// gate holds back (the Job, or its Pods) exists, and delivers the answer.
	ConfirmLease OpenEffect = iota + 1
	// OpenTheGate opens the gate (with a resourceVersion precondition).
	OpenTheGate
	// StopLockLost stops the run as LockLost with LostMessage: its work never
	// started.
	StopLockLost
	// RetryConfirm keeps the gate shut until the next pass: the store did not
	// answer (the self-fence deadline still bounds the run).
	RetryConfirm
)

// Confirmation is the store's answer to ConfirmLease.
type Confirmation struct {
	// NotHeld says the key no longer holds the run's token, and Holder names
	// who holds it instead ("" when the key is gone).
	NotHeld bool
	Holder  string
	// Err is any other failure: the store did not answer.
	Err error
}

// Opening is step open: no gate opens unless a store call sent after the work
// it holds back existed confirmed the lease. A paused manager, or one whose
// lease expired while the API server was slow, finds its lease lost at that call
// and stops the run before any of its work ran.
type Opening struct {
	run    *batchv1alpha1.ActiveRun
	gate   Gate
	next   OpenEffect
	holder string
}

// NewOpening returns the opening of a run's gate.
func NewOpening(run *batchv1alpha1.ActiveRun, gate Gate) *Opening {
	return &Opening{run: run, gate: gate, next: ConfirmLease}
}

// Next is the effect the opening needs now.
func (o *Opening) Next() OpenEffect { return o.next }

// Deliver applies the answer to ConfirmLease.
func (o *Opening) Deliver(c Confirmation) {
	if o.next != ConfirmLease {
		return
	}
	switch {
	case c.NotHeld:
		o.next, o.holder = StopLockLost, c.Holder
	case c.Err != nil:
		o.next = RetryConfirm
	default:
		o.next = OpenTheGate
	}
}

// LostMessage says why the run stops after StopLockLost, and Holder who holds
// its key now ("" when the key is gone).
func (o *Opening) LostMessage() string {
	if o.gate == PodGates {
		return "lock " + o.run.Key + " was lost before the Job's Pods could be scheduled: " + HeldByOr(o.holder, "the key is gone")
	}
	return "lock " + o.run.Key + " was lost before the Job's Pods could start: " +
		HeldByOr(o.holder, "the key is gone (the run may have been completed by another manager)")
}

// Holder is who holds the run's key after StopLockLost ("" when nobody does).
func (o *Opening) Holder() string { return o.holder }

// HeldByOr says who holds a lost key, or gone when nobody does.
func HeldByOr(holder, gone string) string {
	if holder != "" {
		return "it is held by " + holder
	}
	return gone
}
