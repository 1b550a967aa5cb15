// Command mutants checks that the tests catch the bugs that matter most. It copies
// the checkout, then for each known bug (a mutant): plants it in the copy, runs
// the tests named to catch it (its catchers) from the copy, and takes it out
// again. It fails unless, for every mutant, at least one catcher fails with the
// bug planted, and every catcher passes on the unplanted copy first. A mutant
// that no longer applies (its code was rewritten) fails too, so that the list is
// kept up to date with the code it breaks.
//
// The catchers run with no prebuilt binaries in their environment, so that a
// test that runs the manager, the pod guard or the kubectl plugin builds it from
// the mutated copy (internal/testutil/bins): a bug planted in cmd/ or in a
// package those binaries hold can be caught by such a test.
//
// Usage (make test-mutants sets the environment the tests need):
//
//	go run ./hack/mutants [-list] [-workers N] [-every] [-faults] [-seed N] [NAME ...]
//
// -every runs every catcher of each mutant, not only up to the first that
// fails, and says which caught it: a way to see that a fast catcher and its
// story both still catch a mutant (CI stops at the first).
// -workers runs that many mutants at once (1 by default), each in its own copy.
// -faults also builds the manager from each mutated copy and runs the fault test
// (test/e2e TestFaults) with it, which must report at least one violation of the
// guarantee; -seed fixes its fault schedule so that the figures repeat.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// mutant is one planted bug: a unique piece of code and what replaces it.
type mutant struct {
	name string
	bug  string // what the planted code does wrong, in a sentence
	file string
	find string // must occur exactly once in file
	repl string
	// catchers are the tests of which at least one must fail with the mutant
	// planted, fastest first: once one fails, the rest are not run.
	catchers []catcher
}

// catcher is a set of tests of one package.
type catcher struct {
	pkg   string
	tests []string
}

