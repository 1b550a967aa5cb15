package controllers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// docs/events.md lists exactly the event reasons the manager emits, each with the
// type the code gives it. The reasons are read from the code: every call of the
// event helper (or of a recorder's Eventf), following a reason passed in through
// a parameter or a local variable back to the constants and literals it comes
// from. A reason expression the test cannot follow fails the test, so a new way
// of emitting events cannot bypass the catalogue.
func TestEventCatalogue(t *testing.T) {
	g := NewWithT(t)
	emitted := eventsInCode(t)
	catalogue := eventCatalogue(t)

	g.Expect(sortedKeys(catalogue)).To(Equal(sortedKeys(emitted)),
		"docs/events.md lists every reason the code emits, and no other")
	for reason, types := range emitted {
		if len(types) == 0 {
			continue // the type comes through a parameter of the helper
		}
		g.Expect(types).To(HaveKey(catalogue[reason]), "the type docs/events.md gives %s is one the code uses", reason)
	}
}

// eventCatalogue reads the reason -> type table of docs/events.md.
func eventCatalogue(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../docs/events.md")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	out := map[string]string{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		reason := strings.Trim(strings.TrimSpace(cells[1]), "`")
		typ := strings.TrimSpace(cells[2])
		NewWithT(t).Expect(typ).To(BeElementOf("Normal", "Warning"), "type of %s in docs/events.md", reason)
		NewWithT(t).Expect(out).NotTo(HaveKey(reason), "%s is listed once", reason)
		out[reason] = typ
	}
	return out
}

// eventSource is the code of package controllers, parsed.
type eventSource struct {
	t      *testing.T
	fset   *token.FileSet
	consts map[string]string // constants of api/v1alpha1 and corev1's event types
	// funcs maps a function or method name to its declaration.
	funcs map[string]*ast.FuncDecl
	// calls maps a function or method name to its call sites.
	calls map[string][]callSite
	// specErrorReasons are the reason expressions of every spec error made, here
	// and in the rule packages under internal/, and of the Job builder's warnings.
	specErrorReasons []callSite
}

type callSite struct {
	call *ast.CallExpr
	in   *ast.FuncDecl
	arg  ast.Expr // for specErrorReasons
}

// eventsInCode returns the reasons emitted, each with the event types its call
// sites give it (empty when only known through the helper's parameter).
func eventsInCode(t *testing.T) map[string]map[string]bool {
	src := &eventSource{t: t, fset: token.NewFileSet(), funcs: map[string]*ast.FuncDecl{}, calls: map[string][]callSite{},
		consts: map[string]string{"corev1.EventTypeNormal": "Normal", "corev1.EventTypeWarning": "Warning"}}
	src.readConsts("../api/v1alpha1/conditions.go", "batchv1alpha1.")
	src.readConsts("../api/v1alpha1/storeview_types.go", "batchv1alpha1.")
	src.readConsts("../api/v1alpha1/schedule_types.go", "batchv1alpha1.")
	src.readConsts("../internal/specerror/specerror.go", "specerror.")
	for _, name := range goFiles(t, "*.go") {
		f, err := parser.ParseFile(src.fset, name, nil, 0)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		src.index(f)
	}
	// A spec error a rule package returns becomes an event through se.Reason.
	for _, name := range goFiles(t, "../internal/*/*.go") {
		f, err := parser.ParseFile(src.fset, name, nil, 0)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		src.indexSpecErrors(f)
	}

	out := map[string]map[string]bool{}
	for _, emitter := range []string{"event", "Eventf"} {
		for _, site := range src.calls[emitter] {
			if emitter == "Eventf" && site.in.Name.Name == "event" {
				continue // the helper itself: its callers are read instead
			}
			// event(obj, related, type, reason, ...) and Eventf(obj, related, type, reason, action, ...).
			types := src.resolve(site.call.Args[2], site.in, map[string]bool{})
			for _, reason := range src.resolve(site.call.Args[3], site.in, map[string]bool{}) {
				if out[reason] == nil {
					out[reason] = map[string]bool{}
				}
				for _, typ := range types {
					out[reason][typ] = true
				}
			}
		}
	}
	NewWithT(t).Expect(out).NotTo(BeEmpty())
	return out
}

// goFiles returns the files matching pattern, without tests.
func goFiles(t *testing.T, pattern string) []string {
	files, err := filepath.Glob(pattern)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return slices.DeleteFunc(files, func(name string) bool { return strings.HasSuffix(name, "_test.go") })
}

// readConsts reads the string constants of a file, named prefix+name.
func (s *eventSource) readConsts(path, prefix string) {
	f, err := parser.ParseFile(s.fset, path, nil, 0)
	NewWithT(s.t).Expect(err).NotTo(HaveOccurred())
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						s.consts[prefix+name.Name] = v
					}
				}
			}
		}
	}
}

func (s *eventSource) index(f *ast.File) {
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		s.funcs[fd.Name.Name] = fd
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				var name string
				switch fn := n.Fun.(type) {
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				case *ast.Ident:
					name = fn.Name
				}
				s.calls[name] = append(s.calls[name], callSite{call: n, in: fd})
			}
			return true
		})
	}
	s.indexSpecErrors(f)
}

// indexSpecErrors records the reason of every spec error f makes:
// specerror.Errorf(reason, ...) and specerror.Error{Reason: reason, ...}.
func (s *eventSource) indexSpecErrors(f *ast.File) {
	isSpecError := func(e ast.Expr, name string) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != name {
			return false
		}
		pkg, ok := sel.X.(*ast.Ident)
		return ok && pkg.Name == "specerror"
	}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if isSpecError(n.Fun, "Errorf") {
					s.specErrorReasons = append(s.specErrorReasons, callSite{in: fd, arg: n.Args[0]})
				}
			case *ast.CompositeLit:
				// jobbuild.Warning{reason, message}: events the Job builder asks for.
				if id, ok := n.Type.(*ast.Ident); ok && id.Name == "Warning" && f.Name.Name == "jobbuild" && len(n.Elts) == 2 {
					s.specErrorReasons = append(s.specErrorReasons, callSite{in: fd, arg: n.Elts[0]})
				}
				if isSpecError(n.Type, "Error") {
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok && kv.Key.(*ast.Ident).Name == "Reason" {
							s.specErrorReasons = append(s.specErrorReasons, callSite{in: fd, arg: kv.Value})
						}
					}
				}
			}
			return true
		})
	}
}

// resolve returns the string values expr can have inside fn.
func (s *eventSource) resolve(expr ast.Expr, fn *ast.FuncDecl, seen map[string]bool) []string {
	pos := s.fset.Position(expr.Pos()).String()
	if seen[pos] {
		return nil
	}
	seen[pos] = true
	switch e := expr.(type) {
	case *ast.BasicLit:
		if v, err := strconv.Unquote(e.Value); err == nil {
			return []string{v}
		}
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok {
			if v, ok := s.consts[x.Name+"."+e.Sel.Name]; ok {
				return []string{v}
			}
		}
		if e.Sel.Name == "Reason" { // se.Reason of a *specerror.Error, w.Reason of a jobbuild.Warning
			var out []string
			for _, site := range s.specErrorReasons {
				out = append(out, s.resolve(site.arg, site.in, seen)...)
			}
			return out
		}
	case *ast.Ident:
		if i := paramIndex(fn, e.Name); i >= 0 {
			var out []string
			for _, site := range s.calls[fn.Name.Name] {
				out = append(out, s.resolve(site.call.Args[i], site.in, seen)...)
			}
			return out
		}
		var out []string
		found := false
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == len(as.Rhs) {
				for i, lhs := range as.Lhs {
					if id, ok := lhs.(*ast.Ident); ok && id.Name == e.Name {
						found = true
						out = append(out, s.resolve(as.Rhs[i], fn, seen)...)
					}
				}
			}
			return true
		})
		if found {
			return out
		}
	}
	s.t.Fatalf("%s: cannot tell which event reason or type this is; emit events with constants of api/v1alpha1", pos)
	return nil
}

func paramIndex(fn *ast.FuncDecl, name string) int {
	i := 0
	for _, field := range fn.Type.Params.List {
		for _, n := range field.Names {
			if n.Name == name {
				return i
			}
			i++
		}
	}
	return -1
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
