package runtoken

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/guardedjob/guardedjob/internal/leasetoken"
)

func TestMintedForRecognisesOnlyItsOwnRun(t *testing.T) {
	g := NewWithT(t)
	run := Run{Cluster: "cluster-a", Namespace: "payments", Name: "settle", UID: "uid-1", Occurrence: time.Date(2026, 11, 30, 0, 5, 0, 0, time.UTC)}
	token, job, err := Mint(run)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(leasetoken.HolderOf(token)).To(Equal("cluster-a/payments/" + job))
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
		"no random part":                       leasetoken.HolderOf(token),
		"a foreign value":                      "some-service-instance-7",
		"a token of the old kind (all random)": leasetoken.HolderOf(token) + "#0123456789abcdef0123456789abcdef",
		"another holder":                       strings.Replace(token, "cluster-a/", "cluster-a2/", 1),
		"not hex":                              token[:len(token)-2] + "zz",
	} {
		_, ok := MintedFor(bad, run)
		g.Expect(ok).To(BeFalse(), name)
	}
}

// TestATokenAttestsWhatStartedItsRun: the start a run was minted with is
// attested by its token and recognised; any other is not, and whatever
// started it, the token identifies its run.
func TestATokenAttestsWhatStartedItsRun(t *testing.T) {
	g := NewWithT(t)
	run := Run{Cluster: "cluster-a", Namespace: "payments", Name: "settle", UID: "uid-1",
		Occurrence: time.Date(2026, 11, 30, 0, 5, 0, 0, time.UTC), Start: `"2026-11-30T00:05:00Z" "" 0 1796000000`}
	token, job, err := Mint(run)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(token[strings.LastIndexByte(token, '#')+1:]).To(MatchRegexp(`^[0-9a-f]{48}$`))
	g.Expect(StartedBy(token, run.Start)).To(BeTrue())
	g.Expect(StartedBy(token, `"guardedjobrun:uid-9" "" 0 1796000000`)).To(BeFalse(), "another start")
	g.Expect(StartedBy(token, "")).To(BeFalse(), "no start")
	g.Expect(StartedBy(leasetoken.HolderOf(token)+"#"+token[len(token)-48:len(token)-16], run.Start)).To(BeFalse(), "a token of the previous scheme attests nothing")
	other := run
	other.Start = "anything"
	got, ok := MintedFor(token, other)
	g.Expect(ok).To(BeTrue(), "the start does not identify the run")
	g.Expect(got).To(Equal(job))
}

func TestJobName(t *testing.T) {
	scheduled := time.Date(2026, 11, 29, 16, 5, 0, 0, time.UTC) // Unix 1795968300
	tests := []struct {
		name   string
		gj     string
		random string
		want   string
	}{
		{name: "name, scheduled Unix minutes and 6 characters of the random part",
			gj: "daily-settlement", random: "5f3a9c0b1d2e", want: "daily-settlement-29932805-5f3a9c"},
		{name: "a short random part is used whole", gj: "a", random: "ab", want: "a-29932805-ab"},
		{name: "the longest allowed name still fits a label value", gj: "a23456789-123456789-123456789-123456789-12345",
			random: "0123456789abcdef", want: "a23456789-123456789-123456789-123456789-12345-29932805-012345"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := JobName(tt.gj, scheduled, tt.random)
			g.Expect(got).To(Equal(tt.want))
			g.Expect(len(got)).To(BeNumerically("<=", 63))
			g.Expect(validation.IsDNS1123Label(got)).To(BeEmpty())
		})
	}
}

func TestJobNameIsTheSameInEveryZone(t *testing.T) {
	g := NewWithT(t)
	taipei, err := time.LoadLocation("Asia/Taipei")
	g.Expect(err).NotTo(HaveOccurred())
	utc := time.Date(2026, 11, 29, 16, 5, 0, 0, time.UTC)
	g.Expect(JobName("gj", utc.In(taipei), "abcdef")).To(Equal(JobName("gj", utc, "abcdef")))
}
