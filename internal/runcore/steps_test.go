package runcore_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/guardedjob/guardedjob/internal/runcore"
)

// TestEveryStepOfTheModelHasItsName: the labelled steps of the model's
// Reconciler and Stopper (model/run.pml) and runcore's steps are the same set,
// so that a log line and a spin trail name a step the same way.
func TestEveryStepOfTheModelHasItsName(t *testing.T) {
	b, err := os.ReadFile("../../model/run.pml")
	if err != nil {
		t.Fatal(err)
	}
	label := regexp.MustCompile(`->\s*([a-z_][a-z0-9_]*):`)
	var model []string
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "proctype Reconciler(") || strings.HasPrefix(line, "proctype Stopper("):
			in = true
		case strings.HasPrefix(line, "}"):
			in = false
		case in:
			for _, m := range label.FindAllStringSubmatch(line, -1) {
				model = append(model, m[1])
			}
		}
	}
	slices.Sort(model)
	model = slices.Compact(model)
	var code []string
	for s := range runcore.Steps() {
		code = append(code, string(s))
	}
	slices.Sort(code)
	if len(model) == 0 {
		t.Fatal("no labelled step found in the model's Reconciler and Stopper")
	}
	for _, s := range model {
		if !slices.Contains(code, s) {
			t.Errorf("the model's step %s has no runcore.Step", s)
		}
	}
	for _, s := range code {
		if !slices.Contains(model, s) {
			t.Errorf("runcore.Step %s is no labelled step of the model", s)
		}
	}
}

// TestEveryModelConfigurationAndHoleHasItsRow: every hole switch the model has is
// one that make model-check runs (hack/model-check.sh), and every configuration and
// hole switch it runs has its row in docs/reliability.md, whose tables say what each
// adds and breaks.
func TestEveryModelConfigurationAndHoleHasItsRow(t *testing.T) {
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	model, script, docs := read("../../model/run.pml"), read("../../hack/model-check.sh"), read("../../docs/reliability.md")

	inModel := regexp.MustCompile(`\bHOLE_[A-Z0-9_]+`).FindAllString(model, -1)
	var run []string
	for _, m := range regexp.MustCompile(`(?m)^\s*\[(HOLE_[A-Z0-9_]+)\]=`).FindAllStringSubmatch(script, -1) {
		run = append(run, m[1])
	}
	configs := regexp.MustCompile(`(?s)\nconfigs=\(([^)]*)\)`).FindStringSubmatch(script)
	if len(run) == 0 || configs == nil {
		t.Fatal("found no hole switches or no configs=(...) in hack/model-check.sh")
	}
	for _, h := range inModel {
		if !slices.Contains(run, h) {
			t.Errorf("model/run.pml has %s, which make model-check never runs", h)
		}
	}
	for _, name := range append(strings.Fields(configs[1]), run...) {
		if !strings.Contains(docs, "\n| `"+name+"` |") {
			t.Errorf("%s has no row in docs/reliability.md", name)
		}
	}
}
