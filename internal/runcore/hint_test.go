package runcore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// TestRunDiffersNamesTheFirstFieldAnAnnotationChanges: every field the manager
// acts on is compared, and the answer names the field, never its value.
func TestRunDiffersNamesTheFirstFieldAnAnnotationChanges(t *testing.T) {
	want := batchv1alpha1.ActiveRun{
		ScheduledTime: metav1.NewTime(time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)),
		Key:           "payments:payout", OccurrenceKey: "payments:payout:done:1796443200", FenceKey: "payments:payout:fence",
		Store: "redis://redis.payments:6379", TTL: metav1.Duration{Duration: time.Minute}, RenewInterval: metav1.Duration{Duration: 20 * time.Second},
		MaxHold: metav1.Duration{Duration: time.Hour}, EnvName: "GUARDEDJOB_FENCE", FencingPolicy: batchv1alpha1.FencingInject,
		StoreFailurePolicy: batchv1alpha1.FailClosed,
		// What the annotation may give: not compared.
		JobName: "payout-29941200-0a1b2c", Holder: "cluster-a/payments/payout-29941200-0a1b2c", Fence: 7,
	}
	same := want
	same.Fence, same.Backfill = 9, "bf-1"
	if got := runcore.RunDiffers(&want, &same); got != "" {
		t.Errorf("fields the annotation may give differ: %s", got)
	}
	for field, change := range map[string]func(r *batchv1alpha1.ActiveRun){
		"scheduledTime":      func(r *batchv1alpha1.ActiveRun) { r.ScheduledTime = metav1.NewTime(r.ScheduledTime.Add(time.Hour)) },
		"key":                func(r *batchv1alpha1.ActiveRun) { r.Key = "billing:payout" },
		"occurrenceKey":      func(r *batchv1alpha1.ActiveRun) { r.OccurrenceKey = "billing:payout:done:1" },
		"fenceKey":           func(r *batchv1alpha1.ActiveRun) { r.FenceKey = "billing:payout:fence" },
		"store":              func(r *batchv1alpha1.ActiveRun) { r.Store = "redis://attacker.example:6379" },
		"ttl":                func(r *batchv1alpha1.ActiveRun) { r.TTL = metav1.Duration{Duration: 24 * time.Hour} },
		"renewInterval":      func(r *batchv1alpha1.ActiveRun) { r.RenewInterval = metav1.Duration{Duration: time.Hour} },
		"maxHold":            func(r *batchv1alpha1.ActiveRun) { r.MaxHold = metav1.Duration{Duration: 240 * time.Hour} },
		"envName":            func(r *batchv1alpha1.ActiveRun) { r.EnvName = "PATH" },
		"fencingPolicy":      func(r *batchv1alpha1.ActiveRun) { r.FencingPolicy = batchv1alpha1.FencingNone },
		"storeFailurePolicy": func(r *batchv1alpha1.ActiveRun) { r.StoreFailurePolicy = batchv1alpha1.FailOpen },
		"podGuard":           func(r *batchv1alpha1.ActiveRun) { r.PodGuard = &batchv1alpha1.RunPodGuard{} },
	} {
		hint := want
		change(&hint)
		got := runcore.RunDiffers(&want, &hint)
		if got != field {
			t.Errorf("a changed %s: RunDiffers says %q", field, got)
		}
		if strings.Contains(got, "attacker") || strings.Contains(got, "24h") {
			t.Errorf("the answer shows a value: %s", got)
		}
	}
}