var mutants = []mutant{
	{
		name: "renew-noop",
		bug:  "renewals report success without calling Redis",
		file: "internal/lockclient/keeper.go",
		find: "func (c *Client) renewMany(ctx context.Context, items []renewItem) []error {\n",
		repl: "func (c *Client) renewMany(ctx context.Context, items []renewItem) []error {\n\tif len(items) >= 0 {\n\t\treturn make([]error, len(items))\n\t}\n",
		catchers: []catcher{
			{"./internal/lockclient/", []string{"TestKeeperReportsATheftWithinOneRenewInterval"}},
			{"./controllers/", []string{"TestAStolenLeaseStopsTheJobAndItsPodsAndLeavesTheThiefAlone"}},
		},
	},
	{
		name: "deadline-from-reply",
		bug:  "the self-fence deadline counts from a renewal's reply instead of its send time",
		file: "internal/lockclient/keeper.go",
		find: "k.applyLocked(e, sent, c.provenSent(sent, e.req.Lease.TTL), now, res[i])",
		repl: "k.applyLocked(e, sent, now, now, res[i])",
		catchers: []catcher{
			{"./internal/lockclient/", []string{"TestKeeperCountsARenewalFromItsSendTimeNotItsLateReply"}},
			{"./controllers/", []string{"TestWindowSlowRenewal_TheDeadlineCountsFromARenewalsSendTimeNotItsLateReply"}},
		},
	},
	{
		name: "skew-ignored",
		bug:  "a resumed lease's self-fence deadline ignores the clock-skew allowance",
		file: "internal/leasetiming/leasetiming.go",
		find: "return acquiredAt.Add(-skew)",
		repl: "return acquiredAt",
		catchers: []catcher{
			{"./internal/leasetiming/", []string{"TestResumedEvidenceIsNeverYoungerThanTheLease"}},
			{"./internal/runcore/", []string{"TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestWindowClockSkew_ALeaseResumedFromAFastClocksRecordStopsThePodsBeforeTheKeyCouldExpire"}},
		},
	},
	{
		name: "release-no-compare",
		bug:  "release deletes the key without comparing the token",
		file: "internal/lockclient/lua/release.lua",
		find: "if current == ARGV[1] then",
		repl: "if current then",
		catchers: []catcher{
			{"./internal/lockclient/", []string{"TestAnExpiredHolderCannotReleaseRenewOrCompleteOverTheNextHolder"}},
			{"./controllers/", []string{"TestAStolenLeaseStopsTheJobAndItsPodsAndLeavesTheThiefAlone"}},
		},
	},
	{
		name: "renew-no-compare",
		bug:  "renew.lua extends the key without comparing the token",
		file: "internal/lockclient/lua/renew.lua",
		find: "if current == ARGV[1] then",
		repl: "if current then",
		catchers: []catcher{
			{"./internal/lockclient/", []string{"TestAnExpiredHolderCannotReleaseRenewOrCompleteOverTheNextHolder"}},
			{"./controllers/", []string{"TestAStolenLeaseStopsTheJobAndItsPodsAndLeavesTheThiefAlone"}},
		},
	},
	{
		name: "takeup-ignores-binding",
		bug:  "take-up adopts a token of this cluster and object name whatever run (object UID, occurrence) it was minted for",
		file: "internal/runtoken/runtoken.go",
		find: "if len(random) != 32 && len(random) != 48 || random[16:32] != binding(r) {",
		repl: "if len(random) != 32 && len(random) != 48 {",
		catchers: []catcher{
			{"./internal/runtoken/", []string{"TestMintedForRecognisesOnlyItsOwnRun"}},
			{"./controllers/", []string{"TestTwoWrites_ALeaseMintedForAnotherObjectOrClusterIsNeverTakenUp"}},
		},
	},
	{
		name: "takeup-ignores-ledger",
		bug:  "take-up adopts a token the lease ledger knows (a lease its run left to expire)",
		file: "internal/runcore/takeup.go",
		find: "if why := ledger(o.Holder); why != \"\" {",
		repl: "if why := \"\"; why != \"\" {",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestTakeUpOnlyAnOrphanNoRecordKnows", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestEveryActor_ARunNowNeverTakesUpTheLeaseItsFailedRunLeftToExpire"}},
		},
	},
	{
		name: "unlock-live-token",
		bug:  "a manual unlock deletes a GuardedJob lease that still has time to live (another cluster's, or one left to expire)",
		file: "internal/lockclient/lua/unlock.lua",
		find: "if ARGV[2] == \"lock\" and string.match(",
		repl: "if false and string.match(",
		catchers: []catcher{
			{"./internal/lockclient/", []string{"TestUnlockDeletesOnlyTheHolderThatWasShown"}},
			{"./controllers/", []string{"TestEveryActor_ATenantsUnlockNeverDeletesAnotherClustersLiveLease", "TestEveryActor_AnUnlockOfALeftLeaseStaysRefusedWhateverOverwritesLastRun"}},
		},
	},
	{
		name: "shard-break-before-make",
		bug:  "a shard that a GuardedJob left stops renewing its runs' leases before the new shard holds them",
		file: "internal/runcore/handover.go",
		find: "func HandsOver(shard string) bool { return shard != \"\" }",
		repl: "func HandsOver(shard string) bool { return shard == \"\" }",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestAShardHandsOverMakeBeforeBreak", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestEveryActor_AShardMoveKeepsTheLeaseUntilTheNewShardHoldsIt"}},
		},
	},
	{
		name: "early-claim-ignores-jobs",
		bug:  "the early gate: a shard a GuardedJob moved into claims it while a working Job no status records has its lease renewed only by the shard it left, which then lets go",
		file: "internal/runcore/handover.go",
		find: "\tfor _, job := range unrecorded {\n\t\tif !renews(job) {",
		repl: "\tfor _, job := range unrecorded {\n\t\tif renews(job) {",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestAShardHandsOverMakeBeforeBreak"}},
		},
	},
	{
		name: "grants-not-exclusive",
		bug:  "a key prefix granted to one namespace stays in the default of the namespace whose name it starts with",
		file: "internal/keys/grants.go",
		find: "return strings.HasPrefix(key, namespace+\":\") && g.grantedElsewhere(namespace, key) == \"\"",
		repl: "return strings.HasPrefix(key, namespace+\":\")",
		catchers: []catcher{
			{"./internal/keys/", []string{"TestKeyGrantsAllowed"}},
			{"./controllers/", []string{"TestEveryActor_ANamespaceWhoseNameStartsAnotherTenantsGrantGetsNoneOfItsKeys"}},
		},
	},
	{
		name: "renew-only-reacquires",
		bug:  "an old leader renewing alone still takes back FailOpen keys it finds absent",
		file: "controllers/setup.go",
		find: "if err := keeper.StopReacquiring(ctx); err != nil {",
		repl: "if err := error(nil); err != nil {",
		catchers: []catcher{
			{"./controllers/", []string{"TestRenewOnlyNeverTakesBackAKeyFoundAbsent"}}, // no API server
			{"./controllers/", []string{"TestEveryActor_AnOldLeaderRenewingAloneNeverWritesBackAKeyTheNewLeaderReleased"}},
		},
	},
	{
		name: "job-not-gated",
		bug:  "a run's Job is created ready to start, before its lease was confirmed after the create",
		file: "internal/jobbuild/jobbuild.go",
		find: "\tjob.Spec.Suspend = ptr.To(true)\n\tjob.Annotations[batchv1alpha1.StartGateAnnotation] = batchv1alpha1.StartGateLease\n",
		repl: "",
		catchers: []catcher{
			{"./internal/jobbuild/", []string{"TestEveryJobOfARunThatHoldsALeaseStartsGated"}},
			{"./controllers/", []string{"TestEveryActor_APausedOldLeaderNeverStartsTheJobOfARunThatAlreadyCompleted"}},
		},
	},
	{
		name: "keeper-ignores-pause",
		bug:  "a keeper that wakes from a pause judges the deadlines that passed meanwhile before it renews",
		file: "internal/lockclient/keeper.go",
		find: "paused := !k.planned.IsZero() && now.Sub(k.planned) > pauseThreshold\n",
		repl: "paused := false && !k.planned.IsZero() && now.Sub(k.planned) > pauseThreshold\n",
		catchers: []catcher{
			{"./internal/lockclient/", []string{"TestKeeperAfterAPauseRenewsBeforeItJudgesDeadlines"}},
		},
	},
	{
		name: "unclean-by-recorded-uid",
		bug:  "a guarded run whose Job's UID was never recorded counts as one that never had a Job, and releases its lease",
		file: "internal/runcore/running.go",
		find: "if run.PodGuard == nil {\n\t\treturn false\n\t}",
		repl: "if run.PodGuard == nil || run.JobUID == \"\" {\n\t\treturn false\n\t}",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestAGuardedRunLeavesItsLeaseToExpireUnlessItsJobCompletedCleanly", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestEveryActor_AGuardedRunStoppedBeforeItsJobUIDWasRecordedLeavesItsLeaseToExpire"}},
		},
	},
	{
		name: "release-ignores-unclean-end",
		bug:  "the release of a guarded run that did not end cleanly deletes its lease (or completes it) instead of leaving it to expire: a Pod the API server no longer shows works on while another holder starts",
		file: "internal/runcore/release.go",
		find: "\tcase !m.owns:\n\tcase m.leave:\n",
		repl: "\tcase !m.owns:\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestTheReleaseOfARunEffectByEffect", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestAGuardedRunWhosePodVanishedLeavesItsLeaseToExpireWhileAnUnguardedOneReleases"}},
		},
	},
	{
		name: "stopping-trusts-cached-pods",
		bug:  "a stopping run releases its lease when the cache shows no Pod of it left, without asking the API server: a Pod the cache has not seen yet works on after the release",
		file: "internal/runcore/stopping.go",
		find: "\t\tcase m.next == CountPods:\n\t\t\tm.next = CountPodsLive\n",
		repl: "\t\tcase m.next == CountPods:\n\t\t\tm.next = ReadStoppedJob\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestAStoppingRunReleasesOnlyOnceNothingOfItIsLeft"}},
		},
	},
	{
		name: "deadline-stop-full-grace",
		bug:  "the Pods of a run stopped at its self-fence deadline get their whole grace period, not what still fits before the lease could expire: they may work on after another holder started",
		file: "internal/runcore/stopverdict.go",
		find: "return leasetiming.DeadlineGrace(v.PodGrace, v.ValidUntil, v.ValidUntil.Add(-v.ValidFor)), true",
		repl: "return max(v.PodGrace, leasetiming.DeadlineGrace(v.PodGrace, v.ValidUntil, v.ValidUntil.Add(-v.ValidFor))), true",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestTheStopControllerStopsWhatTheKeeperReportsOrStatusRecords", "TestAHandedOverRunIsStoppedOnlyAsItsOwnWouldBe"}},
		},
	},
	{
		name: "marker-unacked",
		bug:  "with minReplicaAcks, a completion releases the lease without waiting for replicas to have the done-marker",
		file: "internal/lockclient/redis.go",
		find: "if c.acks.min > 0 {\n\t\treturn c.completeAcked(ctx, l, markerTTL)",
		repl: "if c.acks.min < 0 {\n\t\treturn c.completeAcked(ctx, l, markerTTL)",
		catchers: []catcher{
			{"./internal/lockclient/", []string{"TestReplicaAcknowledgementOfADoneMarker"}},
		},
	},
	{
		name: "identity-unchecked",
		bug:  "a manager never sees that another live manager claims its cluster identity, and starts runs beside it",
		file: "internal/runcore/beats.go",
		find: "if strikes >= IdentityStrikes && !b.Dup {",
		repl: "if false {",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestBeatsSettleOnlyOnAnsweredBeatsThatFindNoTwin"}},
			{"./controllers/", []string{"TestEveryActor_TwoClustersClaimingOneIdentityStartNoRun"}},
		},
	},
	{
		name: "identity-not-settled",
		bug:  "a manager that has just started takes up leases before its identity heartbeat could have seen a twin",
		file: "internal/runcore/beats.go",
		find: "if b.Dup || len(b.recent) < IdentityStrikes {\n\t\treturn false\n\t}",
		repl: "if b.Dup {\n\t\treturn false\n\t}\n\tif len(b.recent) < IdentityStrikes {\n\t\treturn true\n\t}",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestBeatsSettleOnlyOnAnsweredBeatsThatFindNoTwin"}},
			{"./controllers/", []string{"TestEveryActor_AManagerJustStartedNeverTakesUpATwinsLease"}},
		},
	},
	{
		name: "takeover-ended-context",
		bug:  "a shard takes a moved run over with the watch event's context, which has ended by then: the first renewal fails and a healthy run is stopped, or the take-over waits for the work queue",
		file: "controllers/shard.go",
		find: "\tr.ensureTracked(ctx, gj)\n}\n\n// leftShard",
		repl: "\tended, cancel := context.WithCancel(ctx)\n\tcancel()\n\tr.ensureTracked(ended, gj)\n}\n\n// leftShard",
		catchers: []catcher{
			{"./controllers/", []string{"TestEveryActor_ANewShardWhoseQueueIsBusyTakesAMovedRunOverOnSight"}},
		},
	},
	{
		name: "stop-trusts-cached-job",
		bug:  "the stop controller stops a Job no run claims as its cache read it, before its GuardedJob: a run that ended in between loses its finished Job",
		file: "controllers/stop_controller.go",
		find: "\treturn r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), job)\n",
		repl: "\treturn nil\n",
		catchers: []catcher{
			{"./controllers/", []string{"TestAJobThatCompletesBetweenTheStopControllersReadsIsNotStopped"}},
		},
	},
	{
		name: "jobfirst-gate-early",
		bug:  "the pass that creates a run's Job opens its start gate before status records the run: a manager that dies in between leaves a working Pod whose lease nobody renews",
		file: "internal/runcore/start.go",
		find: "\t\tcase o.Created:\n\t\t\tm.job = true\n\t\t\tm.next = WriteRecord\n",
		repl: "\t\tcase o.Created:\n\t\t\tm.job = true\n\t\t\tm.next = OpenJobGate\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestTheStartOfARunWritesItsRecordBeforeItsWorkMayStart", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestJobFirst_ARunCreatesItsJobBeforeItsFirstStatusWrite", "TestJobFirst_AManagerThatDiesBetweenTheJobAndTheStatusWriteLeavesAJobTheNextOneAdopts"}},
		},
	},
	{
		name: "jobfirst-adopt-any",
		bug:  "a Job no status records is adopted whatever its lock key, fence counter and the lease ledger say: an old leader's late Job of a completed run starts",
		file: "internal/runcore/adopt.go",
		find: "\t\twhy = Adoptable(u.Leases, u.Run, u.Recorded == nil, u.Key, u.ReadErr, u.Identity)\n",
		repl: "\t\twhy = \"\"\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestAdoptionAdoptsOnlyAJobItsKeyStillHoldsTheLeaseOf", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestJobFirst_AJobLeftUnrecordedWhoseLeaseExpiredIsDeletedNeverStarted", "TestEveryActor_APausedOldLeaderNeverStartsTheJobOfARunThatAlreadyCompleted"}},
		},
	},
	{
		name: "jobfirst-deletes-history",
		bug:  "a Job that finished while it still waited at its start gate is taken for one waiting for adoption: the next pass deletes the run's history as StaleJob",
		file: "internal/runcore/hint.go",
		find: "\t\treturn !w.Finished\n",
		repl: "\t\treturn true\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestOnlyAGatedUnfinishedUnrecordedJobWaitsForAdoption"}},
			{"./controllers/", []string{"TestJobFirst_AJobThatFinishedBeforeItsGateOpenedKeepsItsHistory"}},
		},
	},
	{
		name: "early-resume-skips-unrecorded",
		bug:  "a restart renews only the leases status records: the lease of a Job whose gate opened before its status write lapses under its working Pods (HOLE_EARLY_RESUME_SKIPS_UNRECORDED)",
		file: "internal/runcore/adopt.go",
		find: "\tact, _ := Adoption(u)\n\treturn act == AdoptTheJob\n",
		repl: "\t_, _ = Adoption(u)\n\treturn false\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestARestartResumesOnlyAWorkingJobItsPassWouldAdopt", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestEarlyGate_ARestartRenewsTheLeaseOfAJobPastItsGateThatNoStatusRecords"}},
		},
	},
	{
		name: "early-start-recorded-intent",
		bug:  "a run whose intent status already records starts in the early order: its gate opens and the record is left to a pass that adopts only a Job no status names, so status keeps the run waiting for a key its own Job holds",
		file: "internal/runcore/start.go",
		find: "if jobFirst && early && !inStatus && RecordableFromJob(run) {",
		repl: "if jobFirst && early && RecordableFromJob(run) {",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestTheEarlyGateStartsOnlyARunNoStatusNamesYet"}},
			{"./controllers/", []string{"TestEarlyGate_ARunThatWaitedForItsKeyIsRecordedBeforeItsGateOpens"}},
		},
	},
	{
		name: "early-start-loses-bookkeeping",
		bug:  "a try of a retried occurrence or a backfill's run starts in the early order: the record pass rebuilds the run from its Job, and status.retry's count of tries or status.backfill's progress, which the starting pass kept, is lost",
		file: "internal/runcore/start.go",
		find: "return run.Retry == 0 && run.Backfill == \"\"",
		repl: "return run != nil",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestTheEarlyGateStartsOnlyARunNoStatusNamesYet"}},
		},
	},
	{
		name: "early-stopper-stops-renewed",
		bug:  "the stop controller stops every Job past its gate that no status records, also one whose lease this process renews: a run whose status write failed is stopped although it holds its lease",
		file: "internal/runcore/unclaimed.go",
		find: "\tif job.Started && job.RenewedHere {\n",
		repl: "\tif job.Started && job.RenewedHere && false {\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestUnclaimedStopsOnlyAJobNoReadShowsClaimedOrFinished"}},
			{"./controllers/", []string{"TestEarlyGate_AStatusWriteThatFailsAfterTheGateOpenedKeepsTheLeaseUntilAPassAdoptsTheJob"}},
		},
	},
	{
		name: "early-stopper-keeps-unheld",
		bug:  "the stop controller keeps every Job past its gate that no status records, whether or not its lease is renewed here: a Job whose lease was lost works on beside the key's next holder (HOLE_EARLY_STOPPER_KEEPS_UNHELD)",
		file: "internal/runcore/unclaimed.go",
		find: "\tif job.Started && job.RenewedHere {\n",
		repl: "\tif job.Started {\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestUnclaimedStopsOnlyAJobNoReadShowsClaimedOrFinished", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestEarlyGate_AJobPastItsGateWhoseLeaseIsLostBeforeAnyStatusRecordsItIsStopped"}},
		},
	},
	{
		name: "early-adoption-untracks-started",
		bug:  "an adoption whose status write fails stops renewing the lease of a Job past its gate: its Pods work on under a lease that lapses",
		file: "internal/runcore/adopt.go",
		find: "\treturn u.Recorded != nil || u.Started || u.OpenedHere\n",
		repl: "\treturn u.Recorded != nil || u.OpenedHere\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestAnAdoptionWhoseWriteFailsKeepsRenewingAJobPastItsGate", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestEarlyGate_ARestartRenewsTheLeaseOfAJobPastItsGateThatNoStatusRecords"}},
		},
	},
	{
		name: "early-floor-without-jobs",
		bug:  "the Strict floor is status.lastFence alone: after a store data loss, a fence a Job took before status recorded it is handed out again (HOLE_EARLY_FLOOR_WITHOUT_JOBS)",
		file: "internal/runcore/records.go",
		find: "\t\tfloor = max(floor, j.Fence)\n",
		repl: "\t\t_ = j\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestAJobIsItsRunsRecordUntilStatusCatchesUp", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
		},
	},
	{
		name: "early-finalizer-before-floor",
		bug:  "a Job no status records loses its lease finalizer before status holds its fence and occurrence: the history limit deletes the only record of them (HOLE_EARLY_FINALIZER_BEFORE_FLOOR)",
		file: "internal/runcore/records.go",
		find: "\tif j.Fence > st.LastFence {\n\t\treturn false\n\t}\n",
		repl: "\tif j.Fence > st.LastFence && false {\n\t\treturn false\n\t}\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestAJobIsItsRunsRecordUntilStatusCatchesUp"}},
		},
	},
	{
		name: "adoptable-holder-alone",
		bug:  "a Job waiting for adoption is adopted when the key holds any token of its holder, not the one minted for that very Job: a value someone else wrote under the run's holder name is taken for the run's lease",
		file: "internal/runcore/adopt.go",
		find: "if name, ok := runtoken.MintedFor(key.Holder, identity); !ok || name != run.JobName || holder != run.Holder {",
		repl: "if holder != run.Holder {",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestAdoptableOnlyWhileTheKeyHoldsTheTokenMintedForThisVeryJob"}},
		},
	},
	{
		name: "adoption-trusts-start",
		bug:  "a Job waiting for adoption is adopted with what its annotation says started its run (a request, parameters, a backfill), though its token attests another start: a tenant who may edit Jobs makes a pending request look answered",
		file: "internal/runcore/adopt.go",
		find: "if unrecorded && !runtoken.StartedBy(key.Holder, StartOf(run)) {",
		repl: "if unrecorded && false {",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestAdoptableOnlyWhileTheKeyHoldsTheTokenMintedForThisVeryJob", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestUntrusted_AnAnnotationNamingAPendingRequestNeverAnswersIt"}},
		},
	},
	{
		name: "adoptable-ignores-ledger",
		bug:  "adoption ignores the lease ledger: the Job of a run status records as released is adopted when its key still holds its token",
		file: "internal/runcore/adopt.go",
		find: "rec != nil && rec.State != batchv1alpha1.LeaseLive {\n\t\treturn \"status.leases records its lease as \"",
		repl: "rec != nil && false {\n\t\treturn \"status.leases records its lease as \"",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestAdoptableOnlyWhileTheKeyHoldsTheTokenMintedForThisVeryJob"}},
		},
	},
	{
		name: "unadopted-delete-any-version",
		bug:  "the delete of a Job waiting for adoption does not name the version judged: a cache that still lists a finished run's Job as it was created deletes the run's history",
		file: "internal/runcore/adopt.go",
		find: "\treturn u.Judged\n",
		repl: "\treturn JobVersion{UID: u.Judged.UID}\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestJobFirst_AStaleCacheNeverDeletesAJobThatHasChangedSince"}},
		},
	},
	{
		name: "finished-deleting-not-adopted",
		bug:  "with the early gate, a finished Job being deleted (ttlSecondsAfterFinished) that no status records is not adopted: its run is missing from the history and its lease is left to expire",
		file: "internal/runcore/hint.go",
		find: "\tif w.Deleting && (w.Gated || !w.Finished) {\n",
		repl: "\tif w.Deleting {\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestInTheEarlyGateAStartedUnrecordedJobWaitsForAdoption"}},
			{"./controllers/", []string{"TestEarlyGate_ARunWhoseJobFinishedAndWentBeforeItsRecordIsRecordedAndReleased"}},
		},
	},
	{
		name: "waiting-ignores-unclaimed",
		bug:  "a run that waited in status (a retry, a buffered occurrence, a backfill's next occurrence) starts while a Job no run claims still has Pods working without a lease, beside its own GuardedJob's Pods",
		file: "internal/due/admit.go",
		find: "\tcase a.Unclaimed != \"\":\n\t\treturn Admission{Act: Wait, RetryAfter: time.Second}\n\t}\n\treturn Admission{Act: Start}\n}\n\n// Contend",
		repl: "\t}\n\treturn Admission{Act: Start}\n}\n\n// Contend",
		catchers: []catcher{
			{"./internal/due/", []string{"TestARunThatWaitedStartsOnlyWhenNoJobOutsideStatusMayWork"}},
			{"./controllers/", []string{"TestEarlyGate_ARunThatWaitedStartsOnlyOnceAJobNoRunClaimsHasNoPodsLeft"}},
		},
	},
	{
		name: "retry-uncounted",
		bug:  "a retry whose recording status write was lost, and whose Job a later pass took up, is not counted in status.retry: its backoff and its abandonment undercount the runs made",
		file: "internal/due/retry.go",
		find: "\t\trt.Attempts, rt.NotBefore = run.Retry, nil\n",
		repl: "\t\trt.NotBefore = nil\n",
		catchers: []catcher{
			{"./internal/due/", []string{"TestRetryFollowsHowEachRunEnded"}},
			{"./controllers/", []string{"TestRetryOccurrence_ARetryWhoseRecordWasLostIsStillCounted"}},
		},
	},
	{
		name: "request-opens-early",
		bug:  "with the early gate, a run a request started (run-now, GuardedJobRun) opens its gate before status records it: a Job that worked and could not be adopted (its lease gone) leaves the request unanswered, and the request runs its work again (HOLE_TRIGGER_OPENS_EARLY)",
		file: "internal/runcore/start.go",
		find: "\treturn run.Retry == 0 && run.Backfill == \"\" && run.RunNow == \"\"\n",
		repl: "\treturn run.Retry == 0 && run.Backfill == \"\"\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestTheEarlyGateStartsOnlyARunNoStatusNamesYet", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestEarlyGate_ARunNowIsRecordedBeforeItsGateOpens"}},
		},
	},
	{
		name: "jobfirst-no-floor",
		bug:  "adopting a Job records its fence in the run but does not raise status.lastFence: once the history limit deletes the Job, a data loss hands its fence out again",
		file: "internal/runcore/adopt.go",
		find: "\tst.LastFence = max(st.LastFence, r.Fence)\n",
		repl: "",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestRecordAdoptedRaisesTheFenceFloor", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestJobFirst_AManagerThatDiesBetweenTheJobAndTheStatusWriteLeavesAJobTheNextOneAdopts"}},
		},
	},
	{
		name: "jobfirst-recorded-reacquires",
		bug:  "a run recorded while it waited for its key acquires again although its earlier pass created its Job: the new fence is not the Job's, and the run is stopped as StaleJob",
		file: "internal/runcore/hint.go",
		find: "\treturn recorded && run.JobUID == \"\"\n",
		repl: "\treturn false\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestARecordedRunLooksForTheJobItsFailedStatusWriteLeftBeforeItAcquires"}},
			{"./controllers/", []string{"TestJobFirst_ARunWaitingForItsKeyAdoptsTheJobItsFailedStatusWriteLeft"}},
		},
	},
	{
		name: "jobfirst-blind-schedule",
		bug:  "a pass whose store does not answer the adoption of a Job waiting at its gate schedules anyway: the unanswered run-now starts a FailOpen run without a lease beside that Job",
		file: "internal/due/admit.go",
		find: "\tif a.Adopting {\n\t\treturn Admission{Act: Wait} // the Job waiting for adoption may be this occurrence's\n",
		repl: "\tif a.Adopting && false {\n\t\treturn Admission{Act: Wait}\n",
		catchers: []catcher{
			{"./internal/due/", []string{"TestAnOccurrenceStartsOnlyWhenNothingMayStandAheadOfIt"}},
			{"./controllers/", []string{"TestJobFirst_AStoreThatDoesNotAnswerTheAdoptionStartsNoRunBesideTheJob"}},
		},
	},
	{
		name: "stop-gate-race",
		bug:  "the stop controller judges a Job no run claims from a GuardedJob read before the Job's gate opened: a run recorded in between loses its working Job",
		file: "internal/runcore/unclaimed.go",
		find: "\tcase u.reads == 4:\n",
		repl: "\tcase u.reads == 2:\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestUnclaimedStopsOnlyAJobNoReadShowsClaimedOrFinished"}},
			{"./controllers/", []string{"TestJobFirst_AJobWhoseGateOpensBetweenTheStopControllersReadsIsNotStopped"}},
		},
	},
	{
		name: "unclaimed-ignores-finished",
		bug:  "the stop controller's live read of a Job no run claims does not look at whether it finished: a run that ended between the reads loses its finished Job",
		file: "internal/runcore/unclaimed.go",
		find: "\tcase j.Finished:\n",
		repl: "\tcase false && j.Finished:\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestUnclaimedStopsOnlyAJobNoReadShowsClaimedOrFinished"}},
			{"./controllers/", []string{"TestAJobThatCompletesBetweenTheStopControllersReadsIsNotStopped"}},
		},
	},
	{
		name: "identity-outage-keeps-beats",
		bug:  "beats from before a store outage still settle the identity, so a take-up right after it cannot have seen a twin that started meanwhile",
		file: "internal/runcore/beats.go",
		find: "b.Down = true\n\t\tb.recent = b.recent[:0]\n",
		repl: "b.Down = true\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestBeatsSettleOnlyOnAnsweredBeatsThatFindNoTwin"}},
			{"./controllers/", []string{"TestIdentityAStoreThatAnswersAgainBetweenBeatsIsNotSettled"}},
		},
	},
	{
		name: "identity-own-store-only",
		bug:  "the identity heartbeat beats only in the manager's own store: clones whose managers have stores of their own never see each other in the tenant store they share, and take up each other's leases there",
		file: "controllers/identity.go",
		find: "if c.tenantStores == nil {\n\t\treturn\n\t}",
		repl: "if true {\n\t\treturn\n\t}",
		catchers: []catcher{
			{"./controllers/", []string{"TestIdentityATwinInATenantStoreHoldsBackOnlyThatStore"}}, // no API server
			{"./controllers/", []string{"TestEveryActor_TwoClustersClaimingOneIdentityInATenantStoreStartNoRunInIt"}},
		},
	},
	{
		name: "pause-move-trusts-the-note",
		bug:  "the manager moves any suspendNote by guardedjob-manager out of spec, without the old manager's status: a note Git holds is removed on every sync, and a person's copy of it too",
		file: "internal/due/pause.go",
		find: "return c.LastTransitionTime, c.Status == metav1.ConditionTrue && c.Reason == batchv1alpha1.TooManyFailuresReason",
		repl: "return c.LastTransitionTime, true",
		catchers: []catcher{
			{"./internal/due/", []string{"TestALegacyPauseMovesOnlyWithTheOldManagersStatus"}},
			{"./controllers/", []string{"TestGitOps_APauseAnEarlierVersionWroteIntoSpecMovesToStatusOnce"}},
		},
	},
	{
		name: "retry-past-next-occurrence",
		bug:  "spec.retryOccurrence tries an occurrence until within after it even when the next occurrence comes first: a try may start after the occurrence's done-marker has expired, and run an occurrence another cluster already did",
		file: "internal/due/retry.go",
		find: "next.After(scheduled) && next.Before(until)",
		repl: "next.After(scheduled) && next.Before(until) && false",
		catchers: []catcher{
			{"./internal/due/", []string{"TestRetryTriesNeverOutliveTheOccurrencesDoneMarker"}},
			{"./controllers/", []string{"TestRetryDeadlinesOfARunFollowTheOccurrencesTries"}},
		},
	},
	{
		name: "guard-deadline-from-reply",
		bug:  "the pod guard's confirmation counts the lease from the read's reply instead of its send time",
		file: "internal/lockclient/confirm.go",
		find: "\tsent := c.clock.Now()\n\tv, err := c.readLease(ctx, key)\n",
		repl: "\tv, err := c.readLease(ctx, key)\n\tsent := c.clock.Now()\n",
		catchers: []catcher{
			{"./internal/lockclient/", []string{"TestConfirmCountsTheLeaseFromTheSendTimeNotTheReply"}},
		},
	},
	{
		name: "guard-ignores-pause",
		bug:  "the leadership guard lets a manager act after a pause until its leader lease is renewed again",
		file: "internal/leadership/guard.go",
		find: "\tcase !g.pausedAt.Before(g.renewedAt):\n",
		repl: "\tcase false && !g.pausedAt.Before(g.renewedAt):\n",
		catchers: []catcher{
			{"./internal/leadership/", []string{"TestAGuardLeadsOnlyWhileItsLeaderLeaseIsFreshlyRenewedAndNoPauseCameSince"}},
		},
	},
	{
		name: "store-writes-unguarded",
		bug:  "a manager not known to lead still acquires, completes, releases, unlocks and beats in the store",
		file: "internal/lockclient/redis.go",
		find: "\tif err := c.writeGate(); err != nil {\n\t\treturn fmt.Errorf(\"%s %s: %w\", op, key, err)\n\t}\n",
		repl: "\t_ = c.writeGate\n",
		catchers: []catcher{
			{"./internal/lockclient/", []string{"TestAClientWhoseWriteGateRefusesWritesNothingButRenewals"}},
		},
	},
	{
		name: "reacquire-after-pause",
		bug:  "the keeper takes a key back while the manager is not known to lead",
		file: "internal/lockclient/keeper.go",
		find: "reacquire := k.mayReacquire == nil || k.mayReacquire()",
		repl: "reacquire := k.mayReacquire == nil || k.mayReacquire() || true",
		catchers: []catcher{
			{"./internal/lockclient/", []string{"TestKeeperTakesAKeyBackOnlyWhileItsGateAllows"}},
		},
	},
	{
		name: "inflight-allowance-spent",
		bug:  "a renewal in flight across a pause keeps its allowance from before the pause: a healthy run is stopped at the wake",
		file: "internal/lockclient/keeper.go",
		find: "d = latest(d, k.wokeAt.Add(resumeAnswerAllowance))",
		repl: "d = latest(d, d)",
		catchers: []catcher{
			{"./internal/lockclient/", []string{"TestKeeperARenewalInFlightAcrossAPauseDoesNotStopAHealthyRun"}},
		},
	},
	{
		name: "failure-across-pause-retried-late",
		bug:  "a renewal that times out across a pause is taken for a store failure and retried after the usual delay: the allowance after the wake runs out first and a healthy run is stopped",
		file: "internal/lockclient/keeper.go",
		find: "\t\tk.stats.RenewalsFailed++\n\t\te.nextRenew = now\n",
		repl: "\t\tk.stats.RenewalsFailed++\n\t\te.state, e.lastErr = StateFailing, err\n\t\te.nextRenew = now.Add(renewRetry)\n",
		catchers: []catcher{
			{"./internal/lockclient/", []string{"TestKeeperARenewalThatFailsAcrossAPauseDoesNotStopAHealthyRun"}},
		},
	},
	{
		name: "ghost-reacquire-kept",
		bug:  "a key taken back by a renewal sent before a pause is renewed on as the run's lease",
		file: "internal/lockclient/keeper.go",
		find: "\tcase errors.Is(err, errReacquired) && sent.Before(k.wokeAt):\n",
		repl: "\tcase false:\n",
		catchers: []catcher{
			{"./internal/lockclient/", []string{"TestKeeperAKeyTakenBackByARenewalSentBeforeAPauseIsLost"}},
		},
	},
	{
		name: "skip-on-cached-miss",
		bug:  "a run whose Job UID status does not record is taken as Job-less on the cache's word, skipped and its lease released",
		file: "internal/runcore/running.go",
		find: "case job.Read == ReadCached && !job.Exists:",
		repl: "case job.Read == ReadCached && !job.Exists && run.JobUID != \"\":",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestARecordedRunsPassFollowsItsJobAndItsLease", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestStaleCache_ARunWhoseJobTheCacheHasNotSeenIsNeverSkippedAndItsLeaseNeverReleased"}},
		},
	},
	{
		name: "adopt-trusts-annotation",
		bug:  "adoption takes a Job's run annotation as it is: keys and lease timing a tenant wrote",
		file: "internal/runcore/hint.go",
		find: "if field := RunDiffers(&want, hint); field != \"\" {",
		repl: "want = *hint\n\tif field := RunDiffers(&want, hint); field != \"\" {",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestTrustedRunTakesFromTheAnnotationOnlyWhatItMayGive", "TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestUntrusted_AnAnnotationThatLengthensTheLeaseIsNeverAdopted"}},
		},
	},
	{
		name: "hint-ttl-unchecked",
		bug:  "a Job's run annotation may give its run another ttl than the spec does: a tenant lengthens the lease of a run that is adopted",
		file: "internal/runcore/hint.go",
		find: "{\"ttl\", want.TTL == hint.TTL},",
		repl: "{\"ttl\", true},",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestRunDiffersNamesTheFirstFieldAnAnnotationChanges"}},
		},
	},
	{
		name: "podguard-ungated",
		bug:  "a pod guard's Job starts ungated: a paused manager's late create runs an ended occurrence",
		file: "internal/jobbuild/jobbuild.go",
		find: "\tif run.Unguarded {\n\t\treturn\n\t}\n\tif ptr.Deref(job.Spec.Suspend, false) {",
		repl: "\tif run.Unguarded || run.PodGuard != nil {\n\t\treturn\n\t}\n\tif ptr.Deref(job.Spec.Suspend, false) {",
		catchers: []catcher{
			{"./internal/jobbuild/", []string{"TestEveryJobOfARunThatHoldsALeaseStartsGated"}},
			{"./controllers/", []string{"TestPausedLeader_ALateJobOfAGuardedRunThatLeftItsLeaseToExpireNeverStarts"}},
		},
	},
	{
		name: "queue-pods-ungated",
		bug:  "the Pods of a Job a queue starts are scheduled without the lease being confirmed",
		file: "internal/jobbuild/jobbuild.go",
		find: "\t\tqueueGate(job)\n\t\treturn\n",
		repl: "\t\treturn\n",
		catchers: []catcher{
			{"./internal/jobbuild/", []string{"TestEveryJobOfARunThatHoldsALeaseStartsGated"}},
			{"./controllers/", []string{"TestQueued_APodOfAQueuesJobIsScheduledOnlyOnceItsRunsLeaseIsConfirmed"}},
		},
	},
	{
		name: "pod-gate-unconfirmed",
		bug:  "a queued Job's Pods have their scheduling gate removed without confirming the lease",
		file: "internal/runcore/open.go",
		find: "\treturn &Opening{run: run, gate: gate, next: ConfirmLease}\n",
		repl: "\treturn &Opening{run: run, gate: gate, next: map[Gate]OpenEffect{JobGate: ConfirmLease, PodGates: OpenTheGate}[gate]}\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestNoGateOpensBeforeTheLeaseIsConfirmedAfterIt"}},
			{"./controllers/", []string{"TestQueued_APodWhoseRunLostItsLeaseBeforeTheQueueStartedItIsNeverScheduled"}},
		},
	},
	{
		name: "marker-ignores-buffer",
		bug:  "a done-marker lives only until the next occurrence and its starting deadline: a run that waited behind another starts after it expired",
		file: "internal/leasetiming/leasetiming.go",
		find: "return due.Add(st.StartingDeadline + time.Duration(st.Buffered)*(st.RunAhead+st.StartingDeadline))",
		repl: "return due.Add(st.StartingDeadline)",
		catchers: []catcher{
			{"./internal/leasetiming/", []string{"TestLatestStartCoversEveryStartOfTheOccurrence", "TestMarkerTTL"}},
		},
	},
	{
		name: "late-start-runs",
		bug:  "a buffered run past the latest start of its occurrence runs, after the done-marker may have expired",
		file: "internal/due/late.go",
		find: "if latest := LatestStart(spec, sched, run.ScheduledTime.Time, now); now.After(latest) {",
		repl: "if latest := LatestStart(spec, sched, run.ScheduledTime.Time, now); now.After(latest) && false {",
		catchers: []catcher{
			{"./internal/due/", []string{"TestLateRunsAreSkippedNeverRun"}},
			{"./internal/runcore/", []string{"TestTheSimulationKeepsOneWorkingPodPerKey"}},
			{"./controllers/", []string{"TestMarker_ABufferedRunLaterThanItsOccurrencesLatestStartIsSkippedNotRun"}},
		},
	},
	{
		name: "shard-claims-untracked",
		bug:  "a shard claims a hand-over while a run's lease is renewed by nobody here",
		file: "internal/runcore/handover.go",
		find: "\t\tif RenewsHere(cluster, gj.UID, run) && !tracked(run.Token) {\n",
		repl: "\t\tif RenewsHere(cluster, gj.UID, run) && !tracked(run.Token) && false {\n",
		catchers: []catcher{
			{"./internal/runcore/", []string{"TestAShardHandsOverMakeBeforeBreak"}},
			{"./controllers/", []string{"TestShardClaimsAHandOverOnlyOnceItRenewsEveryRun"}},
		},
	},
	{
		name: "grants-disagreement-ignored",
		bug:  "a manager sharing a store without another's --key-grants gives a granted key to the namespace whose default covers it",
		file: "internal/keys/grants.go",
		find: "return key != \"\" && ours.Allowed(namespace, key) != theirs.Allowed(namespace, key)",
		repl: "return false && ours.Allowed(namespace, key) != theirs.Allowed(namespace, key)",
		catchers: []catcher{
			{"./internal/keys/", []string{"TestKeyGrantsDisagreeOnlyOnKeysTheyGiveToDifferentNamespaces"}},
			{"./controllers/", []string{"TestGrantsAManagerWithOtherKeyGrantsRefusesTheKeysTheyGiveToAnotherNamespace"}},
		},
	},
	{
		name: "backfill-started-with-its-acceptance",
		bug:  "the pass that accepts a backfill also starts its first occurrence: a status write that then fails (a person's next request conflicts with it) loses the backfill's record, and the next request is accepted while the first one's run goes on",
		file: "internal/due/late.go",
		find: "return after != nil && after.State == batchv1alpha1.BackfillRunning &&",
		repl: "return false && after != nil && after.State == batchv1alpha1.BackfillRunning &&",
		catchers: []catcher{
			{"./internal/due/", []string{"TestABackfillStartsNothingInThePassThatAcceptsIt"}},
			{"./controllers/", []string{"TestBackfill_ARequestThatConflictsWithTheFirstRunsRecordFindsTheBackfillRunning"}},
		},
	},
	{
		name: "backfill-starts-forever",
		bug:  "a backfill starts occurrences after the done-markers of its runs in other clusters may have expired",
		file: "internal/due/late.go",
		find: "return at.Add(batchv1alpha1.BackfillDoneMarkerTTL), true",
		repl: "return at.Add(batchv1alpha1.BackfillDoneMarkerTTL), false",
		catchers: []catcher{
			{"./internal/due/", []string{"TestABackfillStartsOccurrencesOnlyWhileItsMarkersLive"}},
			{"./controllers/", []string{"TestBackfill_ABackfillStartsNoOccurrenceAfterItsMarkersCouldHaveExpired"}},
		},
	},
	{
		name: "undeploy-failed-list-is-empty",
		bug:  "make undeploy takes a list of GuardedJobs that failed for \"none left\" and removes the manager while a run goes on",
		file: "hack/undeploy.sh",
		find: "if left=\"$(remaining --no-headers 2>/dev/null)\" && [[ -z $left ]]; then",
		repl: "if left=\"$(remaining --no-headers 2>/dev/null || true)\" && [[ -z $left ]]; then",
		catchers: []catcher{
			{"./test/undeploy/", []string{"TestUndeployTakesAFailedListForRunsStillGoing"}},
		},
	},
	{
		name: "undeploy-failed-crd-lookup-is-absent",
		bug:  "make undeploy takes a lookup of the CRD that failed for \"not installed\" and removes the manager at once while a run goes on",
		file: "hack/undeploy.sh",
		find: `if ! installed="$("$kubectl" get crd "$crd" --ignore-not-found -o name)"; then`,
		repl: `if ! installed="$("$kubectl" get crd "$crd" --ignore-not-found -o name 2>/dev/null || true)"; then`,
		catchers: []catcher{
			{"./test/undeploy/", []string{"TestUndeployTakesAFailedListForRunsStillGoing"}},
		},
	},
}

