package runcore

import (
	"k8s.io/apimachinery/pkg/api/equality"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// RunDiffers is the hint rule of step AdoptUnrecorded: it names the first field
// the manager acts on in which a run found in a Job's annotation (hint) differs
// from the trusted one (want: from status, or from the spec for the occurrence
// the annotation names), or "". It names fields, never values: the annotation
// is anyone's to write.
func RunDiffers(want, hint *batchv1alpha1.ActiveRun) string {
	for _, f := range []struct {
		name string
		same bool
	}{
		{"scheduledTime", want.ScheduledTime.Equal(&hint.ScheduledTime)},
		{"key", want.Key == hint.Key},
		{"occurrenceKey", want.OccurrenceKey == hint.OccurrenceKey},
		{"fenceKey", want.FenceKey == hint.FenceKey},
		{"store", want.Store == hint.Store},
		{"ttl", want.TTL == hint.TTL},
		{"renewInterval", want.RenewInterval == hint.RenewInterval},
		{"maxHold", want.MaxHold == hint.MaxHold},
		{"envName", want.EnvName == hint.EnvName},
		{"fencingPolicy", want.FencingPolicy == hint.FencingPolicy},
		{"storeFailurePolicy", want.StoreFailurePolicy == hint.StoreFailurePolicy},
		{"podGuard", equality.Semantic.DeepEqual(want.PodGuard, hint.PodGuard)},
	} {
		if !f.same {
			return f.name
		}
	}
	return ""
}
