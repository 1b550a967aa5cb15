package controllers

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/runparams"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// Parameters of manual runs: a run-now request may set values for the
// parameters spec.parameters declares (the run-now-parameters annotation), and
// nothing else. The run carries them in status.active and its record, its Job in
// env vars and an annotation (internal/jobbuild).

// checkParameters reports what the schema cannot check of spec.parameters: a
// pattern that does not compile (Ready=False, InvalidParameters).
func checkParameters(gj *batchv1alpha1.GuardedJob) error {
	if err := runparams.CheckDeclarations(gj.Spec.Parameters); err != nil {
		return specerror.Errorf(batchv1alpha1.InvalidParametersReason, "%v", err)
	}
	return nil
}

// refuseTriggerParameters refuses a run-now request whose parameters are not
// declared or not allowed: the trigger is handled (status.lastRunNow), the run
// does not start, status.lastRun says why (Skipped) and a Warning event
// InvalidParameters repeats it. It reports whether it refused.
func (r *GuardedJobReconciler) refuseTriggerParameters(s *scope, value string, occurrence time.Time, values map[string]string, err error) bool {
	gj := s.gj
	if err == nil {
		err = runparams.Check(gj.Spec.Parameters, values)
	}
	if err == nil {
		if len(values) > 0 {
			r.event(gj, nil, corev1.EventTypeNormal, batchv1alpha1.RunParametersReason,
				"Run-now %s with parameters %s", value, runparams.Describe(values))
		}
		return false
	}
	msg := fmt.Sprintf("run-now %s refused: %v", value, err)
	answerTrigger(gj, value)
	runcore.RecordRun(gj, "", occurrence, "", 0, false, batchv1alpha1.RunResultSkipped, "", msg, s.now)
	runcore.SyncRecent(gj, batchv1alpha1.TriggerRunNow)
	runcore.NoteRequest(gj, value)
	s.requests.refuse(value, msg)
	r.event(gj, nil, corev1.EventTypeWarning, batchv1alpha1.InvalidParametersReason, "%s", msg)
	return true
}
