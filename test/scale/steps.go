package main

import (
	"time"

	"github.com/guardedjob/guardedjob/test/scale/report"
)

// runShape says how a controller's run shows in the audit log: its Job's
// namespace, how many name parts the Job adds to its owner's name, the
// owner's status resource, and whether the Job waits at a start gate that a
// patch opens.
type runShape struct {
	ns         string
	jobSuffix  int
	status     string
	gated      bool
	controller string
}

// runSteps takes each run of a burst apart, from the API server's audit log:
// when its pass sent the Job create, how long the API server took over each
// of the run's requests, and what the controller did between them. A run's
// requests follow each other in one pass (the Job, its status, the gate), so
// the gaps between them are the controller's own work (and, for GuardedJob,
// its Redis calls). started holds, per owner, when its Job could start: the
// answer to the patch that opened its gate, or to its create. With the early
// gate (--early-gate) the gate's patch comes before the status write, which a
// later pass makes: those runs get steps of their own.
func runSteps(window []auditEvent, due time.Time, shape runShape) (steps []report.Step, started map[string]time.Time) {
	type run struct{ create, status, gate *auditEvent }
	runs := map[string]*run{}
	for i := range window {
		e := &window[i]
		if e.Verb == "create" && e.resource() == "jobs" && e.ok() && e.namespace() == shape.ns && !e.Done.Before(due) {
			owner := ownerOf(e.name(), shape.jobSuffix)
			if r := runs[owner]; r == nil || e.Received.Before(r.create.Received) {
				runs[owner] = &run{create: e}
			}
		}
	}
	for i := range window {
		e := &window[i]
		if !e.ok() || e.namespace() != shape.ns {
			continue
		}
		switch {
		case (e.Verb == "update" || e.Verb == "patch") && e.resource() == shape.status:
			if r := runs[e.name()]; r != nil && !e.Received.Before(r.create.Done) && (r.status == nil || e.Received.Before(r.status.Received)) {
				r.status = e
			}
		case shape.gated && (e.Verb == "update" || e.Verb == "patch") && e.resource() == "jobs":
			if r := runs[ownerOf(e.name(), shape.jobSuffix)]; r != nil && e.name() == r.create.name() && !e.Received.Before(r.create.Done) &&
				(r.gate == nil || e.Received.Before(r.gate.Received)) {
				r.gate = e
			}
		}
	}
	var toCreate, create, toStatus, status, toGate, gate, toEarly, early, toLate, late []time.Duration
	started = map[string]time.Time{}
	for owner, r := range runs {
		toCreate = append(toCreate, r.create.Received.Sub(due))
		create = append(create, r.create.Done.Sub(r.create.Received))
		if !shape.gated {
			started[owner] = r.create.Done
		}
		if r.gate != nil && (r.status == nil || r.gate.Received.Before(r.status.Received)) {
			toEarly = append(toEarly, r.gate.Received.Sub(r.create.Done))
			early = append(early, r.gate.Done.Sub(r.gate.Received))
			started[owner] = r.gate.Done
			if r.status != nil {
				toLate = append(toLate, r.status.Received.Sub(r.gate.Done))
				late = append(late, r.status.Done.Sub(r.status.Received))
			}
			continue
		}
		if r.status == nil {
			continue
		}
		toStatus = append(toStatus, r.status.Received.Sub(r.create.Done))
		status = append(status, r.status.Done.Sub(r.status.Received))
		if r.gate == nil || r.gate.Received.Before(r.status.Done) {
			continue
		}
		toGate = append(toGate, r.gate.Received.Sub(r.status.Done))
		gate = append(gate, r.gate.Done.Sub(r.gate.Received))
		started[owner] = r.gate.Done
	}
	step := func(name string, ds []time.Duration) {
		steps = append(steps, report.Step{Name: name, Runs: len(ds),
			P50Seconds: percentile(ds, 0.5).Seconds(), P99Seconds: percentile(ds, 0.99).Seconds()})
	}
	step("due time → Job create sent (a free worker, then the pass up to it)", toCreate)
	step("Job create at the API server", create)
	step("Job created → status write sent ("+shape.controller+")", toStatus)
	step("status write at the API server", status)
	if shape.gated {
		step("status written → gate write sent (the confirming renewal)", toGate)
		step("gate write at the API server", gate)
	}
	if len(toEarly) > 0 {
		step("early gate: Job created → gate write sent (the confirming renewal)", toEarly)
		step("early gate: gate write at the API server", early)
		step("early gate: gate opened → status write sent (a later pass)", toLate)
		step("early gate: status write at the API server", late)
	}
	return steps, started
}
