package main

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestSoftMemoryLimitIsNineTenthsOfTheContainersLimit(t *testing.T) {
	for _, tc := range []struct {
		name, limit, gomemlimit string
		want                    int64
		err                     string
	}{
		{name: "no limit given: none set", want: 0},
		{name: "the Downward API's bytes", limit: "268435456", want: 241591910},
		{name: "a quantity", limit: "256Mi", want: 241591910},
		{name: "GOMEMLIMIT is the operator's own choice", limit: "256Mi", gomemlimit: "200MiB", want: 0},
		{name: "not a quantity", limit: "lots", err: "--memory-limit \"lots\": want a quantity"},
		{name: "zero", limit: "0", err: "want more than 0 bytes"},
		{name: "negative", limit: "-1Gi", err: "want more than 0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := softMemoryLimit(tc.limit, tc.gomemlimit)
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
