package v1alpha1

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// etcdObjectLimit is etcd's default request size limit (--max-request-bytes), the
// largest object the API server can store.
const etcdObjectLimit = 1536 * 1024

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

// kubectl get gj shows the columns users and the docs rely on; -o wide adds
// the rest.
func TestCRDPrinterColumns(t *testing.T) {
	g := NewWithT(t)
	crd, _ := readCRD(t)
	var normal, wide []string
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		name := strings.ToUpper(c.Name)
		if c.Priority == 0 {
			normal = append(normal, name)
		} else {
			wide = append(wide, name)
		}
	}
	g.Expect(normal).To(Equal([]string{"SCHEDULE", "SUSPEND", "READY", "LOCK", "HOLDER", "FENCE", "LAST SCHEDULE", "LAST SUCCESS", "AGE"}))
	g.Expect(wide).To(Equal([]string{"TIMEZONE", "KEY", "NEXT SCHEDULE", "LAST RESULT"}))
}
