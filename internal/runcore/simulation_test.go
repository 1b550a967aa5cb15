package runcore_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/due"
	"github.com/guardedjob/guardedjob/internal/leasetiming"
	"github.com/guardedjob/guardedjob/internal/leasetoken"
	"github.com/guardedjob/guardedjob/internal/runcore"
	"github.com/guardedjob/guardedjob/internal/runtoken"
	"github.com/guardedjob/guardedjob/internal/schedule"
)

// The simulation: the core's decisions for the start of a run
// (runcore.NewStart: its Job first, the guarded status write, then the gate), a
// recorded run (runcore.Running), stopping (runcore.NewStopping), its release
// (runcore.NewRelease), opening the gate (runcore.NewOpening), take-up of a
// lease a crashed pass left (runcore.TakeUp, with tokens minted as runtoken
// mints them), the adoption of a Job whose pass died before its status write
// (runcore.Adoption, runcore.RecordAdopted), the lease ledger and the end of a
// run in status, driven by one seeded random source against a simulated lock
// store, API server, Pods and pod guards, in two clusters that share one lock
// key. Faults come at any step: a manager dies before any effect of a run's
// start, or crashes later and resumes its leases from status; a manager is
// deposed (or dies) with a Job create in flight, and the API server carries it
// out up to a minute later, after a new leader may have acted on the key; a
// manager that dies was paused instead, a third of the time, and wakes up to a
// minute later, when its keeper renews every lease it kept whose key still
// holds its token until its leader election gives up and it exits (a lease the
// new manager left to expire lives longer); a GuardedJob moves to the other shard of its cluster, whose manager takes its
// leases over at its first pass while the shard it left hands them over
// (runcore.HandsOver, MayClaimShard, HandOver, HandedRun); the store restarts
// empty (its key, fence counter and done-markers gone); a manager dies before
// an effect of a release; the API server does not answer a create; the
// manager's cache shows a new Job late, sometimes after the run's starting
// deadline, or keeps showing a Job as it was before a change for up to 40 s
// (a pass judges a Job as its cache shows it; the delete of a Job waiting for
// adoption names the version judged, runcore.Unrecorded.DeleteNames, and the
// API server refuses it when the Job has changed since); a manager is deposed
// with such a delete in flight, which lands up to a minute later; a person runs
// the last occurrence again (a run-now, its value bound into the run's token,
// answered by the status write that records its run or by the adoption of its
// Job; runcore.RecordableFromJob keeps it out of the early order); the store
// stops answering;
// a node is cut off (its Pod works on where the API server no longer shows it);
// the API server refuses a cluster's status writes for a while; time passes;
// a tenant who may edit Jobs edits the run annotation of a Job waiting for
// adoption (runcore.TrustedRun judges it as the manager does); in a third of
// the seeds every manager stands still for 10 to 15 minutes at a quiet moment, after which the occurrences due meanwhile are later than
// their latest start (due.Late skips them) and done-markers have expired
// (their time to live is leasetiming.MarkerTTL's, for the spec simSpec).
// In a third of the seeds the managers' clocks differ within the allowance
// they are configured with (--clock-skew-allowance): what a manager writes
// into status is its own clock's reading, and a lease resumed from status
// counts its self-fence deadline from evidence read on another clock
// (runcore.KeepTermsOf).
// Half the seeds (drawn from a source of their own) run the early
// gate (runcore.NewEarlyStart: the gate opens before the status write): a
// restart resumes the lease of a Job past its gate that no status records when
// its key holds the token minted for it, adoption takes such Jobs too, the stop
// controller stops every other one (runcore.NewUnclaimed), and the Strict floor
// counts the Jobs' fences (runcore.FloorWithJobs). No goroutine and no wall
// clock: a seed replays exactly, and a failing seed prints its trace.
//
// The acquisition's store call, the stop controller and the keeper are the
// simulation's own, kept to what the code does: the stop controller deletes
// the Pods of a lease the keeper reports lost or at its self-fence deadline at
// once (the model's timing assumption). One cluster's runs have a pod guard,
// the other's have none. The invariants checked after every step are the
// model's I1, no two Pods work under the key at once (sparing a Pod whose lease
// the store lost in a restart without its data, until it stops), and I3: the
// fences each cluster's Pods start under keep rising; I2: no occurrence is
// completed (its done-marker written) by two runs since the store last lost
// its data (a person's run-now of it again aside); I9T: a run-now's work
// starts at most once; at every adoption and
// resume of a Job no status records, that the annotation stayed a hint (the
// run's keys, lease timing and pod guard are the spec's) and I8: what started
// the run is what its token attests; that a Job deleted as one that never
// started and may not be adopted never started (it is no run's working Job or
// history); and where the stop
// controller stops a Job no status records, I4: not while its key holds its
// token and its manager, not restarted since, merely stopped renewing it, nor
// after a restart that found the Job as its pass would adopt it (that restart
// renews its lease with the recorded ones: runcore.ResumesUnrecorded).
//
// GUARDEDJOB_SIM_SEEDS sets how many seeds run (10,000 by default, in a few
// seconds); GUARDEDJOB_SIM_SEED runs one seed and prints its trace;
// GUARDEDJOB_SIM_SKIP_REGRESSIONS=1 leaves the regression seeds out (to find
// the first seed that catches a bug planted anew).

const (
	simTTL         = 30 * time.Second
	simRenew       = 10 * time.Second
	simStopBudget  = 10 * time.Second // the self-fence deadline: ttl less this after the last confirmed renewal
	simGuardMargin = 5 * time.Second  // a guard stops its Pod this long before the lease it last saw could expire
	simPeriod      = time.Minute      // the schedule: one occurrence a minute
	simStartWithin = 20 * time.Second // a run not started this long after its acquisition is skipped
	simKey         = "team:settle"
	simHandover    = 45 * time.Second // --shard-handover-timeout
	// simSkew is --clock-skew-allowance in the seeds whose managers' clocks
	// differ: each manager's clock is off by -simSkew/2, 0 or +simSkew/2, so
	// two of them differ by at most simSkew, the bound the flag states.
	simSkew = 12 * time.Second
)

// simSchedule is the simulated GuardedJobs' schedule, one occurrence a minute.
var simSchedule = func() *schedule.Schedule {
	sched, err := schedule.Parse("* * * * *", "UTC")
	if err != nil {
		panic(err)
	}
	return sched
}()

// simSpec is the simulated GuardedJobs' spec, as far as the core and due read
// it: an occurrence due while a run is active waits behind it (BufferOne),
// and a run may start startingDeadlineSeconds after its occurrence, or after
// the run it waited behind (lock.maxHold and the stop budget).
func simSpec() batchv1alpha1.GuardedJobSpec {
	return batchv1alpha1.GuardedJobSpec{
		Schedule: "* * * * *", ConcurrencyPolicy: batchv1alpha1.BufferOneConcurrent, StartingDeadlineSeconds: ptr.To(int64(simStartWithin / time.Second)),
		Lock: batchv1alpha1.LockSpec{MaxHold: &metav1.Duration{Duration: 2 * time.Minute}},
	}
}

// errSimStoreDown is a store call's error while the simulated store is down.
var errSimStoreDown = errors.New("the store does not answer")

type simLease struct {
	token   string
	expires time.Time
}

// simStore is the lock store: one key with a time to live, its fence counter,
// and done-markers per occurrence. Every write compares the token, as the Lua
// scripts do.
type simStore struct {
	key     *simLease
	fence   int64
	markers map[string]simMarker
	down    bool
}

// simMarker is an occurrence's done-marker: who wrote it, and when it expires
// (leasetiming.MarkerTTL, as the manager's completion sets it).
type simMarker struct {
	by      string
	expires time.Time
}

func (st *simStore) expire(now time.Time) {
	if st.key != nil && !now.Before(st.key.expires) {
		st.key = nil
	}
}

// expireMarkers drops the done-markers whose time to live ended.
func (s *sim) expireMarkers() {
	for occ, m := range s.store.markers {
		if !s.now.Before(m.expires) {
			delete(s.store.markers, occ)
			s.expiredOcc++
			s.logf("the done-marker %s expires", occ)
		}
	}
}

func (st *simStore) holds(token string) bool { return st.key != nil && st.key.token == token }

type simPod struct {
	running bool
	visible bool
	// lostByStore: the store lost the lease this Pod works under (a restart
	// without its data): the two-Pod check spares it until it stops, as
	// failure-semantics.md says.
	lostByStore bool
	// until is when its guard stops it unless it reads the lease again.
	until time.Time
}

type simJob struct {
	name     string
	uid      types.UID
	token    string
	gated    bool
	finished batchv1.JobConditionType
	failed   bool
	pod      *simPod
	// deleted: the history limit deleted the Job; a Pod the API server could
	// not reach works on.
	deleted bool
	// guarded: its Pod has a pod guard (lock.podGuard).
	guarded bool
	// run is the run a Job created before its status write carries (its
	// run annotation), for adoption.
	run *batchv1alpha1.ActiveRun
	// seen is when the manager's cache shows the Job: it lags the API server.
	seen time.Time
	// fence is the fence its run took (its fence annotation).
	fence int64
	// openedIn is the restart count of its cluster's manager when its gate
	// opened.
	openedIn int
	// created is when the API server created the Job (its creation
	// timestamp, on the API server's clock).
	created time.Time
	// resumableIn is the restart count of its cluster's manager at the restart
	// that found the Job working, with no status recording it, as its pass
	// would adopt it (its key holding its token at its fence): that restart
	// had to resume its lease.
	resumableIn int
	// version is its resourceVersion: every change of the Job raises it.
	version int
	// cache is the Job as the manager's cache still shows it until
	// cacheUntil, when the cache fell behind a change; nil when it is current.
	cache      *simJob
	cacheUntil time.Time
}

// resourceVersion is the Job's version as the API server names it.
func (j *simJob) resourceVersion() string { return strconv.Itoa(j.version) }

// change changes the Job (f) and raises its version; now and then the
// manager's cache keeps showing the version before the change for up to 40 s
// (a cache that fell behind the world).
func (s *sim) change(j *simJob, f func()) {
	if s.cachedJob(j) == j && s.caches.IntN(4) == 0 {
		before := *j
		if j.pod != nil {
			pod := *j.pod
			before.pod = &pod
		}
		j.cache, j.cacheUntil = &before, s.now.Add(time.Duration(1+s.caches.IntN(40))*time.Second)
	}
	f()
	j.version++
}

