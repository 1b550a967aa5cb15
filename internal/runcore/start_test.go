package runcore_test

import (
	"testing"

	. "github.com/onsi/gomega"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// The start of a run whose lease a pass has just acquired, effect by effect:
// its Job first when it may be, then the guarded status write, and only once
// that write succeeded what lets the work start (the Job's gate, or the
// Running phase that creates the Job). Scripted answers, no API server.
func TestTheStartOfARunWritesItsRecordBeforeItsWorkMayStart(t *testing.T) {
	created := runcore.StartOutcome{Created: true}
	ok := runcore.StartOutcome{WriteOK: true}
	none := runcore.StartOutcome{}
	for _, c := range []struct {
		name     string
		jobFirst bool
		answers  []runcore.StartOutcome
		effects  []runcore.StartEffect
		record   runcore.Step
	}{
		{"Job-first: the Job, the record of the run and its Job, then the gate", true, []runcore.StartOutcome{created, ok, none, none},
			[]runcore.StartEffect{runcore.CreateJobFirst, runcore.WriteRecord, runcore.Recorded, runcore.OpenJobGate, runcore.StartDone}, runcore.RecordJob},
		{"a Job that could not be created first: the record, then phase Running creates it", true, []runcore.StartOutcome{none, ok, none},
			[]runcore.StartEffect{runcore.CreateJobFirst, runcore.WriteRecord, runcore.Recorded, runcore.GoRunning}, runcore.Record},
		{"a lease not confirmed with room to stop the Pods: status first", false, []runcore.StartOutcome{ok, none},
			[]runcore.StartEffect{runcore.WriteRecord, runcore.Recorded, runcore.GoRunning}, runcore.Record},
		{"a rejected Job: the run releases its lease", true, []runcore.StartOutcome{{Rejected: true}},
			[]runcore.StartEffect{runcore.CreateJobFirst, runcore.ReleaseRejected}, runcore.Record},
		{"a failed status write: the pass ends with the Job waiting at its gate for adoption", true, []runcore.StartOutcome{created, none},
			[]runcore.StartEffect{runcore.CreateJobFirst, runcore.WriteRecord, runcore.AbandonPass}, runcore.RecordJob},
		{"a failed status write without a Job", false, []runcore.StartOutcome{none},
			[]runcore.StartEffect{runcore.WriteRecord, runcore.AbandonPass}, runcore.Record},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			m := runcore.NewStart(c.jobFirst)
			var got []runcore.StartEffect
			written := false
			for _, a := range c.answers {
				e := m.Next()
				got = append(got, e)
				if e == runcore.OpenJobGate || e == runcore.GoRunning {
					g.Expect(written).To(BeTrue(), "%s before status recorded the run", e)
				}
				if e == runcore.WriteRecord && a.WriteOK {
					written = true
				}
				m.Deliver(a)
			}
			got = append(got, m.Next())
			g.Expect(got).To(Equal(c.effects))
			g.Expect(m.Record()).To(Equal(c.record))
		})
	}
}

// The early gate: the Job carries its run, so its gate opens with no status
// write before it, and the record is left to the next pass while the lease
// stays renewed (the Job is the run's only record until that pass adopts it); a
// gate that did not open leaves the recorded run to its phase.
func TestTheEarlyGateOpensTheJobBeforeTheStatusWrite(t *testing.T) {
	created := runcore.StartOutcome{Created: true}
	opened := runcore.StartOutcome{Opened: true}
	ok := runcore.StartOutcome{WriteOK: true}
	none := runcore.StartOutcome{}
	for _, c := range []struct {
		name    string
		answers []runcore.StartOutcome
		effects []runcore.StartEffect
		renews  bool
	}{
		{"the Job, its gate, and the record left to the next pass", []runcore.StartOutcome{created, opened},
			[]runcore.StartEffect{runcore.CreateJobFirst, runcore.OpenJobGate, runcore.RecordLater}, true},
		{"a gate that did not open: the record, then the recorded run's phase", []runcore.StartOutcome{created, none, ok, none},
			[]runcore.StartEffect{runcore.CreateJobFirst, runcore.OpenJobGate, runcore.WriteRecord, runcore.Recorded, runcore.GoRunning}, false},
		{"a failed status write behind a shut gate: the Job waits for adoption", []runcore.StartOutcome{created, none, none},
			[]runcore.StartEffect{runcore.CreateJobFirst, runcore.OpenJobGate, runcore.WriteRecord, runcore.AbandonPass}, false},
		{"a Job that could not be created first: status first", []runcore.StartOutcome{none, ok, none},
			[]runcore.StartEffect{runcore.CreateJobFirst, runcore.WriteRecord, runcore.Recorded, runcore.GoRunning}, false},
		{"a rejected Job: the run releases its lease", []runcore.StartOutcome{{Rejected: true}},
			[]runcore.StartEffect{runcore.CreateJobFirst, runcore.ReleaseRejected}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			m := runcore.NewEarlyStart()
			var got []runcore.StartEffect
			for _, a := range c.answers {
				got = append(got, m.Next())
				m.Deliver(a)
			}
			got = append(got, m.Next())
			g.Expect(got).To(Equal(c.effects))
			g.Expect(m.KeepsRenewing()).To(Equal(c.renews))
		})
	}
}

func TestTheEarlyGateStartsOnlyARunNoStatusNamesYet(t *testing.T) {
	g := NewWithT(t)
	plain := &batchv1alpha1.ActiveRun{}
	g.Expect(runcore.StartFor(true, true, false, plain).Early()).To(BeTrue(), "a new run: the early gate's order")
	recorded := runcore.StartFor(true, true, true, plain)
	g.Expect(recorded.Early()).To(BeFalse(), "a run whose intent status records: no later pass would adopt its Job")
	g.Expect(recorded.Next()).To(Equal(runcore.CreateJobFirst), "it still goes Job first")
	g.Expect(runcore.StartFor(true, true, false, &batchv1alpha1.ActiveRun{Retry: 1}).Early()).To(BeFalse(),
		"a try of a retried occurrence: status.retry counts it, which its Job does not carry")
	g.Expect(runcore.StartFor(true, true, false, &batchv1alpha1.ActiveRun{Backfill: "2026-12-07T06:00:00Z"}).Early()).To(BeFalse(),
		"a backfill's run: status.backfill follows it")
	for _, request := range []string{"2026-12-07T06:00:00Z", "guardedjobrun:0b9e4f4e-1a55-4d83-9d3c-3f1d8b0a6a11"} {
		g.Expect(runcore.StartFor(true, true, false, &batchv1alpha1.ActiveRun{RunNow: request}).Early()).To(BeFalse(),
			"a run a request started: status answers the request before any Pod works (%s)", request)
	}
	g.Expect(runcore.StartFor(true, false, false, plain).Early()).To(BeFalse(), "without the flag")
	g.Expect(runcore.StartFor(false, true, false, plain).Next()).To(Equal(runcore.WriteRecord), "a run whose Job may not come first: status first")
}
