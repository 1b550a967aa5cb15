package runcore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/runtoken"
)

// TestAdoptableOnlyWhileTheKeyHoldsTheTokenMintedForThisVeryJob: the judgement
// of step adopt_unrecorded, without an API server or a store.
func TestAdoptableOnlyWhileTheKeyHoldsTheTokenMintedForThisVeryJob(t *testing.T) {
	started := &batchv1alpha1.ActiveRun{RunNow: "2026-12-05T02:00:00Z", Parameters: map[string]string{"REGION": "eu"}}
	id := runtoken.Run{Cluster: "cluster-a", Namespace: "payments", Name: "payout", UID: "uid-1",
		Occurrence: time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC), Start: runcore.StartOf(started)}
	token, job, err := runtoken.Mint(id)
	if err != nil {
		t.Fatal(err)
	}
	holder := leasetoken.HolderOf(token)
	run := &batchv1alpha1.ActiveRun{JobName: job, Key: "payments:payout", FenceKey: "payments:payout:fence", Holder: holder, Fence: 7,
		RunNow: started.RunNow, Parameters: started.Parameters}
	// What a tenant who may edit Jobs can make the annotation say started the run.
	retold := map[string]func(*batchv1alpha1.ActiveRun){
		"a request":        func(r *batchv1alpha1.ActiveRun) { r.RunNow = batchv1alpha1.RunRequestPrefix + "uid-9" },
		"other parameters": func(r *batchv1alpha1.ActiveRun) { r.Parameters = map[string]string{"REGION": "us"} },
		"a backfill":       func(r *batchv1alpha1.ActiveRun) { r.Backfill = batchv1alpha1.BackfillRequestPrefix + "uid-9" },
		"a retry":          func(r *batchv1alpha1.ActiveRun) { r.Retry = 3 },
		"a later deadline": func(r *batchv1alpha1.ActiveRun) { r.StartDeadline = &metav1.Time{Time: id.Occurrence.Add(time.Hour)} },
	}
	for what, retell := range retold {
		t.Run("the annotation says "+what+" started it", func(t *testing.T) {
			told := run.DeepCopy()
			retell(told)
			toldID := id
			toldID.Start = runcore.StartOf(told)
			if got := runcore.Adoptable(nil, told, true, runcore.KeyView{Holder: token, Fence: 7}, nil, toldID); !strings.Contains(got, "does not match the run") {
				t.Errorf("adoptable as told (%q)", got)
			}
			if got := runcore.Adoptable(nil, told, false, runcore.KeyView{Holder: token, Fence: 7}, nil, toldID); got != "" {
				t.Errorf("a run status records is judged by its token's identity alone: %s", got)
			}
		})
	}
	if got := runcore.Adoptable(nil, run, true, runcore.KeyView{Holder: holder + "#" + token[len(token)-48:len(token)-16], Fence: 7}, nil, id); got == "" {
		t.Error("a token of the previous scheme attests nothing, so a run no status records is not adopted from it")
	}
	other, _, err := runtoken.Mint(id)
	if err != nil {
		t.Fatal(err)
	}
	sameHolderForeign := holder + "#0123456789abcdef0123456789abcdef0123456789abcdef"
	otherRun := runtoken.Run{Cluster: "cluster-b", Namespace: "payments", Name: "payout", UID: "uid-1", Occurrence: id.Occurrence}
	for name, c := range map[string]struct {
		key    runcore.KeyView
		err    error
		leases []batchv1alpha1.LeaseRecord
		id     runtoken.Run
		want   string // "" adoptable, else a part of the reason
	}{
		"the key holds its token at its fence":         {key: runcore.KeyView{Holder: token, Fence: 7}, id: id},
		"the key cannot be read":                       {err: errors.New("i/o timeout"), id: id, want: "cannot be read"},
		"the key is free":                              {key: runcore.KeyView{Fence: 7}, id: id, want: "is free"},
		"the key holds another Job's token":            {key: runcore.KeyView{Holder: other, Fence: 7}, id: id, want: "is held by " + leasetoken.HolderOf(other)},
		"the key holds the holder with a foreign half": {key: runcore.KeyView{Holder: sameHolderForeign, Fence: 7}, id: id, want: "is held by " + holder},
		"the token was minted by another cluster":      {key: runcore.KeyView{Holder: token, Fence: 7}, id: otherRun, want: "is held by"},
		"the fence counter moved on":                   {key: runcore.KeyView{Holder: token, Fence: 8}, id: id, want: "at 8, not at the Job's fence 7"},
		"the ledger says the lease was released": {key: runcore.KeyView{Holder: token, Fence: 7}, id: id, want: "records its lease as Released",
			leases: []batchv1alpha1.LeaseRecord{{Holder: holder, State: batchv1alpha1.LeaseReleased}}},
		"the ledger says another run's lease was released": {key: runcore.KeyView{Holder: token, Fence: 7}, id: id,
			leases: []batchv1alpha1.LeaseRecord{{Holder: leasetoken.HolderOf(other), State: batchv1alpha1.LeaseReleased}}},
	} {
		t.Run(name, func(t *testing.T) {
			got := runcore.Adoptable(c.leases, run, true, c.key, c.err, c.id)
			switch {
			case c.want == "" && got != "":
				t.Errorf("not adoptable: %s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Errorf("reason %q, want one containing %q", got, c.want)
			}
			if strings.Contains(got, token[strings.LastIndexByte(token, '#'):]) {
				t.Errorf("the reason shows the token's secret half: %s", got)
			}
		})
	}
}