// cachedJob is the Job as the manager's cache shows it now.
func (s *sim) cachedJob(j *simJob) *simJob {
	if j.cache != nil && s.now.Before(j.cacheUntil) {
		return j.cache
	}
	j.cache = nil
	return j
}

// apiJob is the Job of a name as the API server shows it, or nil.
func (c *simCluster) apiJob(name string) *simJob {
	if j := c.jobs[name]; j != nil && !j.deleted {
		return j
	}
	return nil
}

// simLanding is a Job create (or, with del set, the delete of a Job waiting
// for adoption, conditional on del) the API server carries out at at, after
// the manager that sent it died or lost its leadership.
type simLanding struct {
	at  time.Time
	c   *simCluster
	job *simJob
	del *runcore.JobVersion
	why string
}

type simKept struct {
	lastOK time.Time // send time of the last renewal that found the key holding the token
	lost   bool
}

type simCluster struct {
	name    string
	gj      *batchv1alpha1.GuardedJob
	jobs    map[string]*simJob
	order   []*simJob // every Job ever created, in order: a map's order would not replay
	keeper  map[string]*simKept
	created map[string]types.UID // the Jobs a pass created and left to the next one to record
	// opened is the manager's memory of the Jobs whose gates it opened before
	// any status recorded their runs (the early gate), by name.
	opened map[string]types.UID
	next   time.Time // the next occurrence
	last   time.Time // the last occurrence status records
	rerun  bool      // a run-now of the last occurrence waits
	// request is the value of the run-now that waits (rerun) or was the last;
	// requests counts them.
	request  string
	requests int
	// requestedAt is when the person asked for the run-now that waits.
	requestedAt time.Time
	// freedAt is when the last run status recorded as active ended (what
	// status.lastRun says of it).
	freedAt time.Time
	guarded bool // its runs have a pod guard
	// fence is the highest fence a Pod of this cluster started under: a
	// Strict fence handed out again would let a new run's writes pass below
	// an old one's.
	fence int64
	// shard is the shard whose manager serves the GuardedJob (0 or 1);
	// resumed says that manager has taken the leases of its runs over.
	shard   int
	resumed bool
	// handing is what the shard the GuardedJob left still renews, since
	// handSince, until the shard it joined holds every lease (status.shard).
	handing   map[string]*simKept
	handSince time.Time
	handOut   bool // the hand-over timed out: its runs are stopped
	// writesFailUntil: until then every status write of the cluster's
	// manager fails.
	writesFailUntil time.Time
	// restarts counts its manager's restarts (and moves to another shard).
	restarts int
	// clock is how far its manager's clock is off (its reading less the
	// true time). Every time a manager writes into status is its own reading
	// (local); what it keeps in memory is in true time, since its clock's
	// offset cancels between two readings of its own.
	clock time.Duration
}

// writeFails says whether a status write of the cluster's manager fails now.
func (c *simCluster) writeFails(now time.Time) bool { return now.Before(c.writesFailUntil) }

// renewedHere is what the cluster's manager renews of a lease: its keeper's
// entry, or the hand-over's of the shard the GuardedJob left.
func (c *simCluster) renewedHere(token string) *simKept {
	if k := c.keeper[token]; k != nil {
		return k
	}
	return c.handing[token]
}

// shardName is a shard's watch label selector.
func shardName(i int) string { return "shard=" + strconv.Itoa(i) }

type sim struct {
	t   testing.TB
	rng *rand.Rand
	// Each fault added after the first ones draws from a source of its own:
	// late creates (a deposed manager's create that lands later), moves
	// between shards, the store's data loss, a manager dying in a release. A
	// seed that never draws one runs as it did before it was simulated.
	late, moves, losses, dies *rand.Rand
	// writes: the API server refuses a cluster's status writes for a while
	// (conflicts, or it does not answer).
	writes *rand.Rand
	// early: the managers open a Job's gate before the status write that
	// records its run (--early-gate), drawn per seed from a source of its own.
	early bool
	// clocks: in a third of the seeds (drawn from a source of their own) the
	// managers' clocks differ within skew, the allowance they are configured
	// with; a new manager (a restart, the shard a GuardedJob joins) draws its
	// clock from that source.
	clocks   *rand.Rand
	skew     time.Duration
	landing  []simLanding
	now      time.Time
	store    simStore
	clusters []*simCluster
	trace    []string
	uids     int
	failed   string
	// ended counts the runs that ended, by result, and leftToExpire the
	// leases left to expire: what the seeds reached.
	ended        map[batchv1alpha1.RunResult]int
	leftToExpire int
	adopted      int
	// takenUp counts the leases a crashed pass left that a later pass of
	// their run took up (what the seeds reached).
	takenUp int
	// I2's bookkeeping: when each token last acquired the key and whether its
	// run is a person's run-now of an occurrence again, when the store last
	// lost its data, and which run completed each occurrence since; markers
	// that expired, and the runs skipped as later than their occurrence's
	// latest start (what the seeds reached).
	acquired   map[string]time.Time
	reruns     map[string]bool
	lostAt     time.Time
	completed  map[string]string
	expiredOcc int
	skipped    int
	// stallAt is the step from which, at the first quiet moment (no run
	// active, no Pod working), every manager stands still for stallFor (a
	// control plane away for long); zero: no stall in this seed.
	stallAt, steps int
	stallFor       time.Duration
	// tenants draws the edits of a tenant who may edit Jobs; edits counts
	// them (what the seeds reached).
	tenants *rand.Rand
	edits   int
	// caches draws when the manager's cache falls behind a change of a Job,
	// and for how long; deletes draws when a delete of a Job waiting for
	// adoption is in flight as its manager is deposed (it lands later).
	// conflicts counts the deletes the API server refused because the Job had
	// changed since it was judged (what the seeds reached).
	caches, deletes *rand.Rand
	conflicts       int
	// requestStarts counts, by run-now, the Pods that started its work (I9T:
	// at most one).
	requestStarts map[string]int
	// pauses draws whether a manager that dies was paused instead, with a new
	// manager taking over; asleep are those paused managers until they wake,
	// and woke counts their wake-ups (what the seeds reached).
	pauses *rand.Rand
	asleep []simAsleep
	woke   int
	// extended counts the renewals by a waking manager of a lease no live
	// manager renews any more (left to expire, or lost to the new one's
	// judgement).
	extended int
}

// simAsleep is a manager paused while a new one took over: from wakeAt its
// keeper renews every lease it kept whose key still holds its token (it renews
// before it judges a deadline), each renew interval, until its leader
// election gives up (simRenewDeadline after it woke) and it exits. Its
// renewals may extend a lease the new manager has since left to expire: the
// key outlives the ledger's expiresBy, and no second run may work meanwhile.
type simAsleep struct {
	c         *simCluster
	tokens    []string
	wakeAt    time.Time
	renewedAt time.Time
}

// simRenewDeadline is the manager's leader election RenewDeadline: how long a
// manager that woke from a pause goes on renewing before it exits.
const simRenewDeadline = 10 * time.Second

func (s *sim) logf(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf("%7.1fs ", s.now.Sub(simStart).Seconds())+fmt.Sprintf(format, args...))
}

var simStart = time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)

func newSim(t testing.TB, seed uint64) *sim {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), late: rand.New(rand.NewPCG(seed^0x5bd1e995, seed)),
		moves: rand.New(rand.NewPCG(seed^0x27d4eb2f165667c5, seed)), losses: rand.New(rand.NewPCG(seed^0x94d049bb133111eb, seed)),
		dies: rand.New(rand.NewPCG(seed^0xbf58476d1ce4e5b9, seed)), writes: rand.New(rand.NewPCG(seed^0x4cf5ad432745937f, seed)), now: simStart, store: simStore{markers: map[string]simMarker{}},
		ended: map[batchv1alpha1.RunResult]int{}, acquired: map[string]time.Time{}, reruns: map[string]bool{}, completed: map[string]string{}, requestStarts: map[string]int{}, early: rand.New(rand.NewPCG(seed^0xd6e8feb86659fd93, seed)).IntN(2) == 0}
	s.tenants = rand.New(rand.NewPCG(seed^0x1b873593cc9e2d51, seed))
	s.pauses = rand.New(rand.NewPCG(seed^0x3c6ef372fe94f82b, seed))
	s.caches, s.deletes = rand.New(rand.NewPCG(seed^0x85ebca6b0c2f1a1d, seed)), rand.New(rand.NewPCG(seed^0xc2b2ae3d27d4eb4f, seed))
	if stalls := rand.New(rand.NewPCG(seed^0x9fb21c651e98df25, seed)); stalls.IntN(3) == 0 {
		s.stallAt, s.stallFor = 1+stalls.IntN(500), time.Duration(10+stalls.IntN(6))*time.Minute
	}
	if clocks := rand.New(rand.NewPCG(seed^0x2545f4914f6cdd1d, seed)); clocks.IntN(3) == 0 {
		s.clocks, s.skew = clocks, simSkew
	}
	for _, name := range []string{"cluster-a", "cluster-b"} {
		s.clusters = append(s.clusters, &simCluster{
			name: name, jobs: map[string]*simJob{}, keeper: map[string]*simKept{}, created: map[string]types.UID{}, opened: map[string]types.UID{},
			next: simStart, guarded: name == "cluster-a", resumed: true,
			gj: &batchv1alpha1.GuardedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "settle", UID: types.UID("gj-" + name)}, Spec: simSpec()},
		})
	}
	for _, c := range s.clusters {
		c.clock = s.newClock()
	}
	return s
}

// newClock is the offset of a new manager's clock: none in a seed whose
// clocks agree.
func (s *sim) newClock() time.Duration {
	if s.clocks == nil {
		return 0
	}
	return time.Duration(s.clocks.IntN(3)-1) * s.skew / 2
}

// clockOf says, in a seed whose clocks differ, how far the cluster's
// manager's clock is off.
func (s *sim) clockOf(c *simCluster) string {
	if s.clocks == nil {
		return ""
	}
	return fmt.Sprintf(" (its clock is off by %+.0fs)", c.clock.Seconds())
}

// local is the cluster's manager's clock now.
func (s *sim) local(c *simCluster) time.Time { return s.now.Add(c.clock) }