func main() {
	list := flag.Bool("list", false, "list the mutants and exit")
	check := flag.Bool("check", false, "only check that every mutant applies to this tree, and exit")
	faults := flag.Bool("faults", false, "also run the fault test (test/e2e TestFaults) against a manager built from each mutant")
	seed := flag.Int64("seed", 0, "with -faults: the fault schedule's seed (E2E_SEED); 0: a new one each run")
	timeout := flag.Duration("timeout", 15*time.Minute, "bound on each go test run")
	workers := flag.Int("workers", 1, "mutants run at once, each in its own copy of the checkout (-faults: 1); more is faster but loads the timing of the catchers")
	every := flag.Bool("every", false, "run every catcher of each mutant, not only up to the first that catches it, and say which caught it")
	unplanted := flag.Bool("unplanted", true, "first run every catcher on the unplanted copy (false: the caller ran them on this very tree already, as CI's make test does)")
	flag.Parse()
	if *list {
		for _, m := range mutants {
			fmt.Printf("%-20s %s (%s)\n", m.name, m.bug, m.file)
		}
		return
	}
	selected, err := pick(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(2)
	}
	if *check {
		failed := false
		for _, m := range selected {
			if _, err := m.apply(".", true); err != nil {
				fmt.Fprintln(os.Stderr, "mutants:", err)
				failed = true
			}
		}
		if failed {
			os.Exit(1)
		}
		fmt.Printf("%d mutants apply\n", len(selected))
		return
	}
	r := &runner{timeout: *timeout, faults: *faults, seed: *seed, unplanted: *unplanted, workers: *workers, every: *every}
	if *faults {
		r.workers = 1 // the fault test needs the whole machine
	}
	if err := r.run(selected); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func pick(names []string) ([]mutant, error) {
	if len(names) == 0 {
		return mutants, nil
	}
	var out []mutant
	for _, n := range names {
		i := slices.IndexFunc(mutants, func(m mutant) bool { return m.name == n })
		if i < 0 {
			return nil, fmt.Errorf("no mutant %q (see -list)", n)
		}
		out = append(out, mutants[i])
	}
	return out, nil
}

type runner struct {
	timeout   time.Duration
	faults    bool
	seed      int64
	unplanted bool
	workers   int
	every     bool
}

func (r *runner) run(ms []mutant) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "hack", "mutants")); err != nil {
		return errors.New("run from the repository root (make test-mutants)")
	}
	tmp, err := os.MkdirTemp("", "guardedjob-mutants-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	// One copy of the checkout per worker: each plants its mutant in its own.
	workers := max(1, min(r.workers, len(ms)))
	copies := make(chan string, workers)
	first := ""
	for i := range workers {
		dir := filepath.Join(tmp, fmt.Sprintf("src%d", i))
		if err := copyCheckout(root, dir); err != nil {
			return fmt.Errorf("copy the checkout: %w", err)
		}
		if first == "" {
			first = dir
		}
		copies <- dir
	}
	// Every mutant must apply before anything runs: a stale one is a failure of
	// its own, found in seconds.
	for _, m := range ms {
		if _, err := m.apply(first, true); err != nil {
			return err
		}
	}

	// The mutants whose first catcher needs an API server take longest: they
	// start first, so that none of them is left running alone at the end.
	var slowFirst, fast []mutant
	for _, m := range ms {
		if slow(m) {
			slowFirst = append(slowFirst, m)
		} else {
			fast = append(fast, m)
		}
	}
	ms = append(slowFirst, fast...)

	start := time.Now()
	unplanted := mergeCatchers(ms)
	if !r.unplanted {
		fmt.Printf("== the unplanted copy: not run again (-unplanted=false: the caller ran every catcher on this tree)\n")
		unplanted = nil
	} else {
		fmt.Printf("== the unplanted copy: every catcher must pass\n")
	}
	for _, c := range unplanted {
		res := r.goTest(first, c)
		fmt.Printf("   %s %s: %s (%s)\n", c.pkg, strings.Join(c.tests, ","), res.verdict(), res.took.Round(time.Second))
		if !res.ok() {
			fmt.Println(indent(res.tail()))
			return fmt.Errorf("the catchers fail without a mutant: fix them first")
		}
	}

	// The mutants run side by side, one per copy: much of a catcher's time is
	// a link, the API server's start and a test's waits, which leave a core
	// idle. Each mutant's report is printed whole when it ends.
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		missed  []string
		failure error
	)
	for _, m := range ms {
		dir := <-copies
		mu.Lock()
		stop := failure != nil
		mu.Unlock()
		if stop {
			copies <- dir
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out strings.Builder
			caught, err := r.runMutant(&out, m, dir)
			mu.Lock()
			defer mu.Unlock()
			fmt.Print(out.String())
			switch {
			case err != nil:
				if failure == nil {
					failure = err
				}
			case !caught:
				missed = append(missed, m.name)
			}
			copies <- dir
		}()
	}
	wg.Wait()
	if failure != nil {
		return failure
	}
	fmt.Printf("== %d mutants, %d caught, in %s (%d at a time)\n", len(ms), len(ms)-len(missed), time.Since(start).Round(time.Second), workers)
	if len(missed) > 0 {
		slices.Sort(missed)
		return fmt.Errorf("not caught: %s", strings.Join(missed, ", "))
	}
	return nil
}

