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

package e2e

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

var (
	t0     = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	limits = Limits{RenewInterval: 3 * time.Second, PodGrace: 2 * time.Second, Slack: 5 * time.Second,
		CrashLoopExits: 3, CrashLoopWindow: time.Minute}
)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

// pod is a run of key k in cluster c with fence f, scheduled at sched, running from
// start to end (seconds after t0) with result res.
func pod(c, k string, f int64, sched, start, end int, res string) PodRun {
	p := PodRun{Cluster: c, Name: k + "-" + c + "-" + res, Key: k, Fence: f, Sched: at(sched),
		Created: at(start - 1), Start: at(start), End: at(end), Result: res,
		Holder: c + "/e2e/" + k + "-" + time.Duration(f).String()}
	if res == "Running" {
		p.End = time.Time{}
	}
	return p
}

// healthy is a history without violations: two keys, runs alternating between the
// clusters, each key succeeding after the quiet period starts at 100 s.
func healthy() History {
	return History{
		Seed: 1, Keys: []string{"k1", "k2"}, QuietStart: at(100),
		Pods: []PodRun{
			pod("cluster-a", "k1", 1, 0, 1, 4, "Succeeded"),
			pod("cluster-b", "k1", 2, 10, 11, 13, "Failed"),
			pod("cluster-a", "k1", 10, 110, 111, 115, "Succeeded"),
			pod("cluster-b", "k2", 1, 0, 1, 3, "Succeeded"),
			pod("cluster-b", "k2", 10, 120, 121, 122, "Succeeded"),
		},
		Faults: []Fault{{Kind: FaultManagerKill, Target: "cluster-a-0", At: at(5), Until: at(5)}},
		Exits:  []ManagerExit{{Replica: "cluster-a-1", At: at(30), Designed: true}},
	}
}

func rules(r Result) []string {
	var out []string
	for _, v := range r.Violations {
		out = append(out, v.Rule)
	}
	return out
}

func TestTheCheckerAcceptsAHealthyHistory(t *testing.T) {
	g := NewWithT(t)
	r := Check(healthy(), limits)
	g.Expect(r.Violations).To(BeEmpty())
	sum := Summary(healthy(), r)
	g.Expect(sum).To(ContainSubstring("violations             none"))
	g.Expect(sum).To(ContainSubstring("max fence              k1 10, k2 10"))
}

