package keys

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
	"unicode/utf8"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// Data is the data key templates see.
type Data struct {
	// ScheduledTime is the occurrence's scheduled time in the spec's zone.
	ScheduledTime time.Time
	Namespace     string
	Name          string
	// Key is the rendered lock key; empty while rendering the lock key itself.
	Key string
}

const (
	// maxTemplateBytes matches the CRD's maxLength for key templates.
	maxTemplateBytes = 1024
	// maxValueBytes caps every string a template function returns. A key is at most
	// 512 bytes, so nothing longer is useful, and the cap stops templates that feed a
	// function's output back into it from growing strings exponentially.
	maxValueBytes = 2 * lockclient.MaxKeyLength
	// keyMessageBytes is how much of a rendered key a message quotes.
	keyMessageBytes = 80
)

// keyFuncs is the function set of key templates: pure string functions, no access
// to the environment, files or network. The builtins that build strings (print,
// printf, println, html, js, urlquery) are replaced by capped versions. Argument
// order follows sprig, so the string comes last and pipelines read naturally:
// {{ .Name | replace "-" "_" }}.
var keyFuncs = template.FuncMap{
	"lower":      func(s string) (string, error) { return capValue(strings.ToLower(s)) },
	"upper":      func(s string) (string, error) { return capValue(strings.ToUpper(s)) },
	"trimPrefix": func(prefix, s string) string { return strings.TrimPrefix(s, prefix) },
	"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
	"replace":    replaceAll,
	"print":      func(args ...any) (string, error) { return capValue(fmt.Sprint(args...)) },
	"println":    func(args ...any) (string, error) { return capValue(fmt.Sprintln(args...)) },
	"printf":     printfCapped,
	"html":       func(args ...any) (string, error) { return capValue(template.HTMLEscaper(args...)) },
	"js":         func(args ...any) (string, error) { return capValue(template.JSEscaper(args...)) },
	"urlquery":   func(args ...any) (string, error) { return capValue(template.URLQueryEscaper(args...)) },
}

// capValue returns s, or an error if it is longer than maxValueBytes. (The template
// package names the function in the error.)
func capValue(s string) (string, error) {
	if len(s) > maxValueBytes {
		return "", errValueTooLong
	}
	return s, nil
}

var errValueTooLong = fmt.Errorf("result longer than %d bytes", maxValueBytes)

// replaceAll is strings.ReplaceAll(s, from, to) that computes the result's length
// before building it.
func replaceAll(from, to, s string) (string, error) {
	n := strings.Count(s, from) // for from == "": runes + 1, as ReplaceAll inserts
	if len(s)+n*(len(to)-len(from)) > maxValueBytes {
		return "", errValueTooLong
	}
	return strings.ReplaceAll(s, from, to), nil
}

// printfCapped is fmt.Sprintf that refuses widths, precisions and argument indexes
// above maxValueBytes, and widths taken from arguments (*), whose output could be
// large before the result's length is checked.
func printfCapped(format string, args ...any) (string, error) {
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		num := 0
		for i++; i < len(format) && strings.IndexByte("+-# 0123456789.[]*", format[i]) >= 0; i++ {
			switch c := format[i]; {
			case c == '*':
				return "", errors.New("* widths are not allowed")
			case c >= '0' && c <= '9':
				if num = num*10 + int(c-'0'); num > maxValueBytes {
					return "", fmt.Errorf("widths and precisions above %d are not allowed", maxValueBytes)
				}
			default:
				num = 0
			}
		}
	}
	return capValue(fmt.Sprintf(format, args...))
}

// ParseTemplate parses the key template text of field (a path such as
// "spec.lock.occurrenceKey", used in messages) with the key function set and
// missingkey=error. It rejects what could loop, recurse or grow without bound: range,
// define, block and template actions, and method calls with arguments that are not
// constants (such as .ScheduledTime.Format fed its own output). Errors are
// *specerror.Error{Reason: InvalidTemplate}.
func ParseTemplate(field, text string) (*template.Template, error) {
	if text == "" {
		return nil, specerror.Errorf(specerror.InvalidTemplateReason, "%s is empty", field)
	}
	if len(text) > maxTemplateBytes {
		return nil, specerror.Errorf(specerror.InvalidTemplateReason, "%s is %d bytes long, more than the %d allowed", field, len(text), maxTemplateBytes)
	}
	t, err := template.New(field).Funcs(keyFuncs).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, specerror.Errorf(specerror.InvalidTemplateReason, "invalid key template %s", strings.TrimPrefix(err.Error(), "template: "))
	}
	for _, d := range t.Templates() {
		if d.Name() != field {
			return nil, specerror.Errorf(specerror.InvalidTemplateReason, "%s: define and block are not allowed in key templates", field)
		}
	}
	if t.Tree == nil || t.Root == nil {
		return nil, specerror.Errorf(specerror.InvalidTemplateReason, "%s is empty", field)
	}
	if err := checkKeyNode(t.Tree, t.Root, true); err != nil {
		return nil, specerror.Errorf(specerror.InvalidTemplateReason, "invalid key template %v", err)
	}
	return t, nil
}