// TestRecordAdoptedRaisesTheFenceFloor: an adopted run's fence becomes the
// floor at once, before the history limit can delete its Job.
func TestRecordAdoptedRaisesTheFenceFloor(t *testing.T) {
	earlier := metav1.NewTime(time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC))
	occurrence := metav1.NewTime(time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC))
	for _, recordedFirst := range []bool{false, true} {
		st := batchv1alpha1.GuardedJobStatus{
			LastFence: 3, LastScheduleTime: &earlier,
			Buffered: []batchv1alpha1.BufferedRun{{ScheduledTime: occurrence}},
		}
		var recorded *batchv1alpha1.ActiveRun
		if recordedFirst {
			st.Active = []batchv1alpha1.ActiveRun{{JobName: "payout-1", ScheduledTime: occurrence, Phase: batchv1alpha1.RunPhaseAcquiring}}
			recorded = &st.Active[0]
		}
		run := runcore.RecordAdopted(&st, batchv1alpha1.ActiveRun{JobName: "payout-1", ScheduledTime: occurrence, Fence: 9, JobUID: "job-uid",
			Phase: batchv1alpha1.RunPhaseRunning}, recorded)
		if len(st.Active) != 1 || run != &st.Active[0] || run.JobUID != "job-uid" {
			t.Errorf("recorded first %v: active %+v", recordedFirst, st.Active)
		}
		if st.LastFence != 9 {
			t.Errorf("recorded first %v: the fence floor is %d, want the adopted run's 9", recordedFirst, st.LastFence)
		}
		if st.LastScheduleTime == nil || !st.LastScheduleTime.Equal(&occurrence) {
			t.Errorf("recorded first %v: last schedule time %v", recordedFirst, st.LastScheduleTime)
		}
		if st.Buffered != nil {
			t.Errorf("recorded first %v: the occurrence is still buffered", recordedFirst)
		}
	}
}