func TestTheCheckerCatchesEachKindOfViolation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(h *History)
		rule   string
	}{
		{"two Pods of one key in two clusters at once", func(h *History) {
			h.Pods = append(h.Pods, pod("cluster-b", "k1", 4, 50, 52, 60, "Succeeded"), pod("cluster-a", "k1", 5, 55, 58, 62, "Succeeded"))
		}, RuleOverlap},
		{"two Pods of one key in one cluster at once", func(h *History) {
			h.Pods = append(h.Pods, pod("cluster-a", "k2", 4, 50, 52, 60, "Succeeded"), pod("cluster-a", "k2", 5, 55, 58, 62, "Succeeded"))
		}, RuleOverlap},
		{"an overlap after a data loss that lasts past the window", func(h *History) {
			h.Faults = append(h.Faults, Fault{Kind: FaultRedisDataLoss, At: at(50), Until: at(50)})
			// The older Pod still runs 12 s after the loss; the window is 3+2+5 = 10 s.
			h.Pods = append(h.Pods, pod("cluster-a", "k1", 4, 45, 46, 62, "Deleted"), pod("cluster-b", "k1", 5, 50, 52, 65, "Succeeded"))
		}, RuleOverlap},
		{"a Pod that runs on long after its key was stolen", func(h *History) {
			h.Faults = append(h.Faults, Fault{Kind: FaultKeyTheft, Key: "k1", At: at(50), Until: at(50)})
			// The newer Pod ends early, but the older one runs 15 s past the theft.
			h.Pods = append(h.Pods, pod("cluster-a", "k1", 4, 45, 46, 65, "Succeeded"), pod("cluster-b", "k1", 5, 50, 52, 55, "Succeeded"))
		}, RuleOverlap},
		{"an overlap after a theft of another key", func(h *History) {
			h.Faults = append(h.Faults, Fault{Kind: FaultKeyTheft, Key: "k2", At: at(50), Until: at(50)})
			h.Pods = append(h.Pods, pod("cluster-a", "k1", 4, 45, 46, 53, "Deleted"), pod("cluster-b", "k1", 5, 50, 52, 55, "Succeeded"))
		}, RuleOverlap},
		{"an overlap after a fault that cannot break a lease", func(h *History) {
			h.Faults = append(h.Faults, Fault{Kind: FaultAPIOutage, Target: "cluster-a", At: at(50), Until: at(60)})
			h.Pods = append(h.Pods, pod("cluster-a", "k1", 4, 45, 46, 53, "Deleted"), pod("cluster-b", "k1", 5, 50, 52, 55, "Succeeded"))
		}, RuleOverlap},
		{"a Pod still running beside a newer one", func(h *History) {
			h.Pods = append(h.Pods, pod("cluster-a", "k2", 4, 50, 52, 0, "Running"), pod("cluster-b", "k2", 5, 60, 61, 63, "Succeeded"))
		}, RuleOverlap},
		{"a lower fence handed out later", func(h *History) {
			h.Pods = append(h.Pods, pod("cluster-a", "k1", 7, 50, 52, 55, "Succeeded"), pod("cluster-b", "k1", 6, 60, 61, 63, "Succeeded"))
		}, RuleFenceOrder},
		{"a fence handed out twice to different runs", func(h *History) {
			h.Pods = append(h.Pods, pod("cluster-a", "k1", 7, 50, 52, 55, "Succeeded"), pod("cluster-b", "k1", 7, 60, 61, 63, "Succeeded"))
		}, RuleFenceOrder},
		{"an occurrence that succeeded in both clusters", func(h *History) {
			h.Pods = append(h.Pods, pod("cluster-a", "k2", 4, 50, 52, 55, "Succeeded"), pod("cluster-b", "k2", 5, 50, 57, 59, "Succeeded"))
		}, RuleDoubleDone},
		{"an occurrence that succeeded twice with a theft of another key between", func(h *History) {
			h.Faults = append(h.Faults, Fault{Kind: FaultKeyTheft, Key: "k1", At: at(56), Until: at(56)})
			h.Pods = append(h.Pods, pod("cluster-a", "k2", 4, 50, 52, 55, "Succeeded"), pod("cluster-b", "k2", 5, 50, 57, 59, "Succeeded"))
		}, RuleDoubleDone},
		{"a key that never succeeded", func(h *History) {
			h.Keys = append(h.Keys, "k3")
			h.Pods = append(h.Pods, pod("cluster-a", "k3", 1, 50, 52, 55, "Failed"))
		}, RuleNoProgress},
		{"a key without a run that ended after the faults stopped", func(h *History) {
			h.QuietStart = at(130)
		}, RuleNoProgress},
		{"a key whose only run after the faults stopped was stopped", func(h *History) {
			h.QuietStart = at(125)
			h.Pods = append(h.Pods, pod("cluster-a", "k1", 11, 126, 127, 129, "Deleted"), pod("cluster-a", "k2", 11, 126, 127, 130, "Failed"))
		}, RuleNoProgress},
		{"a Pod left running", func(h *History) { h.LeftRunning = []string{"cluster-a e2e/k1-x"} }, RuleLeftOver},
		{"a lock left held", func(h *History) { h.LeftLocked = []string{"k1 held by cluster-a/e2e/k1-x"} }, RuleLeftOver},
		{"a run left in status", func(h *History) { h.LeftActive = []string{"cluster-b e2e/k1"} }, RuleLeftOver},
		{"a manager that exited by surprise", func(h *History) {
			h.Exits = append(h.Exits, ManagerExit{Replica: "cluster-b-0", At: at(40), Reason: "panic: boom"})
		}, RuleManagerExit},
		{"a manager that crash-loops through designed exits", func(h *History) {
			for i := range 4 {
				h.Exits = append(h.Exits, ManagerExit{Replica: "cluster-b-0", At: at(40 + 10*i), Designed: true})
			}
		}, RuleCrashLoop},
		{"no Pod at all", func(h *History) { h.Pods = nil }, RuleNothingFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			h := healthy()
			tc.change(&h)
			r := Check(h, limits)
			g.Expect(rules(r)).To(ContainElement(tc.rule))
			g.Expect(Summary(h, r)).To(ContainSubstring(tc.rule), "the summary names the violation")
		})
	}
}

