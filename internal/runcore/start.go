package runcore

import batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"

// The start of a run whose lease this pass has just acquired (steps
// create_first, record or record_job, then confirm and open), as a machine.
// Its rule is the write barrier: the guarded status write that records the run
// comes before anything that lets the run's work start, so that a manager
// that dies at any effect leaves either a run status records (a restart
// resumes its lease) or a Job that waits at its gate (the next pass adopts or
// deletes it), never a working Pod whose lease nobody renews. The early gate
// (NewEarlyStart) moves the barrier onto the Job: the Job carries its run, so
// its gate opens (steps confirm_first and open_first) with no status write
// before it, and the pass leaves the run's record to the next pass
// (RecordLater), off the start's path: a working Job that no status records is
// adopted (Waiting.Early), its lease renewed meanwhile, and a restart renews
// it too. The adapter's loop is the
// release's (NewRelease): perform what Next says, Deliver the answer, until
// StartDone.

// StartEffect is what the start of a run needs next.
type StartEffect int

const (
	// CreateJobFirst creates the run's Job, waiting at the manager's start
	// gate and carrying its run, before status records the run (Job-first).
	CreateJobFirst StartEffect = iota + 1
	// WriteRecord is the guarded status write that records the run, its fence
	// and its lease, and its Job if one was created: a barrier.
	WriteRecord
	// Recorded: the write succeeded; what it makes true can be told (the
	// acquisition's events), and the adapter finds the run again in the
	// status the write returned.
	Recorded
	// OpenJobGate confirms the lease and opens the gate of the Job this pass
	// created (the Job's events first). In the early gate it comes before
	// WriteRecord, and its answer says whether the gate opened.
	OpenJobGate
	// GoRunning: status records the run without a Job; the run goes on in
	// phase Running, whose pass creates its Job (status first).
	GoRunning
	// RecordLater (the early gate): the Job's gate is open and the Job is the
	// run's record; the pass writes no status, its lease stays renewed, and the
	// next pass records the run from the Job (AdoptUnrecorded). What the
	// acquisition makes true can be told now (its events).
	RecordLater
	// ReleaseRejected: the API server rejected the Job; the run releases its
	// lease in phase Releasing.
	ReleaseRejected
	// AbandonPass: the status write failed (the object changed since the pass
	// read it): an unrecorded run's lease is no longer renewed (take-up, or
	// its ttl, decides it), a Job this pass created waits for adoption, and
	// the pass ends.
	AbandonPass
	// StartDone: nothing more in this pass.
	StartDone
)

// Step is the model's step an effect takes.
func (e StartEffect) Step() Step {
	switch e {
	case CreateJobFirst:
		return CreateFirst
	case OpenJobGate:
		return Open
	}
	return ""
}

// StartOutcome is the answer to the effect Next returned.
type StartOutcome struct {
	// Created and Rejected answer CreateJobFirst: the Job was created; or the
	// API server refused it as invalid or forbidden. Neither: no Job was
	// created (a Job of its name exists, the API server did not answer), and
	// the run goes on status first.
	Created  bool
	Rejected bool
	// WriteOK answers WriteRecord.
	WriteOK bool
	// Opened answers OpenJobGate in the early gate: the gate opened. Not
	// opened: the lease was not confirmed (the run is stopping, its Job
	// deleted) or the store did not answer (the gate stays shut until a pass
	// of the recorded run confirms it).
	Opened bool
}

// Starting is the start of one run, from its acquisition to its Job's gate.
type Starting struct {
	next     StartEffect
	early    bool
	job      bool
	recorded bool
	tried    bool // the gate's opening was tried
	opened   bool
}

// NewStart starts a run whose lease was just acquired. jobFirst says its Job
// may be created before status records it: the run holds a lease confirmed
// with room to stop its Pods, and its Job waits at the manager's start gate
// (a Job a queue starts does not).
func NewStart(jobFirst bool) *Starting {
	m := &Starting{next: WriteRecord}
	if jobFirst {
		m.next = CreateJobFirst
	}
	return m
}