// resumed is a lease resumed from status by the cluster's manager: its
// evidence is the recorded acquisition (another manager's reading) less the
// allowance (runcore.KeepTermsOf, as the keeper's resume takes it), read on
// this manager's clock and kept in true time.
// (The simulation has no unguarded FailOpen run, whose resume has no evidence.)
func (s *sim) resumed(c *simCluster, run *batchv1alpha1.ActiveRun) *simKept {
	return &simKept{lastOK: runcore.KeepTermsOf(run, 0, true, s.skew).LastRenewed.Add(-c.clock)}
}

// check is the invariant: at most one Pod works under the key.
func (s *sim) check() {
	var working []string
	for _, c := range s.clusters {
		for _, j := range c.order {
			if j.pod != nil && j.pod.running && !j.pod.lostByStore {
				where := "visible"
				if !j.pod.visible {
					where = "cut off"
				}
				working = append(working, c.name+"/"+j.name+" ("+where+")")
			}
		}
	}
	if len(working) > 1 && s.failed == "" {
		s.failed = "I1: two Pods work under the key at once: " + strings.Join(working, ", ")
		s.logf("VIOLATION %s", s.failed)
	}
}

// advance lets time pass: keys expire, and guards stop their Pods at the end
// of the lease they last confirmed.
func (s *sim) advance(d time.Duration) {
	for _, c := range s.clusters {
		s.stopUnclaimed(c)
	}
	s.now = s.now.Add(d)
	s.store.expire(s.now)
	s.expireMarkers()
	s.land()
	s.wake()
	for _, c := range s.clusters {
		s.handOver(c)
	}
	s.stopReported()
	for _, c := range s.clusters {
		for _, j := range c.order {
			if p := j.pod; p != nil && p.running && !s.now.Before(p.until) {
				s.change(j, func() {
					p.running = false
					if p.visible && j.finished == "" {
						j.finished, j.failed = batchv1.JobFailed, true
					}
				})
				s.logf("%s: the guard of %s stops its Pod (its lease could expire)", c.name, j.name)
			}
		}
	}
}

// wake: a paused manager whose time has come wakes up; its keeper renews its
// leases each renew interval until the manager exits, simRenewDeadline later.
func (s *sim) wake() {
	var still []simAsleep
	for _, a := range s.asleep {
		if s.now.Before(a.wakeAt) {
			still = append(still, a)
			continue
		}
		if a.renewedAt.IsZero() || !s.now.Before(a.renewedAt.Add(simRenew)) {
			first := a.renewedAt.IsZero()
			a.renewedAt = s.now
			renewed := 0
			for _, token := range a.tokens {
				if !s.store.down && s.store.holds(token) {
					s.store.key.expires = s.now.Add(simTTL)
					renewed++
					if !s.keptByALiveManager(token) {
						s.extended++
					}
				}
			}
			if first && renewed > 0 {
				s.woke++ // a wake-up that renewed a lease (what the seeds reached)
			}
			s.logf("%s: the paused manager is awake: its keeper renews %d of its %d lease(s) before it learns it no longer leads", a.c.name, renewed, len(a.tokens))
		}
		if !s.now.Before(a.wakeAt.Add(simRenewDeadline)) {
			s.logf("%s: the paused manager exits: its leader election gave up", a.c.name)
			continue
		}
		still = append(still, a)
	}
	s.asleep = still
}

// keptByALiveManager says whether a live manager's keeper (or a shard's
// hand-over) renews the lease of token.
func (s *sim) keptByALiveManager(token string) bool {
	for _, c := range s.clusters {
		if k := c.keeper[token]; k != nil && !k.lost {
			return true
		}
		if k := c.handing[token]; k != nil && !k.lost {
			return true
		}
	}
	return false
}

// land carries out the creates whose time has come. A Job of the name that
// exists already makes the create fail (AlreadyExists); a name whose Job was
// deleted is free again.
func (s *sim) land() {
	s.landing = slices.DeleteFunc(s.landing, func(l simLanding) bool {
		if s.now.Before(l.at) {
			return false
		}
		if l.del != nil {
			s.deleteUnadopted(l.c, l.job, *l.del, "late, "+l.why)
			return true
		}
		if l.c.apiJob(l.job.name) != nil {
			s.logf("%s: the late create of %s fails: the Job exists", l.c.name, l.job.name)
			return true
		}
		l.job.seen = s.now.Add(s.cacheLag())
		l.c.jobs[l.job.name] = l.job
		l.c.order = append(l.c.order, l.job)
		s.logf("%s: the late create of %s lands: a gated Job carrying a run no status records", l.c.name, l.job.name)
		return true
	})
}

// stopReported: the keeper reports a lease lost or at its self-fence deadline
// and the stop controller deletes the run's Pods at once (the model's
// timing assumption: within the stop budget, before the key could expire).
// A cut-off Pod cannot be reached.
func (s *sim) stopReported() {
	for _, c := range s.clusters {
		for _, j := range c.order {
			k, tracked := c.keeper[j.token]
			if h, handed := c.handing[j.token]; handed && (!tracked || h.lost || h.lastOK.Before(k.lastOK)) {
				k, tracked = h, true
			}
			if p := j.pod; p == nil || !p.running || !p.visible || !tracked {
				continue
			}
			if k.lost || !s.now.Before(k.lastOK.Add(simTTL-simStopBudget)) {
				s.change(j, func() {
					j.pod.running = false
					j.finished, j.failed = batchv1.JobFailed, true
				})
				s.logf("%s: %s: the Pod of %s is deleted (its lease is lost or at its deadline)", c.name, runcore.StopReported, j.name)
			}
		}
	}
}

// guard: every guard reads the lease; a Pod whose key no longer holds its
// token stops at once, one whose key does is confirmed until shortly before
// the key could expire.
func (s *sim) guard(c *simCluster) {
	if s.store.down {
		return
	}
	for _, j := range c.order {
		p := j.pod
		if p == nil || !p.running || !j.guarded {
			continue
		}
		if s.store.holds(j.token) {
			p.until = s.store.key.expires.Add(-simGuardMargin)
			continue
		}
		s.change(j, func() {
			p.running = false
			if p.visible && j.finished == "" {
				j.finished, j.failed = batchv1.JobFailed, true
			}
		})
		s.logf("%s: the guard of %s finds the key gone and stops its Pod", c.name, j.name)
	}
}

// keep renews every tracked lease, as the keeper does: a renewal that finds
// the key holding another token (or none) loses the lease.
func (s *sim) keep(c *simCluster) {
	if s.store.down {
		return
	}
	for _, kept := range []map[string]*simKept{c.keeper, c.handing} {
		tokens := make([]string, 0, len(kept))
		for token := range kept {
			tokens = append(tokens, token)
		}
		slices.Sort(tokens)
		for _, token := range tokens {
			k := kept[token]
			if k.lost {
				continue
			}
			if s.store.holds(token) {
				s.store.key.expires = s.now.Add(simTTL)
				k.lastOK = s.now
			} else {
				k.lost = true
				s.logf("%s: the keeper finds the lease of %s lost", c.name, leasetoken.HolderOf(token))
			}
		}
	}
	s.stopReported()
}

// tenantEdits: a tenant who may edit Jobs in the namespace edits the run
// annotation of a Job that waits for adoption: a ten times longer ttl, another
// key, or a request as what started the run. What the manager acts on must
// still be the spec's (checkAdopted); the Job itself may be lost to the edit
// (deleted, or stopped), as the tenant could also delete it.
func (s *sim) tenantEdits(c *simCluster) {
	var waiting []*simJob
	for _, j := range c.order {
		if j.run != nil && c.waiting(j, true).WaitsForAdoption() {
			waiting = append(waiting, j)
		}
	}
	if len(waiting) == 0 {
		return
	}
	j := waiting[s.tenants.IntN(len(waiting))]
	edited := *j.run
	switch s.tenants.IntN(3) {
	case 0:
		edited.TTL = metav1.Duration{Duration: 10 * simTTL}
	case 1:
		edited.Key = "team:tenant"
	default:
		edited.RunNow = batchv1alpha1.RunRequestPrefix + "uid-tenant"
	}
	s.change(j, func() { j.run = &edited })
	s.edits++
	s.logf("%s: a tenant edits the run annotation of %s (ttl %v, key %s, run-now %q)", c.name, j.name, edited.TTL.Duration, edited.Key, edited.RunNow)
}

// quiet says whether no run is active and no Pod works, in any cluster.
func (s *sim) quiet() bool {
	for _, c := range s.clusters {
		if len(c.gj.Status.Active) > 0 {
			return false
		}
		for _, j := range c.order {
			if j.pod != nil && j.pod.running {
				return false
			}
		}
	}
	return true
}

// completes checks I2 as a run completes its occurrence: no other run
// completed it since the store last lost its data. A person's run-now of an
// occurrence again does not count, nor a run whose lease predates the data
// loss. A run that completes with its key absent (its lease expired while the
// store did not answer its completion) may come after another cluster ran the
// occurrence meanwhile (failure-semantics.md, what cannot be guaranteed): it
// is flagged only as the first completion, before which no other may come.
func (s *sim) completes(run *batchv1alpha1.ActiveRun) {
	if s.reruns[run.Token] || s.acquired[run.Token].Before(s.lostAt) {
		return
	}
	by, ok := s.completed[run.OccurrenceKey]
	if ok && !s.store.holds(run.Token) {
		return
	}
	if ok && by != run.Holder && s.failed == "" {
		s.failed = fmt.Sprintf("I2: %s completes the occurrence at %s, which %s completed already", run.Holder, run.ScheduledTime.UTC().Format("15:04"), by)
		s.logf("VIOLATION %s", s.failed)
	}
	s.completed[run.OccurrenceKey] = run.Holder
}

// loseData: the store restarts without its data: the lock key, the fence
// counter and the done-markers are gone. A Pod working under the lost key may
// overlap the next holder's until its keeper finds the lease lost (the
// documented moment); what must hold is that the fences of each cluster's runs
// go on rising (Strict: above status.lastFence).
func (s *sim) loseData() {
	for _, c := range s.clusters {
		for _, j := range c.order {
			if j.pod != nil && j.pod.running {
				j.pod.lostByStore = true
			}
		}
	}
	s.store.key, s.store.fence, s.store.markers = nil, 0, map[string]simMarker{}
	s.lostAt, s.completed = s.now, map[string]string{}
	s.logf("the store restarts empty: the lock key, the fence counter and the done-markers are gone")
}