// TestAdoptionAdoptsOnlyAJobItsKeyStillHoldsTheLeaseOf: what step
// adopt_unrecorded does with a Job waiting at its gate: adopt it, delete it,
// stop the recorded run it belongs to, or wait for the store.
func TestAdoptionAdoptsOnlyAJobItsKeyStillHoldsTheLeaseOf(t *testing.T) {
	id, token, job := mintedForPayout(t)
	other, _, err := runtoken.Mint(id)
	if err != nil {
		t.Fatal(err)
	}
	run := func() *batchv1alpha1.ActiveRun {
		return &batchv1alpha1.ActiveRun{JobName: job, Key: "payments:payout", FenceKey: "payments:payout:fence", Holder: leasetoken.HolderOf(token), Fence: 7}
	}
	recorded := func(tok string) *batchv1alpha1.ActiveRun {
		r := run()
		r.Token, r.Phase = tok, batchv1alpha1.RunPhaseAcquiring
		return r
	}
	held := runcore.KeyView{Holder: token, Fence: 7}
	for name, c := range map[string]struct {
		u    runcore.Unrecorded
		want runcore.AdoptAct
		why  string // a part of the reason
	}{
		"the key holds its token at its fence":      {u: runcore.Unrecorded{Run: run(), Key: held, Identity: id}, want: runcore.AdoptTheJob},
		"the key was acquired again since":          {u: runcore.Unrecorded{Run: run(), Key: runcore.KeyView{Holder: token, Fence: 8}, Identity: id}, want: runcore.DeleteUnadopted, why: "acquired again"},
		"the lease expired":                         {u: runcore.Unrecorded{Run: run(), Key: runcore.KeyView{Fence: 7}, Identity: id}, want: runcore.DeleteUnadopted, why: "is free"},
		"the annotation cannot be trusted":          {u: runcore.Unrecorded{Why: "its annotation does not parse", Key: held, Identity: id}, want: runcore.DeleteUnadopted, why: "does not parse"},
		"the store does not answer":                 {u: runcore.Unrecorded{Run: run(), StoreDown: true, ReadErr: errors.New("i/o timeout"), Identity: id}, want: runcore.WaitForTheStore},
		"the recorded run's key holds its token":    {u: runcore.Unrecorded{Run: run(), Recorded: recorded(token), Key: held, Identity: id}, want: runcore.AdoptTheJob},
		"the recorded run owns another token":       {u: runcore.Unrecorded{Run: run(), Recorded: recorded(other), Key: held, Identity: id}, want: runcore.StopRecorded, why: "another token of its run"},
		"the recorded run's lease was lost":         {u: runcore.Unrecorded{Run: run(), Recorded: recorded(token), Key: runcore.KeyView{Fence: 7}, Identity: id}, want: runcore.StopRecorded, why: "is free"},
		"the ledger says the lease is over":         {u: runcore.Unrecorded{Run: run(), Key: held, Identity: id, Leases: []batchv1alpha1.LeaseRecord{{Holder: leasetoken.HolderOf(token), State: batchv1alpha1.LeaseLeftToExpire}}}, want: runcore.DeleteUnadopted, why: "records its lease"},
		"an untrusted annotation with a dead store": {u: runcore.Unrecorded{Why: "its annotation does not parse", StoreDown: true, Identity: id}, want: runcore.DeleteUnadopted, why: "does not parse"},
		"a started Job whose key holds its token":   {u: runcore.Unrecorded{Run: run(), Key: held, Identity: id, Started: true}, want: runcore.AdoptTheJob},
		"a started Job whose lease expired":         {u: runcore.Unrecorded{Run: run(), Key: runcore.KeyView{Fence: 7}, Identity: id, Started: true}, want: runcore.LeaveToStopper, why: "is free"},
		"a started Job acquired again since":        {u: runcore.Unrecorded{Run: run(), Key: runcore.KeyView{Holder: other, Fence: 8}, Identity: id, Started: true}, want: runcore.LeaveToStopper},
	} {
		t.Run(name, func(t *testing.T) {
			got, why := runcore.Adoption(c.u)
			if got != c.want || !strings.Contains(why, c.why) {
				t.Errorf("got %v (%q), want %v (%q)", got, why, c.want, c.why)
			}
		})
	}
}

