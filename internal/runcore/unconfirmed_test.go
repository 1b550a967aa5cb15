package runcore_test

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// TestAnUnconfirmedLeaseIsReleasedOnlyOnceNothingRenewsIt: the release of a
// lease a run without a Job may hold. The key is deleted only after the keeper
// stopped renewing it, and a lease the store did not answer for is left to
// expire.
func TestAnUnconfirmedLeaseIsReleasedOnlyOnceNothingRenewsIt(t *testing.T) {
	now := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	run := &batchv1alpha1.ActiveRun{JobName: "settle-1", TTL: metav1.Duration{Duration: 30 * time.Second}, AcquiredAt: &metav1.Time{Time: now}}
	left := runcore.LeftToExpire(run, now, 0)
	for name, c := range map[string]struct {
		owned   bool
		answers []bool
		effects []runcore.UnconfirmedEffect
		end     runcore.LeaseEnd
		note    bool
	}{
		"another cluster's lease: nothing is touched": {effects: nil, end: runcore.NeverHeld},
		"released":                  {owned: true, answers: []bool{true, true}, effects: []runcore.UnconfirmedEffect{runcore.QuiesceLease, runcore.DeleteKey}, end: runcore.Released},
		"the keeper cannot quiesce": {owned: true, answers: []bool{false}, effects: []runcore.UnconfirmedEffect{runcore.QuiesceLease}, end: left, note: true},
		"the store does not answer": {owned: true, answers: []bool{true, false}, effects: []runcore.UnconfirmedEffect{runcore.QuiesceLease, runcore.DeleteKey}, end: left, note: true},
	} {
		m := runcore.NewUnconfirmed(run, c.owned)
		var effects []runcore.UnconfirmedEffect
		for i := 0; m.Next() != runcore.UnconfirmedDone && i < 5; i++ {
			effects = append(effects, m.Next())
			m.Deliver(c.answers[i])
		}
		note, end := m.Ended(now, 0)
		if !slices.Equal(effects, c.effects) {
			t.Errorf("%s: effects %v, want %v", name, effects, c.effects)
		}
		if end.State != c.end.State || !end.ExpiresBy.Equal(c.end.ExpiresBy) || (note != "") != c.note {
			t.Errorf("%s: end %+v, note %q", name, end, note)
		}
	}
}
