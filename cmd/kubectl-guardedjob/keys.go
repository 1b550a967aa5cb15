package main

import (
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/gjspec"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// keysOf returns the keys to look at: each active run's, as the manager recorded
// them when the run started; with no active run, the keys of the latest
// occurrence (status.lastScheduleTime, or before the first one the latest
// schedule time at or before now): those status.lastRun recorded when the last
// run was for that occurrence, otherwise the keys the manager renders from the
// spec for it. A spec whose keys do not render gives the lock key status names,
// if any.
func keysOf(gj *batchv1alpha1.GuardedJob, now time.Time) []lockclient.Keys {
	var out []lockclient.Keys
	for i := range gj.Status.Active {
		r := &gj.Status.Active[i]
		if r.Key == "" {
			continue
		}
		out = append(out, lockclient.Keys{Lock: r.Key, Fence: r.FenceKey, Occurrence: r.OccurrenceKey})
	}
	if len(out) > 0 {
		return out
	}

	var k lockclient.Keys
	if rules, err := gjspec.Compile(gj); err == nil {
		if occurrence, ok := latestOccurrence(gj, rules, now); ok {
			k, _ = rules.Keys(occurrence) // a key that does not render: Ready=False says why
		}
	}
	// The last run's keys, as the manager rendered them, when it ran for the
	// latest occurrence (the spec may have changed since).
	if lr := gj.Status.LastRun; lr != nil && lr.Key != "" && lr.ScheduledTime != nil && gj.Status.LastScheduleTime != nil &&
		lr.ScheduledTime.Equal(gj.Status.LastScheduleTime) {
		rendered := k
		k = lockclient.Keys{Lock: lr.Key, Occurrence: lr.OccurrenceKey, Fence: lr.FenceKey}
		if k.Occurrence == "" && rendered.Lock == k.Lock {
			k.Occurrence = rendered.Occurrence
		}
		if k.Fence == "" && rendered.Lock == k.Lock {
			k.Fence = rendered.Fence
		}
	}
	if gj.Spec.Fencing.PolicyOrDefault() == batchv1alpha1.FencingNone {
		k.Fence = ""
	}
	if k.Lock == "" {
		switch {
		case gj.Status.Lock != nil && gj.Status.Lock.Key != "":
			k = lockclient.Keys{Lock: gj.Status.Lock.Key}
		case gj.Status.LastRun != nil && gj.Status.LastRun.Key != "":
			k = lockclient.Keys{Lock: gj.Status.LastRun.Key}
		default:
			return nil
		}
	}
	return []lockclient.Keys{k}
}

// latestOccurrence is status.lastScheduleTime, or before the first one the
// latest schedule time at or before now.
func latestOccurrence(gj *batchv1alpha1.GuardedJob, rules *gjspec.Rules, now time.Time) (time.Time, bool) {
	if t := gj.Status.LastScheduleTime; t != nil {
		return t.Time, true
	}
	return rules.Schedule.Prev(now)
}
