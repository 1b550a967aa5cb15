package runtoken

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/lockclient"
)

func TestMintedForRecognisesOnlyItsOwnRun(t *testing.T) {
	g := NewWithT(t)
	run := Run{Cluster: "cluster-a", Namespace: "payments", Name: "settle", UID: "uid-1", Occurrence: time.Date(2026, 11, 30, 0, 5, 0, 0, time.UTC)}
	token, job, err := Mint(run)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lockclient.HolderOf(token)).To(Equal("cluster-a/payments/" + job))
	g.Expect(job).To(MatchRegexp(`^settle-29933285-[0-9a-f]{6}$`))
	got, ok := MintedFor(token, run)
	g.Expect(ok).To(BeTrue())
	g.Expect(got).To(Equal(job))

	other, _, err := Mint(run)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other).NotTo(Equal(token), "each run has random bits of its own")

	for name, r := range map[string]Run{
		"another cluster name":                          {Cluster: "cluster-b", Namespace: run.Namespace, Name: run.Name, UID: run.UID, Occurrence: run.Occurrence},
		"another object of the same name (another UID)": {Cluster: run.Cluster, Namespace: run.Namespace, Name: run.Name, UID: "uid-2", Occurrence: run.Occurrence},
		"another namespace":                             {Cluster: run.Cluster, Namespace: "reports", Name: run.Name, UID: run.UID, Occurrence: run.Occurrence},
		"another occurrence":                            {Cluster: run.Cluster, Namespace: run.Namespace, Name: run.Name, UID: run.UID, Occurrence: run.Occurrence.Add(time.Hour)},
	} {
		_, ok := MintedFor(token, r)
		g.Expect(ok).To(BeFalse(), name)
	}
	for name, bad := range map[string]string{
		"no random part":                       lockclient.HolderOf(token),
		"a foreign value":                      "some-service-instance-7",
		"a token of the old kind (all random)": lockclient.HolderOf(token) + "#0123456789abcdef0123456789abcdef",
		"another holder":                       strings.Replace(token, "cluster-a/", "cluster-a2/", 1),
		"not hex":                              token[:len(token)-32] + "zz" + token[len(token)-30:],
	} {
		_, ok := MintedFor(bad, run)
		g.Expect(ok).To(BeFalse(), name)
	}
}
