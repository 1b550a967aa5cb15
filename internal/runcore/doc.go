// Package runcore holds the decisions of the run protocol, named after the steps
// of its model (model/run.pml), as pure functions and machines of what a pass has
// read: no API server, no store, no keeper, no clock. The adapters in controllers/
// gather what a decision needs, ask it, and carry out the effect.
//
// A machine says the one effect the protocol needs now (Next), and the adapter
// performs it and delivers the answer (Deliver), until the machine says the pass
// is done with the run. The adapter's loop is the same for each:
//
//	m := runcore.NewRelease(run, owns)
//	for {
//		switch m.Next() {
//		case runcore.CompleteLease: // the store call ...
//			m.Deliver(runcore.ReleaseOutcome{Released: released})
//		...
//		case runcore.EndRun: // record m.Ended(now, skew); return
//		}
//	}
//
// The machines are the phases of a run: NewStart (after the acquisition: the Job
// first, the guarded status write as a barrier, then the gate), Running (a
// recorded run's pass: a verdict per pass), NewOpening (a gate opens only after
// a confirmation of the lease sent after the gate's work existed), NewStopping,
// NewRelease, and the stop controller's NewUnclaimed. Verdicts without effects
// decide adoption (Adoption), what a working run's pass does next (Working: the
// pod guard's stop, the gates, a queue, the pod-start timeout), a shard's hand-over (HandOver, MayClaimShard) and
// the stop controller's judgement (StopVerdict), and what a GuardedJob's
// deletion does to each run (OnDelete). A phase never calls another: the run dispatcher in
// controllers (advanceRun) takes the run's next phase when a step moved it on.
// Status is written through the helpers here (conditions, the lease ledger, the
// end of a run), so that each field has its writers in one place.
//
// One run, as the V(1) log names its steps (a story's log reads like a spin
// trail of the model):
//
//	acquire_next   the lease, fence 7              (acquire; the store's Lua script)
//	create_first   the Job, waiting at its gate    (NewStart: CreateJobFirst)
//	record_job     status records run, fence, Job  (NewStart: WriteRecord, the barrier)
//	open           lease confirmed, gate opened    (NewStart: OpenJobGate; NewOpening)
//	release        Job complete: marker, DEL       (Running: ReleaseFinished; NewRelease: CompleteLease)
//	finish         lastRun, the ledger, finalizer  (NewRelease: EndRun)
//
// It imports no context, controller-runtime, client-go, go-redis or lease client,
// and reads no clock (purity_test.go checks it); every step of the model's
// Reconciler and Stopper has one Step here (steps_test.go checks it against the
// model). simulation_test.go runs the machines against a simulated store, API
// server and Pods in two clusters, with faults, for thousands of seeds.
package runcore
