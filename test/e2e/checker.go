/*
Copyright 2026 The GuardedJob Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package e2e runs the operator end to end on local control planes: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kwok, redis-server and the
// manager binary, all on 127.0.0.1.
//
// This file holds the fault test's history and its checker: what happened, as seen
// from outside (Pods read from each cluster's API server, lock keys read from Redis,
// faults and manager exits recorded by the harness), and the rules that history must
// obey. It is pure Go, so the rules are unit-tested with hand-made histories.
package e2e

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// FaultKind names a fault the harness injects.
type FaultKind string

// The faults of the fault test. Only RedisDataLoss and KeyTheft may legitimately break
// a lease, so only they open an overlap window.
const (
	FaultManagerKill   FaultKind = "manager-kill"  // SIGKILL, restarted like a Deployment
	FaultManagerPause  FaultKind = "manager-pause" // SIGSTOP, SIGCONT a few seconds later
	FaultRedisDataLoss FaultKind = "redis-data-loss"
	FaultKeyTheft      FaultKind = "key-theft"  // a lock key overwritten by a foreign token
	FaultAPIOutage     FaultKind = "api-outage" // one cluster's API server unreachable
	FaultRedisCut      FaultKind = "redis-cut"  // one cluster's managers cut off from Redis
	// Compound faults, opt-in (see fault_test.go).
	FaultRestartCutOff FaultKind = "restart-cut-off" // a manager restarted while cut off from Redis
	FaultSlowAPIResume FaultKind = "slow-api-resume" // the leader killed while the API server is slow
)

// breaksLeases says whether a fault may legitimately end a lease under a running Pod.
func (k FaultKind) breaksLeases() bool { return k == FaultRedisDataLoss || k == FaultKeyTheft }

// Fault is one injected fault.
type Fault struct {
	Kind   FaultKind
	Target string // the manager replica, cluster or key it hit
	Key    string // KeyTheft: the lock key overwritten
	// Victim is, for KeyTheft, the holder (<cluster>/<namespace>/<job>) whose token
	// was overwritten.
	Victim string
	// Cluster is the cluster the fault aimed at: that of the manager replica, the
	// cut-off Redis proxy or the API server. Empty for Redis data loss and thefts.
	Cluster string
	// Leader says whether the manager replica killed or paused led its cluster.
	Leader bool
	At     time.Time
	Until  time.Time // end of a fault with a duration; At otherwise
}

// Hit says whether f hit a running Pod: whether a Pod ran whose lease the fault
// put at risk, as the history shows it.
//
//   - key-theft: the victim's Pod ran when its key was stolen;
//   - redis-data-loss: any Pod ran when Redis lost its data;
//   - manager-kill, manager-pause: the replica led its cluster (a standby's fault
//     touches no lease) and a Pod of that cluster ran during the fault;
//   - api-outage, redis-cut, restart-cut-off, slow-api-resume: a Pod of the cluster
//     ran during the fault.
//
// Start times have one-second resolution, rounded down: a Pod counts only if it
// started at least a second before the fault ended.
func (f Fault) Hit(pods []PodRun) bool {
	during := func(p PodRun) bool {
		return p.ran() && !p.Start.Add(time.Second).After(f.Until) && end(p).After(f.At)
	}
	for _, p := range pods {
		if !during(p) {
			continue
		}
		switch f.Kind {
		case FaultKeyTheft:
			if f.Victim != "" && p.Holder == f.Victim {
				return true
			}
		case FaultRedisDataLoss:
			return true
		case FaultManagerKill, FaultManagerPause:
			if f.Leader && p.Cluster == f.Cluster {
				return true
			}
		case FaultAPIOutage, FaultRedisCut, FaultRestartCutOff, FaultSlowAPIResume:
			if p.Cluster == f.Cluster {
				return true
			}
		}
	}
	return false
}

// PodRun is one Pod of a run, as read from its cluster's API server.
type PodRun struct {
	Cluster string
	Name    string
	Key     string    // lock key of the GuardedJob that created it
	Holder  string    // <cluster>/<namespace>/<job>
	Fence   int64     // GUARDEDJOB_FENCE
	Sched   time.Time // the occurrence (scheduled time)
	Created time.Time
	Start   time.Time // status.startTime; zero if it never ran
	End     time.Time // when it stopped running (latest possible time); zero if still running
	Result  string    // Succeeded, Failed, Deleted, or Running
}

func (p PodRun) ran() bool { return !p.Start.IsZero() }

func (p PodRun) String() string {
	end := "still running"
	if !p.End.IsZero() {
		end = p.End.Format("15:04:05")
	}
	start := "never"
	if p.ran() {
		start = p.Start.Format("15:04:05")
	}
	return fmt.Sprintf("%s pod %s fence=%d occurrence=%s ran %s-%s (%s)",
		p.Cluster, p.Name, p.Fence, p.Sched.UTC().Format("15:04:05"), start, end, p.Result)
}

// ManagerExit is one exit of a manager process that the harness did not cause.
type ManagerExit struct {
	Replica  string
	At       time.Time
	Designed bool   // the designed exit of renew-only mode after leadership was lost
	Reason   string // the last lines of its log
}

// Release is a lock key observed freed (or taken over) after holder had it.
type Release struct {
	Key    string
	Holder string
	At     time.Time
}

// History is everything the fault test observed.
type History struct {
	Seed       int64
	Keys       []string
	Pods       []PodRun
	Faults     []Fault
	Exits      []ManagerExit
	Releases   []Release
	QuietStart time.Time // faults stopped here
	// Left over after the quiet period and the final drain: Pods still running, lock
	// keys still held, GuardedJobs with active runs.
	LeftRunning []string
	LeftLocked  []string
	LeftActive  []string
}

// Limits are the bounds the checker holds the history to.
type Limits struct {
	// RenewInterval + PodGrace + Slack after a lease-breaking fault, the older of two
	// overlapping Pods must have stopped.
	RenewInterval, PodGrace, Slack time.Duration
	// CrashLoop: more than CrashLoopExits exits of one replica within CrashLoopWindow.
	CrashLoopExits  int
	CrashLoopWindow time.Duration
	// MinHits is how many faults must hit a running Pod (Fault.Hit) for the run to
	// prove anything.
	MinHits int
}

// OverlapWindow is how long after a lease-breaking fault two Pods of one key may run
// at once.
func (l Limits) OverlapWindow() time.Duration { return l.RenewInterval + l.PodGrace + l.Slack }

// Violation is one broken rule, with the records that show it.
type Violation struct {
	Rule    string
	Details string
}

func (v Violation) String() string { return v.Rule + ": " + v.Details }

// Rules the checker enforces (the Rule of a Violation).
const (
	RuleOverlap      = "two Pods of one key ran at once"
	RuleFenceOrder   = "fences not strictly increasing"
	RuleDoubleDone   = "an occurrence succeeded twice"
	RuleNoProgress   = "no progress"
	RuleLeftOver     = "left over after the quiet period"
	RuleManagerExit  = "a manager exited unexpectedly"
	RuleCrashLoop    = "a manager crash-loops"
	RuleNothingFound = "nothing ran"
	RuleFewHits      = "too few faults hit a running Pod"
)

// Overlap is two Pods of one key that ran at once, and the fault that allowed it.
type Overlap struct {
	Key          string
	Older, Newer PodRun
	From, To     time.Time
	AllowedBy    *Fault
}

// Result is the checker's verdict and the figures of the summary table.
type Result struct {
	Violations []Violation
	Overlaps   []Overlap
	// Faults by kind, and how many of them hit a running Pod.
	Faults, Hits map[FaultKind]int
	// Reaction times.
	TheftToStop     []time.Duration
	DoneToRelease   []time.Duration
	ScheduleToStart []time.Duration
}

// Check holds h to the rules and returns every violation found.
func Check(h History, lim Limits) Result {
	var r Result
	byKey := map[string][]PodRun{}
	for _, p := range h.Pods {
		byKey[p.Key] = append(byKey[p.Key], p)
	}
	if len(h.Pods) == 0 {
		r.add(RuleNothingFound, "the history holds no Pod")
	}
	for _, key := range h.Keys {
		pods := byKey[key]
		r.checkOverlaps(key, pods, h.Faults, lim)
		r.checkFences(key, pods)
		r.checkOccurrences(key, pods, h.Faults)
		r.checkProgress(key, pods, h.QuietStart)
	}
	for _, s := range h.LeftRunning {
		r.add(RuleLeftOver, "Pod still running: %s", s)
	}
	for _, s := range h.LeftLocked {
		r.add(RuleLeftOver, "lock still held: %s", s)
	}
	for _, s := range h.LeftActive {
		r.add(RuleLeftOver, "run still active in status: %s", s)
	}
	r.checkExits(h.Exits, lim)
	r.checkHits(h, lim)
	r.measure(h)
	return r
}

// checkHits counts the faults that hit a running Pod, by kind, and fails when fewer
// than lim.MinHits did.
func (r *Result) checkHits(h History, lim Limits) {
	r.Faults, r.Hits = map[FaultKind]int{}, map[FaultKind]int{}
	hits := 0
	for _, f := range h.Faults {
		r.Faults[f.Kind]++
		if f.Hit(h.Pods) {
			r.Hits[f.Kind]++
			hits++
		}
	}
	if hits < lim.MinHits {
		r.add(RuleFewHits, "%d of %d faults hit a running Pod; the run needs at least %d", hits, len(h.Faults), lim.MinHits)
	}
}

func (r *Result) add(rule, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{Rule: rule, Details: fmt.Sprintf(format, args...)})
}

// end returns when p stopped running; a Pod still running counts as running forever.
func end(p PodRun) time.Time {
	if p.End.IsZero() {
		return time.Unix(1<<40, 0)
	}
	return p.End
}

// checkOverlaps fails on two Pods of key running at once, unless the overlap starts
// after a lease-breaking fault and the older Pod (whose lease the fault broke) stopped
// within the overlap window after it, however early the newer Pod ended.
// Start times in Pod status have one-second resolution, so ends are compared at that
// resolution too: an end and a start in the same second are not an overlap.
func (r *Result) checkOverlaps(key string, pods []PodRun, faults []Fault, lim Limits) {
	ran := slices.DeleteFunc(slices.Clone(pods), func(p PodRun) bool { return !p.ran() })
	sort.SliceStable(ran, func(i, j int) bool { return ran[i].Start.Before(ran[j].Start) })
	for i := range ran {
		for j := i + 1; j < len(ran); j++ {
			a, b := ran[i], ran[j]
			if !b.Start.Before(end(a).Truncate(time.Second)) {
				continue
			}
			o := Overlap{Key: key, Older: a, Newer: b, From: b.Start, To: minTime(end(a), end(b))}
			for _, f := range faults {
				if !f.Kind.breaksLeases() || (f.Key != "" && f.Key != key) {
					continue
				}
				// One second of slack before the fault: timestamps are truncated.
				if !o.From.Before(f.At.Add(-time.Second)) && !end(a).After(f.At.Add(lim.OverlapWindow())) {
					o.AllowedBy = &f
					break
				}
			}
			r.Overlaps = append(r.Overlaps, o)
			if o.AllowedBy == nil {
				r.add(RuleOverlap, "key %s from %s to %s:\n    %s\n    %s",
					key, o.From.Format("15:04:05"), fmtEnd(o.To), a, b)
			}
		}
	}
}

func fmtEnd(t time.Time) string {
	if t.Year() > 3000 {
		return "the end"
	}
	return t.Format("15:04:05")
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// checkFences fails when a Pod created later carries a fence not higher than one
// created before it: Pods are created after their run acquired the lease, so creation
// order is acquisition order. Pods of one run share its fence.
func (r *Result) checkFences(key string, pods []PodRun) {
	ps := slices.Clone(pods)
	sort.SliceStable(ps, func(i, j int) bool {
		if !ps[i].Created.Equal(ps[j].Created) {
			return ps[i].Created.Before(ps[j].Created)
		}
		return ps[i].Fence < ps[j].Fence
	})
	for i := 1; i < len(ps); i++ {
		prev, cur := ps[i-1], ps[i]
		if cur.Holder == prev.Holder {
			continue
		}
		if cur.Fence <= prev.Fence {
			r.add(RuleFenceOrder, "key %s: fence %d handed out after %d:\n    %s\n    %s", key, cur.Fence, prev.Fence, prev, cur)
		}
	}
}

// checkOccurrences fails when one occurrence of key succeeded twice, unless Redis lost
// its data (the done-marker with it) or the key was stolen (a run that lost its lease
// writes no done-marker) between the two.
func (r *Result) checkOccurrences(key string, pods []PodRun, faults []Fault) {
	done := map[time.Time][]PodRun{}
	for _, p := range pods {
		if p.Result == "Succeeded" {
			done[p.Sched.UTC()] = append(done[p.Sched.UTC()], p)
		}
	}
	for _, sched := range slices.SortedFunc(maps.Keys(done), time.Time.Compare) {
		ps := done[sched]
		sort.SliceStable(ps, func(i, j int) bool { return ps[i].End.Before(ps[j].End) })
		for i := 1; i < len(ps); i++ {
			first, second := ps[i-1], ps[i]
			excused := false
			for _, f := range faults {
				if f.Kind.breaksLeases() && (f.Key == "" || f.Key == key) &&
					!f.At.Before(first.Start.Add(-time.Second)) && !f.At.After(second.Start.Add(time.Second)) {
					excused = true
				}
			}
			if !excused {
				r.add(RuleDoubleDone, "key %s occurrence %s:\n    %s\n    %s", key, sched.Format("15:04:05"), first, second)
			}
		}
	}
}

// checkProgress fails when key has no successful run, or no run that started after
// the faults stopped and ran to its end (the system did not recover). A run that ran
// to its end and failed is progress too: its Pod chose to fail.
func (r *Result) checkProgress(key string, pods []PodRun, quiet time.Time) {
	var succeeded, afterQuiet int
	for _, p := range pods {
		if p.Result == "Succeeded" {
			succeeded++
		}
		if (p.Result == "Succeeded" || p.Result == "Failed") && !p.Start.Before(quiet) {
			afterQuiet++
		}
	}
	switch {
	case succeeded == 0:
		r.add(RuleNoProgress, "key %s: no run succeeded", key)
	case !quiet.IsZero() && afterQuiet == 0:
		r.add(RuleNoProgress, "key %s: no run started and ran to its end after the faults stopped at %s", key, quiet.Format("15:04:05"))
	}
}

// checkExits fails on any exit but the designed one, and on a replica that exits too
// often, for whatever reason.
func (r *Result) checkExits(exits []ManagerExit, lim Limits) {
	byReplica := map[string][]time.Time{}
	for _, e := range exits {
		if !e.Designed {
			r.add(RuleManagerExit, "%s at %s:\n%s", e.Replica, e.At.Format("15:04:05"), indent(e.Reason))
		}
		byReplica[e.Replica] = append(byReplica[e.Replica], e.At)
	}
	for _, replica := range slices.Sorted(maps.Keys(byReplica)) {
		ts := byReplica[replica]
		slices.SortFunc(ts, time.Time.Compare)
		for i := range ts {
			j := i + lim.CrashLoopExits
			if j < len(ts) && ts[j].Sub(ts[i]) <= lim.CrashLoopWindow {
				r.add(RuleCrashLoop, "%s exited %d times between %s and %s",
					replica, lim.CrashLoopExits+1, ts[i].Format("15:04:05"), ts[j].Format("15:04:05"))
				break
			}
		}
	}
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// measure computes the reaction times of the summary table.
func (r *Result) measure(h History) {
	for _, f := range h.Faults {
		if f.Kind != FaultKeyTheft {
			continue
		}
		// The victim: the Pod of the holder whose token was overwritten.
		for _, p := range h.Pods {
			if p.Holder == f.Victim && p.ran() && !p.Start.After(f.At) && !p.End.IsZero() && p.End.After(f.At) && p.Result == "Deleted" {
				r.TheftToStop = append(r.TheftToStop, p.End.Sub(f.At))
			}
		}
	}
	released := map[string]time.Time{}
	for _, rel := range h.Releases {
		if _, ok := released[rel.Holder]; !ok {
			released[rel.Holder] = rel.At
		}
	}
	for _, p := range h.Pods {
		if p.ran() && !p.Sched.IsZero() {
			r.ScheduleToStart = append(r.ScheduleToStart, p.Start.Sub(p.Sched))
		}
		if at, ok := released[p.Holder]; ok && (p.Result == "Succeeded" || p.Result == "Failed") && !at.Before(p.End) {
			r.DoneToRelease = append(r.DoneToRelease, at.Sub(p.End))
		}
	}
}

// Summary returns the short table of the fault test.
func Summary(h History, r Result) string {
	var w strings.Builder
	results := map[string]int{}
	ran := 0
	for _, p := range h.Pods {
		results[p.Result]++
		if p.ran() {
			ran++
		}
	}
	allowed := 0
	for _, o := range r.Overlaps {
		if o.AllowedBy != nil {
			allowed++
		}
	}
	maxFence := map[string]int64{}
	for _, p := range h.Pods {
		maxFence[p.Key] = max(maxFence[p.Key], p.Fence)
	}
	fmt.Fprintf(&w, "seed %d\n", h.Seed)
	fmt.Fprintf(&w, "%-22s %d (pods created %d; succeeded %d, failed %d, stopped %d, running %d)\n", "runs that started",
		ran, len(h.Pods), results["Succeeded"], results["Failed"], results["Deleted"], results["Running"])
	var fk []string
	hits := 0
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		fk = append(fk, fmt.Sprintf("%s %d/%d", k, r.Hits[k], r.Faults[k]))
		hits += r.Hits[k]
	}
	fmt.Fprintf(&w, "%-22s %d, %d hit a running Pod (by kind, hit/injected: %s)\n", "faults", len(h.Faults), hits, strings.Join(fk, ", "))
	exits := 0
	for _, e := range h.Exits {
		if e.Designed {
			exits++
		}
	}
	fmt.Fprintf(&w, "%-22s %d designed (renew-only), %d other\n", "manager exits", exits, len(h.Exits)-exits)
	fmt.Fprintf(&w, "%-22s %d allowed (after data loss or theft), %d violations\n", "overlaps", allowed, len(r.Overlaps)-allowed)
	var mf []string
	for _, k := range slices.Sorted(maps.Keys(maxFence)) {
		mf = append(mf, fmt.Sprintf("%s %d", k, maxFence[k]))
	}
	fmt.Fprintf(&w, "%-22s %s\n", "max fence", strings.Join(mf, ", "))
	fmt.Fprintf(&w, "%-22s %s\n", "theft -> stop", stats(r.TheftToStop))
	fmt.Fprintf(&w, "%-22s %s\n", "done -> release", stats(r.DoneToRelease))
	fmt.Fprintf(&w, "%-22s %s\n", "schedule -> Pod start", stats(r.ScheduleToStart))
	if len(r.Violations) == 0 {
		fmt.Fprintln(&w, "violations             none")
		return w.String()
	}
	fmt.Fprintf(&w, "violations             %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&w, "  - %s\n", v)
	}
	return w.String()
}

// stats formats n, median, p90 and max of ds. Pod timestamps have one-second
// resolution, and so do these figures.
func stats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n=0"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(f float64) time.Duration { return s[int(f*float64(len(s)-1))].Round(100 * time.Millisecond) }
	return fmt.Sprintf("n=%d median %s p90 %s max %s", len(s), q(0.5), q(0.9), q(1))
}

// Timeline returns the history in time order, for a failing run.
func Timeline(h History) string {
	var w strings.Builder
	type line struct {
		at   time.Time
		text string
	}
	var ls []line
	for _, f := range h.Faults {
		text := fmt.Sprintf("FAULT %s %s", f.Kind, f.Target)
		if f.Until.After(f.At) {
			text += fmt.Sprintf(" (until %s)", f.Until.Format("15:04:05.0"))
		}
		if !f.Hit(h.Pods) {
			text += " (hit no running Pod)"
		}
		ls = append(ls, line{f.At, text})
	}
	for _, p := range h.Pods {
		if p.ran() {
			ls = append(ls, line{p.Start, fmt.Sprintf("start %-8s %-10s fence=%-16d %s", p.Key, p.Cluster, p.Fence, p.Name)})
		}
		if !p.End.IsZero() && p.ran() {
			ls = append(ls, line{p.End, fmt.Sprintf("end   %-8s %-10s fence=%-16d %s %s", p.Key, p.Cluster, p.Fence, p.Name, p.Result)})
		}
	}
	for _, e := range h.Exits {
		ls = append(ls, line{e.At, fmt.Sprintf("EXIT  %s designed=%t", e.Replica, e.Designed)})
	}
	if !h.QuietStart.IsZero() {
		ls = append(ls, line{h.QuietStart, "quiet period starts"})
	}
	sort.SliceStable(ls, func(i, j int) bool { return ls[i].at.Before(ls[j].at) })
	for _, l := range ls {
		fmt.Fprintf(&w, "%s %s\n", l.at.Format("15:04:05.0"), l.text)
	}
	return w.String()
}
