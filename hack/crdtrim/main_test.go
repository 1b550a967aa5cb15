package main

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

const crd = `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: things.example.dev
spec:
  versions:
  - name: v1
    schema:
      openAPIV3Schema:
        description: Thing is ours.
        properties:
          spec:
            description: spec is ours.
            properties:
              jobTemplate:
                description: jobTemplate is ours.
                properties:
                  metadata:
                    description: |-
                      Standard object's metadata.
                      More info: https://example.dev

                      A second paragraph.
                    type: object
                  spec:
                    description: Specification of the desired behavior
                      of a job, folded over two lines.
                    properties:
                      description:
                        description: a field named description stays
                        type: string
                      mode:
                        default:
                          description: a default value stays
                        description: mode of the job.
                        enum:
                        - A
                        type: string
                      list:
                        items:
                          description: an item
                          type: string
                        type: array
                      either:
                        anyOf:
                        - type: integer
                        - type: string
                        description: int or string
                        x-kubernetes-int-or-string: true
                    required:
                    - mode
                    type: object
                type: object
              schedule:
                description: schedule is ours.
                type: string
            type: object
        type: object
    served: true
    storage: true
`

func TestTrimRemovesOnlyTheDescriptionsInsideJobTemplate(t *testing.T) {
	g := NewWithT(t)
	out, err := Trim([]byte(crd))
	g.Expect(err).NotTo(HaveOccurred())
	s := string(out)
	for _, kept := range []string{"Thing is ours.", "spec is ours.", "jobTemplate is ours.", "schedule is ours.",
		"a default value stays", "                      description:\n", "enum:", "required:", "x-kubernetes-int-or-string: true"} {
		g.Expect(s).To(ContainSubstring(kept))
	}
	for _, gone := range []string{"Standard object", "A second paragraph", "desired behavior", "folded over", "a field named description stays",
		"mode of the job", "an item", "int or string"} {
		g.Expect(s).NotTo(ContainSubstring(gone))
	}
	// Nothing else changed: the result is the input less whole lines.
	g.Expect(strings.Count(crd, "\n") - strings.Count(s, "\n")).To(Equal(11))

	again, err := Trim(out)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(again)).To(Equal(s), "trimming twice changes nothing")
}

func TestTrimRefusesWhatItCannotTrimSafely(t *testing.T) {
	g := NewWithT(t)
	_, err := Trim([]byte(strings.Replace(crd, "jobTemplate:", "podTemplate:", 1)))
	g.Expect(err).To(MatchError(ContainSubstring("no schema for spec.jobTemplate")))

	// A flow-style schema cannot be cut line by line.
	_, err = Trim([]byte(strings.Replace(crd, "                        items:\n                          description: an item\n                          type: string\n",
		"                        items: {description: an item, type: string}\n", 1)))
	g.Expect(err).To(HaveOccurred())
}