// checkKeyNode walks the parse tree and rejects what key templates may not do.
// firstInPipe is false for the second and later commands of a pipeline, which
// receive the previous command's result as their last argument.
func checkKeyNode(tree *parse.Tree, n parse.Node, firstInPipe bool) error {
	reject := func(what string) error {
		loc, _ := tree.ErrorContext(n)
		return fmt.Errorf("%s: %s", loc, what)
	}
	switch n := n.(type) {
	case nil:
		return nil
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkKeyNode(tree, c, true); err != nil {
				return err
			}
		}
	case *parse.TextNode, *parse.CommentNode, *parse.DotNode, *parse.NilNode,
		*parse.BoolNode, *parse.NumberNode, *parse.StringNode, *parse.IdentifierNode,
		*parse.FieldNode, *parse.VariableNode:
		return nil
	case *parse.ActionNode:
		return checkKeyNode(tree, n.Pipe, true)
	case *parse.IfNode:
		return checkBranch(tree, &n.BranchNode)
	case *parse.WithNode:
		return checkBranch(tree, &n.BranchNode)
	case *parse.RangeNode:
		return reject("range is not allowed in key templates")
	case *parse.TemplateNode:
		return reject("template is not allowed in key templates")
	case *parse.PipeNode:
		if n == nil {
			return nil
		}
		for i, c := range n.Cmds {
			if err := checkKeyNode(tree, c, i == 0); err != nil {
				return err
			}
		}
	case *parse.ChainNode:
		return checkKeyNode(tree, n.Node, true)
	case *parse.CommandNode:
		if isMethodCall(n.Args[0]) {
			if !firstInPipe {
				return reject(fmt.Sprintf("%s cannot take a piped value: methods take only constant arguments", n.Args[0]))
			}
			for _, a := range n.Args[1:] {
				if !isConstant(a) {
					return reject(fmt.Sprintf("%s takes %s: methods take only constant arguments", n.Args[0], a))
				}
			}
		}
		for _, a := range n.Args {
			if err := checkKeyNode(tree, a, true); err != nil {
				return err
			}
		}
	default:
		return reject(fmt.Sprintf("%s is not allowed in key templates", n))
	}
	return nil
}

func checkBranch(tree *parse.Tree, b *parse.BranchNode) error {
	for _, n := range []parse.Node{b.Pipe, b.List, b.ElseList} {
		if err := checkKeyNode(tree, n, true); err != nil {
			return err
		}
	}
	return nil
}

// isMethodCall reports whether a command's first word evaluates a field or method
// (.A.B, $x.B, (pipeline).B), which receives the command's other words as arguments.
func isMethodCall(n parse.Node) bool {
	switch n := n.(type) {
	case *parse.FieldNode, *parse.ChainNode:
		return true
	case *parse.VariableNode:
		return len(n.Ident) > 1
	}
	return false
}

func isConstant(n parse.Node) bool {
	switch n.(type) {
	case *parse.StringNode, *parse.NumberNode, *parse.BoolNode, *parse.NilNode:
		return true
	}
	return false
}

// errKeyTooLong stops a template whose output passed the longest key.
var errKeyTooLong = errors.New("key too long")

// keyWriter keeps at most one byte more than the longest key, then fails the
// write, which ends the template's execution.
type keyWriter struct{ buf bytes.Buffer }

func (w *keyWriter) Write(p []byte) (int, error) {
	room := lockclient.MaxKeyLength + 1 - w.buf.Len()
	if len(p) > room {
		w.buf.Write(p[:room])
		return room, errKeyTooLong
	}
	return w.buf.Write(p)
}

// Render executes t (from ParseTemplate) with data and checks the result with
// lockclient.ValidateKey. Output beyond 513 bytes is never buffered. Errors are
// *specerror.Error: InvalidTemplate when execution fails (a missing field, a function
// error), InvalidKey when the key is empty, too long, or has whitespace or control
// characters. Messages name field and quote at most 80 bytes of the key.
func Render(field string, t *template.Template, data Data) (string, error) {
	var w keyWriter
	if err := t.Execute(&w, data); err != nil {
		if errors.Is(err, errKeyTooLong) {
			return "", specerror.Errorf(specerror.InvalidKeyReason, "%s renders a key longer than %d bytes: %s",
				field, lockclient.MaxKeyLength, quoteKey(w.buf.String()))
		}
		return "", specerror.Errorf(specerror.InvalidTemplateReason, "key template failed: %s", strings.TrimPrefix(err.Error(), "template: "))
	}
	key := w.buf.String()
	if err := lockclient.ValidateKey(key); err != nil {
		msg := err.Error()
		switch q := strconv.Quote(key); {
		case key == "":
		case strings.Contains(msg, q):
			msg = strings.Replace(msg, q, quoteKey(key), 1)
		default:
			msg += ": " + quoteKey(key)
		}
		return "", specerror.Errorf(specerror.InvalidKeyReason, "%s renders an invalid key: %s", field, msg)
	}
	return key, nil
}

// quoteKey quotes key for a message, cut to keyMessageBytes (on a rune boundary).
func quoteKey(key string) string {
	if len(key) <= keyMessageBytes {
		return strconv.Quote(key)
	}
	cut := keyMessageBytes
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return strconv.Quote(key[:cut]) + "..."
}
