package runcore_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheCoreIsPure: the protocol's decisions reach no API server, no store, no
// keeper and no clock. Its own imports name none of the packages that do, none
// of its dependencies is a client of either, and no file of it reads the time.
func TestTheCoreIsPure(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, imp := range strings.Fields(string(out)) {
		switch imp {
		case "context", "net", "net/http", "os", "time", "math/rand", "math/rand/v2":
			t.Errorf("runcore imports %s: a decision must get what it needs from its caller", imp)
		}
	}
	out, err = exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{
			"sigs.k8s.io/controller-runtime", "k8s.io/client-go", "github.com/redis/go-redis",
			"github.com/guardedjob/guardedjob/internal/lockclient", "github.com/guardedjob/guardedjob/controllers",
		} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("runcore depends on %s", dep)
			}
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
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