// runMutant plants m in the copy at dir, runs its catchers until one fails,
// takes it out again, and writes what happened to out.
func (r *runner) runMutant(out *strings.Builder, m mutant, dir string) (caught bool, err error) {
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(out, format, args...) }
	say("== %s: %s (%s)\n", m.name, m.bug, m.file)
	restore, err := m.apply(dir, false)
	if err != nil {
		return false, err
	}
	defer func() {
		if rerr := restore(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	var by []string
	for _, c := range m.catchers {
		if caught && !r.every {
			// One catcher is enough; the others (slower, listed last) need not run.
			say("   %s %s: not run, caught already\n", c.pkg, strings.Join(c.tests, ","))
			continue
		}
		res := r.goTest(dir, c)
		say("   %s %s: %s (%s)\n", c.pkg, strings.Join(c.tests, ","), res.verdict(), res.took.Round(time.Second))
		switch {
		case res.buildFailed():
			say("%s\n", indent(res.tail()))
			return false, fmt.Errorf("mutant %s does not build: update it", m.name)
		case len(res.failed) > 0:
			caught = true
			by = append(by, c.pkg)
			for _, name := range res.failed {
				say("     caught by %s: %s\n", name, res.firstMessage(name))
			}
		}
	}
	if r.faults {
		v, err := r.faultTest(dir, m)
		if err != nil {
			return caught, err
		}
		say("   fault test: %s\n", v)
	}
	if !caught {
		say("   NOT CAUGHT: every catcher passed with the bug planted\n")
	} else if r.every {
		say("   caught by %d of %d catchers: %s\n", len(by), len(m.catchers), strings.Join(by, " "))
	}
	return caught, nil
}

// apply plants m in the copy at dir and returns the function that takes it out
// again. check only verifies that it would apply.
func (m mutant) apply(dir string, check bool) (func() error, error) {
	path := filepath.Join(dir, m.file)
	orig, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mutant %s: %w", m.name, err)
	}
	if n := bytes.Count(orig, []byte(m.find)); n != 1 {
		return nil, fmt.Errorf("mutant %s no longer applies: %q occurs %d times in %s (want once); update hack/mutants to the code", m.name, m.find, n, m.file)
	}
	if check {
		return nil, nil
	}
	planted := bytes.Replace(orig, []byte(m.find), []byte(m.repl), 1)
	if err := os.WriteFile(path, planted, 0o644); err != nil {
		return nil, err
	}
	return func() error { return os.WriteFile(path, orig, 0o644) }, nil
}

