package runparams

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

var decls = []batchv1alpha1.RunParameter{
	{Name: "REGION", Enum: []string{"eu-west-1", "us-east-1"}, Default: ptr.To("eu-west-1")},
	{Name: "DRY_RUN", Pattern: "true|false", Default: ptr.To("true")},
	{Name: "NOTE"},
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		values map[string]string
		err    string // "" means accepted
	}{
		{name: "decls values within their enum and pattern are accepted", values: map[string]string{"REGION": "us-east-1", "DRY_RUN": "false"}},
		{name: "no values are accepted", values: nil},
		{name: "a free parameter takes any printable value", values: map[string]string{"NOTE": "re-run after the 2026-11-30 incident"}},
		{name: "an undeclared name is refused, naming the decls ones", values: map[string]string{"PATH": "/tmp"},
			err: `parameter "PATH" is not declared in spec.parameters (declared: DRY_RUN, NOTE, REGION)`},
		{name: "a value outside the enum is refused", values: map[string]string{"REGION": "ap-south-1"},
			err: `parameter REGION="ap-south-1" is not one of "eu-west-1", "us-east-1"`},
		{name: "a pattern must match the whole value", values: map[string]string{"DRY_RUN": "falsely"},
			err: `parameter DRY_RUN="falsely" does not match its pattern true|false`},
		{name: "a newline in a value is refused", values: map[string]string{"NOTE": "a\nb"},
			err: "parameter NOTE: the value contains control characters"},
		{name: "every problem is named in one message", values: map[string]string{"A": "1", "REGION": "x"},
			err: `parameter "A" is not declared in spec.parameters (declared: DRY_RUN, NOTE, REGION); parameter REGION="x" is not one of`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(decls, tt.values)
			if tt.err == "" {
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
				return
			}
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tt.err)))
		})
	}
	t.Run("a GuardedJob without parameters says so", func(t *testing.T) {
		NewWithT(t).Expect(Check(nil, map[string]string{"X": "1"})).To(MatchError(ContainSubstring("(it declares none)")))
	})
	t.Run("a value over 256 bytes is refused", func(t *testing.T) {
		long := make([]byte, 257)
		for i := range long {
			long[i] = 'a'
		}
		NewWithT(t).Expect(Check(decls, map[string]string{"NOTE": string(long)})).To(MatchError(ContainSubstring("257 bytes, more than 256")))
	})
}

func TestParseAndFormat(t *testing.T) {
	g := NewWithT(t)
	values, err := Parse(`{"REGION":"us-east-1","DRY_RUN":"false"}`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(values).To(Equal(map[string]string{"REGION": "us-east-1", "DRY_RUN": "false"}))
	g.Expect(Format(values)).To(Equal(`{"DRY_RUN":"false","REGION":"us-east-1"}`))
	g.Expect(Describe(values)).To(Equal("DRY_RUN=false, REGION=us-east-1"))
	empty, err := Parse("  ")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(empty).To(BeNil())
	for _, bad := range []string{`REGION=eu`, `{"REGION":1}`, `["a"]`} {
		_, err := Parse(bad)
		g.Expect(err).To(MatchError(ContainSubstring("must be a JSON object of names and string values")), bad)
	}
}

func TestEffectiveFillsInTheDefaults(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Effective(decls, map[string]string{"DRY_RUN": "false"})).To(Equal(map[string]string{
		"REGION": "eu-west-1", "DRY_RUN": "false", "NOTE": "",
	}))
	g.Expect(Effective(nil, nil)).To(BeNil())
}

func TestCheckDeclarationsFindsAPatternThatDoesNotCompile(t *testing.T) {
	g := NewWithT(t)
	g.Expect(CheckDeclarations(decls)).To(Succeed())
	err := CheckDeclarations([]batchv1alpha1.RunParameter{{Name: "X", Pattern: "(a"}})
	g.Expect(err).To(MatchError(ContainSubstring(`spec.parameters X: pattern "(a" is not a regular expression (RE2 syntax)`)))
}
