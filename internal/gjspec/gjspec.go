// Package gjspec reads what a GuardedJob's spec says about its occurrences into
// the rule packages: its schedule, read in its time zone, and its key templates.
// The manager and the kubectl plugin both render a GuardedJob's keys through it,
// so the plugin shows exactly the keys the manager uses.
package gjspec

import (
	"time"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/keys"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// Rules are a GuardedJob's schedule and key templates, parsed.
type Rules struct {
	Schedule  *schedule.Schedule
	Templates *keys.Templates

	namespace, name string
}

// Compile parses the schedule of gj, then its key templates (defaults applied).
// Errors are *specerror.Error.
func Compile(gj *batchv1alpha1.GuardedJob) (*Rules, error) {
	s, err := schedule.Parse(gj.Spec.Schedule, gj.Spec.TimeZoneOrDefault())
	if err != nil {
		return nil, err
	}
	t, err := keys.ParseTemplates(keys.Spec{
		Lock:       gj.Spec.Lock.Key,
		Occurrence: gj.Spec.Lock.OccurrenceKeyTemplate(),
		Fence:      gj.Spec.Fencing.KeyTemplate(),
		Fenced:     gj.Spec.Fencing.PolicyOrDefault() != batchv1alpha1.FencingNone,
	})
	if err != nil {
		return nil, err
	}
	return &Rules{Schedule: s, Templates: t, namespace: gj.Namespace, name: gj.Name}, nil
}

// Keys renders the lock, done-marker and (fenced runs only) fence keys of the
// occurrence at scheduled, which the templates see in the schedule's zone.
// Errors are *specerror.Error.
func (r *Rules) Keys(scheduled time.Time) (lockclient.Keys, error) {
	return r.Templates.Keys(r.data(scheduled))
}

// LockKey renders the lock key of the occurrence at scheduled.
func (r *Rules) LockKey(scheduled time.Time) (string, error) {
	return r.Templates.LockKey(r.data(scheduled))
}

func (r *Rules) data(scheduled time.Time) keys.Data {
	return keys.Data{ScheduledTime: scheduled.In(r.Schedule.Location()), Namespace: r.namespace, Name: r.name}
}