// slow says whether m's first catcher is outside internal/: a package whose
// tests start an API server or build and run the binaries.
func slow(m mutant) bool {
	return len(m.catchers) > 0 && !strings.HasPrefix(m.catchers[0].pkg, "./internal/")
}

// mergeCatchers groups the catchers of ms by package, each test once.
func mergeCatchers(ms []mutant) []catcher {
	var out []catcher
	for _, m := range ms {
		for _, c := range m.catchers {
			i := slices.IndexFunc(out, func(o catcher) bool { return o.pkg == c.pkg })
			if i < 0 {
				out = append(out, catcher{pkg: c.pkg})
				i = len(out) - 1
			}
			for _, t := range c.tests {
				if !slices.Contains(out[i].tests, t) {
					out[i].tests = append(out[i].tests, t)
				}
			}
		}
	}
	return out
}

// result is one go test run.
type result struct {
	err    error
	out    string
	took   time.Duration
	passed []string
	failed []string
}

var (
	passLine = regexp.MustCompile(`(?m)^\s*--- PASS: (\S+)`)
	failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
)

func (r result) ok() bool          { return r.err == nil && len(r.failed) == 0 && len(r.passed) > 0 }
func (r result) buildFailed() bool { return r.err != nil && len(r.passed)+len(r.failed) == 0 }

