package runcore

// Step is a labelled step of the model's Reconciler or Stopper. Its value is the
// model's label, so that a log line and a spin trail name a step the same way.
type Step string

// Kind says who takes a step.
type Kind int

const (
	// Protocol steps are what the manager does.
	Protocol Kind = iota
	// Adversary steps are what a deposed, paused or moved-away manager may still
	// send late: the protocol must stay safe when they land, never take them.
	Adversary
	// Hole steps exist only under a hole switch: the order the code must not
	// take, whose counterexample the model keeps.
	Hole
	// Planned steps are an order the model checks before the code takes it.
	Planned
)

// The Reconciler's steps.
const (
	// AcquireNext records the intent and acquires the lease of the next
	// scheduled occurrence.
	AcquireNext Step = "acquire_next"
	// AcquireTrigger acquires for a run-now trigger of the latest occurrence.
	AcquireTrigger Step = "acquire_trigger"
	// SkipForbid skips an occurrence due while a run is active (Forbid).
	SkipForbid Step = "skip_forbid"
	// SchedulePastJob moves the schedule's last time past an occurrence that a
	// Job no status records carries: its run started, and cannot be adopted (the
	// early gate).
	SchedulePastJob Step = "schedule_past_job"
	// SkipTrigger skips a trigger while a run is active, or a stale one.
	SkipTrigger Step = "skip_trigger"
	// Record writes the run, its fence and its lease into status.
	Record Step = "record"
	// CreateJob creates a recorded run's Job, suspended, on a confirmed lease
	// (the status-first order: queues, failed creates).
	CreateJob Step = "create_job"
	// CreateFirst creates the run's Job right after the acquisition, before
	// status records the run (the Job-first order).
	CreateFirst Step = "create_first"
	// RecordJob records the run from the Job just created: its UID, token,
	// fence and occurrence; the lease in the ledger.
	RecordJob Step = "record_job"
	// AdoptUnrecorded records the run of a Job that no status records, when
	// its key still holds the token minted for it (Adoptable).
	AdoptUnrecorded Step = "adopt_unrecorded"
	// GateEarly opens the gate of a Job before status records its run.
	GateEarly Step = "gate_early"
	// ConfirmFirst confirms the lease of the Job the pass just created, before
	// status records its run (the early gate).
	ConfirmFirst Step = "confirm_first"
	// OpenFirst opens that Job's gate, before status records its run (the early
	// gate).
	OpenFirst Step = "open_first"
	// Confirm renews the run's lease before its gate opens; a lease that is not
	// confirmed stops the run.
	Confirm Step = "confirm"
	// Open unsuspends the Job of a recorded, confirmed run.
	Open Step = "open"
	// Adopt records the UID of the Job of a recorded run, or stops a Job of its
	// name with another fence.
	Adopt Step = "adopt"
	// SkipLate skips a recorded run whose Job a live read confirms missing, past
	// its start deadline, and releases its lease.
	SkipLate Step = "skip_late"
	// StopLost stops a run whose lease was lost or reached its deadline.
	StopLost Step = "stop_lost"
	// StopDeleted stops a run whose Job was deleted.
	StopDeleted Step = "stop_deleted"
	// StopDeletedUnrecorded stops a run whose Job, created by this process and
	// not yet recorded, was deleted.
	StopDeletedUnrecorded Step = "stop_deleted_unrecorded"
	// Release releases the lease of a run whose Job finished, or whose stop is
	// done.
	Release Step = "release"
	// CompleteUnacked keeps the lease of a completion whose marker too few
	// replicas acknowledged, and completes again.
	CompleteUnacked Step = "complete_unacked"
	// Finish moves the run to lastRun; the ledger keeps its lease.
	Finish Step = "finish"
	// History drops the lease finalizer of a finished Job no run claims; the
	// history limits delete it later.
	History Step = "history"
	// HandedOver: the shard a GuardedJob moved away from renews until the new
	// shard has taken its runs over.
	HandedOver Step = "handed_over"
	// HandoverTimeout stops the run when the new shard does not come within the
	// hand-over timeout.
	HandoverTimeout Step = "handover_timeout"
	// HandoverDone lets go of the lease once the new shard holds it.
	HandoverDone Step = "handover_done"
	// FirstSight: the new shard renews the object's recorded leases, then
	// claims the object, only while it tracks every lease-holding run.
	FirstSight Step = "first_sight"
	// StoreUnresolved: the new shard cannot resolve a run's store yet and does
	// not claim the object.
	StoreUnresolved Step = "store_unresolved"
	// StopUnresolved stops a run whose store cannot be resolved.
	StopUnresolved Step = "stop_unresolved"
	// TrackLate tracks a run once its store resolves, then claims the object.
	TrackLate Step = "track_late"
	// WriteFails: a pass in flight on the old shard cannot write status any
	// more.
	WriteFails Step = "write_fails"
	// ReleaseWriteFails: the same, with a lease it acquired: left to take-up.
	ReleaseWriteFails Step = "release_write_fails"
	// StaleAcquire: an old leader acquires again for a run its cache shows.
	StaleAcquire Step = "stale_acquire"
	// StaleSkip: an old leader skips a run its cache shows without a Job.
	StaleSkip Step = "stale_skip"
	// StaleCreate: an old leader creates the Job of a run its cache shows.
	StaleCreate Step = "stale_create"
	// StaleOpen: an old leader confirms and opens the gate of a run its cache
	// shows.
	StaleOpen Step = "stale_open"
	// PausedCreate: a leader awake after a pause sends the Job create it was
	// about to send.
	PausedCreate Step = "paused_create"
	// PausedConfirm: that leader confirms the lease before it unsuspends, or
	// deletes the Job.
	PausedConfirm Step = "paused_confirm"
)

