package controllers

import (
	"context"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

// Occurrences done in any cluster (status.lastOccurrenceDone). Where the same
// GuardedJob is applied in every cluster that shares the lock store, each
// occurrence runs in the cluster that takes the lock first; the others end
// their run Skipped (the done-marker was there: already done) or Busy (the
// winner still held the lock). Neither is a failure of the GuardedJob, and what
// the alerts ask is whether the occurrence was done anywhere:
//   - Skipped, already done: the acquisition read the marker's holder, and the
//     occurrence is recorded done by it at once (runcore.NoteOccurrenceDone).
//   - Busy, held by a run of the GuardedJob of the same name in another
//     cluster: that run's outcome is not known yet. Later passes read that
//     run's occurrence's done-marker (watchOccurrence), each when the holder's
//     lease would expire unless renewed (every lock.ttl at most), until the
//     marker is there (done by its holder) or the key no longer holds that
//     run (it ended without completing the occurrence: nothing is recorded).

// watchedOccurrence is the occurrence whose outcome the last run waits to learn:
// the one the run of another cluster that held the lock (status.lastRun, Busy)
// was for, with its done-marker key.
type watchedOccurrence struct {
	scheduled time.Time
	marker    string
}

// peerOccurrence returns the occurrence a Busy last run should watch: the lock
// was held by a run of the GuardedJob of the same name in another cluster
// (holder <cluster>/<namespace>/<name>-<scheduled Unix minutes>-<hex>, any
// namespace: each cluster may keep it in its own), and that occurrence is not
// known to be done yet.
func (r *GuardedJobReconciler) peerOccurrence(gj *batchv1alpha1.GuardedJob, spec *compiledSpec) (watchedOccurrence, bool) {
	lr := gj.Status.LastRun
	if lr == nil || lr.Result != batchv1alpha1.RunResultBusy || lr.Key == "" || lr.ScheduledTime == nil {
		return watchedOccurrence{}, false
	}
	minutes, ok := peerRunMinutes(gj.Name, lr.HeldBy, r.ClusterName)
	if !ok {
		return watchedOccurrence{}, false
	}
	w := watchedOccurrence{scheduled: lr.ScheduledTime.Time, marker: lr.OccurrenceKey}
	if lr.ScheduledTime.Unix()/60 != minutes {
		// The holder runs an earlier occurrence (one that lasts longer than the
		// schedule's interval): the schedule's occurrence in its minute.
		start := time.Unix(minutes*60, 0)
		w.scheduled = spec.rules.Schedule.Next(start.Add(-time.Second))
		if w.scheduled.Unix()/60 != minutes {
			return watchedOccurrence{}, false
		}
		k, err := spec.keys(r, gj, w.scheduled)
		if err != nil {
			return watchedOccurrence{}, false
		}
		w.marker = k.Occurrence
	}
	if w.marker == "" {
		return watchedOccurrence{}, false
	}
	if done := gj.Status.LastOccurrenceDone; done != nil && !done.ScheduledTime.Time.Before(w.scheduled) {
		return watchedOccurrence{}, false
	}
	return w, true
}

// peerRunMinutes parses a holder as a run of the GuardedJob named name in a
// cluster other than this one's, and returns the Unix minutes of its occurrence
// (from its Job name, runtoken.JobName).
func peerRunMinutes(name, holder, clusterName string) (int64, bool) {
	cluster, _, job, ok := leasetoken.SplitHolder(holder)
	if !ok || cluster == clusterName {
		return 0, false
	}
	rest, ok := strings.CutPrefix(job, name+"-")
	if !ok {
		return 0, false
	}
	digits, random, ok := strings.Cut(rest, "-")
	if !ok || random == "" || strings.Contains(random, "-") {
		return 0, false
	}
	minutes, err := strconv.ParseInt(digits, 10, 64)
	return minutes, err == nil && minutes > 0
}

// watchOccurrence reads the done-marker of the occurrence a Busy last run lost
// to a run of another cluster (peerOccurrence) and records it done once the
// marker is there. While that run still holds the lock it looks again when the
// run's lease would expire unless renewed; once the key no longer holds it and
// no marker was written, the run ended without completing the occurrence and
// nothing is recorded. A store that does not answer is asked again later.
func (r *GuardedJobReconciler) watchOccurrence(ctx context.Context, s *scope, spec *compiledSpec) {
	if s.guardedWriteFailed || spec == nil {
		return
	}
	gj := s.gj
	w, ok := r.peerOccurrence(gj, spec)
	if !ok {
		return
	}
	lr := gj.Status.LastRun
	st, err := spec.store.Inspect(ctx, lockclient.Keys{Lock: lr.Key, Occurrence: w.marker})
	switch {
	case err != nil:
		s.requeueAfter(storeRetry)
	case st.Done != "":
		by := leasetoken.HolderOf(st.Done)
		runcore.SetOccurrenceDone(gj, w.scheduled, by, s.now)
		r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.OccurrenceDoneElsewhereReason,
			"Occurrence %s was done by %s (done-marker %s); run %s had found lock %s held by it",
			w.scheduled.UTC().Format(time.RFC3339), by, w.marker, lr.JobName, lr.Key)
	case leasetoken.HolderOf(st.Holder) == lr.HeldBy:
		ttl := gj.Spec.Lock.TTLOrDefault()
		wait := st.TTL
		if wait <= 0 || wait > ttl {
			wait = ttl
		}
		s.requeueAfter(max(wait, time.Second))
	}
}

// countDoneElsewhere counts, for the metrics, a Busy run whose occurrence was
// found done by another cluster's run: it was the race of two clusters, not a
// lock that no run gets.
func (r *GuardedJobReconciler) countDoneElsewhere(s *scope) {
	done := s.gj.Status.LastOccurrenceDone
	if done == nil || equality.Semantic.DeepEqual(done, s.orig.Status.LastOccurrenceDone) {
		return
	}
	if cluster, _, _, ok := leasetoken.SplitHolder(done.By); ok && cluster == r.ClusterName {
		return
	}
	if lr := s.gj.Status.LastRun; lr == nil || lr.Result != batchv1alpha1.RunResultBusy {
		return
	}
	guardedJobMetrics.busyRunDoneElsewhere(s.gj)
}