func (r result) verdict() string {
	switch {
	case r.ok():
		return fmt.Sprintf("pass (%d)", len(r.passed))
	case len(r.failed) > 0:
		return fmt.Sprintf("FAIL (%d of %d)", len(r.failed), len(r.failed)+len(r.passed))
	default:
		return fmt.Sprintf("no test result (%v)", r.err)
	}
}

// tail is the end of the output, without the manager's JSON log lines.
func (r result) tail() string {
	var keep []string
	for _, l := range strings.Split(r.out, "\n") {
		if !strings.HasPrefix(l, "{") && !strings.HasPrefix(l, "I1") && !strings.HasPrefix(l, "W1") && !strings.HasPrefix(l, "E1") {
			keep = append(keep, l)
		}
	}
	if len(keep) > 40 {
		keep = keep[len(keep)-40:]
	}
	return strings.Join(keep, "\n")
}

// firstMessage is the first line of the test's failure report: the first
// message a _test.go line logged between the test's last start (or
// continuation) and its "--- FAIL" line.
func (r result) firstMessage(test string) string {
	lines := strings.Split(r.out, "\n")
	end := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "--- FAIL: "+test+" ") })
	if end < 0 {
		return "(see the test's output)"
	}
	start := 0
	for i := end - 1; i >= 0; i-- {
		if f := strings.Fields(lines[i]); len(f) == 3 && (f[0] == "===") && f[2] == test {
			start = i
			break
		}
	}
	for i := start; i < end; i++ {
		l := strings.TrimSpace(lines[i])
		if _, msg, ok := strings.Cut(l, "_test.go:"); ok {
			if _, text, ok := strings.Cut(msg, ": "); ok && strings.TrimSpace(text) != "" {
				return strings.TrimSpace(text)
			}
			for _, next := range lines[i+1 : min(end, i+4)] {
				if t := strings.TrimSpace(next); t != "" && !strings.HasPrefix(t, "{") {
					return t
				}
			}
		}
	}
	return "(see the test's output)"
}