// move: the GuardedJob moves to the other shard of its cluster. The shard it
// left hands its runs' leases over (runcore.HandsOver): it renews them until
// the shard it joined says in status.shard that it holds every one of them
// (runcore.MayClaimShard), or stops the runs at the hand-over's time limit.
// The shard it joined takes the leases over at its first pass.
func (s *sim) move(c *simCluster) {
	if c.handing != nil {
		return // one hand-over at a time
	}
	left := c.shard
	c.shard = 1 - c.shard
	if runcore.HandsOver(shardName(left)) && len(c.keeper) > 0 {
		c.handing, c.handSince, c.handOut = c.keeper, s.now, false
	}
	c.keeper, c.created, c.resumed = map[string]*simKept{}, map[string]types.UID{}, false
	c.restarts++
	c.clock = s.newClock()
	s.logf("%s: the GuardedJob moves from %s to %s; %s hands %d lease(s) over%s", c.name, shardName(left), shardName(c.shard), shardName(left), len(c.handing), s.clockOf(c))
}

// takeOver is the first pass of the shard a GuardedJob joined: it renews the
// lease of every run status records at once (the keeper's resume), then
// claims the runs in status.shard once it renews every one.
func (s *sim) takeOver(c *simCluster) {
	for _, run := range c.gj.Status.Active {
		if run.Phase == batchv1alpha1.RunPhaseAcquiring || run.AcquiredAt == nil || c.keeper[run.Token] != nil {
			continue
		}
		k := s.resumed(c, &run)
		switch {
		case s.store.down:
		case s.store.holds(run.Token):
			s.store.key.expires = s.now.Add(simTTL)
			k.lastOK = s.now
		default:
			k.lost = true
		}
		c.keeper[run.Token] = k
	}
	c.resumed = true
	tracked := func(token string) bool { return c.keeper[token] != nil }
	var unrecorded []string
	for _, j := range c.order {
		if c.waiting(j, true).WorksUnrecorded() {
			unrecorded = append(unrecorded, j.name)
		}
	}
	renews := func(name string) bool { return c.keeper[c.jobs[name].token] != nil }
	if len(c.gj.Status.Active) > 0 && runcore.MayClaimShard(c.name, c.gj, tracked, unrecorded, renews) {
		c.gj.Status.Shard = shardName(c.shard)
	}
	s.logf("%s: %s takes %d lease(s) over; status.shard is %q", c.name, shardName(c.shard), len(c.keeper), c.gj.Status.Shard)
}

// handOver is the watch of the shard a GuardedJob left: it lets go once the
// shard it joined claims the runs, and stops them when none does in time.
func (s *sim) handOver(c *simCluster) {
	if c.handing == nil {
		return
	}
	switch runcore.HandOver(runcore.HandOverView{Shard: c.gj.Status.Shard, Ours: shardName(1 - c.shard), Since: c.handSince, Timeout: simHandover, TimedOut: c.handOut}, s.now) {
	case runcore.LetGoOfAll:
		s.logf("%s: %s lets go of %d lease(s): %s holds them", c.name, shardName(1-c.shard), len(c.handing), c.gj.Status.Shard)
		c.handing = nil
		return
	case runcore.GiveUpHandOver:
		c.handOut = true
		s.logf("%s: no shard took the runs over in time: %s stops them", c.name, shardName(1-c.shard))
	}
	tokens := make([]string, 0, len(c.handing))
	for token := range c.handing {
		tokens = append(tokens, token)
	}
	slices.Sort(tokens)
	for _, token := range tokens {
		if runcore.HandedRun(s.keptView(c.handing[token]), c.handOut) != runcore.StopHandedRun {
			continue
		}
		for _, j := range c.order {
			if j.token == token && j.pod != nil && j.pod.running && j.pod.visible {
				s.change(j, func() {
					j.pod.running = false
					j.finished, j.failed = batchv1.JobFailed, true
				})
				s.logf("%s: the Pod of %s is deleted (its hand-over ended)", c.name, j.name)
			}
		}
		delete(c.handing, token)
	}
	if len(c.handing) == 0 {
		c.handing = nil
	}
}

func (s *sim) leaseView(c *simCluster, run *batchv1alpha1.ActiveRun) runcore.LeaseView {
	return s.keptView(c.keeper[run.Token])
}

// keptView is what a keeper's entry (nil: none) reports of a lease now.
func (s *sim) keptView(k *simKept) runcore.LeaseView {
	if k == nil {
		return runcore.LeaseView{}
	}
	deadline := k.lastOK.Add(simTTL - simStopBudget)
	return runcore.LeaseView{
		Tracked: true, Lost: k.lost, DeadlineReached: !k.lost && !s.now.Before(deadline),
		Confirmed: !k.lost && s.now.Before(deadline),
	}
}

func jobViewOf(j *simJob, read runcore.JobRead) runcore.RunJobView {
	if j == nil {
		return runcore.RunJobView{Read: read}
	}
	return runcore.RunJobView{Read: read, Exists: true, UID: j.uid, Finished: j.finished, Gated: j.gated, PodsFailed: j.failed}
}

// cacheLag is how long the manager's cache takes to show a new Job: mostly a
// moment, sometimes longer than a run's starting deadline (a cache that fell
// behind).
func (s *sim) cacheLag() time.Duration {
	if s.rng.IntN(8) == 0 {
		return 40 * time.Second
	}
	return time.Duration(s.rng.IntN(4)) * time.Second
}

// cachedView is a Job as the manager's cache shows it: a Job created moments
// ago may not be there yet.
func (s *sim) cachedView(j *simJob) runcore.RunJobView {
	if j == nil || s.now.Before(j.seen) {
		return runcore.RunJobView{Read: runcore.ReadCached}
	}
	if seen := s.cachedJob(j); !seen.deleted {
		return jobViewOf(seen, runcore.ReadCached)
	}
	return runcore.RunJobView{Read: runcore.ReadCached}
}

// schedule starts the occurrence that is due (or a run-now of the last one),
// when no run is active: the intent and its acquisition, recorded in one
// status write (status first).
func (s *sim) schedule(c *simCluster) {
	if len(c.gj.Status.Active) > 0 || s.store.down {
		return // the acquisition is tried again at a later pass
	}
	occ, rerun := c.next, c.rerun
	switch {
	case rerun:
		occ = c.last
	case s.now.Before(c.next):
		return
	}
	run := c.runFor(occ)
	run.Phase, run.StartDeadline = batchv1alpha1.RunPhaseAcquiring, &metav1.Time{Time: c.dueAt(occ, rerun, s.local(c)).Add(simStartWithin)}
	if rerun {
		run.RunNow = c.request // what started it, bound into its token
	}
	identity := c.identity(&run)
	run.Token, run.JobName = runtoken.MintFrom(identity, fmt.Sprintf("%016x", s.rng.Uint64()))
	run.Holder = leasetoken.HolderOf(run.Token)
	recorded := func() {
		c.scheduled(occ, rerun)
	}
	if why := due.Late(&c.gj.Spec, simSchedule, &run, false, s.local(c)); why != "" && !rerun {
		// Past the latest start of its occurrence (a cluster that was down
		// or blocked for long): its done-marker may be gone.
		recorded()
		runcore.FinishRun(c.gj, run, runcore.NeverHeld, batchv1alpha1.RunResultSkipped, "", why, s.local(c))
		s.ended[batchv1alpha1.RunResultSkipped]++
		s.skipped++
		s.logf("%s: %s skipped: %s", c.name, run.JobName, why)
		return
	}
	if m, ok := s.store.markers[run.OccurrenceKey]; ok && !rerun {
		by := m.by
		recorded()
		runcore.FinishRun(c.gj, run, runcore.NeverHeld, batchv1alpha1.RunResultSkipped, by, "done elsewhere", s.local(c))
		s.ended[batchv1alpha1.RunResultSkipped]++
		s.logf("%s: %s skipped: occurrence done by %s", c.name, run.JobName, leasetoken.HolderOf(by))
		return
	}
	if s.store.key != nil {
		ledger := func(holder string) string { return runcore.LedgerSays(c.gj, holder, s.local(c)) }
		orphan, minted, refused := runcore.TakeUp(s.store.key.token, run.Token, identity, runcore.Identity{Settled: true}, c.gj.Status.Active, ledger)
		if minted && refused == "" {
			refused = orphan.JobRefusal(c.apiJob(orphan.JobName) != nil)
		}
		if !minted || refused != "" {
			recorded()
			runcore.FinishRun(c.gj, run, runcore.NeverHeld, batchv1alpha1.RunResultBusy, s.store.key.token, "busy", s.local(c))
			s.ended[batchv1alpha1.RunResultBusy]++
			s.logf("%s: %s busy: the key holds %s", c.name, run.JobName, leasetoken.HolderOf(s.store.key.token))
			return
		}
		// An orphan of a pass that acquired and died before its status write:
		// the run takes its token and Job name, and acquires again with it.
		run.JobName, run.Token, run.Holder = orphan.JobName, orphan.Value, orphan.Holder
		s.takenUp++
		s.logf("%s: %s takes up the lease %s no status records", c.name, runcore.AcquireNext, run.Holder)
	}
	s.store.key = &simLease{token: run.Token, expires: s.now.Add(simTTL)}
	s.acquired[run.Token], s.reruns[run.Token] = s.now, rerun
	s.store.fence++
	if floor := runcore.FloorWithJobs(c.gj.Status.LastFence, c.jobRecords()); s.store.fence <= floor {
		s.store.fence = floor + 1 // Strict: the script raises the counter above the floor the run brings
		s.logf("%s: the fence counter was at or below the floor %d (status.lastFence and the Jobs' fences): raised", c.name, floor)
	}
	run.Phase, run.Fence, run.AcquiredAt = batchv1alpha1.RunPhaseRunning, s.store.fence, runcore.PtrTime(s.local(c))
	c.keeper[run.Token] = &simKept{lastOK: s.now}
	s.logf("%s: %s %s: fence %d", c.name, runcore.AcquireNext, run.Holder, run.Fence)
	s.start(c, &run, recorded)
}