func TestTheCheckerAllowsWhatALeaseBreakingFaultExplains(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(h *History)
	}{
		{"an overlap that ends within the window after a data loss", func(h *History) {
			h.Faults = append(h.Faults, Fault{Kind: FaultRedisDataLoss, At: at(50), Until: at(50)})
			h.Pods = append(h.Pods, pod("cluster-a", "k1", 4, 45, 46, 57, "Deleted"), pod("cluster-b", "k1", 5, 50, 52, 55, "Succeeded"))
		}},
		{"an overlap that ends within the window after a theft of that key", func(h *History) {
			h.Faults = append(h.Faults, Fault{Kind: FaultKeyTheft, Key: "k2", At: at(50), Until: at(50)})
			h.Pods = append(h.Pods, pod("cluster-a", "k2", 4, 45, 46, 53, "Deleted"), pod("cluster-b", "k2", 5, 50, 52, 55, "Succeeded"))
		}},
		{"an occurrence that succeeded again after a data loss", func(h *History) {
			h.Faults = append(h.Faults, Fault{Kind: FaultRedisDataLoss, At: at(56), Until: at(56)})
			h.Pods = append(h.Pods, pod("cluster-a", "k2", 4, 50, 52, 55, "Succeeded"), pod("cluster-b", "k2", 5, 50, 57, 59, "Succeeded"))
		}},
		{"an end and a start in the same second", func(h *History) {
			older := pod("cluster-a", "k2", 4, 50, 52, 55, "Deleted")
			older.End = older.End.Add(400 * time.Millisecond) // a deletion seen at 55.4 s
			h.Pods = append(h.Pods, older, pod("cluster-b", "k2", 5, 55, 55, 59, "Succeeded"))
		}},
		{"a key whose run after the faults stopped failed", func(h *History) {
			h.QuietStart = at(116)
			h.Pods = append(h.Pods, pod("cluster-b", "k1", 11, 126, 127, 129, "Failed"))
		}},
		{"manager exits that are designed and far apart", func(h *History) {
			for i := range 4 {
				h.Exits = append(h.Exits, ManagerExit{Replica: "cluster-b-0", At: at(40 + 30*i), Designed: true})
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			h := healthy()
			tc.change(&h)
			g.Expect(Check(h, limits).Violations).To(BeEmpty())
		})
	}
}

func TestTheCheckerMeasuresReactionTimes(t *testing.T) {
	g := NewWithT(t)
	h := healthy()
	victim := pod("cluster-a", "k1", 4, 45, 46, 52, "Deleted")
	h.Pods = append(h.Pods, victim)
	h.Faults = append(h.Faults, Fault{Kind: FaultKeyTheft, Key: "k1", Victim: victim.Holder, At: at(50), Until: at(50)})
	h.Releases = []Release{{Key: "k1", Holder: h.Pods[0].Holder, At: at(4).Add(300 * time.Millisecond)}}
	r := Check(h, limits)
	g.Expect(r.Violations).To(BeEmpty())
	g.Expect(r.TheftToStop).To(Equal([]time.Duration{2 * time.Second}))
	g.Expect(r.DoneToRelease).To(Equal([]time.Duration{300 * time.Millisecond}))
	g.Expect(r.ScheduleToStart).To(ContainElement(time.Second))
}