func TestAnAdoptionWhoseWriteFailsKeepsRenewingAJobPastItsGate(t *testing.T) {
	recorded := &batchv1alpha1.ActiveRun{JobName: "settle-1"}
	for _, c := range []struct {
		name string
		u    runcore.Unrecorded
		want bool
	}{
		{"behind its gate: no Pod works, the next pass judges the Job again", runcore.Unrecorded{}, false},
		{"past its gate: its Pods may work, and the Job is the run's only record", runcore.Unrecorded{Started: true}, true},
		{"status records the run (waiting to acquire again)", runcore.Unrecorded{Recorded: recorded}, true},
		{"this process opened its gate; a cache behind the world shows it at its gate", runcore.Unrecorded{OpenedHere: true}, true},
	} {
		if got := c.u.KeepsLeaseUnwritten(); got != c.want {
			t.Errorf("%s: keeps renewing %v, want %v", c.name, got, c.want)
		}
	}
}

// TestARestartResumesOnlyAWorkingJobItsPassWouldAdopt: a restart renews, with
// the leases status records, the lease of a Job past its gate that no status
// records only while the key holds the token minted for it; any other Job it
// leaves to its pass or to the stop controller.
func TestARestartResumesOnlyAWorkingJobItsPassWouldAdopt(t *testing.T) {
	id, token, job := mintedForPayout(t)
	run := &batchv1alpha1.ActiveRun{JobName: job, Key: "payments:payout", FenceKey: "payments:payout:fence", Holder: leasetoken.HolderOf(token), Fence: 7}
	held := runcore.Unrecorded{Run: run, Key: runcore.KeyView{Holder: token, Fence: 7}, Identity: id, Started: true}
	working := runcore.Waiting{Controlled: true, CarriesRun: true, Early: true, Finalized: true}
	for _, c := range []struct {
		name string
		w    func(*runcore.Waiting)
		u    func(*runcore.Unrecorded)
		want bool
	}{
		{"working, its key holds its token at its fence", nil, nil, true},
		{"working, its key acquired again since", nil, func(u *runcore.Unrecorded) { u.Key.Fence = 8 }, false},
		{"working, its lease expired", nil, func(u *runcore.Unrecorded) { u.Key.Holder = "" }, false},
		{"working, the store does not answer", nil, func(u *runcore.Unrecorded) { u.StoreDown, u.Key = true, runcore.KeyView{} }, false},
		{"behind its gate: no Pod works under its lease", func(w *runcore.Waiting) { w.Gated = true }, nil, false},
		{"finished: nothing works under its lease", func(w *runcore.Waiting) { w.Finished = true }, nil, false},
		{"status records it: its lease is resumed as recorded", func(w *runcore.Waiting) { w.Recorded = true }, nil, false},
		{"not the GuardedJob's own", func(w *runcore.Waiting) { w.Controlled = false }, nil, false},
	} {
		w, u := working, held
		if c.w != nil {
			c.w(&w)
		}
		if c.u != nil {
			c.u(&u)
		}
		if got := runcore.ResumesUnrecorded(w, u); got != c.want {
			t.Errorf("%s: resumed %v, want %v", c.name, got, c.want)
		}
	}
}

// mintedForPayout returns a scheduled run's identity, the token minted for it
// and its Job's name.
func mintedForPayout(t *testing.T) (runtoken.Run, string, string) {
	t.Helper()
	id := runtoken.Run{Cluster: "cluster-a", Namespace: "payments", Name: "payout", UID: "uid-1",
		Occurrence: time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC), Start: runcore.StartOf(&batchv1alpha1.ActiveRun{})}
	token, job, err := runtoken.Mint(id)
	if err != nil {
		t.Fatal(err)
	}
	return id, token, job
}

