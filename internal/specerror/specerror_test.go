package specerror_test

import (
	"testing"

	. "github.com/onsi/gomega"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// The rule packages cannot import the API types (their fuzz targets would
// instrument all of k8s.io/api), so the reasons they return are declared twice:
// users see the api/v1alpha1 ones, documented there and in docs/api.md.
func TestReasonsAreTheAPIReasons(t *testing.T) {
	for _, tt := range []struct{ rule, api string }{
		{specerror.InvalidScheduleReason, batchv1alpha1.InvalidScheduleReason},
		{specerror.InvalidTimeZoneReason, batchv1alpha1.InvalidTimeZoneReason},
		{specerror.InvalidTemplateReason, batchv1alpha1.InvalidTemplateReason},
		{specerror.InvalidKeyReason, batchv1alpha1.InvalidKeyReason},
		{specerror.KeyNotAllowedReason, batchv1alpha1.KeyNotAllowedReason},
		{specerror.UnsafeLeaseTimingReason, batchv1alpha1.UnsafeLeaseTimingReason},
	} {
		t.Run(tt.api, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tt.rule).To(Equal(tt.api))
			g.Expect(batchv1alpha1.IsStalledReason(tt.rule)).To(BeTrue(), "retrying cannot fix a spec problem")
		})
	}
}

func TestErrorfFormatsTheMessageAndKeepsTheReason(t *testing.T) {
	g := NewWithT(t)
	err := specerror.Errorf(specerror.InvalidKeyReason, "spec.lock.key renders %q", "a b")
	g.Expect(err.Reason).To(Equal("InvalidKey"))
	g.Expect(err.Error()).To(Equal(`spec.lock.key renders "a b"`))
}
