package runcore_test

import (
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