// The Stopper's steps (the stop controller).
const (
	// StopReported stops the Job of a lease the keeper reports lost or at its
	// deadline, at once.
	StopReported Step = "stop_reported"
	// StopStopping deletes the Pods of a run marked Stopping.
	StopStopping Step = "stop_stopping"
	// StopUnclaimed stops a Job no active run claims, unless it waits for
	// adoption.
	StopUnclaimed Step = "stop_unclaimed"
	// DropFinalizer drops the lease finalizer of an unclaimed Job that finished
	// or whose Pods are gone.
	DropFinalizer Step = "drop_finalizer"
)

var kinds = map[Step]Kind{
	AcquireNext: Protocol, AcquireTrigger: Protocol, SkipForbid: Protocol, SkipTrigger: Protocol,
	Record: Protocol, CreateJob: Protocol, CreateFirst: Protocol, RecordJob: Protocol,
	AdoptUnrecorded: Protocol, GateEarly: Hole, ConfirmFirst: Protocol, OpenFirst: Protocol, SchedulePastJob: Protocol,
	Confirm: Protocol, Open: Protocol, Adopt: Protocol,
	SkipLate: Protocol, StopLost: Protocol, StopDeleted: Protocol, StopDeletedUnrecorded: Protocol,
	Release: Protocol, CompleteUnacked: Protocol, Finish: Protocol, History: Protocol,
	HandedOver: Protocol, HandoverTimeout: Protocol, HandoverDone: Protocol, FirstSight: Protocol,
	StoreUnresolved: Protocol, StopUnresolved: Protocol, TrackLate: Protocol,
	WriteFails: Adversary, ReleaseWriteFails: Adversary,
	StaleAcquire: Adversary, StaleSkip: Adversary, StaleCreate: Adversary, StaleOpen: Adversary,
	PausedCreate: Adversary, PausedConfirm: Adversary,
	StopReported: Protocol, StopStopping: Protocol, StopUnclaimed: Protocol, DropFinalizer: Protocol,
}

// Steps returns every step with its kind.
func Steps() map[Step]Kind {
	out := make(map[Step]Kind, len(kinds))
	for s, k := range kinds {
		out[s] = k
	}
	return out
}