// TestAnAdoptedJobIsRecordedAsItsRunWithTheTokenItsKeyHolds: what an adoption
// writes into status: the run with the key's token, the Job's UID and phase
// Running, its lease in the ledger, the lock held under its fence; the
// request it carries answered only while the annotation still asks for it; and
// whether the adoption writes status itself (a Job whose gate this process
// opened is recorded by its pass's own write, as step record_job).
func TestAnAdoptedJobIsRecordedAsItsRunWithTheTokenItsKeyHolds(t *testing.T) {
	now := time.Date(2026, 12, 5, 2, 0, 30, 0, time.UTC)
	occurrence := metav1.NewTime(time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC))
	token := "cluster-a/payments/payout-29942040-abcdef#0123456789abcdef0123456789abcdef"
	holder := leasetoken.HolderOf(token)
	for _, c := range []struct {
		name       string
		asked      string // the run-now annotation
		recorded   bool
		answered   string
		openedHere bool
		writes     bool
		step       runcore.Step
	}{
		{name: "a run-now the annotation still asks for", asked: "req-1", answered: "req-1", writes: true, step: runcore.AdoptUnrecorded},
		{name: "a run-now the annotation no longer asks for", asked: "req-2", writes: true, step: runcore.AdoptUnrecorded},
		{name: "the run status records, waiting to acquire again", asked: "req-1", recorded: true, answered: "req-1", writes: true, step: runcore.AdoptUnrecorded},
		{name: "a Job whose gate this process opened", openedHere: true, step: runcore.RecordJob},
	} {
		t.Run(c.name, func(t *testing.T) {
			gj := &batchv1alpha1.GuardedJob{}
			gj.Annotations = map[string]string{batchv1alpha1.RunNowAnnotation: c.asked}
			// An earlier acquisition found the key unusable: the adoption shows one went through.
			runcore.SetNotReady(gj, batchv1alpha1.InvalidKeyReason, "the key cannot be used", now.Add(-time.Minute))
			trusted := &batchv1alpha1.ActiveRun{JobName: "payout-29942040-abcdef", ScheduledTime: occurrence, Key: "team:payout", Holder: holder,
				Fence: 7, RunNow: "req-1", TTL: metav1.Duration{Duration: time.Minute}}
			u := runcore.Unrecorded{Run: trusted, Key: runcore.KeyView{Holder: token, Fence: 7}, OpenedHere: c.openedHere}
			if c.recorded {
				gj.Status.Active = []batchv1alpha1.ActiveRun{{JobName: trusted.JobName, ScheduledTime: occurrence, Phase: batchv1alpha1.RunPhaseAcquiring, RunNow: "req-1"}}
				u.Recorded = &gj.Status.Active[0]
			}
			run := runcore.AdoptInto(gj, u, "job-uid", now)
			if len(gj.Status.Active) != 1 || run != &gj.Status.Active[0] { // a recorded run is adopted in place
				t.Fatalf("active %+v", gj.Status.Active)
			}
			if run.Token != token || run.JobUID != "job-uid" || run.Phase != batchv1alpha1.RunPhaseRunning || run.Fence != 7 {
				t.Errorf("adopted as %+v", run)
			}
			if gj.Status.LastFence != 7 {
				t.Errorf("status.lastFence %d, want 7", gj.Status.LastFence)
			}
			if rec := runcore.LedgerRecord(gj.Status.Leases, holder); rec == nil || rec.State != batchv1alpha1.LeaseLive {
				t.Errorf("the ledger does not know the adopted lease as live: %+v", gj.Status.Leases)
			}
			if l := gj.Status.Lock; l == nil || l.State != batchv1alpha1.LockStateHeld || l.Holder != holder || l.Fence != 7 || l.Key != "team:payout" {
				t.Errorf("status.lock %+v", gj.Status.Lock)
			}
			for _, cond := range []string{batchv1alpha1.StoreReachableCondition, batchv1alpha1.ReadyCondition, batchv1alpha1.LockHeldCondition} {
				if got := runcore.FindCondition(gj.Status.Conditions, cond); got == nil || got.Status != metav1.ConditionTrue {
					t.Errorf("condition %s: %+v, want True", cond, got)
				}
			}
			if gj.Status.LastRunNow != c.answered {
				t.Errorf("status.lastRunNow %q, want %q", gj.Status.LastRunNow, c.answered)
			}
			if u.WritesRecord() != c.writes || u.Step() != c.step {
				t.Errorf("writes its record %v at step %s, want %v at %s", u.WritesRecord(), u.Step(), c.writes, c.step)
			}
		})
	}
}