// NewEarlyStart starts a run in the early gate's order: its Job first, waiting
// at its gate and carrying its run, then the lease confirmed and the gate
// opened, then the status write that records the run and its Job. A Job that
// could not be created first goes status first, as in NewStart.
func NewEarlyStart() *Starting {
	return &Starting{next: CreateJobFirst, early: true}
}

// StartFor starts run, whose lease was just acquired, in the order it may take:
// the early gate's (early: --early-gate) only for a run no status names yet
// (inStatus false) whose record a later pass can rebuild from its Job alone
// (RecordableFromJob), since that pass adopts a Job as its run's record only
// while no status names the run, and writes only what the Job carries. Any
// other run takes the Job-first order, which records it before its gate
// opens. In the model every run starts with no status naming it
// (acquire_next, acquire_trigger): it has no intent recorded before its
// acquisition. jobFirst is as for NewStart.
func StartFor(jobFirst, early, inStatus bool, run *batchv1alpha1.ActiveRun) *Starting {
	if jobFirst && early && !inStatus && RecordableFromJob(run) {
		return NewEarlyStart()
	}
	return NewStart(jobFirst)
}

// RecordableFromJob says whether all that the pass starting run writes into
// status can be rebuilt from the run its Job carries: not for a try of a
// retried occurrence (status.retry counts the tries), a backfill's run
// (status.backfill follows its occurrences), nor a run a request started
// (run-now, GuardedJobRun): status answers the request, and a Job's
// annotation, which anyone who may write Jobs can forge, may not. Were its
// Job to work before that answer is written, a run whose Job could not be
// adopted (its lease gone by the time a manager came back) would leave the
// request unanswered, and the request would run its work a second time.
func RecordableFromJob(run *batchv1alpha1.ActiveRun) bool {
	return run.Retry == 0 && run.Backfill == "" && run.RunNow == ""
}

// Next is the effect the start needs now.
func (m *Starting) Next() StartEffect { return m.next }

// Record is the model's step the status write takes: record_job when it
// records a Job created first, record otherwise.
func (m *Starting) Record() Step {
	if m.job {
		return RecordJob
	}
	return Record
}

// Deliver takes the answer to the effect Next returned.
func (m *Starting) Deliver(o StartOutcome) {
	switch m.next {
	case CreateJobFirst:
		switch {
		case o.Rejected:
			m.next = ReleaseRejected
		case o.Created:
			m.job = true
			m.next = WriteRecord
			if m.early {
				m.next = OpenJobGate
			}
		default:
			m.next = WriteRecord
		}
	case WriteRecord:
		if !o.WriteOK {
			m.next = AbandonPass
			return
		}
		m.recorded = true
		m.next = Recorded
	case Recorded:
		switch {
		case m.job && m.opened:
			m.next = StartDone
		case m.job && !m.tried:
			m.next = OpenJobGate
		default:
			// A gate the early start could not open: the recorded run's
			// phase confirms it again, or stops the run.
			m.next = GoRunning
		}
	case OpenJobGate:
		m.tried = true
		m.opened = !m.early || o.Opened
		switch {
		case m.recorded:
			m.next = StartDone
		case m.early && m.opened:
			m.next = RecordLater
		default:
			m.next = WriteRecord
		}
	default:
		m.next = StartDone
	}
}

// JobCreated says the pass created the run's Job (a failed status write leaves
// it waiting for adoption).
func (m *Starting) JobCreated() bool { return m.job }

// Early says the start follows the early gate's order (NewEarlyStart).
func (m *Starting) Early() bool { return m.early }

// KeepsRenewing says whether the lease of a run no status records yet
// (RecordLater, or a failed status write: AbandonPass) is still renewed by this
// process: the early gate opened its Job's gate, so its Pods may work, and the
// Job is the run's only record until the next pass adopts it. Otherwise no Pod
// can work under the lease, and it is left to take-up, adoption or its ttl.
func (m *Starting) KeepsRenewing() bool { return m.early && m.opened && !m.recorded }
