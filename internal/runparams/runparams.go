// Package runparams checks the parameter values of a manual run against the
// parameters a GuardedJob declares (spec.parameters): only declared names, only
// values their pattern or enum allows. The manager and the kubectl plugin use the
// same rules, so the plugin refuses what the manager would.
package runparams

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// MaxAnnotation is the longest run-now-parameters annotation value read, in
// bytes: 16 names and values of at most 64 and 256 bytes, quoted.
const MaxAnnotation = 8 << 10

// Parse reads the run-now-parameters annotation: a JSON object whose values are
// strings. "" is no parameters.
func Parse(v string) (map[string]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	if len(v) > MaxAnnotation {
		return nil, fmt.Errorf("%s is %d bytes, more than %d", batchv1alpha1.RunNowParametersAnnotation, len(v), MaxAnnotation)
	}
	var out map[string]string
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("%s must be a JSON object of names and string values such as {\"REGION\":\"eu-west-1\"}", batchv1alpha1.RunNowParametersAnnotation)
	}
	return out, nil
}

// Format writes parameter values as the run-now-parameters annotation holds
// them (names sorted).
func Format(values map[string]string) string {
	if len(values) == 0 {
		return ""
	}
	b, _ := json.Marshal(values) // a map of strings always marshals, keys sorted
	return string(b)
}

// CheckDeclarations checks what the schema cannot: that every pattern compiles.
func CheckDeclarations(decl []batchv1alpha1.RunParameter) error {
	for _, p := range decl {
		if p.Pattern == "" {
			continue
		}
		if _, err := compile(p.Pattern); err != nil {
			return fmt.Errorf("spec.parameters %s: pattern %q is not a regular expression (RE2 syntax): %v", p.Name, p.Pattern, err)
		}
	}
	return nil
}

// Check checks values against the declarations: every name declared, every
// value allowed by its parameter's pattern or enum. All problems are reported in
// one error, names sorted.
func Check(decl []batchv1alpha1.RunParameter, values map[string]string) error {
	byName := make(map[string]*batchv1alpha1.RunParameter, len(decl))
	for i := range decl {
		byName[decl[i].Name] = &decl[i]
	}
	var errs []string
	for _, name := range slices.Sorted(maps.Keys(values)) {
		p := byName[name]
		if p == nil {
			errs = append(errs, fmt.Sprintf("parameter %q is not declared in spec.parameters (%s)", clip(name, 64), declared(decl)))
			continue
		}
		if err := checkValue(p, values[name]); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; "))
}

func checkValue(p *batchv1alpha1.RunParameter, v string) error {
	switch {
	case len(v) > batchv1alpha1.MaxParameterValue:
		return fmt.Errorf("parameter %s: the value is %d bytes, more than %d", p.Name, len(v), batchv1alpha1.MaxParameterValue)
	case strings.ContainsFunc(v, unicode.IsControl):
		return fmt.Errorf("parameter %s: the value contains control characters (a newline?)", p.Name)
	case len(p.Enum) > 0 && !slices.Contains(p.Enum, v):
		return fmt.Errorf("parameter %s=%q is not one of %s", p.Name, clip(v, 64), strings.Join(quoted(p.Enum), ", "))
	case p.Pattern != "":
		re, err := compile(p.Pattern)
		if err != nil {
			return fmt.Errorf("parameter %s: pattern %q does not compile: %v", p.Name, p.Pattern, err)
		}
		if !re.MatchString(v) {
			return fmt.Errorf("parameter %s=%q does not match its pattern %s", p.Name, clip(v, 64), p.Pattern)
		}
	}
	return nil
}

// Effective returns the value of every declared parameter: the one given, or
// its default.
func Effective(decl []batchv1alpha1.RunParameter, values map[string]string) map[string]string {
	if len(decl) == 0 {
		return nil
	}
	out := make(map[string]string, len(decl))
	for i := range decl {
		v, ok := values[decl[i].Name]
		if !ok {
			v = decl[i].ParameterDefault()
		}
		out[decl[i].Name] = v
	}
	return out
}

// Describe writes values as NAME=value pairs, names sorted, for events and
// messages.
func Describe(values map[string]string) string {
	parts := make([]string, 0, len(values))
	for _, k := range slices.Sorted(maps.Keys(values)) {
		parts = append(parts, k+"="+values[k])
	}
	return strings.Join(parts, ", ")
}

// compile compiles a pattern so that it must match a value as a whole, as the
// schema checks a default.
func compile(pattern string) (*regexp.Regexp, error) {
	return regexp.Compile("^(?:" + pattern + ")$")
}

func declared(decl []batchv1alpha1.RunParameter) string {
	if len(decl) == 0 {
		return "it declares none"
	}
	names := make([]string, len(decl))
	for i := range decl {
		names[i] = decl[i].Name
	}
	slices.Sort(names)
	return "declared: " + strings.Join(names, ", ")
}

func quoted(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