// noPrebuilt empties the environment variables that name prebuilt project
// binaries, so that a test builds them from the copy it runs in.
var noPrebuilt = []string{"GUARDEDJOB_MANAGER_BIN=", "GUARDEDJOB_PLUGIN_BIN=", "GUARDEDJOB_GUARD_BIN="}

func (r *runner) goTest(dir string, c catcher) result {
	pattern := "^(" + strings.Join(c.tests, "|") + ")$"
	// Test binaries linked without symbol tables and DWARF (as make test links
	// them): a third less link time for each of the many copies.
	return r.command(dir, noPrebuilt, "go", "test", "-count=1", "-vet=off", "-ldflags=-s -w", "-v", "-timeout", r.timeout.String(), "-run", pattern, c.pkg)
}

func (r *runner) command(dir string, env []string, name string, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	res := result{err: err, out: out.String(), took: time.Since(start)}
	for _, m := range passLine.FindAllStringSubmatch(res.out, -1) {
		res.passed = append(res.passed, m[1])
	}
	for _, m := range failLine.FindAllStringSubmatch(res.out, -1) {
		res.failed = append(res.failed, m[1])
	}
	return res
}

var violations = regexp.MustCompile(`(\d+) violations \(seed`)

// faultTest runs TestFaults against a manager built from the mutated copy (the
// test builds it when GUARDEDJOB_MANAGER_BIN is empty) and reports its verdict.
func (r *runner) faultTest(dir string, m mutant) (string, error) {
	env := append([]string{"E2E_FAULTS=1"}, noPrebuilt...)
	if r.seed != 0 {
		env = append(env, fmt.Sprintf("E2E_SEED=%d", r.seed))
	}
	res := r.command(dir, env, "go", "test", "-count=1", "-v", "-timeout", "45m", "-run", "^TestFaults$", "./test/e2e/")
	if v := violations.FindStringSubmatch(res.out); v != nil {
		return fmt.Sprintf("%s violations (caught)", v[1]), nil
	}
	if res.buildFailed() {
		return "", fmt.Errorf("mutant %s: the fault test did not run:\n%s", m.name, indent(res.tail()))
	}
	return fmt.Sprintf("no violation reported (%s)", res.verdict()), nil
}

func indent(s string) string {
	return "     | " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n     | ")
}

// copyCheckout copies the files git knows of (tracked, and new ones not ignored)
// from root to dst, as they are in the working tree.
func copyCheckout(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if rel == "" {
			continue
		}
		if err := copyFile(filepath.Join(root, rel), filepath.Join(dst, rel)); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted in the working tree
			}
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	info, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
