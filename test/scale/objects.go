package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
)

// Each phase has a namespace of its own.
const (
	nsFloor = "floor"
	nsCron  = "cron"
	nsGJ    = "gj"
	nsIdle  = "idle"
)

// The lease of the measured runs: the keeper's figures use the same (ttl 30s,
// renewInterval 10s); a 2s Pod grace keeps the self-fence deadline at
// last renewal + 23s.
const (
	benchTTL      = 30 * time.Second
	benchInterval = 10 * time.Second
	benchGrace    = 2 * time.Second
	// stopMargin is the time budgeted to issue a run's deletes after its
	// self-fence deadline.
	stopMargin = leasetiming.StopMargin
)

func podTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr.To(int64(benchGrace / time.Second)),
		Containers:                    []corev1.Container{{Name: "work", Image: "busybox", Command: []string{"true"}}},
	}}
}

// guardedJob is one benchmark GuardedJob: its own lock key in its namespace.
func guardedJob(ns, name, schedule string) *batchv1alpha1.GuardedJob {
	return &batchv1alpha1.GuardedJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1alpha1.GuardedJobSpec{
			Schedule: schedule,
			TimeZone: "UTC",
			Lock: batchv1alpha1.LockSpec{
				Key:           ns + ":" + name,
				TTL:           &metav1.Duration{Duration: benchTTL},
				RenewInterval: &metav1.Duration{Duration: benchInterval},
				// No kubelet runs here: the Pods never start, and the runs must
				// stay active for the whole benchmark.
				PodStartTimeout: &metav1.Duration{Duration: time.Hour},
			},
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: podTemplate()}},
		},
	}
}

// cronSchedule is a schedule due once a day, at t's minute (UTC).
func cronSchedule(t time.Time) string {
	t = t.UTC()
	return fmt.Sprintf("%d %d * * *", t.Minute(), t.Hour())
}

// nextDue is the first whole minute at least lead from now.
func nextDue(lead time.Duration) time.Time {
	return time.Now().Add(lead).Truncate(time.Minute).Add(time.Minute)
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// ownerOf returns the name of the object a Job of a CronJob or GuardedJob belongs
// to: the Job's name without its "-<minutes>" (CronJob) or "-<minutes>-<hex>"
// (GuardedJob) suffix.
func ownerOf(job string, parts int) string {
	for range parts {
		i := strings.LastIndexByte(job, '-')
		if i < 0 {
			return job
		}
		job = job[:i]
	}
	return job
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

func secs(d time.Duration) string {
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func mib(b int64) string {
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}
