package controllers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestTheControllersCallOneWay keeps controllers/ readable from the top down:
// Reconcile's file calls the phases' files, a phase calls the files below it,
// and no two files call each other back and forth (the shape of the pass, not
// of one call, is what a reader follows). It also keeps the package within
// twenty files: the protocol's decisions live in internal/runcore and
// internal/due, and the files here only gather, act and record.
//
// The phases of a run (acquire, running, stopping, release) are called only
// by the run dispatcher, advanceRun. A GuardedJob's pass writes (to the API
// server, a store, the keeper, events) only through effects.go, and reads only
// through views.go.
//
// A call is matched by name: a plain call of a function of this package, or
// a method of this package called on a variable (r.track, s.requeueAfter).
// A name shared with another package's method can only add an arrow, never
// hide one.
func TestTheControllersCallOneWay(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	parsed := map[string]*ast.File{}
	funcs, methods := map[string]string{}, map[string][]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed[f] = af
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				if fd.Recv == nil {
					funcs[fd.Name.Name] = f
				} else {
					methods[fd.Name.Name] = append(methods[fd.Name.Name], f)
				}
			}
		}
	}
	if len(parsed) > 20 {
		t.Errorf("controllers/ has %d files (at most 20): a decision belongs in internal/runcore or internal/due", len(parsed))
	}
	calls := map[[2]string][]string{}
	for from, af := range parsed {
		imported := map[string]bool{}
		for _, imp := range af.Imports {
			name := strings.Trim(imp.Path.Value, `"`)
			name = name[strings.LastIndex(name, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			imported[name] = true
		}
		ast.Inspect(af, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var to []string
			switch fn := call.Fun.(type) {
			case *ast.Ident:
				if f, ok := funcs[fn.Name]; ok {
					to = []string{f}
				}
			case *ast.SelectorExpr:
				if x, ok := fn.X.(*ast.Ident); ok && !imported[x.Name] {
					to = methods[fn.Sel.Name]
				}
			}
			for _, f := range to {
				if f != from {
					k := [2]string{from, f}
					calls[k] = append(calls[k], fset.Position(call.Pos()).String())
				}
			}
			return true
		})
	}
	var both []string
	for k, at := range calls {
		if back, ok := calls[[2]string{k[1], k[0]}]; ok && k[0] < k[1] {
			both = append(both, k[0]+" calls "+k[1]+" (at "+at[0]+") and back (at "+back[0]+")")
		}
	}
	sort.Strings(both)
	for _, b := range both {
		t.Error(b)
	}

	// A GuardedJob's pass writes only through effects.go (its API server
	// writes, its store calls, what the keeper renews and its events) and
	// reads only through views.go (the cache, the API server, the stores'
	// keys, the keeper's reports). The other actors read and write on their
	// own.
	actors := map[string]bool{"stop_controller.go": true, "shard.go": true, "identity.go": true, "requests.go": true, "setup.go": true, "stores.go": true, "metrics.go": true}
	reads := map[string]bool{"Get": true, "List": true}
	keeperReads := map[string]bool{"Get": true, "Snapshot": true}
	writes := map[string]bool{"Create": true, "Patch": true, "Delete": true, "DeleteAllOf": true, "Update": true, "Status": true, "Eventf": true}
	storeWrites := map[string]bool{"Acquire": true, "Renew": true, "Complete": true, "Release": true, "Unlock": true}
	keeperWrites := map[string]bool{"Track": true, "Untrack": true, "Quiesce": true, "ResumeAll": true}
	for name, af := range parsed {
		if actors[name] {
			continue
		}
		ast.Inspect(af, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			var on string
			switch x := sel.X.(type) {
			case *ast.Ident:
				on = x.Name
			case *ast.SelectorExpr:
				on = x.Sel.Name
			}
			if name != "effects.go" && (on == "r" && writes[sel.Sel.Name] || on == "Keeper" && keeperWrites[sel.Sel.Name] || on == "Recorder" ||
				strings.HasSuffix(strings.ToLower(on), "store") && storeWrites[sel.Sel.Name]) {
				t.Errorf("%s: %s.%s writes outside effects.go", fset.Position(call.Pos()), on, sel.Sel.Name)
			}
			if name != "views.go" && (on == "r" && reads[sel.Sel.Name] || on == "APIReader" || on == "Keeper" && keeperReads[sel.Sel.Name] ||
				strings.HasSuffix(strings.ToLower(on), "store") && sel.Sel.Name == "Inspect") {
				t.Errorf("%s: %s.%s reads outside views.go", fset.Position(call.Pos()), on, sel.Sel.Name)
			}
			return true
		})
	}

	// The phases of a run never call each other: only the run dispatcher
	// takes a run into a phase, after the step before it said next.
	phases := map[string]bool{"acquire": true, "running": true, "stopping": true, "release": true}
	for _, af := range parsed {
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil || fd.Name.Name == "advanceRun" {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok && phases[sel.Sel.Name] {
						if x, ok := sel.X.(*ast.Ident); ok && x.Name == "r" {
							t.Errorf("%s: %s calls the phase %s: end the step with s.next(run) and let advanceRun take it", fset.Position(call.Pos()), fd.Name.Name, sel.Sel.Name)
						}
					}
				}
				return true
			})
		}
	}
}
