package runcore

import (
	"maps"
	"slices"
	"strconv"
	"strings"

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

// StartOf is what started a run, in the canonical form its token attests
// (runtoken.Run.Start): its trigger or request, parameters, backfill, retry and
// start deadline. A run no status records takes these from its Job's annotation,
// which anyone who may edit Jobs can change, so they count only when the token
// in the lock key, which only the manager writes, attests them.
func StartOf(run *batchv1alpha1.ActiveRun) string {
	var deadline int64
	if run.StartDeadline != nil {
		deadline = run.StartDeadline.Unix()
	}
	parts := []string{strconv.Quote(run.RunNow), strconv.Quote(run.Backfill),
		strconv.FormatInt(int64(run.Retry), 10), strconv.FormatInt(deadline, 10)}
	for _, name := range slices.Sorted(maps.Keys(run.Parameters)) {
		parts = append(parts, strconv.Quote(name)+"="+strconv.Quote(run.Parameters[name]))
	}
	return strings.Join(parts, " ")
}