// start drives the core's start of a run (runcore.NewStart) against the
// simulated API server; the manager may die before any effect.
func (s *sim) start(c *simCluster, run *batchv1alpha1.ActiveRun, recorded func()) {
	m := runcore.StartFor(true, s.early, false, run) // a new run: no status names it yet
	var job *simJob
	for {
		e := m.Next()
		if (e == runcore.CreateJobFirst || e == runcore.WriteRecord || e == runcore.OpenJobGate) && s.rng.IntN(20) == 0 {
			// The manager dies before this effect: the key holds a token no
			// status may record yet, and the occurrence is due again.
			s.crash(c)
			s.logf("%s: the manager dies before %v of %s", c.name, startEffectName[e], run.JobName)
			return
		}
		switch e {
		case runcore.CreateJobFirst:
			if s.late.IntN(25) == 0 {
				// The create is sent, and its manager dies or loses its
				// leadership before the answer: the API server carries it
				// out later, after a new leader may have acted on the key.
				s.landing = append(s.landing, simLanding{at: s.now.Add(time.Duration(1+s.late.IntN(60)) * time.Second), c: c, job: s.newJob(run)})
				s.crash(c)
				s.logf("%s: %s %s is sent, and the manager is deposed before its answer", c.name, e.Step(), run.JobName)
				return
			}
			if c.apiJob(run.JobName) != nil {
				// A late create of this name landed first: AlreadyExists, and
				// the run goes on in the status-first order.
				s.logf("%s: %s %s: the Job exists already", c.name, e.Step(), run.JobName)
				m.Deliver(runcore.StartOutcome{})
				continue
			}
			if s.rng.IntN(4) == 0 {
				// The API server does not answer the create: status records the
				// run first, and phase Running creates its Job.
				s.logf("%s: %s %s: the API server does not answer", c.name, e.Step(), run.JobName)
				m.Deliver(runcore.StartOutcome{})
				continue
			}
			job = s.newJob(run)
			job.seen = s.now.Add(s.cacheLag())
			c.jobs[run.JobName] = job
			c.order = append(c.order, job)
			run.JobUID = job.uid
			s.logf("%s: %s %s, gated", c.name, e.Step(), run.JobName)
			m.Deliver(runcore.StartOutcome{Created: true})
		case runcore.WriteRecord:
			if c.writeFails(s.now) {
				s.logf("%s: %s %s: the status write fails", c.name, m.Record(), run.JobName)
				m.Deliver(runcore.StartOutcome{})
				continue
			}
			recorded()
			c.gj.Status.Active = append(c.gj.Status.Active, *run)
			c.gj.Status.LastFence = max(c.gj.Status.LastFence, run.Fence)
			runcore.RecordLease(c.gj, &c.gj.Status.Active[len(c.gj.Status.Active)-1], s.local(c))
			s.logf("%s: %s %s: fence %d", c.name, m.Record(), run.JobName, run.Fence)
			m.Deliver(runcore.StartOutcome{WriteOK: true})
			delete(c.opened, run.JobName)
			run = runcore.RunByName(c.gj, run.JobName)
		case runcore.OpenJobGate:
			s.open(c, run, job)
			if !job.gated && runcore.RunByName(c.gj, run.JobName) == nil {
				c.opened[run.JobName] = job.uid
			}
			m.Deliver(runcore.StartOutcome{Opened: !job.gated})
		case runcore.Recorded:
			m.Deliver(runcore.StartOutcome{})
		case runcore.AbandonPass:
			// No status names the run: its Job (if created) waits for the
			// next pass's adoption.
			if !m.KeepsRenewing() {
				delete(c.keeper, run.Token)
			}
			return
		default:
			return
		}
	}
}

// newJob is the Job a run's start creates: gated, carrying the run.
func (s *sim) newJob(run *batchv1alpha1.ActiveRun) *simJob {
	s.uids++
	annotated := *run
	annotated.Token = "" // the annotation never carries the token
	return &simJob{name: run.JobName, uid: types.UID("uid-" + strconv.Itoa(s.uids)), token: run.Token, gated: true, guarded: run.PodGuard != nil, run: &annotated,
		fence: run.Fence, created: s.now}
}

var startEffectName = map[runcore.StartEffect]string{
	runcore.CreateJobFirst: "creating its Job", runcore.WriteRecord: "the status write", runcore.OpenJobGate: "opening the gate",
}

// pass is one reconcile pass over the cluster's active runs.
func (s *sim) pass(c *simCluster) {
	if !c.resumed {
		s.takeOver(c)
	}
	for _, name := range activeNames(c) {
		run := runcore.RunByName(c.gj, name)
		for run != nil {
			phase := run.Phase
			switch phase {
			case batchv1alpha1.RunPhaseRunning:
				s.running(c, run)
			case batchv1alpha1.RunPhaseStopping:
				s.stopping(c, run)
			case batchv1alpha1.RunPhaseReleasing:
				s.release(c, run)
			}
			if run = runcore.RunByName(c.gj, name); run != nil && run.Phase == phase {
				break
			}
			if run != nil && run.Phase == batchv1alpha1.RunPhaseStopping {
				break // the stop controller deletes the Pods first
			}
		}
	}
	if s.adopt(c) {
		return // its pass ended with it
	}
	s.schedule(c)
}

// identity is what a run's token is minted for (runtoken.Run), as the
// reconciler's runIdentity says it.
func (c *simCluster) identity(run *batchv1alpha1.ActiveRun) runtoken.Run {
	return runtoken.Run{Cluster: c.name, Namespace: c.gj.Namespace, Name: c.gj.Name, UID: string(c.gj.UID),
		Occurrence: run.ScheduledTime.Time, Start: runcore.StartOf(run)}
}