func TestAFaultHitsARunningPodOnlyWhenItPutsThatPodsLeaseAtRisk(t *testing.T) {
	// From 46 s to 60 s a Pod of k1 runs in cluster-a, held by its run's holder.
	running := pod("cluster-a", "k1", 4, 45, 46, 60, "Deleted")
	// A Pod of cluster-b that ran earlier, and one that never started.
	earlier := pod("cluster-b", "k2", 3, 30, 31, 34, "Succeeded")
	pending := pod("cluster-b", "k2", 5, 50, 0, 0, "Running")
	pending.Start = time.Time{}
	pods := []PodRun{running, earlier, pending}
	instant := func(k FaultKind, s int) Fault { return Fault{Kind: k, At: at(s), Until: at(s)} }
	span := func(k FaultKind, cluster string, from, to int) Fault {
		return Fault{Kind: k, Cluster: cluster, Target: cluster, At: at(from), Until: at(to)}
	}
	theft := func(victim string, s int) Fault {
		f := instant(FaultKeyTheft, s)
		f.Key, f.Victim = "k1", victim
		return f
	}
	manager := func(k FaultKind, cluster string, leader bool, from, to int) Fault {
		f := span(k, cluster, from, to)
		f.Leader = leader
		return f
	}
	for _, tc := range []struct {
		name  string
		fault Fault
		hit   bool
	}{
		{"a theft of a key whose holder's Pod runs", theft(running.Holder, 50), true},
		{"a theft of a key whose holder's Pod has ended", theft(earlier.Holder, 50), false},
		{"a theft of a key whose holder's Pod has not started", theft(pending.Holder, 50), false},
		{"a theft of a key held by no run", theft("", 50), false},
		{"a theft a moment after the Pod started, by its rounded-down start time", theft(running.Holder, 46), false},
		{"a data loss while any Pod runs", instant(FaultRedisDataLoss, 55), true},
		{"a data loss while no Pod runs", instant(FaultRedisDataLoss, 62), false},
		{"a kill of the leader of a cluster with a running Pod", manager(FaultManagerKill, "cluster-a", true, 50, 50), true},
		{"a kill of a standby of that cluster", manager(FaultManagerKill, "cluster-a", false, 50, 50), false},
		{"a kill of the leader of a cluster whose Pods are not running", manager(FaultManagerKill, "cluster-b", true, 50, 50), false},
		{"a pause of the leader that starts before the Pod and lasts into its run", manager(FaultManagerPause, "cluster-a", true, 42, 48), true},
		{"a pause of the leader that ends as the Pod starts", manager(FaultManagerPause, "cluster-a", true, 42, 46), false},
		{"a Redis cut of the cluster with a running Pod", span(FaultRedisCut, "cluster-a", 58, 64), true},
		{"a Redis cut that starts as the Pod ends", span(FaultRedisCut, "cluster-a", 60, 64), false},
		{"a Redis cut of the other cluster", span(FaultRedisCut, "cluster-b", 50, 55), false},
		{"an API outage of the cluster with a running Pod", span(FaultAPIOutage, "cluster-a", 40, 50), true},
		{"an API outage of the other cluster", span(FaultAPIOutage, "cluster-b", 40, 50), false},
		{"a restart while cut off, in the cluster with a running Pod", span(FaultRestartCutOff, "cluster-a", 50, 70), true},
		{"a leader killed behind a slow API server, in the other cluster", span(FaultSlowAPIResume, "cluster-b", 50, 70), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(tc.fault.Hit(pods)).To(Equal(tc.hit))
		})
	}
}

func TestTheCheckerFailsARunWhoseFaultsHitTooFewPods(t *testing.T) {
	g := NewWithT(t)
	h := healthy()
	// The healthy history's manager kill hit no running Pod (no leader recorded);
	// two thefts do, of k1 and k2.
	a := pod("cluster-a", "k1", 4, 45, 46, 52, "Deleted")
	b := pod("cluster-b", "k2", 4, 45, 46, 53, "Deleted")
	h.Pods = append(h.Pods, a, b)
	h.Faults = append(h.Faults,
		Fault{Kind: FaultKeyTheft, Key: "k1", Victim: a.Holder, At: at(50), Until: at(50)},
		Fault{Kind: FaultKeyTheft, Key: "k2", Victim: b.Holder, At: at(50), Until: at(50)})

	lim := limits
	lim.MinHits = 2
	r := Check(h, lim)
	g.Expect(r.Violations).To(BeEmpty())
	g.Expect(r.Hits).To(Equal(map[FaultKind]int{FaultKeyTheft: 2}))
	g.Expect(Summary(h, r)).To(ContainSubstring("faults                 3, 2 hit a running Pod (by kind, hit/injected: key-theft 2/2, manager-kill 0/1)"))
	g.Expect(Timeline(h)).To(ContainSubstring("FAULT manager-kill cluster-a-0 (hit no running Pod)"))

	lim.MinHits = 3
	r = Check(h, lim)
	g.Expect(rules(r)).To(Equal([]string{RuleFewHits}))
	g.Expect(Summary(h, r)).To(ContainSubstring("2 of 3 faults hit a running Pod; the run needs at least 3"))
}
