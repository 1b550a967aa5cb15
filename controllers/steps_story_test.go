package controllers_test

import (
	"regexp"
	"testing"

	. "github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runcore"
)

var stepLine = regexp.MustCompile(`"step": "([a-z_]+)"`)

// The manager's log at V(1) names the protocol's steps as model/run.pml does:
// a run-now request's run, read from the log, follows the model's Reconciler
// from its acquisition to its finish.
func TestTheManagersLogNamesTheModelsSteps(t *testing.T) {
	h := newHarness(t)
	logs := &logBuffer{}
	h.logger = zap.New(zap.WriteTo(logs), zap.UseDevMode(true), zap.Level(zapcore.DebugLevel))
	h.start()
	g := h.g
	gj := h.create(h.guardedJob("steps", h.ns+":steps"))
	h.trigger(gj)
	job := h.waitJobs(1)[0]
	h.waitRecorded(gj)
	h.complete(&job)
	g.Eventually(func() *batchv1alpha1.RunRecord { return h.get(gj).Status.LastRun }).Should(And(Not(BeNil()),
		HaveField("Result", batchv1alpha1.RunResultSucceeded)))

	var steps []string
	for _, m := range stepLine.FindAllStringSubmatch(logs.String(), -1) {
		if len(steps) == 0 || steps[len(steps)-1] != m[1] { // a step a pass looks at again is one step
			steps = append(steps, m[1])
		}
	}
	inOrder := []string{string(runcore.AcquireTrigger), string(runcore.CreateFirst), string(runcore.RecordJob), string(runcore.Release), string(runcore.Finish)}
	var seen []string
	for _, s := range steps {
		if len(seen) < len(inOrder) && s == inOrder[len(seen)] {
			seen = append(seen, s)
		}
	}
	g.Expect(seen).To(Equal(inOrder), "the steps logged: %v", steps)
}