// dueAt is when the run of the occurrence at occ was due, from which its start
// deadline counts, as the reconciler's schedule says it: a run-now's when it
// was asked for (no later than now), else the occurrence's scheduled time, or
// when the run it waited behind ended (due.BufferedDue, the occurrence's time
// standing for when it was buffered). Passes on one clock
// say the same, so the token a crashed pass minted is minted for the run the
// next pass records, which may take it up; a run-now asked for at a time a
// manager's clock reads as still to come counts from that clock's now, as the
// reconciler does, and a manager on another clock mints for another start.
func (c *simCluster) dueAt(occ time.Time, rerun bool, now time.Time) time.Time {
	if rerun {
		return minTime(c.requestedAt, now)
	}
	if c.freedAt.After(occ) {
		return c.freedAt
	}
	return occ
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// scheduled: status records the occurrence's start (or its outcome).
func (c *simCluster) scheduled(occ time.Time, rerun bool) {
	c.rerun = c.rerun && !rerun
	if occ.After(c.last) {
		c.last = occ // an adopted Job of an older occurrence moves nothing back
	}
	if !occ.Before(c.next) {
		c.next = occ.Add(simPeriod)
	}
}

// adopt is step adopt_unrecorded: a Job that waits at its gate carrying a run
// no status records (its pass died before the status write) is adopted when
// its key still holds the token minted for it and the fence counter has not
// moved (runcore.Adoption), else deleted; it never ran. In the early gate a
// Job past its gate waits too (runcore.Waiting): adopted on the same terms,
// else left to the stop controller.
func (s *sim) adopt(c *simCluster) (deposed bool) {
	for _, j := range c.order {
		seen := s.cachedJob(j) // the pass judges the Job as its cache shows it
		if !c.waiting(seen, s.early).WaitsForAdoption() {
			continue
		}
		if s.store.down {
			return false
		}
		u := s.unrecorded(c, seen)
		act, why := runcore.Adoption(u)
		switch act {
		case runcore.DeleteUnadopted:
			if s.deletes.IntN(10) == 0 {
				// The delete is sent, and its manager is deposed before the
				// answer: the API server carries it out later.
				pre := u.DeleteNames()
				s.landing = append(s.landing, simLanding{at: s.now.Add(time.Duration(1+s.deletes.IntN(60)) * time.Second), c: c, job: j, del: &pre, why: why})
				s.crash(c)
				s.logf("%s: %s: the delete of %s is sent, and the manager is deposed before its answer", c.name, runcore.AdoptUnrecorded, j.name)
				return true
			}
			s.deleteUnadopted(c, j, u.DeleteNames(), why)
			continue
		case runcore.LeaveToStopper:
			s.logf("%s: %s: the Job %s, past its gate, is left to the stop controller: %s", c.name, runcore.AdoptUnrecorded, j.name, why)
			continue
		}
		run := *u.Run
		run.Token = u.Key.Holder
		s.checkAdopted(c, &run)
		if c.writeFails(s.now) {
			if u.KeepsLeaseUnwritten() {
				if c.keeper[run.Token] == nil {
					c.keeper[run.Token] = s.resumed(c, &run)
				}
			} else {
				delete(c.keeper, run.Token)
			}
			s.logf("%s: %s %s: the status write fails", c.name, runcore.AdoptUnrecorded, j.name)
			continue
		}
		adopted := runcore.AdoptInto(c.gj, u, j.uid, s.local(c))
		delete(c.opened, j.name)
		// Adopting the run a request started answers the request.
		c.scheduled(run.ScheduledTime.Time, run.RunNow != "" && run.RunNow == c.request)
		if c.keeper[run.Token] == nil {
			c.keeper[run.Token] = s.resumed(c, &run) // resumed: its evidence is the acquisition
		}
		s.adopted++
		s.logf("%s: %s %s: fence %d", c.name, runcore.AdoptUnrecorded, j.name, run.Fence)
		if j.gated {
			s.open(c, adopted, j)
		}
	}
	return false
}

// deleteUnadopted is the API server's side of the delete of a Job waiting for
// adoption, conditional on the version judged (pre). The Job it deletes must
// never have started: the event says so, and a started one is some run's
// (working, or its history).
func (s *sim) deleteUnadopted(c *simCluster, j *simJob, pre runcore.JobVersion, why string) {
	switch {
	case j.deleted || pre.UID != j.uid:
		s.logf("%s: the delete of %s finds it gone", c.name, j.name)
		return
	case pre.ResourceVersion != "" && pre.ResourceVersion != j.resourceVersion():
		s.conflicts++
		s.logf("%s: the delete of %s names version %s, the Job is at %s: refused, judged again", c.name, j.name, pre.ResourceVersion, j.resourceVersion())
		return
	}
	if !j.gated && s.failed == "" {
		s.failed = fmt.Sprintf("%s's Job %s is deleted as one that never started and may not be adopted (%s), yet its gate opened: a run's Job (working, or its history) is gone", c.name, j.name, why)
		s.logf("VIOLATION %s", s.failed)
	}
	s.change(j, func() { j.deleted = true })
	s.logf("%s: %s: the Job %s is deleted, never started: %s", c.name, runcore.AdoptUnrecorded, j.name, why)
}

// unrecorded is what step adopt_unrecorded judges of Job j: the run it would
// be adopted as (runcore.TrustedRun: its annotation is a hint, checked against
// the spec for the occurrence it names), or why it may not be, and what the
// store says of its key.
func (s *sim) unrecorded(c *simCluster, j *simJob) runcore.Unrecorded {
	key := runcore.KeyView{Fence: s.store.fence}
	if s.store.key != nil {
		key.Holder = s.store.key.token
	}
	trust := runcore.Trust{Cluster: c.name, OwnerUID: c.gj.UID, JobName: j.name, JobCreated: metav1.NewTime(j.created),
		FromSpec: func(scheduled metav1.Time) (batchv1alpha1.ActiveRun, error) { return c.runFor(scheduled.Time), nil }}
	run, why := runcore.TrustedRun(trust, j.run)
	u := runcore.Unrecorded{Run: run, Why: why, Key: key, Leases: c.gj.Status.Leases, StoreDown: s.store.down, Started: !j.gated,
		Judged: runcore.JobVersion{UID: j.uid, ResourceVersion: j.resourceVersion()}, OpenedHere: c.opened[j.name] == j.uid}
	if run != nil {
		u.Identity = c.identity(run)
	}
	return u
}

// checkAdopted checks, as the manager adopts or resumes a run from its Job,
// that what it acts on is the spec's and not what the Job's annotation says
// (anyone who may edit Jobs writes it): the run's keys, lease timing and pod
// guard are those the spec gives its occurrence; and (I8) what started it is
// what its token attests.
func (s *sim) checkAdopted(c *simCluster, run *batchv1alpha1.ActiveRun) {
	want := c.runFor(run.ScheduledTime.Time)
	differs := ""
	switch {
	case run.Key != want.Key || run.FenceKey != want.FenceKey || run.OccurrenceKey != want.OccurrenceKey || run.Store != want.Store:
		differs = "keys " + run.Key + ", " + run.FenceKey + ", " + run.OccurrenceKey
	case run.TTL != want.TTL || run.RenewInterval != want.RenewInterval || run.MaxHold != want.MaxHold:
		differs = "lease timing: ttl " + run.TTL.Duration.String()
	case (run.PodGuard == nil) != (want.PodGuard == nil) || run.PodGuard != nil && *run.PodGuard != *want.PodGuard:
		differs = "pod guard"
	}
	if differs != "" && s.failed == "" {
		s.failed = fmt.Sprintf("the annotation is a hint: %s's %s is adopted with %s, which the spec does not give its occurrence", c.name, run.JobName, differs)
		s.logf("VIOLATION %s", s.failed)
	}
	if !runtoken.StartedBy(run.Token, runcore.StartOf(run)) && s.failed == "" {
		s.failed = fmt.Sprintf("I8: %s's %s is adopted as started by %q, which its token does not attest", c.name, run.JobName, runcore.StartOf(run))
		s.logf("VIOLATION %s", s.failed)
	}
}

// runFor is the run the spec gives the occurrence at occ, before anything
// started it.
func (c *simCluster) runFor(occ time.Time) batchv1alpha1.ActiveRun {
	run := batchv1alpha1.ActiveRun{
		Key: simKey, FenceKey: simKey + ":fence", OccurrenceKey: simKey + ":done:" + strconv.FormatInt(occ.Unix(), 10),
		ScheduledTime: metav1.NewTime(occ), TTL: metav1.Duration{Duration: simTTL}, Cluster: c.name, OwnerUID: c.gj.UID,
	}
	if c.guarded {
		run.PodGuard = &batchv1alpha1.RunPodGuard{Interval: metav1.Duration{Duration: 5 * time.Second}}
	}
	return run
}

// jobRecords is what the cluster's Jobs carry of their runs' fences (the
// Strict floor counts them: runcore.FloorWithJobs).
func (c *simCluster) jobRecords() []runcore.JobRecord {
	var recs []runcore.JobRecord
	for _, j := range c.order {
		if !j.deleted {
			recs = append(recs, runcore.JobRecord{Fence: j.fence})
		}
	}
	return recs
}

// waiting is what Job j shows of whether it waits for adoption; early as the
// manager's --early-gate (a restart's resume looks at Jobs past their gate
// whatever the flag). A Job the simulation deletes is a recorded run's, which
// the history limit deletes after the run's end (its lease finalizer gone), or
// one that never left its gate: neither waits for adoption.
func (c *simCluster) waiting(j *simJob, early bool) runcore.Waiting {
	return runcore.Waiting{Controlled: true, Deleting: j.deleted, Gated: j.gated, Finished: j.finished != "", CarriesRun: j.run != nil,
		Recorded: runcore.RunByName(c.gj, j.name) != nil, Early: early, Finalized: !j.deleted}
}

func activeNames(c *simCluster) []string {
	var names []string
	for _, r := range c.gj.Status.Active {
		names = append(names, r.JobName)
	}
	return names
}

func (s *sim) running(c *simCluster, run *batchv1alpha1.ActiveRun) {
	if run.JobUID == "" {
		if uid, ok := c.created[run.Token]; ok {
			run.JobUID = uid
		}
	}
	job := c.apiJob(run.JobName)
	view := s.cachedView(c.jobs[run.JobName]) // the cache may still show a Job deleted since
	for {
		v := runcore.Running(runcore.RunningView{Run: run, Job: view, Lease: s.leaseView(c, run), PastStartDeadline: !s.local(c).Before(run.StartDeadline.Time)})
		switch v.Act {
		case runcore.ReadJobLive:
			view = jobViewOf(job, runcore.ReadLive)
			continue
		case runcore.SkipLateRun:
			// The release of a lease the run may hold (runcore.NewUnconfirmed):
			// the keeper stops renewing it, then the key is deleted if it
			// holds the run's token.
			m := runcore.NewUnconfirmed(run, true)
			for m.Next() != runcore.UnconfirmedDone {
				switch m.Next() {
				case runcore.QuiesceLease:
					delete(c.keeper, run.Token)
					m.Deliver(true)
				case runcore.DeleteKey:
					if !s.store.down && s.store.holds(run.Token) {
						s.store.key = nil
					}
					m.Deliver(!s.store.down)
				}
			}
			_, end := m.Ended(s.local(c), s.skew)
			runcore.FinishRun(c.gj, *run, end, batchv1alpha1.RunResultSkipped, "", "past its starting deadline", s.local(c))
			c.freedAt = s.local(c)
			s.ended[batchv1alpha1.RunResultSkipped]++
			s.logf("%s: %s %s: no Job; lease %s", c.name, v.Step, run.JobName, leaseState(end))
		case runcore.ReleaseFinished:
			run.Phase = batchv1alpha1.RunPhaseReleasing
			if view.Finished == batchv1.JobComplete {
				run.StopResult, run.StopReason = batchv1alpha1.RunResultSucceeded, "Succeeded: the Job completed"
			} else {
				run.StopResult, run.StopReason = batchv1alpha1.RunResultFailed, "Failed: the Job failed"
			}
			s.logf("%s: %s %s: the Job ended %s", c.name, v.Step, run.JobName, view.Finished)
		case runcore.StopRun:
			run.Phase, run.StopResult, run.StopReason = batchv1alpha1.RunPhaseStopping, batchv1alpha1.RunResultLockLost, "LockLost: stopped"
			s.logf("%s: %s %s (cause %d)", c.name, v.Step, run.JobName, v.Cause)
		case runcore.CreateRunJob:
			if c.apiJob(run.JobName) != nil {
				s.logf("%s: %s %s: a Job of that name exists (the next pass adopts or stops it)", c.name, v.Step, run.JobName)
				return
			}
			s.uids++
			job = &simJob{name: run.JobName, uid: types.UID("uid-" + strconv.Itoa(s.uids)), token: run.Token, gated: true, guarded: run.PodGuard != nil,
				seen: s.now.Add(s.cacheLag()), fence: run.Fence}
			c.jobs[run.JobName] = job
			c.order = append(c.order, job)
			c.created[run.Token] = job.uid // recorded by the next pass (recordLater)
			s.logf("%s: %s %s", c.name, v.Step, run.JobName)
			s.open(c, run, job)
		case runcore.AdoptJob:
			run.JobUID = view.UID
			s.logf("%s: %s %s", c.name, v.Step, run.JobName)
		case runcore.GoOn:
			if job != nil && job.gated {
				s.open(c, run, job)
			}
		}
		return
	}
}

// open is the start gate: a renewal confirms the lease in the store, then the
// Job starts; its Pod's guard holds what that renewal saw.
func (s *sim) open(c *simCluster, run *batchv1alpha1.ActiveRun, job *simJob) {
	if !s.leaseView(c, run).Confirmed {
		return
	}
	m := runcore.NewOpening(run, runcore.JobGate)
	if m.Next() == runcore.ConfirmLease {
		switch {
		case s.store.down:
			m.Deliver(runcore.Confirmation{Err: errSimStoreDown})
		case !s.store.holds(run.Token):
			m.Deliver(runcore.Confirmation{NotHeld: true})
		default:
			m.Deliver(runcore.Confirmation{})
		}
	}
	if m.Next() != runcore.OpenTheGate {
		return
	}
	s.store.key.expires = s.now.Add(simTTL)
	c.keeper[run.Token].lastOK = s.now
	s.change(job, func() {
		job.gated, job.openedIn = false, c.restarts
		job.pod = &simPod{running: true, visible: true, until: s.store.key.expires.Add(-simGuardMargin)}
	})
	if run.Fence <= c.fence && s.failed == "" {
		s.failed = fmt.Sprintf("I3: %s's run %s starts under fence %d, not above the %d an earlier run of it had", c.name, run.JobName, run.Fence, c.fence)
		s.logf("VIOLATION %s", s.failed)
	}
	c.fence = max(c.fence, run.Fence)
	if run.RunNow != "" {
		s.requestStarts[run.RunNow]++
		if s.requestStarts[run.RunNow] > 1 && s.failed == "" {
			s.failed = fmt.Sprintf("I9T: the work of %s's run-now %s starts a second time, with %s", c.name, run.RunNow, run.JobName)
			s.logf("VIOLATION %s", s.failed)
		}
	}
	if !job.guarded {
		job.pod.until = s.now.Add(24 * time.Hour) // no guard: only a stop ends it early
	}
	s.logf("%s: %s %s: its Pod starts", c.name, runcore.Open, run.JobName)
}

// stopping drives the core's pass of a stopping run (runcore.NewStopping):
// the API server counts the Pods it can see.
func (s *sim) stopping(c *simCluster, run *batchv1alpha1.ActiveRun) {
	m := runcore.NewStopping()
	for {
		job := c.apiJob(run.JobName)
		switch m.Next() {
		case runcore.CountPods, runcore.CountPodsLive:
			pods := 0
			if job != nil && job.pod != nil && job.pod.running && job.pod.visible {
				pods = 1
			}
			m.Deliver(runcore.StopOutcome{Pods: pods})
		case runcore.ReadStoppedJob:
			m.Deliver(runcore.StopOutcome{Job: jobViewOf(job, runcore.ReadLive)})
		case runcore.GoRelease:
			run.Phase = batchv1alpha1.RunPhaseReleasing
			return
		default:
			return // the stop controller deletes the Pods, then the Job
		}
	}
}

// release drives the core's release machine against the simulated store.
func (s *sim) release(c *simCluster, run *batchv1alpha1.ActiveRun) {
	m := runcore.NewRelease(run, true)
	for {
		e := m.Next()
		if e != runcore.Quiesce && e != runcore.ReadGuardedJob && e != runcore.WaitForStore && s.dies.IntN(30) == 0 {
			// The manager dies before this effect of the release (after the
			// store call, before the run's end is in status): the next one
			// resumes the lease from status and releases again.
			s.crash(c)
			s.logf("%s: the manager dies before %v of %s", c.name, e.Step(), run.JobName)
			return
		}
		switch e {
		case runcore.Quiesce:
			k := c.keeper[run.Token]
			m.Deliver(runcore.ReleaseOutcome{HeldNow: k != nil && !k.lost})
		case runcore.ReadGuardedJob:
			m.Deliver(runcore.ReleaseOutcome{Job: jobViewOf(c.apiJob(run.JobName), runcore.ReadLive)})
		case runcore.CompleteLease, runcore.ReleaseLease:
			switch {
			case s.store.down:
				m.Deliver(runcore.ReleaseOutcome{StoreDown: true})
			case s.store.key != nil && s.store.key.token != run.Token:
				m.Deliver(runcore.ReleaseOutcome{NotHeld: true, Holder: s.store.key.token})
			default:
				if e == runcore.CompleteLease {
					ttl := leasetiming.MarkerTTL(simSchedule, run.ScheduledTime.Time, s.local(c), due.StartsOf(&c.gj.Spec), c.gj.Spec.Lock.KeepAfterSuccessOrDefault())
					s.store.markers[run.OccurrenceKey] = simMarker{by: run.Holder, expires: s.now.Add(ttl)}
					s.completes(run)
				}
				released := s.store.key != nil
				s.store.key = nil
				m.Deliver(runcore.ReleaseOutcome{Released: released})
				s.logf("%s: %s %s: the key is deleted", c.name, e.Step(), run.JobName)
			}
		case runcore.WaitForStore:
			return
		default:
			end := m.Ended(s.local(c), s.skew)
			delete(c.keeper, run.Token)
			runcore.FinishRun(c.gj, *run, end.Lease, end.Result, "", end.Message, s.local(c))
			c.freedAt = s.local(c)
			s.ended[end.Result]++
			if j := c.jobs[run.JobName]; j != nil && s.rng.IntN(2) == 0 {
				s.change(j, func() { j.deleted = true }) // the history limit
				s.logf("%s: %s: the Job %s is deleted", c.name, runcore.History, run.JobName)
			}
			if end.Lease.State == batchv1alpha1.LeaseLeftToExpire {
				s.leftToExpire++
			}
			s.logf("%s: %s %s: %s, lease %s", c.name, runcore.Finish, run.JobName, end.Result, leaseState(end.Lease))
			return
		}
	}
}

func leaseState(e runcore.LeaseEnd) string {
	if e.State == "" {
		return "never held"
	}
	return string(e.State)
}

// stopper deletes the visible Pods of runs that stop (the stop controller).
func (s *sim) stopper(c *simCluster) {
	for _, run := range c.gj.Status.Active {
		if run.Phase != batchv1alpha1.RunPhaseStopping {
			continue
		}
		j := c.apiJob(run.JobName)
		if j == nil || j.finished != "" && (j.pod == nil || !j.pod.running || !j.pod.visible) {
			continue
		}
		s.change(j, func() {
			if j.pod != nil && j.pod.running && j.pod.visible {
				j.pod.running = false
			}
			j.finished, j.failed = batchv1.JobFailed, true // the Job is deleted with them
		})
		s.logf("%s: %s: the Job %s and its Pods are deleted", c.name, runcore.StopStopping, run.JobName)
	}
	s.stopUnclaimed(c)
}

// stopUnclaimed is step stop_unclaimed for a Job past its gate that no status
// records: kept while this manager renews its lease, stopped otherwise, as a
// stop owed at once (time does not pass before it: advance).
func (s *sim) stopUnclaimed(c *simCluster) {
	for _, j := range c.order {
		if !c.waiting(j, true).WorksUnrecorded() || j.pod == nil || !j.pod.running || !j.pod.visible {
			continue
		}
		kept := c.renewedHere(j.token)
		u := runcore.NewUnclaimed(c.gj.Name, runcore.JobView{Found: true, OwnerUID: string(c.gj.UID), Started: true,
			RenewedHere: s.keptView(kept).Confirmed})
		for {
			action, why := u.Next()
			switch action {
			case runcore.ReadOwner:
				u.DeliverOwner(runcore.OwnerView{Found: true, UID: string(c.gj.UID), Claims: runcore.RunByName(c.gj, j.name) != nil, InShard: true})
				continue
			case runcore.ReadJob:
				u.DeliverJob(runcore.JobView{Found: true, Finished: j.finished != ""})
				continue
			case runcore.Stop:
				s.change(j, func() {
					j.pod.running = false
					j.finished, j.failed = batchv1.JobFailed, true
				})
				s.logf("%s: %s: the Job %s and its Pods are deleted: %s", c.name, runcore.StopUnclaimed, j.name, why)
				if kept == nil && s.store.holds(j.token) && j.openedIn == c.restarts && s.failed == "" {
					// Its manager never stopped renewing the lease of its run's
					// Job (no restart since the gate opened), yet it did.
					s.failed = "I4: the working Job " + j.name + " is stopped while its key holds its token: no renewal of it went unanswered, its manager just stopped renewing it (no restart since its gate opened)"
					s.logf("VIOLATION %s", s.failed)
				}
				if kept == nil && s.store.holds(j.token) && j.resumableIn == c.restarts && c.restarts > 0 && s.failed == "" {
					// The restart found it as its pass would adopt it: its
					// lease had to be renewed from then on, with the
					// recorded ones, until a pass adopts it.
					s.failed = "I4: the working Job " + j.name + " is stopped while its key holds its token: the restart that found it adoptable did not keep renewing its lease"
					s.logf("VIOLATION %s", s.failed)
				}
			}
			break
		}
	}
}

// kubelet: a visible working Pod ends, mostly well.
func (s *sim) kubelet(c *simCluster) {
	for _, j := range c.order {
		if p := j.pod; p != nil && p.running && p.visible && s.rng.IntN(3) == 0 {
			failed := s.rng.IntN(4) == 0
			s.change(j, func() {
				p.running = false
				if failed {
					j.finished, j.failed = batchv1.JobFailed, true
				} else {
					j.finished = batchv1.JobComplete
				}
			})
			s.logf("%s: the Pod of %s ends: Job %s", c.name, j.name, j.finished)
		}
	}
}

// cutOff: the node of a working Pod is cut off from the control plane: the
// API server shows the Pod failed, and the Pod works on until its guard stops
// it.
func (s *sim) cutOff(c *simCluster) {
	for _, j := range c.order {
		if p := j.pod; p != nil && p.running && p.visible && j.guarded {
			s.change(j, func() {
				p.visible = false
				j.finished, j.failed = batchv1.JobFailed, true
			})
			s.logf("%s: the node of %s is cut off: its Pod works on, the API server shows it failed", c.name, j.name)
			return
		}
	}
}

// crash: the manager restarts; what it kept in memory is gone, and it resumes
// the leases status records, from their recorded evidence.
func (s *sim) crash(c *simCluster) {
	if s.pauses.IntN(3) == 0 {
		var tokens []string
		for token, k := range c.keeper {
			if !k.lost {
				tokens = append(tokens, token)
			}
		}
		if len(tokens) > 0 {
			slices.Sort(tokens)
			s.asleep = append(s.asleep, simAsleep{c: c, tokens: tokens, wakeAt: s.now.Add(time.Duration(1+s.pauses.IntN(60)) * time.Second)})
			s.logf("%s: the manager pauses, keeping %d lease(s), and a new one takes over", c.name, len(tokens))
		}
	}
	c.restarts++
	c.clock = s.newClock()
	c.keeper = map[string]*simKept{}
	c.created = map[string]types.UID{}
	c.opened = map[string]types.UID{}
	for _, j := range c.order {
		j.cache = nil // a new process lists its Jobs anew
	}
	for _, run := range c.gj.Status.Active {
		if run.AcquiredAt != nil && run.Phase != batchv1alpha1.RunPhaseAcquiring {
			c.keeper[run.Token] = s.resumed(c, &run)
		}
	}
	// The early gate: the lease of every Job past its gate that no status
	// records, when its key holds the token minted for it.
	for _, j := range c.order {
		w := c.waiting(j, true)
		if !w.WorksUnrecorded() {
			continue
		}
		u := s.unrecorded(c, j)
		if act, _ := runcore.Adoption(u); act == runcore.AdoptTheJob {
			j.resumableIn = c.restarts
		}
		if c.keeper[j.token] != nil || !runcore.ResumesUnrecorded(w, u) {
			continue
		}
		run := *u.Run
		run.Token = u.Key.Holder
		s.checkAdopted(c, &run)
		c.keeper[run.Token] = s.resumed(c, &run)
		s.logf("%s: the restart resumes the lease of %s, which no status records", c.name, j.name)
	}
	c.resumed = true
	s.logf("%s: the manager restarts and resumes %d lease(s) from status%s", c.name, len(c.keeper), s.clockOf(c))
}

func (s *sim) step() {
	s.steps++
	if s.stallAt > 0 && s.steps >= s.stallAt && s.quiet() {
		s.stallAt = 0
		s.logf("every manager stands still for %v", s.stallFor)
		s.advance(s.stallFor)
	}
	if s.moves.IntN(150) == 0 {
		s.move(s.clusters[s.moves.IntN(len(s.clusters))])
	}
	if s.losses.IntN(400) == 0 {
		s.loseData()
	}
	if s.tenants.IntN(60) == 0 {
		s.tenantEdits(s.clusters[s.tenants.IntN(len(s.clusters))])
	}
	if s.writes.IntN(300) == 0 {
		w := s.clusters[s.writes.IntN(len(s.clusters))]
		w.writesFailUntil = s.now.Add(time.Duration(10+s.writes.IntN(50)) * time.Second)
		s.logf("%s: the API server refuses its manager's status writes until %.0fs", w.name, w.writesFailUntil.Sub(simStart).Seconds())
	}
	c := s.clusters[s.rng.IntN(len(s.clusters))]
	switch n := s.rng.IntN(100); {
	case n < 30:
		s.pass(c)
	case n < 45:
		s.keep(c)
	case n < 55:
		s.guard(c)
	case n < 65:
		s.stopper(c)
	case n < 72:
		s.kubelet(c)
	case n < 75:
		s.cutOff(c)
	case n < 78:
		s.crash(c)
	case n < 83:
		if !c.last.IsZero() && !c.rerun {
			c.requests++
			c.rerun, c.request, c.requestedAt = true, fmt.Sprintf("%s-%d", c.name, c.requests), s.now
			s.logf("%s: a person runs the occurrence at %s again (run-now %s)", c.name, c.last.Format("15:04"), c.request)
		}
	case n < 86:
		s.store.down = !s.store.down
		s.logf("the store %s", map[bool]string{true: "stops answering", false: "answers again"}[s.store.down])
	default:
		s.advance(time.Duration(1+s.rng.IntN(5)) * time.Second)
	}
	s.check()
}

func runSim(t testing.TB, seed uint64, steps int) *sim {
	s := newSim(t, seed)
	for i := 0; i < steps && s.failed == ""; i++ {
		s.step()
	}
	return s
}

func simSeeds(t *testing.T) (from, n uint64) {
	if v := os.Getenv("GUARDEDJOB_SIM_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("GUARDEDJOB_SIM_SEED: %v", err)
		}
		return seed, 1
	}
	n = 10000
	if v := os.Getenv("GUARDEDJOB_SIM_SEEDS"); v != "" {
		var err error
		if n, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("GUARDEDJOB_SIM_SEEDS: %v", err)
		}
	}
	return 1, n
}

