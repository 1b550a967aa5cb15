package main

import (
	"strconv"
	"strings"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// runKeys are the keys of one run (active) or of the current occurrence (idle).
type runKeys struct {
	lockclient.Keys
	// unknown names a derived key that cannot be shown without rendering a custom
	// template ("fence", "done-marker"); the manager records the rendered keys of
	// active runs only.
	unknown []string
}

// keysOf returns the keys to look at: each active run's, as the manager recorded
// them when the run started; with no active run, the keys of the latest occurrence,
// from status and the spec where they can be known without rendering a template:
// a literal template, or the defaults.
func keysOf(gj *batchv1alpha1.GuardedJob) []runKeys {
	var out []runKeys
	for i := range gj.Status.Active {
		r := &gj.Status.Active[i]
		if r.Key == "" {
			continue
		}
		out = append(out, runKeys{Keys: lockclient.Keys{Lock: r.Key, Fence: r.FenceKey, Occurrence: r.OccurrenceKey}})
	}
	if len(out) > 0 {
		return out
	}
	k := runKeys{}
	switch {
	case gj.Status.Lock != nil && gj.Status.Lock.Key != "":
		k.Lock = gj.Status.Lock.Key
	case gj.Status.LastRun != nil && gj.Status.LastRun.Key != "":
		k.Lock = gj.Status.LastRun.Key
	case !isTemplate(gj.Spec.Lock.Key):
		k.Lock = gj.Spec.Lock.Key
	default:
		return nil // never ran, and the key is a template: nothing to look at yet
	}
	// The last run's keys, as the manager rendered them, when it ran for the
	// latest occurrence.
	var last *batchv1alpha1.RunRecord
	if lr := gj.Status.LastRun; lr != nil && lr.Key == k.Lock && lr.ScheduledTime != nil && gj.Status.LastScheduleTime != nil &&
		lr.ScheduledTime.Equal(gj.Status.LastScheduleTime) {
		last = lr
	}
	switch tmpl := gj.Spec.Fencing.KeyTemplate(); {
	case gj.Spec.Fencing.PolicyOrDefault() == batchv1alpha1.FencingNone:
	case last != nil && last.FenceKey != "":
		k.Fence = last.FenceKey
	case tmpl == batchv1alpha1.DefaultFenceKeyTemplate:
		k.Fence = k.Lock + ":fence"
	case !isTemplate(tmpl):
		k.Fence = tmpl
	default:
		k.unknown = append(k.unknown, "fence")
	}
	switch tmpl := gj.Spec.Lock.OccurrenceKeyTemplate(); {
	case last != nil && last.OccurrenceKey != "":
		k.Occurrence = last.OccurrenceKey
	case !isTemplate(tmpl):
		k.Occurrence = tmpl
	case tmpl == batchv1alpha1.DefaultOccurrenceKeyTemplate && gj.Status.LastScheduleTime != nil:
		k.Occurrence = k.Lock + ":done:" + strconv.FormatInt(gj.Status.LastScheduleTime.Unix(), 10)
	case gj.Status.LastScheduleTime != nil:
		k.unknown = append(k.unknown, "done-marker")
	}
	return []runKeys{k}
}

func isTemplate(s string) bool { return strings.Contains(s, "{{") }

// where says whose a lease value is: the given active run of this GuardedJob, this
// cluster, another cluster, or a process that does not write GuardedJob tokens.
func where(value, cluster string, gj *batchv1alpha1.GuardedJob) string {
	if value == "" {
		return "-"
	}
	for _, r := range gj.Status.Active {
		if r.Token != "" && r.Token == value {
			return "this GuardedJob (" + r.JobName + ")"
		}
	}
	holder := lockclient.HolderOf(value)
	parts := strings.Split(holder, "/")
	if len(parts) != 3 || holder == value || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "foreign process"
	}
	if cluster != "" && parts[0] == cluster {
		return "this cluster"
	}
	return "cluster " + parts[0]
}
