// Package purity checks that a package of decisions is pure: it reaches no API
// server, no store and no clock, so that its callers (and tests) hand it every
// input, now included.
package purity

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// banned are the packages whose clients a pure package may not depend on.
var banned = []string{
	"sigs.k8s.io/controller-runtime", "k8s.io/client-go", "github.com/redis/go-redis",
	"github.com/guardedjob/guardedjob/internal/lockclient", "github.com/guardedjob/guardedjob/controllers",
}

// Check fails t when the package in the current directory imports one of
// noImports (or context, net, os or math/rand), depends on a client of the API
// server or the store, or reads the clock (time.Now, Since, Until).
func Check(t *testing.T, name string, noImports ...string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	never := append([]string{"context", "net", "net/http", "os", "math/rand", "math/rand/v2"}, noImports...)
	for _, imp := range strings.Fields(string(out)) {
		if slices.Contains(never, imp) {
			t.Errorf("%s imports %s: a decision must get what it needs from its caller", name, imp)
		}
	}
	out, err = exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, b := range banned {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				t.Errorf("%s depends on %s", name, dep)
			}
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" && (sel.Sel.Name == "Now" || sel.Sel.Name == "Since" || sel.Sel.Name == "Until") {
					t.Errorf("%s reads the clock (time.%s): take now from the caller", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}