// regressionSeeds are seeds that found a hole when its fix was taken out
// (the mutant of that name): they run first, every time.
var regressionSeeds = []struct {
	mutant string
	seed   uint64
}{
	{"unclean-by-recorded-uid", 17665},
	{"release-ignores-unclean-end", 1},
	{"takeup-ignores-ledger", 4},
	{"skip-on-cached-miss", 554},
	{"jobfirst-adopt-any", 239},
	{"shard-break-before-make", 7917},
	{"jobfirst-no-floor", 305},
	{"early-stopper-keeps-unheld", 138},
	{"early-floor-without-jobs", 37},
	{"early-adoption-untracks-started", 317},
	{"skew-ignored", 1524},
	{"early-resume-skips-unrecorded", 19},
	{"late-start-runs", 9668},
	{"adopt-trusts-annotation", 3},
	{"adoption-trusts-start", 53},
	{"unadopted-delete-any-version", 48},
	{"request-opens-early", 41},
}

// TestTheSimulationKeepsOneWorkingPodPerKey runs the simulation for many
// seeds; a seed that breaks the invariant fails with its trace, and replays
// with GUARDEDJOB_SIM_SEED.
func TestTheSimulationKeepsOneWorkingPodPerKey(t *testing.T) {
	from, n := simSeeds(t)
	seeds := make([]uint64, 0, n+uint64(len(regressionSeeds)))
	if n > 1 && os.Getenv("GUARDEDJOB_SIM_SKIP_REGRESSIONS") == "" {
		for _, r := range regressionSeeds {
			seeds = append(seeds, r.seed)
		}
	}
	for seed := from; seed < from+n; seed++ {
		seeds = append(seeds, seed)
	}
	ended, left, adopted, expired, late, edits, conflicts, takenUp, woke, extended := map[batchv1alpha1.RunResult]int{}, 0, 0, 0, 0, 0, 0, 0, 0, 0
	for _, seed := range seeds {
		s := runSim(t, seed, 600)
		for r, k := range s.ended {
			ended[r] += k
		}
		left += s.leftToExpire
		adopted += s.adopted
		expired += s.expiredOcc
		late += s.skipped
		edits += s.edits
		conflicts += s.conflicts
		takenUp += s.takenUp
		woke += s.woke
		extended += s.extended
		if s.failed != "" {
			t.Fatalf("seed %d: %s\nreplay: GUARDEDJOB_SIM_SEED=%d go test ./internal/runcore/ -run TestTheSimulationKeepsOneWorkingPodPerKey\ntrace:\n%s",
				seed, s.failed, seed, strings.Join(s.trace, "\n"))
		}
		if n == 1 {
			t.Logf("trace:\n%s", strings.Join(s.trace, "\n"))
		}
	}
	// The simulation must reach what it checks: runs that succeed, runs that
	// fail or lose their lease, leases left to expire under a Pod that a
	// cut-off node keeps working, Jobs adopted after their pass died, and
	// leases a crashed pass left taken up by the next pass of their run.
	if n >= 100 && (ended[batchv1alpha1.RunResultSucceeded] < int(n)/2 || ended[batchv1alpha1.RunResultFailed] < int(n)/10 ||
		ended[batchv1alpha1.RunResultLockLost] < int(n)/10 || left < int(n)/10 || adopted < int(n)/20 || expired < int(n)/100 || late < int(n)/100 || edits < int(n)/10 ||
		conflicts < int(n)/100 || takenUp < int(n)/20 || woke < int(n)/20 || extended < int(n)/100) {
		t.Errorf("in %d seeds: %v, %d leases left to expire, %d Jobs adopted, %d done-markers expired, %d runs skipped late, %d annotations edited, %d deletes refused, %d leases taken up, %d paused managers woke and renewed (%d renewals of a lease no live manager renewed): the simulation hardly reaches what it checks",
			n, ended, left, adopted, expired, late, edits, conflicts, takenUp, woke, extended)
	}
	t.Logf("%d seeds: runs ended %v, %d leases left to expire, %d Jobs adopted, %d done-markers expired, %d runs skipped past their occurrence's latest start, %d run annotations a tenant edited, %d deletes of Jobs waiting for adoption refused as the Job had changed since it was judged, %d leases taken up, %d paused managers woke and renewed a lease before they exited (%d renewals of a lease no live manager renewed any more)",
		n, ended, left, adopted, expired, late, edits, conflicts, takenUp, woke, extended)
}