// TestTrustedRunTakesFromTheAnnotationOnlyWhatItMayGive: a Job's run annotation
// is anyone's to write. Keys, store and lease timing come from status or the
// spec and must match; the fence, holder and acquisition time (never after the
// Job's creation) come from the annotation.
func TestTrustedRunTakesFromTheAnnotationOnlyWhatItMayGive(t *testing.T) {
	occurrence := metav1.NewTime(time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC))
	created := metav1.NewTime(occurrence.Add(2 * time.Second))
	spec := batchv1alpha1.ActiveRun{
		ScheduledTime: occurrence, Key: "payments:payout", FenceKey: "payments:payout:fence",
		TTL: metav1.Duration{Duration: time.Minute}, RenewInterval: metav1.Duration{Duration: 20 * time.Second},
		StoreFailurePolicy: batchv1alpha1.FailClosed, OwnerUID: "uid-1", Cluster: "cluster-a",
	}
	fromSpec := func(scheduled metav1.Time) (batchv1alpha1.ActiveRun, error) {
		r := spec
		r.ScheduledTime = scheduled
		return r, nil
	}
	trust := runcore.Trust{Cluster: "cluster-a", OwnerUID: "uid-1", JobName: "payout-29941200-0a1b2c", JobCreated: created, FromSpec: fromSpec}
	hint := spec
	acquired := metav1.NewTime(occurrence.Add(time.Second))
	hint.JobName, hint.Holder, hint.Fence, hint.AcquiredAt, hint.RunNow = trust.JobName, "cluster-a/payments/payout-29941200-0a1b2c", 7, &acquired, "req-1"

	run, why := runcore.TrustedRun(trust, &hint)
	if why != "" {
		t.Fatalf("a faithful annotation is refused: %s", why)
	}
	if run.Fence != 7 || run.Holder != hint.Holder || !run.AcquiredAt.Equal(&acquired) || run.RunNow != "req-1" || run.TTL != spec.TTL {
		t.Errorf("adopted as %+v", run)
	}

	late := metav1.NewTime(created.Add(time.Minute))
	lateHint := hint
	lateHint.AcquiredAt = &late
	if run, _ := runcore.TrustedRun(trust, &lateHint); run == nil || !run.AcquiredAt.Equal(&created) {
		t.Errorf("an acquisition after the Job's creation is taken as it is: %v", run)
	}

	recorded := spec
	recorded.JobName = trust.JobName
	for name, c := range map[string]struct {
		trust  func(*runcore.Trust)
		change func(*batchv1alpha1.ActiveRun)
		want   string
	}{
		"a longer ttl than the spec's":       {change: func(r *batchv1alpha1.ActiveRun) { r.TTL = metav1.Duration{Duration: 24 * time.Hour} }, want: "(ttl)"},
		"another key than the spec's":        {change: func(r *batchv1alpha1.ActiveRun) { r.Key = "billing:payout" }, want: "(key)"},
		"a longer maxHold than status's":     {trust: func(t *runcore.Trust) { t.Recorded = &recorded }, change: func(r *batchv1alpha1.ActiveRun) { r.MaxHold = metav1.Duration{Duration: 240 * time.Hour} }, want: "status records (maxHold)"},
		"another GuardedJob's run":           {change: func(r *batchv1alpha1.ActiveRun) { r.OwnerUID = "uid-2" }, want: "for object uid-2"},
		"another cluster's run":              {change: func(r *batchv1alpha1.ActiveRun) { r.Cluster = "cluster-b" }, want: `cluster "cluster-b"`},
		"a run that claims to hold no lease": {change: func(r *batchv1alpha1.ActiveRun) { r.Unguarded = true }, want: "no lease"},
		"a spec that is not valid now":       {trust: func(t *runcore.Trust) { t.FromSpec = nil }, want: "spec is not valid"},
		"keys the spec may not give": {trust: func(t *runcore.Trust) {
			t.FromSpec = func(metav1.Time) (batchv1alpha1.ActiveRun, error) {
				return batchv1alpha1.ActiveRun{}, errors.New("not granted")
			}
		}, want: "not granted"},
	} {
		tr, h := trust, hint
		if c.trust != nil {
			c.trust(&tr)
		}
		if c.change != nil {
			c.change(&h)
		}
		run, why := runcore.TrustedRun(tr, &h)
		if run != nil || !strings.Contains(why, c.want) {
			t.Errorf("%s: adopted %v, why %q (want it refused: %q)", name, run != nil, why, c.want)
		}
	}
}

// TestOnlyAGatedUnfinishedUnrecordedJobWaitsForAdoption: a finished Job is some
// run's history, never one waiting (its delete would lose that history).
func TestOnlyAGatedUnfinishedUnrecordedJobWaitsForAdoption(t *testing.T) {
	waiting := runcore.Waiting{Controlled: true, Gated: true, CarriesRun: true}
	if !waiting.WaitsForAdoption() {
		t.Fatal("a gated Job of this GuardedJob with its run, unrecorded, does not wait")
	}
	for name, change := range map[string]func(*runcore.Waiting){
		"finished":                 func(w *runcore.Waiting) { w.Finished = true },
		"not controlled by it":     func(w *runcore.Waiting) { w.Controlled = false },
		"being deleted":            func(w *runcore.Waiting) { w.Deleting = true },
		"past its gate":            func(w *runcore.Waiting) { w.Gated = false },
		"without a run annotation": func(w *runcore.Waiting) { w.CarriesRun = false },
		"recorded in status":       func(w *runcore.Waiting) { w.Recorded = true },
	} {
		w := waiting
		change(&w)
		if w.WaitsForAdoption() {
			t.Errorf("a Job %s waits for adoption", name)
		}
	}
}

