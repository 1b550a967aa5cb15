package runcore_test

import (
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"

	"github.com/guardedjob/guardedjob/internal/runcore"
)

// A stopping run releases only once no Pod of it is left, as the cache and
// then the API server count them, and its Job finished or is being deleted.
func TestAStoppingRunReleasesOnlyOnceNothingOfItIsLeft(t *testing.T) {
	none := runcore.StopOutcome{}
	pods := runcore.StopOutcome{Pods: 1}
	running := runcore.StopOutcome{Job: runcore.RunJobView{Exists: true}}
	for _, c := range []struct {
		name    string
		answers []runcore.StopOutcome
		effects []runcore.StopEffect
	}{
		{"Pods in the cache", []runcore.StopOutcome{pods}, []runcore.StopEffect{runcore.CountPods, runcore.WaitForPods}},
		{"a Pod only the API server shows yet", []runcore.StopOutcome{none, pods},
			[]runcore.StopEffect{runcore.CountPods, runcore.CountPodsLive, runcore.WaitForPods}},
		{"a Job the stop controller has not deleted yet", []runcore.StopOutcome{none, none, running},
			[]runcore.StopEffect{runcore.CountPods, runcore.CountPodsLive, runcore.ReadStoppedJob, runcore.WaitForStopper}},
		{"a Job being deleted", []runcore.StopOutcome{none, none, {Job: runcore.RunJobView{Exists: true, Deleting: true}}},
			[]runcore.StopEffect{runcore.CountPods, runcore.CountPodsLive, runcore.ReadStoppedJob, runcore.GoRelease}},
		{"a Job that finished", []runcore.StopOutcome{none, none, {Job: runcore.RunJobView{Exists: true, Finished: batchv1.JobFailed}}},
			[]runcore.StopEffect{runcore.CountPods, runcore.CountPodsLive, runcore.ReadStoppedJob, runcore.GoRelease}},
		{"a Job that is gone", []runcore.StopOutcome{none, none, none},
			[]runcore.StopEffect{runcore.CountPods, runcore.CountPodsLive, runcore.ReadStoppedJob, runcore.GoRelease}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := runcore.NewStopping()
			var got []runcore.StopEffect
			for _, a := range c.answers {
				got = append(got, m.Next())
				m.Deliver(a)
			}
			got = append(got, m.Next())
			NewWithT(t).Expect(got).To(Equal(c.effects))
		})
	}
}
