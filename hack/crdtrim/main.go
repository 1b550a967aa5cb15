// Command crdtrim removes the field descriptions inside spec.jobTemplate from the
// GuardedJob CRD that controller-gen writes. Those descriptions are the Job API's
// own (kubectl explain job documents them) and make up most of the CRD: without
// them it fits in the 256 KiB last-applied annotation of a client-side
// `kubectl apply`. Everything else stays: the jobTemplate schema keeps every type,
// enum, required field and validation, so the API server still rejects a bad Job
// template at apply time, and every field the project defines keeps its
// description.
//
// It edits the files in place and leaves controller-gen's formatting alone: the
// description lines are cut out of the text, and the result is checked against
// the parsed document with the same descriptions removed.
//
//	go run ./hack/crdtrim config/crd/bases/batch.guardedjob.dev_guardedjobs.yaml
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: crdtrim CRD.yaml...")
		os.Exit(2)
	}
	for _, path := range os.Args[1:] {
		src, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		out, err := Trim(src)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(1)
		}
		if !bytes.Equal(out, src) {
			if err := os.WriteFile(path, out, 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
	}
}

// jobTemplatePath leads from a version's openAPIV3Schema to the jobTemplate schema.
var jobTemplatePath = []string{"properties", "spec", "properties", "jobTemplate"}

// Trim returns the CRD with every description under spec.jobTemplate removed, in
// every version; jobTemplate's own description stays. A CRD without a jobTemplate
// schema is an error, so a renamed field cannot make the step do nothing.
func Trim(src []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, errors.New("want one YAML document")
	}
	versions := lookup(doc.Content[0], "spec", "versions")
	if versions == nil || versions.Kind != yaml.SequenceNode || len(versions.Content) == 0 {
		return nil, errors.New("no spec.versions")
	}
	var cuts []cut
	for i, v := range versions.Content {
		jt := lookup(v, append([]string{"schema", "openAPIV3Schema"}, jobTemplatePath...)...)
		if jt == nil || jt.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("spec.versions[%d] has no schema for spec.jobTemplate", i)
		}
		cuts = collect(jt, false, cuts)
	}
	if len(cuts) == 0 {
		return src, nil
	}

	out, err := cutLines(src, cuts)
	if err != nil {
		return nil, err
	}
	// The text cut must equal the same removal made on the parsed document.
	// (A mapping has one description key at most, so no deletion moves another.)
	for _, c := range cuts {
		c.parent.Content = slices.Delete(c.parent.Content, c.index, c.index+2)
	}
	var want, got any
	if err := doc.Decode(&want); err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(out, &got); err != nil {
		return nil, fmt.Errorf("the trimmed CRD does not parse: %w", err)
	}
	if !reflect.DeepEqual(want, got) {
		return nil, errors.New("the trimmed CRD differs from the CRD with the descriptions removed: the file's layout is not the one controller-gen writes")
	}
	return out, nil
}

// cut is a description entry: the key at parent.Content[index], its value after it.
type cut struct {
	parent *yaml.Node
	index  int
	key    *yaml.Node
}

// collect finds the description entries of a schema and of the schemas inside it;
// own says whether the schema's own description goes too.
func collect(schema *yaml.Node, own bool, cuts []cut) []cut {
	if schema.Kind != yaml.MappingNode {
		return cuts // additionalProperties: true, for instance
	}
	for i := 0; i+1 < len(schema.Content); i += 2 {
		key, val := schema.Content[i], schema.Content[i+1]
		switch key.Value {
		case "description":
			if own {
				cuts = append(cuts, cut{parent: schema, index: i, key: key})
			}
		case "properties", "patternProperties":
			// A map from field name to schema: the names are data (a field may be
			// called description), the values schemas.
			for j := 1; j < len(val.Content); j += 2 {
				cuts = collect(val.Content[j], true, cuts)
			}
		case "items", "additionalProperties", "not":
			if val.Kind == yaml.SequenceNode {
				for _, s := range val.Content {
					cuts = collect(s, true, cuts)
				}
			} else {
				cuts = collect(val, true, cuts)
			}
		case "allOf", "anyOf", "oneOf":
			for _, s := range val.Content {
				cuts = collect(s, true, cuts)
			}
		}
		// Anything else (default, example, enum, x-kubernetes-validations) holds
		// values, not schemas: a "description" key there is data and stays.
	}
	return cuts
}

// cutLines removes each entry's lines: from its key to the next line indented no
// deeper than the key (the next key of the same mapping, or the mapping's end).
func cutLines(src []byte, cuts []cut) ([]byte, error) {
	lines := strings.SplitAfter(string(src), "\n")
	drop := make([]bool, len(lines))
	for _, c := range cuts {
		start, col := c.key.Line-1, c.key.Column-1
		if start >= len(lines) || strings.TrimLeft(lines[start][:col], " ") != "" {
			return nil, fmt.Errorf("line %d: a description that does not start its own line", c.key.Line)
		}
		end := start + 1
		for end < len(lines) && (strings.TrimSpace(lines[end]) == "" || indent(lines[end]) > col) {
			end++
		}
		for i := start; i < end; i++ {
			drop[i] = true
		}
	}
	var b strings.Builder
	for i, l := range lines {
		if !drop[i] {
			b.WriteString(l)
		}
	}
	return []byte(b.String()), nil
}

func indent(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

// lookup follows mapping keys from n; nil when one is missing.
func lookup(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
				break
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}
