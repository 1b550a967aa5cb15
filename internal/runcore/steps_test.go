package runcore_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
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

// TestEveryStepNamesTheOneCoreFunctionThatDecidesIt: docs/reliability.md's step
// table names, for every step the manager takes (kind Protocol), the one
// function of internal/runcore or internal/due that decides it, and that
// function exists. A row's "decided by" cell names one function for all its
// steps, or one per step ("`step`: `runcore.F`; ...").
func TestEveryStepNamesTheOneCoreFunctionThatDecidesIt(t *testing.T) {
	b, err := os.ReadFile("../../docs/reliability.md")
	if err != nil {
		t.Fatal(err)
	}
	docs := string(b)
	start := strings.Index(docs, "| model step (proctype: label) | what it does | decided by |")
	if start < 0 {
		t.Fatal("docs/reliability.md has no step table with a \"decided by\" column")
	}
	exported := coreFunctions(t)
	ident := regexp.MustCompile("`((?:runcore|due)\\.[A-Za-z.]+)`")
	stepName := regexp.MustCompile("`(?:[A-Za-z]+: )?([a-z_]+)`")
	decider := map[string][]string{}
	for _, line := range strings.Split(docs[start:], "\n")[2:] {
		if !strings.HasPrefix(line, "| ") {
			break
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 4 {
			t.Fatalf("a row of the step table has %d cells: %s", len(cells), line)
		}
		steps := stepName.FindAllStringSubmatch(strings.TrimPrefix(cells[0], "| "), -1)
		for _, part := range strings.Split(cells[2], "; ") {
			named := steps
			if i := strings.Index(part, ": `"); i > 0 && !strings.HasPrefix(part, "`runcore.") && !strings.HasPrefix(part, "`due.") {
				named = stepName.FindAllStringSubmatch(part[:i], -1)
				part = part[i+2:]
			}
			fns := ident.FindAllStringSubmatch(part, -1)
			for _, s := range named {
				for _, f := range fns {
					decider[s[1]] = append(decider[s[1]], f[1])
				}
			}
		}
	}
	for step, kind := range runcore.Steps() {
		if kind != runcore.Protocol {
			continue
		}
		fns := decider[string(step)]
		if len(fns) != 1 {
			t.Errorf("step %s: the step table names %d deciding functions (%v), want one", step, len(fns), fns)
			continue
		}
		if !exported[fns[0]] {
			t.Errorf("step %s: %s, which the step table names, is no exported function of internal/runcore or internal/due", step, fns[0])
		}
	}
}

// coreFunctions returns the exported functions and methods of internal/runcore
// and internal/due, as "runcore.F", "runcore.T.M".
func coreFunctions(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for pkg, dir := range map[string]string{"runcore": ".", "due": "../due"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || !fn.Name.IsExported() {
					continue
				}
				if fn.Recv == nil {
					out[pkg+"."+fn.Name.Name] = true
					continue
				}
				recv := fn.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if id, ok := recv.(*ast.Ident); ok {
					out[pkg+"."+id.Name+"."+fn.Name.Name] = true
				}
			}
		}
	}
	return out
}
