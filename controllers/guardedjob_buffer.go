package controllers

import "context"

// runExtras is what a new run carries besides its occurrence: the parameters
// a run-now request set.
type runExtras struct {
	parameters map[string]string
}

// scheduleAll is the pass's scheduling step: the failure policy and
// suspendNote.until (applySuspension), then the schedule and run-now triggers
// (schedule).
func (r *GuardedJobReconciler) scheduleAll(ctx context.Context, s *scope, spec *compiledSpec) error {
	if err := r.applySuspension(ctx, s); err != nil {
		return err
	}
	return r.schedule(ctx, s, spec)
}