// TestTheRegressionSeedsAreTheOnesTheDocsName: docs/reliability.md's table of
// the simulation's seeds names each regression seed with its planted bug, and
// no other.
func TestTheRegressionSeedsAreTheOnesTheDocsName(t *testing.T) {
	b, err := os.ReadFile("../../docs/reliability.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## The simulation\n")
	if start < 0 {
		t.Fatal("docs/reliability.md has no section \"The simulation\"")
	}
	section := doc[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\| ([0-9]+) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented[m[1]] = m[2]
	}
	for _, r := range regressionSeeds {
		if got := documented[r.mutant]; got != strconv.FormatUint(r.seed, 10) {
			t.Errorf("regression seed %d (%s): docs/reliability.md's table says %q", r.seed, r.mutant, got)
		}
		delete(documented, r.mutant)
	}
	for mutant, seed := range documented {
		t.Errorf("docs/reliability.md's table names seed %s for %s, which is no regression seed", seed, mutant)
	}
}

// TestEverySeedTheDocsCiteIsARegressionSeed: where the docs cite the
// simulation's seeds elsewhere (the planted-bug table's catchers, the failure
// table, the prose), each is a regression seed, and the planted-bug table
// names the seed of its own bug.
func TestEverySeedTheDocsCiteIsARegressionSeed(t *testing.T) {
	bySeed, byMutant := map[string]bool{}, map[string]string{}
	for _, r := range regressionSeeds {
		s := strconv.FormatUint(r.seed, 10)
		bySeed[s], byMutant[r.mutant] = true, s
	}
	cite := regexp.MustCompile(`(?:TestTheSimulationKeepsOneWorkingPodPerKey` + "`" + ` \(seed|the simulation \(seeds?|finds that bug \(seed) ([0-9]+)(?: and ([0-9]+))?`)
	planted := regexp.MustCompile("^\\| `([a-z0-9-]+)` \\|.*TestTheSimulationKeepsOneWorkingPodPerKey` \\(seed ([0-9]+)")
	found := 0
	for _, path := range []string{"../../docs/reliability.md", "../../docs/failure-semantics.md"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range cite.FindAllStringSubmatch(line, -1) {
				for _, seed := range m[1:] {
					if seed == "" {
						continue
					}
					found++
					if !bySeed[seed] {
						t.Errorf("%s:%d cites simulation seed %s, which is no regression seed", path, i+1, seed)
					}
				}
			}
			if m := planted.FindStringSubmatch(line); m != nil && byMutant[m[1]] != m[2] {
				t.Errorf("%s:%d: the planted bug %s is caught by seed %s, not %s", path, i+1, m[1], byMutant[m[1]], m[2])
			}
		}
	}
	if found == 0 {
		t.Fatal("found no seed the docs cite: the pattern no longer matches them")
	}
}
