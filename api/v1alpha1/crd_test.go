package v1alpha1

import (
	"encoding/json"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// etcdObjectLimit is etcd's default request size limit (--max-request-bytes), the
// largest object the API server can store.
const etcdObjectLimit = 1536 * 1024

// clientSideApplyBudget bounds the CRD as JSON: a client-side `kubectl apply` (and
// Argo CD's default sync) stores the whole object in the
// kubectl.kubernetes.io/last-applied-configuration annotation, and all of an
// object's annotations together may hold 256 KiB. The rest is headroom for fields
// the project adds.
const clientSideApplyBudget = 200 * 1024

func readCRD(t *testing.T) (*apiextensionsv1.CustomResourceDefinition, []byte) {
	t.Helper()
	raw, err := os.ReadFile("../../config/crd/bases/batch.guardedjob.dev_guardedjobs.yaml")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	crd := &apiextensionsv1.CustomResourceDefinition{}
	NewWithT(t).Expect(yaml.UnmarshalStrict(raw, crd)).To(Succeed())
	stored, err := json.Marshal(crd)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return crd, stored
}

// The CRD carries field docs for kubectl explain and still fits in the API
// server, with room to spare for a second version.
func TestCRDFitsTheAPIServer(t *testing.T) {
	g := NewWithT(t)
	crd, stored := readCRD(t)
	g.Expect(len(stored)).To(BeNumerically("<", etcdObjectLimit/2),
		"the CRD is %d bytes as stored; the API server accepts at most %d", len(stored), etcdObjectLimit)

	g.Expect(crd.Spec.Versions).To(HaveLen(1))
	schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	lock := schema.Properties["spec"].Properties["lock"]
	g.Expect(lock.Properties["ttl"].Description).To(ContainSubstring("ttl"), "kubectl explain guardedjob.spec.lock.ttl explains the field")
	g.Expect(schema.Properties["spec"].Properties["schedule"].Description).NotTo(BeEmpty())
	g.Expect(schema.Properties["status"].Properties["conditions"].Description).NotTo(BeEmpty())
}

// kubectl get gj shows what a reader needs to tell a broken object from a healthy
// idle one (READY, LAST RESULT), as cert-manager and Flux show readiness by
// default, in CronJob's order; -o wide adds the zone and the lock (state, holder,
// fence) and the next schedule, each beside the column it explains.
func TestCRDPrinterColumns(t *testing.T) {
	g := NewWithT(t)
	crd, _ := readCRD(t)
	var normal, wide []string
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		name := strings.ToUpper(c.Name)
		if c.Priority == 0 {
			normal = append(normal, name)
		}
		wide = append(wide, name)
	}
	g.Expect(normal).To(Equal([]string{"SCHEDULE", "SUSPEND", "ACTIVE", "READY", "LAST RESULT", "LAST SCHEDULE", "AGE"}))
	g.Expect(wide).To(Equal([]string{"SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "READY", "LOCK", "HOLDER", "FENCE",
		"LAST RESULT", "LAST SCHEDULE", "NEXT SCHEDULE", "AGE"}))
}

// The CRD fits a client-side kubectl apply, with room to grow.
func TestCRDFitsAClientSideApply(t *testing.T) {
	_, stored := readCRD(t)
	NewWithT(t).Expect(len(stored)).To(BeNumerically("<=", clientSideApplyBudget),
		"the CRD is %d bytes as JSON: over %d, a client-side kubectl apply of it is close to failing on the 256 KiB annotation limit", len(stored), clientSideApplyBudget)
}

// The docs state the CRD's size as JSON (what a client-side apply records), as
// this test measures it; within 5%, so that a few added fields need no edit.
func TestDocsStateTheCRDSize(t *testing.T) {
	g := NewWithT(t)
	_, stored := readCRD(t)
	kb := float64(len(stored)) / 1000
	for _, doc := range []string{"../../docs/api.md", "../../docs/benchmarks.md"} {
		raw, err := os.ReadFile(doc)
		g.Expect(err).NotTo(HaveOccurred())
		text := strings.Join(strings.Fields(string(raw)), " ")
		m := regexp.MustCompile(`CRD at about (\d+) KB as JSON|drops them \((\d+) KB today`).FindStringSubmatch(text)
		g.Expect(m).NotTo(BeNil(), "%s states the CRD's size", doc)
		stated, err := strconv.Atoi(m[1] + m[2])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(math.Abs(float64(stated)-kb)/kb).To(BeNumerically("<=", 0.05),
			"%s says %d KB; the CRD is %.0f KB as JSON (%d bytes)", doc, stated, kb, len(stored))
	}
}