// TestInTheEarlyGateAStartedUnrecordedJobWaitsForAdoption: with gates opened
// before the status write, a Job past its gate may be a run no status records
// yet, even finished: it waits while it has its lease finalizer (the finalizer
// of a run's history is gone), and so does a finished one being deleted (its
// run may have been a run-now, which must not start again).
func TestInTheEarlyGateAStartedUnrecordedJobWaitsForAdoption(t *testing.T) {
	started := runcore.Waiting{Controlled: true, CarriesRun: true, Early: true, Finalized: true}
	for name, w := range map[string]runcore.Waiting{
		"working":                       started,
		"finished, its finalizer still": {Controlled: true, CarriesRun: true, Early: true, Finalized: true, Finished: true},
		"finished, its finalizer still, being deleted": {Controlled: true, CarriesRun: true, Early: true, Finalized: true, Finished: true, Deleting: true},
	} {
		if !w.WaitsForAdoption() || !w.Started() {
			t.Errorf("a Job past its gate, %s, unrecorded, does not wait for adoption as started", name)
		}
	}
	for name, change := range map[string]func(*runcore.Waiting){
		"without the early gate":       func(w *runcore.Waiting) { w.Early = false },
		"finished, its finalizer gone": func(w *runcore.Waiting) { w.Finished, w.Finalized = true, false },
		"recorded in status":           func(w *runcore.Waiting) { w.Recorded = true },
		"being deleted":                func(w *runcore.Waiting) { w.Deleting = true },
		"finished, being deleted, its finalizer gone": func(w *runcore.Waiting) {
			w.Finished, w.Deleting, w.Finalized = true, true, false
		},
		"finished, being deleted, without the early gate": func(w *runcore.Waiting) { w.Finished, w.Deleting, w.Early = true, true, false },
		"not controlled by it":                            func(w *runcore.Waiting) { w.Controlled = false },
		"without a run annotation":                        func(w *runcore.Waiting) { w.CarriesRun = false },
	} {
		w := started
		change(&w)
		if w.WaitsForAdoption() {
			t.Errorf("a Job past its gate %s waits for adoption", name)
		}
	}
}

// TestARecordedRunLooksForTheJobItsFailedStatusWriteLeftBeforeItAcquires: a
// recorded run with no Job reads its Job before it acquires again, and takes a
// Job for its own only when that Job waits at its gate carrying its run.
func TestARecordedRunLooksForTheJobItsFailedStatusWriteLeftBeforeItAcquires(t *testing.T) {
	if !runcore.LooksForItsJob(&batchv1alpha1.ActiveRun{JobName: "payout-1"}, true) {
		t.Error("a recorded run with no Job acquires again without looking for the Job its earlier pass created: the new fence is not the Job's")
	}
	if runcore.LooksForItsJob(&batchv1alpha1.ActiveRun{JobName: "payout-1", JobUID: "uid-j"}, true) {
		t.Error("a run whose Job status records looks for it again")
	}
	if runcore.LooksForItsJob(&batchv1alpha1.ActiveRun{JobName: "payout-1"}, false) {
		t.Error("a run no status records yet (this pass's own) looks for a Job it has not created")
	}
	waiting := runcore.Waiting{Controlled: true, Gated: true, CarriesRun: true, Recorded: true}
	if !waiting.WaitsForItsRun() {
		t.Error("the gated Job carrying the run is not taken for the run's")
	}
	for name, w := range map[string]runcore.Waiting{
		"another owner's": {Gated: true, CarriesRun: true},
		"being deleted":   {Controlled: true, Deleting: true, Gated: true, CarriesRun: true},
		"past its gate":   {Controlled: true, CarriesRun: true},
		"without its run": {Controlled: true, Gated: true},
	} {
		if w.WaitsForItsRun() {
			t.Errorf("a Job %s is taken for the one the run's pass created", name)
		}
	}
}
