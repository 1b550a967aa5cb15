package main

import (
	"testing"
	"time"

	"github.com/guardedjob/guardedjob/test/scale/report"
)

func event(verb, resource, sub, name string, received, done time.Time) auditEvent {
	var e auditEvent
	e.Verb = verb
	e.ObjectRef = &struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	}{Resource: resource, Subresource: sub, Namespace: nsGJ, Name: name}
	e.ResponseStatus = &struct {
		Code int `json:"code"`
	}{Code: 200}
	e.Received, e.Done = received, done
	return e
}

// A gated run: the Job create, then its status write, then the gate patch. It may
// start when the gate patch is answered, not when the Job is created; a status
// write or patch from before the Job (another run) is not the run's.
func TestRunStepsCountsAGatedRunUntilItsGateOpens(t *testing.T) {
	due := time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return due.Add(time.Duration(ms) * time.Millisecond) }
	window := []auditEvent{
		event("update", "guardedjobs", "status", "gj-1", at(-500), at(-490)),
		event("create", "jobs", "", "gj-1-123-abcde", at(100), at(130)),
		event("update", "guardedjobs", "status", "gj-1", at(150), at(200)),
		event("patch", "jobs", "", "gj-1-123-abcde", at(220), at(250)),
		event("patch", "jobs", "", "gj-1-123-abcde", at(900), at(950)),
	}
	steps, started := runSteps(window, due, runShape{ns: nsGJ, jobSuffix: 2, status: "guardedjobs/status", gated: true})
	if got, want := started["gj-1"], at(250); !got.Equal(want) {
		t.Fatalf("gj-1 may start at %v, want the gate patch's answer %v", got, want)
	}
	want := []time.Duration{100, 30, 20, 50, 20, 30}
	if len(steps) != len(want) {
		t.Fatalf("%d steps, want %d", len(steps), len(want))
	}
	for i, st := range steps {
		if got := time.Duration(st.P50Seconds * float64(time.Second)).Round(time.Millisecond); got != want[i]*time.Millisecond || st.Runs != 1 {
			t.Errorf("step %q: %v over %d runs, want %v over 1", st.Name, got, st.Runs, want[i]*time.Millisecond)
		}
	}

	// Without its gate patch a gated run has not started.
	_, started = runSteps(window[:3], due, runShape{ns: nsGJ, jobSuffix: 2, status: "guardedjobs/status", gated: true})
	if _, ok := started["gj-1"]; ok {
		t.Fatal("a run whose gate never opened counts as started")
	}

	// The gate opened with an update, before the status write (the early gate).
	early := []auditEvent{
		event("create", "jobs", "", "gj-1-123-abcde", at(100), at(130)),
		event("update", "jobs", "", "gj-1-123-abcde", at(150), at(170)),
		event("update", "guardedjobs", "status", "gj-1", at(900), at(950)),
	}
	if _, started = runSteps(early, due, runShape{ns: nsGJ, jobSuffix: 2, status: "guardedjobs/status", gated: true}); !started["gj-1"].Equal(at(170)) {
		t.Fatalf("gj-1 may start at %v, want the gate update's answer %v", started["gj-1"], at(170))
	}
}

func TestSpreadOfCounts(t *testing.T) {
	if got := spreadOf([]int{3, 0, 1, 1, 2}); got != (report.Spread{Min: 0, Median: 1, Max: 3}) {
		t.Fatalf("spreadOf: %+v, want min 0, median 1, max 3", got)
	}
}