// kubectl explain documents every field the project defines. Only the fields inside
// spec.jobTemplate, which are the Job API's (kubectl explain job documents them),
// go without: make manifests drops them to keep the CRD small (hack/crdtrim).
func TestCRDDocumentsEveryProjectField(t *testing.T) {
	g := NewWithT(t)
	crd, _ := readCRD(t)
	for _, v := range crd.Spec.Versions {
		root := v.Schema.OpenAPIV3Schema
		g.Expect(root.Description).NotTo(BeEmpty(), "kubectl explain guardedjob")
		var missing []string
		var walk func(path string, s apiextensionsv1.JSONSchemaProps)
		walk = func(path string, s apiextensionsv1.JSONSchemaProps) {
			for name, p := range s.Properties {
				field := path + "." + name
				if field == ".metadata" || field == ".spec.jobTemplate.metadata" || strings.HasPrefix(field, ".spec.jobTemplate.spec") {
					continue // the API's own types
				}
				if strings.TrimSpace(p.Description) == "" {
					missing = append(missing, field)
				}
				walk(field, p)
			}
			if s.Items != nil && s.Items.Schema != nil {
				walk(path+"[]", *s.Items.Schema)
			}
			if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
				walk(path+"{}", *s.AdditionalProperties.Schema)
			}
		}
		walk("", *root)
		sort.Strings(missing)
		g.Expect(missing).To(BeEmpty(), "fields of version %s without a description (add a doc comment in api/%s)", v.Name, v.Name)
		for _, f := range []string{"spec", "status"} {
			g.Expect(root.Properties).To(HaveKey(f))
		}
		spec := root.Properties["spec"]
		for _, f := range []string{"lock", "fencing", "schedule", "jobTemplate"} {
			g.Expect(spec.Properties[f].Description).NotTo(BeEmpty(), "spec.%s", f)
		}
	}
}

// spec.jobTemplate keeps the Job API's full schema, descriptions aside: a Job
// template with a mistake is refused at apply time, not when the manager creates
// the Job.
func TestCRDValidatesTheJobTemplate(t *testing.T) {
	g := NewWithT(t)
	crd, _ := readCRD(t)
	jt := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["jobTemplate"]
	g.Expect(jt.XPreserveUnknownFields).To(BeNil(), "jobTemplate is validated, not kept as it comes")
	g.Expect(jt.Description).NotTo(BeEmpty(), "jobTemplate's own description is the project's")
	podSpec := jt.Properties["spec"].Properties["template"].Properties["spec"]
	containers := podSpec.Properties["containers"]
	g.Expect(containers.Type).To(Equal("array"))
	g.Expect(containers.Items.Schema.Required).To(ContainElement("name"))
	g.Expect(podSpec.Properties["restartPolicy"].Type).To(Equal("string"))
	var described []string
	var walk func(path string, s apiextensionsv1.JSONSchemaProps)
	walk = func(path string, s apiextensionsv1.JSONSchemaProps) {
		for name, p := range s.Properties {
			if p.Description != "" {
				described = append(described, path+"."+name)
			}
			walk(path+"."+name, p)
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(path+"[]", *s.Items.Schema)
		}
	}
	walk("spec.jobTemplate", jt)
	sort.Strings(described)
	g.Expect(described).To(BeEmpty(), "make manifests drops the Job API's descriptions (hack/crdtrim)")
}

// kubectl explain and docs/api.md describe the run order as it is: the Job is
// created right after the acquisition, before status records the run, and waits
// at its start gate. Phrases of the older order (status first, the Job after)
// must not come back.
func TestTheDocsDescribeTheJobFirstOrder(t *testing.T) {
	g := NewWithT(t)
	crd, _ := readCRD(t)
	active := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties["active"].Items.Schema
	phase := active.Properties["phase"].Description
	g.Expect(phase).To(And(ContainSubstring("start gate"), ContainSubstring("before this status")), "kubectl explain guardedjob.status.active.phase")
	api, err := os.ReadFile("../../docs/api.md")
	g.Expect(err).NotTo(HaveOccurred())
	for name, text := range map[string]string{"the CRD": phase + active.Description, "docs/api.md": string(api)} {
		for _, old := range []string{"intent recorded", "Job created or about to be", "fixed when the run is recorded", "when the intent is recorded"} {
			g.Expect(text).NotTo(ContainSubstring(old), "%s describes the status-first order", name)
		}
	}
}
