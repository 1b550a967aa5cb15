package runcore

// A run in phase Stopping waits until no Pod of it is left, then releases
// (step release, from Stopping): its Pods are deleted by the stop controller,
// and releasing the lease lets another holder start. A Pod the cache has not
// seen yet, or a Job the stop controller has not deleted yet, keeps it
// waiting. The adapter performs what Next says and delivers the answer, until
// the run waits or goes on to Releasing.

// StopEffect is what a stopping run needs next.
type StopEffect int

const (
	// CountPods counts the run's Pods in the cache.
	CountPods StopEffect = iota + 1
	// CountPodsLive counts them on the API server: the cache shows none, and
	// a Pod it has not seen yet would work on after the release.
	CountPodsLive
	// ReadStoppedJob reads the run's Job (a cached miss confirmed live).
	ReadStoppedJob
	// WaitForPods: Pods are left; look again when they are gone.
	WaitForPods
	// WaitForStopper: the Job neither finished nor is being deleted yet; the
	// stop controller deletes it, and its deletion brings the next pass.
	WaitForStopper
	// GoRelease: nothing of the run is left working; it releases in this
	// pass (phase Releasing).
	GoRelease
)

// StopOutcome is the answer to the effect Next returned.
type StopOutcome struct {
	// Pods answers CountPods and CountPodsLive.
	Pods int
	// Job answers ReadStoppedJob.
	Job RunJobView
}

// Stopping is the pass of a run in phase Stopping.
type Stopping struct{ next StopEffect }

// NewStopping starts the pass of a stopping run.
func NewStopping() *Stopping { return &Stopping{next: CountPods} }

// Next is the effect the stopping run needs now.
func (m *Stopping) Next() StopEffect { return m.next }

// Deliver takes the answer to the effect Next returned.
func (m *Stopping) Deliver(o StopOutcome) {
	switch m.next {
	case CountPods, CountPodsLive:
		switch {
		case o.Pods > 0:
			m.next = WaitForPods
		case m.next == CountPods:
			m.next = CountPodsLive
		default:
			m.next = ReadStoppedJob
		}
	case ReadStoppedJob:
		m.next = GoRelease
		if o.Job.Exists && !o.Job.Deleting && o.Job.Finished == "" {
			m.next = WaitForStopper
		}
	}
}
