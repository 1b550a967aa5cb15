/*
 * A bounded model of the GuardedJob run protocol, checked with spin.
 * docs/reliability.md ("The protocol model") says what it models, what it leaves out,
 * the invariants, the configurations and the hole switches; `make model-check` runs it.
 *
 * One lock key. Time is discrete: the Clock advances it one tick at a time, and only
 * when nothing urgent is left (a renewal that is due, a stop the keeper asked for, a
 * restart that is due). Every other step (a reconcile pass, a Pod starting, a tenant's
 * request) may come arbitrarily late, or never. Every step is one atomic action: a
 * crash falls between any two of them. Timers count down, so the state space is finite.
 *
 * Configurations (define one): CFG_RUN, CFG_PAUSE, CFG_DEPOSED, CFG_MARKER, CFG_ADOPT, CFG_RETELL, CFG_LEFT, CFG_GUARD, CFG_UNLOCK,
 * CFG_SHARD, CFG_TWIN, CFG_REPL, CFG_GRANTS (a model of its own: key grants published
 * in a shared store), CFG_EARLY_TRIGGER (the early gate, a run-now trigger, a crash,
 * Redis data loss); CFG_JOBFIRST_RUN, CFG_JOBFIRST_PAUSE and
 * CFG_JOBFIRST_GUARD are RUN, PAUSE and GUARD in the Job-first run order (JOB_FIRST,
 * which any configuration may also be given: below); CFG_EARLY_RUN, CFG_EARLY_PAUSE
 * and CFG_EARLY_GUARD are them with the early gate (EARLY_GATE: below), and
 * CFG_EARLY_SHARD, CFG_EARLY_UNLOCK, CFG_EARLY_TWIN and CFG_EARLY_REPL are SHARD,
 * UNLOCK, TWIN and REPL with both (CFG_JOBFIRST_SHARD and the like: Job-first alone,
 * compiled to check that a hole switch of the early gate changes nothing without
 * it). Hole switches (each off unless
 * defined), one per safety fix: HOLE_TAKEUP_LEFT_LEASE, HOLE_UNLOCK_LIVE_FOREIGN,
 * HOLE_SHARD_BREAK_BEFORE_MAKE, HOLE_UNLOCK_AFTER_LASTRUN_OVERWRITTEN,
 * HOLE_DEADLINE_FROM_REPLY, HOLE_PAUSED_CREATE, HOLE_UNCLEAN_BY_RECORDED_UID,
 * HOLE_RELEASE_IGNORES_UNCLEAN,
 * HOLE_PAUSED_KEEPER, HOLE_RENEW_ONLY_REACQUIRE, HOLE_DUPLICATE_IDENTITY,
 * HOLE_MARKER_UNACKED, HOLE_IDENTITY_WINDOW, HOLE_IDENTITY_OUTAGE, HOLE_IDENTITY_OWN_STORE_ONLY, HOLE_NOT_LEADING,
 * HOLE_INFLIGHT_REACQUIRE_RENEWED, HOLE_SKIP_ON_STALE_CACHE, HOLE_GATE_STALE_CONFIRM,
 * HOLE_MARKER_EXPIRES_EARLY, HOLE_ADOPT_TRUSTS_ANNOTATION, HOLE_SHARD_CLAIM_UNTRACKED,
 * HOLE_GRANTS_UNPUBLISHED, HOLE_GRANTS_REFUSE_ACQUIRE_ONLY, HOLE_ADOPT_TRUSTS_START;
 * a timing assumption:
 * HOLE_SLOW_HANDOVER, HOLE_GRANTS_PUBLICATION_LAPSE; and two planted bugs that show I2 and I3 can
 * fail: HOLE_ACQUIRE_IGNORES_MARKER, HOLE_STRICT_WITHOUT_FLOOR. Holes of the
 * Job-first order (no effect without JOB_FIRST): HOLE_JOBFIRST_GATE_EARLY,
 * HOLE_JOBFIRST_ADOPT_ANY, HOLE_JOBFIRST_NO_FLOOR. Not a hole: JOBFIRST_STOP_PENDING
 * (the stop controller also stops a Job that is pending adoption) verifies clean; it
 * costs liveness only. Holes of the early gate (no effect without EARLY_GATE):
 * HOLE_EARLY_RESUME_SKIPS_UNRECORDED, HOLE_EARLY_STOPPER_KEEPS_UNHELD,
 * HOLE_EARLY_FLOOR_WITHOUT_JOBS, HOLE_EARLY_FINALIZER_BEFORE_FLOOR,
 * HOLE_EARLY_SCHEDULE_IGNORES_JOBS, HOLE_EARLY_HANDOVER_RECORDED_ONLY,
 * HOLE_TRIGGER_OPENS_EARLY.
 *
 * The run order. Status first: acquire, record (status.active: token, fence,
 * occurrence), create the Job (suspended, its start gate closed), confirm the lease
 * (a renewal) and open the gate (a write: within the stop budget of the
 * confirmation, by a manager not paused since it) (the code's order for a run with a pod guard, a queue, a failed
 * create). JOB_FIRST, the code's order for every other run:
 * acquire, create the Job (suspended, carrying token, fence and occurrence), record
 * status from the Job; a Job no status records is adopted when the key still holds
 * its token (and the ledger does not record its run as over), stopped otherwise; the
 * gate opens only for a recorded run. EARLY_GATE (with JOB_FIRST; the order planned
 * to take the status write off a run's start): acquire, create the Job gated, confirm
 * the lease and open the gate, then record status; the Job is the run's record until
 * status catches up. So a restart renews the lease of every unrecorded running Job
 * whose key holds its token, the stop controller keeps such a Job (and stops every
 * other), the Strict floor counts the fences of the Jobs, a Job's lease
 * finalizer stays until status.lastFence has its fence, the schedule's last time
 * counts the occurrences the Jobs carry, and a shard hand-over counts the Jobs.
 *
 * Invariants: I1 (no two runs work at once), I2 (an occurrence completed once), I3
 * (Strict fences rise), I4 (no deadline stop of a run the store would confirm, by a
 * manager that did not ask it), I5 (no key written back, by a renewal or an
 * acquisition, or renewed for a run that is over, but once by a renewal in flight
 * across a pause, which is then Lost), I6 (a manager that does not lead releases no
 * lease the leader's run holds), I7 (GRANTS: two tenants never share a key), I8
 * (RETELL: a run-now trigger is answered only by a run started for it), I9 (an
 * occurrence's work starts once; not checked with a run-now trigger).
 *
 * Each step is `atomic { guard -> label: d_step { ... } }`: one indivisible action
 * (the d_step), and a guard that spin's "unreached" report shows when it never
 * passes (make model-check fails on a labelled step that never fires).
 *
 * Trails: the steps print "MODEL:" lines, which `spin -t` shows (the verifier
 * itself prints nothing). The ghost variables below exist only for the invariants.
 */

/* ------------------------------------------------------------------ configuration */

/* RUN, PAUSE and GUARD in the Job-first order */
#if defined(CFG_JOBFIRST_RUN)
#define CFG_RUN 1
#define JOB_FIRST 1
#elif defined(CFG_JOBFIRST_PAUSE)
#define CFG_PAUSE 1
#define JOB_FIRST 1
#elif defined(CFG_JOBFIRST_GUARD)
#define CFG_GUARD 1
#define JOB_FIRST 1
#elif defined(CFG_EARLY_RUN)
#define CFG_RUN 1
#define JOB_FIRST 1
#define EARLY_GATE 1
#elif defined(CFG_EARLY_PAUSE)
#define CFG_PAUSE 1
#define JOB_FIRST 1
#define EARLY_GATE 1
#elif defined(CFG_EARLY_GUARD)
#define CFG_GUARD 1
#define JOB_FIRST 1
#define EARLY_GATE 1
#elif defined(CFG_JOBFIRST_SHARD)
#define CFG_SHARD 1
#define JOB_FIRST 1
#elif defined(CFG_EARLY_SHARD)
#define CFG_SHARD 1
#define JOB_FIRST 1
#define EARLY_GATE 1
#elif defined(CFG_JOBFIRST_UNLOCK)
#define CFG_UNLOCK 1
#define JOB_FIRST 1
#elif defined(CFG_EARLY_UNLOCK)
#define CFG_UNLOCK 1
#define JOB_FIRST 1
#define EARLY_GATE 1
#elif defined(CFG_JOBFIRST_TWIN)
#define CFG_TWIN 1
#define JOB_FIRST 1
#elif defined(CFG_EARLY_TWIN)
#define CFG_TWIN 1
#define JOB_FIRST 1
#define EARLY_GATE 1
#elif defined(CFG_JOBFIRST_REPL)
#define CFG_REPL 1
#define JOB_FIRST 1
#elif defined(CFG_EARLY_REPL)
#define CFG_REPL 1
#define JOB_FIRST 1
#define EARLY_GATE 1
#elif defined(CFG_JOBFIRST_TRIGGER)
#define CFG_TRIGGER 1
#define JOB_FIRST 1
#elif defined(CFG_EARLY_TRIGGER)
#define CFG_TRIGGER 1
#define JOB_FIRST 1
#define EARLY_GATE 1
#endif

#if defined(CFG_RUN)
/* one cluster: crash and restart at every step, take-up of an unrecorded lease,
 * Redis data loss, renewals that are slow or unanswered, another holder */
#define NOCC 2
#define CRASH 1
#ifndef CRASHES
#define CRASHES 1           /* how many times the manager may crash */
#endif
#define DATALOSS 1
#define FLAKY 1
#elif defined(CFG_PAUSE)
/* one cluster: the leader pauses at any step and a new leader takes over; the old
 * leader wakes up, its keeper renews (alone, renew-only, while it has not exited)
 * and its stop controller acts on what the keeper reports; it sends the Job create
 * it was about to send; the second occurrence's run is FailOpen (its renewals take
 * back a key they find absent); renewals that are slow or unanswered; another
 * holder */
#define NOCC 2
#define PAUSE 1
#define FLAKY 1
#define REACQ 1
#elif defined(CFG_DEPOSED)
/* one cluster, one occurrence: the leader pauses once, and either a new leader
 * takes over (the old one wakes up deposed, its cache as of before the pause) or
 * nobody does (it wakes up still leading: a lapse, its lease maybe expired
 * meanwhile); the run is FailOpen, and the pause may fall while a renewal of it
 * is in flight; a pass may find no Job in its cache for a run status records with
 * no Job UID and skip it late; another holder */
#define NOCC 1
#define PAUSE 1
#define LAPSE 1
#define LATE 1
#define STALE 1
#define REACQ 1             /* its run is FailOpen */
#define INFLIGHT 1          /* the pause may fall while a renewal is in flight */
#elif defined(CFG_MARKER)
/* two clusters, one occurrence: cluster A runs it; cluster B's run of the same
 * occurrence (the other holder) may start as late as the occurrence's latest start
 * (it waits for B's run ahead, or retries while the key is busy), never later;
 * done-markers expire */
#define NOCC 1
#define MARKEXP 1
#elif defined(CFG_ADOPT)
/* one cluster in the Job-first order, one occurrence; a tenant creates a Job
 * naming the GuardedJob, waiting at its gate, with the annotations it chooses: a
 * run token of its own, and a key of its own that holds it; another holder */
#define NOCC 1
#define JOB_FIRST 1
#define FORGE 1
#elif defined(CFG_TRIGGER)
/* one cluster, one occurrence and a run-now trigger for it; the manager crashes,
 * and Redis may lose its data. With the early gate (CFG_EARLY_TRIGGER) the
 * trigger's run still records before its gate opens: status answers the
 * trigger, a Job's annotation may not (HOLE_TRIGGER_OPENS_EARLY: it opens first,
 * as a scheduled run does; its Job works and ends, its lease is gone by the time
 * the next manager comes, and the trigger, unanswered, starts its work again) */
#define NOCC 1
#define CRASH 1
#ifndef CRASHES
#define CRASHES 1
#endif
#define DATALOSS 1
#define TRIGGER 1
#elif defined(CFG_RETELL)
/* one cluster in the Job-first order, one occurrence and a run-now trigger for it;
 * the manager crashes (so a Job may wait for adoption), and a tenant who may edit
 * Jobs changes, once, what a waiting Job's run annotation says started its run:
 * the trigger for the occurrence's own run, or the reverse. What started a run is
 * taken from its token, which attests it (HOLE_ADOPT_TRUSTS_START: from the
 * annotation) */
#define NOCC 1
#define JOB_FIRST 1
#define CRASH 1
#ifndef CRASHES
#define CRASHES 1
#endif
#define TRIGGER 1
#define RETELL 1
#elif defined(CFG_LEFT)
/* one cluster with the pod guard: runs that end uncleanly leave their lease to
 * expire, a Pod cut off from the API server, history clean-up, a run-now trigger,
 * take-up, the tenant's unlock, another holder (MODEL_DEFINES=-DFLAKY adds late
 * and unanswered renewals: 2.7 million states) */
#define NOCC 2
#define GUARD 1
#define TRIGGER 1
#define UNLOCK 1
#elif defined(CFG_GUARD)
/* one cluster with the pod guard: a crash of the manager anywhere, a Pod cut off
 * from the API server, renewals that are late or unanswered, another holder */
#ifndef NOCC
#define NOCC 2
#endif
#define GUARD 1
#define FLAKY 1
#define CRASH 1
#ifndef CRASHES
#define CRASHES 1
#endif
#elif defined(CFG_UNLOCK)
/* cluster A runs, cluster B has a GuardedJob on the same key and serves its
 * tenant's unlock requests; another holder, also one that writes a value without
 * expiry */
#define NOCC 1
#define UNLOCK 1
#define CLUSTER_B 1
#define STALE_VALUE 1
#elif defined(CFG_SHARD)
/* one cluster, two shards, the GuardedJob moved from shard a to shard b while a run
 * is in flight; shard b may not resolve the run's store for a while; renewals may go
 * unanswered */
#define NOCC 1
#define SHARDS 1
#define FLAKY 1
#elif defined(CFG_TWIN)
/* cluster A and cluster B, restored from one etcd snapshot: the same identity
 * (cluster name, object UID), one store: the store the lease lives in, which may be
 * a tenant's (storeRef) that the two share while each manager has a store of its own
 * (HOLE_IDENTITY_OWN_STORE_ONLY: the heartbeat beats only in the managers' own
 * stores, so it never tells). B's manager starts at any moment and may
 * go; its runs are the other holder: one may take the key with a token minted for
 * A's next occurrence (A may take it up), or take up A's lease; the heartbeat
 * makes each manager know of the other IDT ticks after B starts (or goes) */
#define NOCC 2
#define TWIN 1
#define FLAKY 1
#elif defined(CFG_REPL)
/* one cluster; its store has a replica and minReplicaAcks: acquisitions and
 * done-markers wait for it (WAIT), other writes may not have reached it yet, and a
 * failover (at most once) promotes it; one occurrence and a run-now trigger for it;
 * late and unanswered renewals; another holder */
#define NOCC 1
#define TRIGGER 1
#define REPL 1
#define FLAKY 1
#elif defined(CFG_GRANTS)
/* its own small model (below): two clusters sharing one store, each with a tenant
 * that may use the key K under its cluster's --key-grants; the grant sets published
 * in the store; one cluster's manager cut off from the store for a while */
#define GRANTS 1
#else
#error "define one of CFG_RUN, CFG_PAUSE, CFG_DEPOSED, CFG_MARKER, CFG_ADOPT, CFG_RETELL, CFG_LEFT, CFG_GUARD, CFG_UNLOCK, CFG_SHARD, CFG_TWIN, CFG_REPL, CFG_GRANTS, CFG_JOBFIRST_RUN, CFG_JOBFIRST_PAUSE, CFG_JOBFIRST_GUARD, CFG_EARLY_RUN, CFG_EARLY_PAUSE, CFG_EARLY_GUARD, CFG_EARLY_SHARD, CFG_EARLY_UNLOCK, CFG_EARLY_TWIN, CFG_EARLY_REPL, CFG_EARLY_TRIGGER, CFG_JOBFIRST_TRIGGER"
#endif

/* The unlock script refuses a GuardedJob token while its key has a time to live;
 * the manager's own check reads the lease ledger. */
#if defined(HOLE_UNLOCK_LIVE_FOREIGN) || defined(HOLE_UNLOCK_AFTER_LASTRUN_OVERWRITTEN)
#define SCRIPT_REFUSES_LIVE 0
#else
#define SCRIPT_REFUSES_LIVE 1
#endif
#ifdef HOLE_UNLOCK_AFTER_LASTRUN_OVERWRITTEN
#define UNLOCK_READS_LEDGER 0
#else
#define UNLOCK_READS_LEDGER 1
#endif
/* A Job is created suspended and unsuspended only after the lease is confirmed in
 * the store. */
#ifdef HOLE_PAUSED_CREATE
#define CREATE_SUSPENDED 0
#else
#define CREATE_SUSPENDED 1
#endif

/* The Job-first order: JF. Strict's floor is status.lastFence, as the code computes
 * it (it reads no Job's fence): the status write that adopts a Job raises lastFence
 * to the Job's fence (HOLE_JOBFIRST_NO_FLOOR: it records the fence in the run only). */
#ifdef JOB_FIRST
#define JF 1
#else
#define JF 0
#endif
#if defined(JOB_FIRST) && !defined(HOLE_JOBFIRST_NO_FLOOR)
#define ADOPT_RAISES_FLOOR 1
#else
#define ADOPT_RAISES_FLOOR 0
#endif

/* The early gate: EG. A Job's Pods may work before status records its run, so the
 * Jobs are records too: the floor counts their fences (HOLE_EARLY_FLOOR_WITHOUT_JOBS:
 * lastFence alone); the lease finalizer of a Job no run claims goes only once
 * lastFence has its fence (HOLE_EARLY_FINALIZER_BEFORE_FLOOR: at once, so the
 * history limit deletes a fence status never had); a restart renews the lease of
 * every unrecorded running Job whose key holds its token
 * (HOLE_EARLY_RESUME_SKIPS_UNRECORDED: only recorded runs'); the stop controller
 * keeps such a Job for adoption and stops every other unrecorded one
 * (HOLE_EARLY_STOPPER_KEEPS_UNHELD: it keeps every unrecorded running Job). */
#ifdef EARLY_GATE
#define EG 1
#else
#define EG 0
#endif
#define MAX2(a, b) ((a) > (b) -> (a) : (b))
#define JFENCE(s) (j_ex[s] -> j_fence[s] : 0)
#if defined(EARLY_GATE) && !defined(HOLE_EARLY_FLOOR_WITHOUT_JOBS)
#define FLOOR MAX2(lfence, MAX2(JFENCE(0), MAX2(JFENCE(1), JFENCE(2))))
#else
#define FLOOR lfence
#endif
#if defined(EARLY_GATE) && !defined(HOLE_EARLY_FINALIZER_BEFORE_FLOOR)
#define FOLD_FENCE(s) if :: j_fence[s] > lfence -> lfence = j_fence[s] :: else fi
#else
#define FOLD_FENCE(s) skip
#endif
/* the early gate: a Job carries its run's occurrence, so the schedule's last time
 * is the latest of status and the Jobs (HOLE_EARLY_SCHEDULE_IGNORES_JOBS: status
 * alone, so a restart that cannot adopt the Job of a run that worked starts its
 * occurrence again); a Job that loses its finalizer folds its occurrence into
 * status first, as it folds its fence */
#if defined(EARLY_GATE) && !defined(HOLE_EARLY_SCHEDULE_IGNORES_JOBS)
#define CARRIES(s, o) (j_ex[s] && j_tok[s] != 0 && t_occ[j_tok[s]] == (o))
#define CARRIED(o) (CARRIES(0, o) || CARRIES(1, o) || CARRIES(2, o))
#define FOLD_OCC(s) if :: j_tok[s] != 0 && t_occ[j_tok[s]] >= onext -> onext = t_occ[j_tok[s]] + 1 :: else fi
#else
#define CARRIED(o) 0
#define FOLD_OCC(s) skip
#endif
/* the early gate: the lease finalizer of a Job that may still be adopted (its run
 * never recorded, its key holds its token), or that the pass which created it is
 * about to record, stays: the Job is its run's only record */
#ifdef EARLY_GATE
#define CAUGHT_UP(s) ((led[j_tok[s]] != 0 || !HOLDS(s)) && m_jc[0] != (s) + 1 && m_jc[1] != (s) + 1)
#else
#define CAUGHT_UP(s) 1
#endif

/* The second occurrence's run is FailOpen (the policy is recorded per run): its
 * renewals take the key back when they find it absent. A manager that lost its
 * leadership stops that before it renews alone (StopReacquiring). */
#ifdef REACQ
#define FAILOPEN(t) (t_occ[t] == NOCC)
#else
#define FAILOPEN(t) 0
#endif
#ifdef HOLE_RENEW_ONLY_REACQUIRE
#define REACQ_ON(p) (k_fo[p])
#else
#define REACQ_ON(p) (k_fo[p] && pst[p] == UP)
#endif

/* The leadership guard: a manager not known to lead (after a pause, until a
 * renewal of its leader lease succeeds again) performs no side effect but the
 * renewals of its own leases: no Job create, patch or delete, no status or store
 * write, no stop. A process that leads is UP; the old leader, awake after its
 * pause, is not (a request it had sent before the pause still lands: its late Job
 * create). HOLE_NOT_LEADING: the guard is absent, and the deposed leader acts on
 * what it knew before its pause. HOLE_PAUSED_KEEPER takes the guard off its stop
 * controller too: the keeper's own fix is what that switch shows. */
#if defined(HOLE_NOT_LEADING)
#define NOT_LEADING_ACTS 1
#else
#define NOT_LEADING_ACTS 0
#endif
#if defined(HOLE_NOT_LEADING) || defined(HOLE_PAUSED_KEEPER)
#define ACTS(p) (LIVEP(p))
#else
#define ACTS(p) (pst[p] == UP)
#endif

/* A renewal the leader sent just before its pause, answered after it (PAUSE): a
 * FailOpen lease's takes the key back if it finds it absent when it lands (that
 * cannot be called back). Its reply proves nothing fresh: the keeper renews again,
 * and a key it took back is Lost, never renewed again (it expires within its
 * ttl). HOLE_INFLIGHT_REACQUIRE_RENEWED: the reply counts as a renewal. */
#define FL_OK    1
#define FL_REACQ 2
#define FL_LOST  3

/* ------------------------------------------------------------------ constants */

/* Timing, in ticks; a tick stands for the stop budget. Rule 1: TTL - GRACE - MARGIN
 * > renew interval + call timeout (4 - 1 - 0 > 1 + 1). MARGIN is 0: the model issues
 * a stop's deletes at once (they are urgent). A restarted manager or a new leader
 * resumes the leases within HANDOVER ticks: 0, within the tick, so that a stop its
 * predecessor owed (at a self-fence deadline it did not live to act on) still lands
 * before the lease could expire: the hand-over, the resumed lease's first renewal
 * and a grace must fit into the stop budget. HOLE_SLOW_HANDOVER takes a tick. */
#define TTL      4
#define GRACE    1          /* Pod grace at the self-fence deadline and after a loss */
#define SB       1          /* stop budget: GRACE + MARGIN */
#define DL0      3          /* TTL - SB: ticks from a renewal's send time to the deadline */
#ifdef HOLE_SLOW_HANDOVER
#define HANDOVER 1          /* a hand-over that takes longer than the stop budget allows */
#else
#define HANDOVER 0
#endif
#define HT       2          /* shard hand-over timeout */
#define IDT      1          /* ticks until the heartbeats tell of a second manager (three 5 s beats) */
/* Done-marker lifetime (MARKEXP), in ticks from the occurrence: the latest start of
 * a run of it is the next occurrence + startingDeadline + jitter + the buffered
 * runs ahead x (maxHold + stop budget); no run of it starts later (but a backfill),
 * and its marker lives at least that long. HOLE_MARKER_EXPIRES_EARLY: the marker
 * lives until the next occurrence + startingDeadline + 5 min, ignoring the wait
 * behind buffered runs. */
#define LATEST   4
#ifdef HOLE_MARKER_EXPIRES_EARLY
#define MK_UNTIL 2
#else
#define MK_UNTIL LATEST
#endif

#define NT 4                /* tokens (leases) that can be minted */
#define NJ 3                /* Job slots */
#define FV (NT+1)           /* another holder's value (with expiry) */
#define FX (NT+2)           /* a value written without expiry */
#define ISTOK(v) ((v) >= 1 && (v) <= NT)
/* FORGE: the tenant's Job carries token XT, which the manager never mints, and
 * names as its key one of the tenant's that always holds XT. Adoption takes the
 * key, the store and the lease timing from status or the spec, never from a Job
 * (HOLE_ADOPT_TRUSTS_ANNOTATION: from the Job's annotation, so the run's lease is
 * the tenant's key: its renewals and its gate read that key). */
#ifdef FORGE
#define XT NT
#define MINT_OK (tnext < XT)
#ifdef HOLE_ADOPT_TRUSTS_ANNOTATION
#define XKEY(t) ((t) == XT)
#else
#define XKEY(t) 0
#endif
#else
#define MINT_OK (tnext <= NT)
#define XKEY(t) 0
#endif

#define PNONE 0             /* Pod states */
#define PRUN  1
#define PTERM 2             /* deleted, within its grace */
#define PDEAD 3
#define JRUN  0             /* Job conditions */
#define JOK   1             /* Complete */
#define JFAIL 2             /* Failed */
#define RUNNING  1          /* run phases in status.active */
#define STOPPING 2
#define RELEASING 3         /* its Job completed, its completion not yet acknowledged (REPL) */
#define GONEJ (NJ+1)        /* the run's recorded Job no longer exists */
#define HELD    0           /* keeper states */
#define FAILING 1
#define LOST    2
#define R_NONE     0        /* renewal in flight */
#define R_SLOW     1        /* applied; its reply comes at the next tick */
#define R_SLOWLOST 2        /* "not held"; the reply comes at the next tick */
#define R_TIMEOUT  3        /* no reply; it times out at the next tick */
#define LIVE 1              /* lease ledger */
#define LEFT 2              /* left to expire, until T */
#define RELD 3              /* released or completed */
#define GONE   0            /* process states */
#define UP     1
#define DOWN   2            /* crashed, or leadership lost: restarts within HANDOVER */
#define PAUSED 3            /* the old leader, paused */
#define AWAKE  4            /* the old leader after its pause, not yet exited */

/* An invariant: its assertion, and a line that names it in a trail. */
/* I5_OFF sets I5 aside, to see what else a configuration that breaks it
 * alone (PAUSE with GUARD) verifies */
#ifdef I5_OFF
#define I5_HOLDS(c) 1
#else
#define I5_HOLDS(c) (c)
#endif
#define CHECK(cond, what, arg) \
  if :: !(cond) -> printf("MODEL: VIOLATION "); printf(what, arg); printf("\n") :: else fi; \
  assert(cond)

#ifdef GRANTS
/* ------------------------------------------------------------------ GRANTS */

/* Key grants in a shared store. Cluster A's --key-grants give the prefix of K to
 * tenant X (namespace X) exclusively; cluster B runs without that grant, so K falls
 * under tenant Y's default prefix there. Each manager publishes its grant set in the
 * store when none is (SET NX: the first set stands), renews it while the store holds
 * its own set, and takes the published set for its verdict: a manager whose set
 * differs refuses every key the two sets give to different namespaces, here K.
 * HOLE_GRANTS_UNPUBLISHED: nothing is published or read; each cluster lets its own
 * tenant use K. Each cluster's manager reads and renews the publication at every
 * tick, and after an outage reads it again before it acts.
 *
 * A run of a tenant acquires K (SET NX), completes (a done-marker under K, living
 * MKT ticks) and releases it; its lease is renewed at every tick while its manager
 * reaches the store. Cluster A's manager may be cut off from the store once, for as
 * long as it likes. The publication lives PTTL ticks from its last renewal: at least
 * as long as a done-marker (HOLE_GRANTS_PUBLICATION_LAPSE: shorter). A manager that
 * refuses K makes no store operation on it: its run's lease is not renewed and the
 * run stops without a marker (HOLE_GRANTS_REFUSE_ACQUIRE_ONLY: it refuses only
 * acquisitions).
 *
 * I7 (confinement): two tenants never share a key: a run acquires K only when no
 * state a run of another tenant left under K (its lease, its done-marker) is live. */
#define TX 1                /* tenant X (cluster A), its run's token */
#define TY 2                /* tenant Y (cluster B) */
#define SET_A 1             /* A's grant set: K to X */
#define SET_B 2             /* B's: no grant (K to Y by its default prefix) */
#define MKT 3               /* done-marker lifetime */
#ifdef HOLE_GRANTS_PUBLICATION_LAPSE
#define PTTL (MKT - 1)
#else
#define PTTL MKT
#endif
#define G_OFF 0             /* manager states: not started */
#define G_UP  1
#define G_CUT 2             /* cut off from the store */

byte pub, pttl;             /* the published grant set, its ttl */
byte gk, gttl;              /* the key K: the token holding it, its ttl */
byte gmk, gmttl;            /* K's done-marker: the tenant whose run wrote it, its ttl */
byte g_st[2];               /* manager of cluster A (0), B (1) */
bit  g_ok[2];               /* its verdict: its tenant may use K */
bit  g_run[2];              /* its tenant's run holds (or held) K, not yet over */
bit  g_cut;                 /* the one outage happened */
bit  gh_refused;            /* probes: a manager refused K while its tenant's run was due */
bit  gh_moved;              /* probes: the published set changed hands */
byte h_i;                   /* scratch: zero between steps */
/* a refused key gets no store operation at all (HOLE_GRANTS_REFUSE_ACQUIRE_ONLY:
 * only acquisitions are refused; a run holding K renews and completes on) */
#ifdef HOLE_GRANTS_REFUSE_ACQUIRE_ONLY
#define G_USES(i) 1
#else
#define G_USES(i) (g_ok[i])
#endif
#define G_TOK(i) ((i) + 1)
#define G_SET(i) ((i) + 1)

/* the publication and the verdict, as a manager that reaches the store reads it */
inline g_read(i) {
#ifdef HOLE_GRANTS_UNPUBLISHED
  g_ok[i] = 1
#else
  if
  :: pub == 0 ->
     if :: gh_refused -> gh_moved = 1 :: else fi;
     pub = G_SET(i); pttl = PTTL
  :: pub == G_SET(i) -> pttl = PTTL
  :: else
  fi;
  g_ok[i] = (pub == G_SET(i))
#endif
}

active proctype GClock() {
  do
  :: atomic { true -> gtick: d_step {
       printf("MODEL: ---- tick ---- key %d ttl %d, published set %d ttl %d\n", gk, gttl, pub, pttl);
       if :: gttl > 0 -> gttl--; if :: gttl == 0 -> gk = 0 :: else fi :: else fi;
       if :: gmttl > 0 -> gmttl--; if :: gmttl == 0 -> gmk = 0 :: else fi :: else fi;
       if :: pttl > 0 -> pttl--; if :: pttl == 0 -> pub = 0 :: else fi :: else fi;
       /* each manager that reaches the store renews its run's lease and reads (and
        * renews) the publication */
       for (h_i : 0 .. 1) {
         if
         :: g_st[h_i] == G_UP ->
            g_read(h_i);
            if :: gk == G_TOK(h_i) && G_USES(h_i) -> gttl = TTL :: else fi
         :: else
         fi
       };
       h_i = 0 } }
  od
}

proctype GManager(byte i) {
  do
  /* the manager starts: publishes its set when none is, reads the published one */
  :: atomic { g_st[i] == G_OFF -> g_start: d_step {
       g_st[i] = G_UP; g_read(i);
       printf("MODEL: cluster %c's manager starts: published set %d, its tenant may use K: %d\n", 'A' + i, pub, g_ok[i]) } }
  /* its tenant's run acquires K (SET NX) on the verdict; I7 */
  :: atomic { g_st[i] == G_UP && !g_run[i] && g_ok[i] && gk == 0 -> g_acquire: d_step {
       printf("MODEL: tenant %c's run acquires K\n", 'X' + i);
       CHECK(gmk == 0 || gmk == G_TOK(i),
             "I7: tenant %c's run acquires a key under which another tenant's run left its done-marker", 'X' + i);
       gk = G_TOK(i); gttl = TTL; g_run[i] = 1 } }
  :: atomic { g_st[i] == G_UP && !g_run[i] && !g_ok[i] -> g_refuse: d_step {
       printf("MODEL: cluster %c refuses K: the published grant set differs from its own\n", 'A' + i); gh_refused = 1 } }
  /* the run completes: the done-marker, then DEL; or it stops, its lease gone or
   * K refused (a refused key gets no store operation: renewal, marker, release) */
  :: atomic { g_st[i] == G_UP && g_run[i] && gk == G_TOK(i) && G_USES(i) -> g_complete: d_step {
       printf("MODEL: tenant %c's run completes: done-marker, K released\n", 'X' + i);
       gmk = G_TOK(i); gmttl = MKT; gk = 0; gttl = 0; g_run[i] = 0 } }
  :: atomic { g_st[i] == G_UP && g_run[i] && (gk != G_TOK(i) || !G_USES(i)) -> g_lost: d_step {
       printf("MODEL: tenant %c's run stops: its lease is gone, or K is refused (%d)\n", 'X' + i, g_ok[i]); g_run[i] = 0 } }
  /* cluster A's manager is cut off from the store, once; it comes back and reads
   * the publication before it acts */
  :: atomic { i == 0 && g_st[0] == G_UP && !g_cut -> g_cutoff: d_step {
       printf("MODEL: cluster A's manager is cut off from the store\n"); g_st[0] = G_CUT; g_cut = 1 } }
  :: atomic { g_st[i] == G_CUT -> g_back: d_step {
       g_st[i] = G_UP; g_read(i);
       printf("MODEL: cluster A's manager reaches the store again: published set %d\n", pub) } }
  od
}

init {
  atomic { run GManager(0); run GManager(1) }
}

ltl probe_refused            { [] !(gh_refused && gmk != 0) }
ltl probe_set_moved          { [] !(gh_moved && pub == SET_B && gk == TY) }

#else
/* ------------------------------------------------------------------ state */

/* Redis */
byte rkey;                  /* the lock key: 0 absent, a token, FV or FX */
byte rttl;                  /* its time to live; 0 with a value: no expiry */
byte rmark[NOCC+1];         /* done-marker per occurrence: the token that wrote it */
byte rfctr;                 /* the fence counter */
bit  epoch;                 /* Redis lost its data, or writes in a failover (at most once) */
#ifdef REPL
/* The replica: one write behind the master while s_lag (its copy of the key and
 * the done-marker from before the master's last write), else equal to it. */
byte s_key, s_ttl;
byte s_mark[NOCC+1];
bit  s_lag;
bit  failed_over;
/* a write: the replica has everything before it, maybe not the write itself */
#define REP_W   if :: !failed_over -> s_key = rkey; s_ttl = rttl; s_mark[1] = rmark[1]; s_lag = 1 :: else fi
/* WAIT answered: the replica has every write so far */
#define REP_SYNC s_lag = 0; s_key = 0; s_ttl = 0; s_mark[1] = 0
#else
#define REP_W    skip
#define REP_SYNC skip
#endif

/* The GuardedJob's status (cluster A) */
byte a_tok;                 /* status.active: the run's token, 0 none */
byte a_ph;                  /* RUNNING or STOPPING */
byte a_f;                   /* its fence */
byte a_slot;                /* its recorded Job: slot + 1, GONEJ, or 0 */
byte onext = 1;             /* the next occurrence due (NOCC + 1: none left) */
byte l_tok;                 /* status.lastRun: its token (Job name), 0 for none */
byte l_fl;                  /* ticks left of lastRun's unlock refusal (FinishedAt + spec ttl) */
#ifdef UNLOCK
#define LASTRUN(t, fl) l_tok = t; l_fl = fl
#else
#define LASTRUN(t, fl) skip     /* only the unlock check reads lastRun */
#endif
byte lfence;                /* status.lastFence: the Strict floor */
byte led[NT+1];             /* the lease ledger */
bit  trig;                  /* the run-now trigger is used */
byte t_trg;                 /* the tokens the trigger acquired, one bit each */
byte trig_run;              /* the token whose Pod started the trigger's work first */

/* Processes: 0 the leader (shard a), 1 the old leader (shard b). A crash loses
 * everything below but pst and p_left. */
byte pst[2];
byte p_left[2];             /* ticks until the restart or the new leader is due */
byte k_tok[2];              /* the keeper's lease */
byte k_dl[2];               /* ticks until its self-fence deadline */
bit  k_conf[2];             /* confirmed by this process */
byte k_st[2];
bit  k_due[2];              /* a renewal is due now */
byte k_inf[2];              /* renewal in flight */
bit  k_dlr[2];              /* the deadline was reached (final) */
bit  k_fo[2];               /* the lease re-acquires a key it finds absent (a FailOpen run) */
byte m_pend[2];             /* acquired, not yet recorded: token */
byte m_pf[2];               /*   and fence */
bit  m_rel[2];              /* released or completed, status not yet written */
bit  m_left[2];             /*   it was left to expire */
byte m_cre[2];              /* old leader: the Job create it was about to send */
byte m_cf[2];
bit  m_crd;                 /*   sent, suspended; the confirmation is next */
byte m_jc[2];               /* jobsCreated: the slot + 1 of the Job this process created, UID not yet recorded */
byte g_tok[2];              /* the start gate: the token whose lease this process has just confirmed */
byte fl_st;                 /* a renewal in flight across the pause: 0 none, 1 sent, 2 answered */
byte fl_tok;                /*   its lease */
byte fl_res;                /*   its outcome: FL_OK, FL_REACQ, FL_LOST */
#ifdef STALE
/* the old leader's cache, as of before its pause: status.active and the Job list */
byte c_tok, c_ph, c_f, c_slot;
bit  c_job;                 /* its Job is in the cache */
byte c_pend;                /* the run it had acquired, status not yet written (its intent) */
#endif

/* Jobs and their Pods (one Pod per Job) */
byte j_tok[NJ];             /* the Job's name (its run's token); 0: slot free */
bit  j_ex[NJ];              /* the Job object exists */
bit  j_susp[NJ];
bit  j_del[NJ];             /* deletion requested */
bit  j_fin[NJ];             /* the lease finalizer */
byte j_cond[NJ];
byte j_fence[NJ];           /* the fence annotation */
byte p_st[NJ];
bit  p_inv[NJ];             /* the Pod vanished from the API server but still runs */
bit  p_ovl[NJ];             /* ghost: overlapped another worker (I1) */

/* Another holder of the key: a run of another cluster or a foreign service. It
 * takes the key with SET NX PX, works at most until its key could expire, and
 * releases with compare-and-DEL (or crashes and leaves its key to expire). */
bit  fw;                    /* working */
byte fw_left;
bit  fw_ep;
bit  fw_ovl;

/* Shards */
bit  moved;                 /* relabelled to shard b */
bit  seen_b;                /* shard b has resumed the object's leases */
bit  owner_b;               /* status names shard b as the run's owner */
bit  sh_unres;              /* shard b cannot resolve the run's store yet: its keeper does not track it */
bit  sh_late;               /* probes: shard b tracked the run only after its first sight */
byte ho_left;               /* shard a's hand-over countdown */
bit  ho_stop;               /* shard a gave up waiting and stops the run */

/* A second cluster claiming A's identity (TWIN) */
#ifdef TWIN
byte tw_st;                 /* B's manager: 0 not started, 1 running, 2 gone */
byte tw_tok;                /* the token B's run works under: its own, or A's taken up */
byte id_left;               /* ticks until the heartbeats tell */
bit  dup;                   /* each manager knows that another claims its identity */
bit  gh_dup;                /* probes: dup was set once */
bit  hb_out;                /* B's heartbeat has found the store down */
bit  b_settled;             /* HOLE_IDENTITY_OUTAGE: B took the outage for settled */
#define A_MAY (!dup)        /* identityHolds: no run starts, nothing is taken up */
#if defined(HOLE_IDENTITY_WINDOW)
#define B_MAY (tw_st == 1 && !dup)          /* the code as it is: B acts before its heartbeat can tell */
#else
/* B starts nothing until its heartbeat has had the beats it needs to find another
 * manager, and found none (HOLE_DUPLICATE_IDENTITY: it never finds one) */
#if defined(HOLE_IDENTITY_OUTAGE)
#define B_MAY (tw_st == 1 && (id_left == 0 || b_settled) && !dup)
#else
#define B_MAY (tw_st == 1 && id_left == 0 && !dup)
#endif
#endif
#else
#define A_MAY 1
#endif
#ifdef TWIN
#define TW_END tw_tok = 0
#else
#define TW_END skip
#endif
#ifdef MARKEXP
#define B_END b_done = 1
#else
#define B_END skip
#endif

/* Budgets */
byte crashed;                /* crashes so far */
bit  paused, lost_data;
bit  lapsed;                 /* the pause was a lapse: nobody took over */
#ifdef MARKEXP
byte age;                   /* ticks since the occurrence (up to LATEST + 1) */
bit  b_done;                /* cluster B's run of it is over (or skipped, or refused) */
#define START_OK (age <= LATEST)      /* a run starts no later than the latest start */
#else
#define START_OK 1
#endif
bit  gh_late;                /* probes: a run was skipped late */

/* Ghosts */
byte t_occ[NT+1];           /* the occurrence a token was minted for */
bit  t_ep[NT+1];            /* the epoch of its latest acquisition */
byte t_vl[NT+1];            /* ticks until its last renewal seen to succeed (send) + TTL */
byte tnext = 1;             /* the next token to mint */
byte lstart;                /* the highest fence handed to work (I3) */
byte mk_by[NOCC+1];         /* who completed each occurrence (I2) */
byte o_run[NOCC+1];         /* the token whose Pods first worked each occurrence (I9) */
bit  gh_funl;               /* probes: an unlock deleted a foreign value */
bit  gh_refl;               /*   the ledger refused an unlock the lastRun check would not */
bit  k_unans[2];            /* I4: a renewal went unanswered or answered late since the last one
                             * answered at once (kept once the deadline is reached) */
#ifdef JOB_FIRST
bit  gh_adopt;              /* probes: a run was recorded by adopting its Job */
#ifdef EARLY_GATE
bit  gh_rsu;                /* probes: a restart renewed the lease of an unrecorded running Job */
#define GH_RSU gh_rsu = 1; printf("MODEL: the manager renews the lease of Job t%d, which no status records\n", k_tok[0])
#endif
#ifdef RETELL
bit  j_told[NJ];            /* RETELL: the Job's run annotation says another start than its token's */
bit  gh_retold;             /* probes: a waiting Job was retold */
#endif
#endif
#ifndef GH_RSU
#define GH_RSU skip
#endif

/* Scratch variables of a step, zero between steps (BFS allows no hidden ones). */
byte h_s, h_t, h_o, h_r, h_f, h_i, h_p;
#define END_STEP h_s = 0; h_t = 0; h_o = 0; h_r = 0; h_f = 0; h_i = 0; h_p = 0

/* ------------------------------------------------------------------ helpers */

#define ALIVE(s)     (p_st[s] == PRUN || p_st[s] == PTERM)
#define SEENALIVE(s) (ALIVE(s) && !p_inv[s])      /* alive as the API server shows it */
#define ISJOB(s,t)   (j_ex[s] && j_tok[s] == (t))
#define HASJOB(t)    (ISJOB(0,t) || ISJOB(1,t) || ISJOB(2,t))
#define FREESLOT     (j_tok[0] == 0 || j_tok[1] == 0 || j_tok[2] == 0)
#define SEENPOD(s,t) (j_tok[s] == (t) && SEENALIVE(s))
#define PODSOF(t)    (SEENPOD(0,t) || SEENPOD(1,t) || SEENPOD(2,t))
#define BUSYJ(s,t)   (ISJOB(s,t) && !j_del[s] && j_cond[s] == JRUN)
/* A Job no run claims that may still work (or waits at its gate for adoption)
 * holds a run-now trigger back. The trigger stands for every run a pass starts
 * outside the schedule: a run-now, a retry of an occurrence, a buffered
 * occurrence, a backfill's next one (due.Admit, due.AdmitWaiting). Such a Job's
 * Pods work without a lease only after a data loss, which I1 bounds by their
 * stop; waiting for them keeps the GuardedJob's own runs apart beyond that. */
#define UNCLAIMED_BUSY(s) (j_ex[s] && j_tok[s] != a_tok && (j_cond[s] == JRUN && !j_del[s] || ALIVE(s)))
#define TRIG_MAY (!UNCLAIMED_BUSY(0) && !UNCLAIMED_BUSY(1) && !UNCLAIMED_BUSY(2))
#define JOBBUSY(t)   (BUSYJ(0,t) || BUSYJ(1,t) || BUSYJ(2,t))
#define SUSPJ(s,t)   (ISJOB(s,t) && j_susp[s] && !j_del[s])
#define HASSUSP(t)   (SUSPJ(0,t) || SUSPJ(1,t) || SUSPJ(2,t))
#define LIVEP(p)     (pst[p] == UP || pst[p] == AWAKE)
#define WORKERS      ((ALIVE(0) -> 1 : 0) + (ALIVE(1) -> 1 : 0) + (ALIVE(2) -> 1 : 0) + (fw -> 1 : 0))

#if defined(SHARDS)
/* shard b acts on the object once it has claimed it, and not while a run's store
 * is unresolved there (its passes fail before they touch the store) */
#define LEADS(p) (pst[p] == UP && ((p) == 0 && !moved || (p) == 1 && moved && owner_b && !sh_unres))
#else
#define LEADS(p) ((p) == 0 && pst[0] == UP)
#endif

/* The run's lease is confirmed by this process, with more than the stop budget
 * left (leaseConfirmed). */
#define CONFIRMED(p,t) (k_tok[p] == (t) && k_conf[p] && k_st[p] == HELD && !k_dlr[p] && k_dl[p] > 0)

/* The stop controller owes a stop while the keeper reports the lease lost or at
 * its deadline and a Job of it is not being deleted (it looks at every Job event,
 * so a Job that appears later is stopped too). */
#define NOTDEL(s,t)  (ISJOB(s,t) && !j_del[s])
#define OWES(p)      (ACTS(p) && k_tok[p] != 0 && (k_st[p] == LOST || k_dlr[p]) && \
                      (NOTDEL(0, k_tok[p]) || NOTDEL(1, k_tok[p]) || NOTDEL(2, k_tok[p])))
#define URGENT_P(p) (LIVEP(p) && k_due[p] || OWES(p))
/* the early gate: the stop of a running Job no status records and no pass is about
 * to record, whose key does not hold its token, is owed at once too (its Pods may
 * work; nobody renews its lease) */
#ifdef EARLY_GATE
#define OWED_U(s) (BUSYJ(s, j_tok[s]) && !j_susp[s] && j_tok[s] != a_tok && j_tok[s] != m_pend[0] && !PENDING(s))
#define URGENT_U ((LEADS(0) || LEADS(1)) && (OWED_U(0) || OWED_U(1) || OWED_U(2)))
#else
#define URGENT_U 0
#endif
#define URGENT (URGENT_P(0) || URGENT_P(1) || pst[0] == DOWN && p_left[0] == 0 || URGENT_U || \
                fl_st == 1 && pst[1] != PAUSED || fl_st == 2 && pst[1] == AWAKE)

/* Job-first. UNREC: a Job that no status records and that may still start (busy).
 * HOLDS: the key holds its token and the ledger never recorded it (a manager died
 * between the Job and the status write, or is about to write it), or the ledger
 * records it as held; never a token the ledger records as released or left to
 * expire. Such a Job is adopted into status (ADOPTS); the stop controller leaves it
 * to that while it is suspended, and stops every other unrecorded Job. */
#ifdef EARLY_GATE
/* the early gate: a Job may also have run, even finished, before any status
 * recorded it; its run is adopted all the same, so that status records its end */
#define UNREC(s) (ISJOB(s, j_tok[s]) && !j_del[s] && j_tok[s] != a_tok)
#else
#define UNREC(s) (BUSYJ(s, j_tok[s]) && j_tok[s] != a_tok)
#endif
#define HOLDS(s) ((rkey == j_tok[s] || XKEY(j_tok[s])) && led[j_tok[s]] == 0 || led[j_tok[s]] == LIVE)
/* ATTESTS: what the Job's annotation says started its run is what its token was
 * minted for (HOLE_ADOPT_TRUSTS_START: not checked) */
#if defined(RETELL) && !defined(HOLE_ADOPT_TRUSTS_START)
#define ATTESTS(s) (!j_told[s])
#else
#define ATTESTS(s) 1
#endif
#ifdef HOLE_JOBFIRST_ADOPT_ANY
#define ADOPTS(s) (UNREC(s))                      /* the hole: whatever the key and the ledger say */
#else
#define ADOPTS(s) (UNREC(s) && HOLDS(s) && ATTESTS(s))
#endif
#define ADOPTABLE (ADOPTS(0) || ADOPTS(1) || ADOPTS(2))
#ifdef JOBFIRST_STOP_PENDING
#define PENDING(s) 0            /* the stop controller stops a Job pending adoption too (costs only liveness) */
#elif defined(EARLY_GATE) && defined(HOLE_EARLY_STOPPER_KEEPS_UNHELD)
#define PENDING(s) (j_susp[s] && HOLDS(s) && ATTESTS(s) || !j_susp[s])
#else
/* the early gate: a running Job waits for adoption too, while its key holds its token */
#define PENDING(s) (JF && (j_susp[s] || EG) && HOLDS(s) && ATTESTS(s))
#endif
/* the early gate: an unrecorded running Job whose lease a restart renews */
#if defined(EARLY_GATE) && !defined(HOLE_EARLY_RESUME_SKIPS_UNRECORDED)
#define RESUMES(s) (UNREC(s) && !j_susp[s] && HOLDS(s) && ATTESTS(s))
#else
#define RESUMES(s) 0
#endif

/* the early gate: a shard hand-over counts the Jobs as records. The old shard renews
 * the lease of its pass's Job until the new shard has taken it over; the new shard
 * renews, with the recorded lease, that of every unrecorded running Job whose key
 * holds its token before it claims the object (HOLE_EARLY_HANDOVER_RECORDED_ONLY:
 * both count only the runs status records) */
#if defined(EARLY_GATE) && !defined(HOLE_EARLY_HANDOVER_RECORDED_ONLY)
#define HANDS_JOBS 1
#define HANDED_JOB (RESUMES(0) || RESUMES(1) || RESUMES(2))
#else
#define HANDS_JOBS 0
#define HANDED_JOB 0
#endif
inline track_handed(p) {
  if
  :: a_tok != 0 -> track_resumed(p, a_tok)
  :: a_tok == 0 && HANDS_JOBS && RESUMES(0) -> track_resumed(p, j_tok[0])
  :: a_tok == 0 && HANDS_JOBS && RESUMES(1) -> track_resumed(p, j_tok[1])
  :: a_tok == 0 && HANDS_JOBS && RESUMES(2) -> track_resumed(p, j_tok[2])
  :: else
  fi
}

/* s := the slot of the Job named t, NJ if none */
inline job_of(t, s) {
  if
  :: ISJOB(0, t) -> s = 0
  :: ISJOB(1, t) -> s = 1
  :: ISJOB(2, t) -> s = 2
  :: else -> s = NJ
  fi
}

inline free_slot(s) {
  if
  :: j_tok[0] == 0 -> s = 0
  :: j_tok[0] != 0 && j_tok[1] == 0 -> s = 1
  :: j_tok[0] != 0 && j_tok[1] != 0 -> assert(j_tok[2] == 0); s = 2
  fi
}

inline clear_slot(s) {
#ifdef RETELL
  j_told[s] = 0;
#endif
  j_tok[s] = 0; j_ex[s] = 0; j_susp[s] = 0; j_del[s] = 0; j_fin[s] = 0;
  j_cond[s] = JRUN; j_fence[s] = 0; p_st[s] = PNONE; p_inv[s] = 0; p_ovl[s] = 0
}

inline untrack(p) {
  k_tok[p] = 0; k_dl[p] = 0; k_conf[p] = 0; k_st[p] = HELD; k_due[p] = 0;
  k_inf[p] = R_NONE; k_dlr[p] = 0; k_fo[p] = 0; k_unans[p] = 0
}

inline forget(p) {
  untrack(p); m_pend[p] = 0; m_pf[p] = 0; m_rel[p] = 0; m_left[p] = 0; m_cre[p] = 0; m_cf[p] = 0; m_jc[p] = 0; g_tok[p] = 0;
  if :: p == 1 -> m_crd = 0 :: else fi
}

/* Track a lease this process just acquired: confirmed, its deadline counted from
 * the acquisition's send time (now). */
inline track_acquired(p, t) {
  untrack(p); k_tok[p] = t; k_conf[p] = 1; k_dl[p] = DL0; k_fo[p] = FAILOPEN(t)
}

/* Track a lease recorded in status (resumeLeases, firstSight) and renew it now.
 * The model gives it no evidence of its last renewal, so its deadline has passed
 * unless that renewal is answered at once (the code counts from acquiredAt less
 * the clock-skew allowance, which is later: the model is stricter). */
inline track_resumed(p, t) {
  untrack(p); k_tok[p] = t; k_due[p] = 1; k_fo[p] = FAILOPEN(t)
}

/* A renewal seen to succeed, sent `age` ticks ago. */
inline renewed(p, age) {
  k_st[p] = HELD; k_conf[p] = 1;
#ifdef HOLE_DEADLINE_FROM_REPLY
  k_dl[p] = DL0;               /* counted from the reply */
#else
  k_dl[p] = DL0 - age;         /* counted from the send time */
#endif
  t_vl[k_tok[p]] = TTL - age
}

inline lose(p) {
  k_st[p] = LOST
}

/* The stop controller deletes the Job named t (Foreground) and its Pods with a
 * grace period; a Pod the API server no longer shows is out of its reach. */
inline stop_job(t) {
  job_of(t, h_s);
  if
  :: h_s < NJ ->
     j_del[h_s] = 1;
     if :: p_st[h_s] == PRUN && !p_inv[h_s] -> p_st[h_s] = PTERM :: else fi
  :: else
  fi
}

#ifdef TWIN
#define I1_OTHER "I1: two runs work at once (cluster B's run and the one starting), and neither lost its lease to a data loss or failover"
#else
#define I1_OTHER "I1: two runs work at once (the other holder and the one starting), and neither lost its lease to a data loss or failover"
#endif
/* I1 when a worker (a Pod, or the other holder) starts while others work: one of
 * the two must have lost its lease to a Redis data loss (acquired in an earlier
 * epoch); that one is then held to its stop bound at every tick. */
inline i1_start(ep, newovl) {
  newovl = 0;
  for (h_i : 0 .. NJ-1) {
    if
    :: ALIVE(h_i) ->
       CHECK(t_ep[j_tok[h_i]] != epoch || ep != epoch,
             "I1: two runs work at once (the Pod of Job t%d and the one starting), and neither lost its lease to a data loss or failover", j_tok[h_i]);
       if :: t_ep[j_tok[h_i]] != epoch -> p_ovl[h_i] = 1 :: else fi;
       if :: ep != epoch -> newovl = 1 :: else fi
    :: else
    fi
  };
  if
  :: fw ->
     CHECK(fw_ep != epoch || ep != epoch, I1_OTHER, 0);
     if :: fw_ep != epoch -> fw_ovl = 1 :: else fi;
     if :: ep != epoch -> newovl = 1 :: else fi
  :: else
  fi
}

/* acquire.lua with token t for occurrence o, Strict fencing.
 * res: 1 ok, 2 busy, 3 done. */
#ifdef HOLE_ACQUIRE_IGNORES_MARKER
#define MARKED(o) 0                   /* a planted bug: the done-marker is not checked */
#else
#define MARKED(o) (rmark[o] != 0)
#endif
inline acquire(t, o, res, fence) {
  if
  :: MARKED(o) ->
     if :: rkey == t -> REP_W; rkey = 0; rttl = 0; REP_SYNC :: else fi;
     res = 3
  :: !MARKED(o) && rkey == t -> rttl = TTL; res = 1              /* reentered: PEXPIRE */
  :: !MARKED(o) && rkey != t && rkey != 0 -> res = 2
  :: !MARKED(o) && rkey == 0 ->                                   /* SET NX PX */
     CHECK(I5_HOLDS(led[t] != RELD && led[t] != LEFT), "I5: an acquisition writes the key back for run t%d, which is over", t);
     rkey = t; rttl = TTL; res = 1
  fi;
  if
  :: res == 1 ->
     rfctr++;                                  /* fence = max(INCR, floor + 1), written back */
#ifndef HOLE_STRICT_WITHOUT_FLOOR
     if :: rfctr <= FLOOR -> rfctr = FLOOR + 1 :: else fi;     /* (a planted bug leaves the floor out) */
#endif
     fence = rfctr; t_ep[t] = epoch; t_vl[t] = TTL;
     REP_SYNC                                  /* with minReplicaAcks, WAIT follows */
  :: else
  fi
}

/* takeUpOrphan: the key holds a token minted for this cluster, object and
 * occurrence. Fixed: no status ever recorded it (the lease ledger) and no Job of
 * its name exists. The hole: only the active runs are looked at. */
#ifdef HOLE_TAKEUP_LEFT_LEASE
#define TAKEUP_OK(h, o) (ISTOK(h) && t_occ[h] == (o) && a_tok != (h))
#else
#define TAKEUP_OK(h, o) (ISTOK(h) && t_occ[h] == (o) && led[h] == 0 && !HASJOB(h))
#endif

/* One acquisition pass for occurrence o (the schedule's or a trigger's): mint a
 * token, acquire, take up an unrecorded lease of this run if the key holds one.
 * h_r: 1 acquired (in memory, not yet recorded), 2 busy, 3 done. */
inline acquire_pass(p, o) {
  h_o = o; h_t = tnext;
  acquire(h_t, h_o, h_r, h_f);
  if
  :: h_r == 2 && TAKEUP_OK(rkey, h_o) ->
     printf("MODEL: take-up of t%d, minted for this run and never recorded\n", rkey);
     h_t = rkey; acquire(h_t, h_o, h_r, h_f)
  :: else
  fi;
  if
  :: h_r == 1 ->
     if :: h_t == tnext -> t_occ[h_t] = h_o; tnext++ :: else fi;
     track_acquired(p, h_t); m_pend[p] = h_t; m_pf[p] = h_f;
     printf("MODEL: p%d acquired t%d for occurrence %d, fence %d\n", p, h_t, h_o, h_f)
  :: h_r == 2 -> printf("MODEL: p%d occurrence %d busy (key %d): lastRun Busy\n", p, h_o, rkey)
  :: else -> printf("MODEL: p%d occurrence %d already done: lastRun Skipped\n", p, h_o)
  fi
}

/* The done-marker of occurrence o, by the run of process p. I2: one run
 * completes an occurrence (a completion counts once the run takes it for done: a
 * marker too few replicas acknowledged is written again before it counts). */
inline write_marker(p, o, counts) {
  rmark[o] = a_tok;
  if
  :: counts && t_ep[a_tok] == epoch ->
     CHECK(mk_by[o] == 0 || mk_by[o] == a_tok, "I2: occurrence %d completed by a second run", o);
     mk_by[o] = a_tok
  :: else
  fi
}

/* ------------------------------------------------------------------ processes */

/* A renewal extends the key (compare-token-then-PEXPIRE); a FailOpen lease's
 * also takes an absent key back. */
#define RENEWS(p) (rkey == k_tok[p] || rkey == 0 && REACQ_ON(p) || XKEY(k_tok[p]))
#ifdef FORGE
#define EXTEND(p) if :: !XKEY(k_tok[p]) -> rttl = TTL :: else fi     /* the tenant's key is not the spec's */
#else
#define EXTEND(p) rttl = TTL
#endif
/* I5: a renewal takes the key back only for a run that is not over */
inline take_back(p) {
  if
  :: rkey == 0 ->
     CHECK(I5_HOLDS(led[k_tok[p]] != RELD && led[k_tok[p]] != LEFT),
           "I5: a renewal writes the key back for run t%d, which is over", k_tok[p]);
     printf("MODEL: p%d renewal finds the key absent and takes it back for t%d\n", p, k_tok[p]);
     rkey = k_tok[p]
  :: else
  fi
}
/* The old leader's keeper, awake after its pause, renewing (alone): its renewals
 * are answered at once (one that is not makes it stop the run, as a resumed
 * lease's first renewal does; I4 allows that), so the model folds them into the
 * tick and the wake-up. */
inline old_renew() {
  if
  :: RENEWS(1) ->
     CHECK(I5_HOLDS(!(rkey == k_tok[1] && (led[k_tok[1]] == RELD || led[k_tok[1]] == LEFT))),
           "I5: a renewal extends the key of run t%d, which is over", k_tok[1]);
     take_back(1); rttl = TTL; renewed(1, 0); if :: !k_dlr[1] -> k_unans[1] = 0 :: else fi
  :: else -> lose(1); printf("MODEL: the old leader's renewal of t%d: lost (key %d)\n", k_tok[1], rkey)
  fi
}


/* Advances time when nothing urgent is left. Keys expire, Pods within their grace
 * die, the keepers count down to their deadlines and get the replies of slow
 * renewals, the pod guard reads the lease. */
active proctype Clock() {
  do
  :: atomic { !URGENT -> tick: d_step {
  printf("MODEL: ---- tick ---- key %d ttl %d\n", rkey, rttl);
       /* Redis expires keys */
       if
       :: rttl > 0 -> rttl--; if :: rttl == 0 -> rkey = 0 :: else fi
       :: else
       fi;
#ifdef REPL
       if :: s_ttl > 0 -> s_ttl--; if :: s_ttl == 0 -> s_key = 0 :: else fi :: else fi;
#endif
       for (h_i : 1 .. NT) { if :: t_vl[h_i] > 0 -> t_vl[h_i]-- :: else fi };
#ifdef MARKEXP
       if :: age <= LATEST -> age++ :: else fi;
       if :: rmark[1] != 0 && age > MK_UNTIL -> rmark[1] = 0; printf("MODEL: the done-marker of occurrence 1 expires\n") :: else fi;
#endif
       if :: l_fl > 0 -> l_fl-- :: else fi;
       /* the other holder stops working by the time its key could expire */
       if
       :: fw -> fw_left--; if :: fw_left == 0 -> fw = 0; fw_ovl = 0; fw_ep = 0; TW_END; B_END :: else fi
       :: else
       fi;
       /* Pods at the end of their grace are killed */
       for (h_i : 0 .. NJ-1) {
         if
         :: p_st[h_i] == PTERM ->
            p_st[h_i] = PDEAD; p_ovl[h_i] = 0;
            if :: j_ex[h_i] && j_cond[h_i] == JRUN -> j_cond[h_i] = JFAIL :: else fi;
            if :: !j_ex[h_i] -> clear_slot(h_i) :: else fi
         :: else
         fi
       };
       /* the keepers: deadlines, late replies, the next renewal */
       for (h_p : 0 .. 1) {
         if
         :: k_tok[h_p] != 0 ->
            if :: k_dl[h_p] > 0 -> k_dl[h_p]-- :: else fi;
            /* the deadline never waits for a renewal in flight; a paused process
             * judges nothing until it runs again */
            if
            :: k_dl[h_p] == 0 && !k_dlr[h_p] && k_st[h_p] != LOST && pst[h_p] != PAUSED ->
               k_dlr[h_p] = 1;
               printf("MODEL: p%d self-fence deadline of t%d\n", h_p, k_tok[h_p])
            :: else
            fi;
            if
            :: k_inf[h_p] == R_SLOW -> renewed(h_p, 1)
            :: k_inf[h_p] == R_SLOWLOST -> lose(h_p)
            :: k_inf[h_p] == R_TIMEOUT -> k_st[h_p] = FAILING
            :: else
            fi;
            k_inf[h_p] = R_NONE;
#ifdef PAUSE
            /* the old leader awake renews at the tick, answered at once */
            if
            :: h_p == 1 -> if :: pst[1] == AWAKE && k_st[1] != LOST && fl_st == 0 -> old_renew() :: else fi
            :: else -> if :: k_st[h_p] != LOST -> k_due[h_p] = 1 :: else fi
            fi
#else
            if :: k_st[h_p] != LOST -> k_due[h_p] = 1 :: else fi    /* renew interval: 1 tick */
#endif
         :: else
         fi;
         if :: p_left[h_p] > 0 -> p_left[h_p]-- :: else fi;
         /* a confirmation not followed by its patch within the tick has lapsed (a
          * paused process keeps it: its patch is in its memory) */
         if :: pst[h_p] != PAUSED -> g_tok[h_p] = 0 :: else fi
       };
       if :: ho_left > 0 -> ho_left-- :: else fi;
#ifdef TWIN
       /* the heartbeats: each manager finds the other's value over its own beat
        * after beat (or its own again, beat after beat, once B has gone) */
       if
       :: id_left > 0 ->
          id_left--;
          if
          :: id_left == 0 ->
#if !defined(HOLE_DUPLICATE_IDENTITY) && !defined(HOLE_IDENTITY_OWN_STORE_ONLY)
             dup = (tw_st == 1);
             if :: dup -> gh_dup = 1; printf("MODEL: each manager knows that the other claims its identity\n") :: else fi
#else
             skip
#endif
          :: else
          fi
       :: else
       fi;
#endif
#ifdef GUARD
       /* the pod guard: a Pod whose lease is not its own, or could expire within
        * its grace, stops its workload */
       for (h_i : 0 .. NJ-1) {
         if
         :: p_st[h_i] == PRUN && (rkey != j_tok[h_i] || rttl <= SB) ->
            p_st[h_i] = PTERM; printf("MODEL: pod guard stops the Pod of t%d\n", j_tok[h_i])
         :: else
         fi
       };
#endif
       /* I1: a worker that lost its lease to a data loss and overlaps another one
        * is gone by its stop bound (its last renewal's send time + ttl - margin) */
       if
       :: WORKERS >= 2 ->
          for (h_i : 0 .. NJ-1) {
            if
            :: ALIVE(h_i) && p_ovl[h_i] ->
               CHECK(t_vl[j_tok[h_i]] > 0,
                     "I1: the Pod of Job t%d, whose lease a data loss or failover took, works beside another run past its stop bound", j_tok[h_i])
            :: else
            fi
          }
       :: else
       fi;
       END_STEP
     } }
  od
}

/* The keeper renews its lease every tick (compare-token-then-PEXPIRE; a FailOpen
 * lease also takes an absent key back). A lease whose deadline has passed (a
 * resumed one, without evidence; or one whose deadline passed while this process
 * was paused) is reported at once when its renewal is not answered at once (the
 * code waits 0.5 s). */
#define KSEND(p) LIVEP(p) && k_due[p]
#define PASSED(p) if :: k_dl[p] == 0 && !k_dlr[p] -> k_dlr[p] = 1 :: else fi
proctype Keeper(byte p) {
  do
  :: atomic { KSEND(p) && RENEWS(p) -> renew: d_step {  k_due[p] = 0; REP_W; take_back(p); EXTEND(p); renewed(p, 0);
              if :: !k_dlr[p] -> k_unans[p] = 0 :: else fi } }
  :: atomic { KSEND(p) && !RENEWS(p) -> renew_lost: d_step { k_due[p] = 0; lose(p);
              printf("MODEL: p%d renewal of t%d: lost (key %d)\n", p, k_tok[p], rkey) } }
#ifdef FLAKY
  :: atomic { KSEND(p) && RENEWS(p) -> renew_late: d_step { k_due[p] = 0; REP_W; take_back(p); rttl = TTL; k_inf[p] = R_SLOW; k_unans[p] = 1; PASSED(p);
              printf("MODEL: p%d renewal of t%d applied, its reply comes late\n", p, k_tok[p]) } }
  :: atomic { KSEND(p) && !RENEWS(p) -> renew_late_lost: d_step { k_due[p] = 0; k_inf[p] = R_SLOWLOST; k_unans[p] = 1; PASSED(p) } }
  :: atomic { KSEND(p) -> renew_unanswered: d_step { k_due[p] = 0; k_inf[p] = R_TIMEOUT; k_unans[p] = 1; PASSED(p);
              printf("MODEL: p%d renewal of t%d unanswered\n", p, k_tok[p]) } }
#endif
  od
}

/* The stop controller: at once for a lease the keeper reports lost or at its
 * deadline; at its own pace for a run marked Stopping and for unclaimed Jobs. */
proctype Stopper(byte p) {
  do
  :: atomic { OWES(p) -> stop_reported: d_step {
       printf("MODEL: p%d stops the Job of t%d (lease lost or at its deadline)\n", p, k_tok[p]);
       /* I4: a deadline stops a running Job whose lease the key holds, with more
        * than the stop budget left, only after this keeper's own renewal went
        * unanswered or answered late */
       CHECK(!(k_dlr[p] && k_st[p] != LOST && JOBBUSY(k_tok[p]) && rkey == k_tok[p] && rttl > SB) || k_unans[p],
             "I4: the Job of t%d is stopped at a self-fence deadline while the key holds its lease, and no renewal of this manager went unanswered", k_tok[p]);
       stop_job(k_tok[p]); END_STEP } }
  :: atomic { LEADS(p) && a_ph == STOPPING && JOBBUSY(a_tok) -> stop_stopping: d_step {
       printf("MODEL: p%d stops the Job of the stopping run t%d\n", p, a_tok);
       stop_job(a_tok); END_STEP } }
  /* a Job that no active run claims (StaleJob); Job-first: but one pending adoption */
  :: atomic { LEADS(p) && BUSYJ(0, j_tok[0]) && j_tok[0] != a_tok && !PENDING(0) -> stop_unclaimed: d_step {
       printf("MODEL: p%d stops Job t%d, which no run claims\n", p, j_tok[0]); stop_job(j_tok[0]); END_STEP } }
  :: atomic { LEADS(p) && BUSYJ(1, j_tok[1]) && j_tok[1] != a_tok && !PENDING(1) -> d_step {
       printf("MODEL: p%d stops Job t%d, which no run claims\n", p, j_tok[1]); stop_job(j_tok[1]); END_STEP } }
  :: atomic { LEADS(p) && BUSYJ(2, j_tok[2]) && j_tok[2] != a_tok && !PENDING(2) -> d_step {
       printf("MODEL: p%d stops Job t%d, which no run claims\n", p, j_tok[2]); stop_job(j_tok[2]); END_STEP } }
  od
}

#ifdef JOB_FIRST
/* Job-first: record the run of the Job in slot s, found with no status (ADOPTS),
 * from its annotations: token (its name), fence, occurrence (t_occ: the token was
 * minted for it). The status write resumes the lease, as a restart does. */
inline adopt_job(p, s) {
  a_tok = j_tok[s]; a_ph = RUNNING; a_f = j_fence[s]; a_slot = s + 1; led[a_tok] = LIVE;
  if :: ADOPT_RAISES_FLOOR && a_f > lfence -> lfence = a_f :: else fi;
#ifdef RETELL
  /* what started the run, as the annotation tells it: the trigger when its token
   * was minted for the occurrence due (onext), or the reverse once retold */
  if
  :: (t_occ[a_tok] == onext) != j_told[s] -> onext++
  :: else ->
     CHECK(t_occ[a_tok] != onext, "I8: the run-now trigger is answered by run t%d, started for the occurrence due", a_tok);
     trig = 1
  fi;
#else
  if :: t_occ[a_tok] == onext -> onext++ :: else -> trig = 1 fi;
#endif
  track_resumed(p, a_tok); gh_adopt = 1;
  printf("MODEL: p%d adopts Job t%d (fence %d), which no status recorded (key %d)\n", p, a_tok, a_f, rkey)
}
#endif

/* The GuardedJob reconciler of process p: each step of a run is one action. */
proctype Reconciler(byte p) {
  do
  /* recordIntent + acquire for the next scheduled occurrence (Job-first: once status
   * has adopted the Jobs it can) */
  :: atomic { LEADS(p) && A_MAY && a_tok == 0 && m_pend[p] == 0 && !m_rel[p] && onext <= NOCC && MINT_OK && !(JF && ADOPTABLE) && !CARRIED(onext) && START_OK -> acquire_next: d_step {

       acquire_pass(p, onext);
       if :: h_r != 1 -> LASTRUN(0, 0); onext++ :: else fi;
       END_STEP } }
#ifdef EARLY_GATE
  /* the early gate: a Job no status records carries the occurrence due (its run
   * started, here or before a restart, and cannot be adopted): the schedule's last
   * time is past it */
  :: atomic { LEADS(p) && A_MAY && a_tok == 0 && m_pend[p] == 0 && !m_rel[p] && onext <= NOCC && !ADOPTABLE && CARRIED(onext) -> schedule_past_job: d_step {
       printf("MODEL: p%d finds a Job carrying occurrence %d: the schedule's last time is past it\n", p, onext);
       onext++ } }
#endif
  /* an occurrence due while a run is active: concurrencyPolicy Forbid skips it */
  :: atomic { LEADS(p) && A_MAY && a_tok != 0 && onext <= NOCC -> skip_forbid: d_step {
       printf("MODEL: occurrence %d skipped (Forbid): lastRun overwritten\n", onext);
       LASTRUN(0, 0); onext++ } }
#ifdef TRIGGER
  /* a run-now trigger for the latest occurrence runs it when nothing is active (a
   * Job no run claims counts while it may work or waits for adoption: the code's
   * due.Admit waits for it, or skips the trigger with Forbid)... */
  :: atomic { LEADS(p) && !trig && a_tok == 0 && m_pend[p] == 0 && !m_rel[p] && onext > 1 && tnext <= NT && TRIG_MAY -> acquire_trigger: d_step {
       printf("MODEL: run-now trigger for occurrence %d\n", onext - 1);
       acquire_pass(p, onext - 1);
       if :: h_r != 1 -> LASTRUN(0, 0); trig = 1 :: else -> t_trg = t_trg | (1 << h_t) fi;
       END_STEP } }
  /* ... or is skipped (a run is active, or the trigger is stale): lastRun overwritten */
  :: atomic { LEADS(p) && !trig -> skip_trigger: d_step {
       printf("MODEL: run-now trigger skipped: lastRun overwritten\n");
       LASTRUN(0, 0); trig = 1 } }
#endif
#if !JF
  /* record: the run and its fence in status, the lease in the ledger */
  :: atomic { LEADS(p) && m_pend[p] != 0 -> record: d_step {
       a_tok = m_pend[p]; a_ph = RUNNING; a_f = m_pf[p]; a_slot = 0; led[a_tok] = LIVE;
       if :: a_f > lfence -> lfence = a_f :: else fi;
       if :: t_occ[a_tok] == onext -> onext++ :: else -> trig = 1 fi;
       m_pend[p] = 0; m_pf[p] = 0;
       printf("MODEL: p%d recorded run t%d (fence %d)\n", p, a_tok, a_f) } }
  /* createJob, on a lease this process confirmed (suspended, unless the hole) */
  :: atomic { LEADS(p) && a_ph == RUNNING && a_slot == 0 && !HASJOB(a_tok) && CONFIRMED(p, a_tok) && FREESLOT -> create_job: d_step {
       free_slot(h_s);
       j_tok[h_s] = a_tok; j_ex[h_s] = 1; j_susp[h_s] = CREATE_SUSPENDED; j_fin[h_s] = 1; j_fence[h_s] = a_f;
       m_jc[p] = h_s + 1;           /* jobsCreated: recorded in status by a later pass */
       printf("MODEL: p%d created Job t%d (fence %d)\n", p, a_tok, a_f);
       END_STEP } }
#else
  /* Job-first. createJob right after the acquisition, on the lease this process
   * confirmed: suspended, its name the token, the fence and occurrence annotated */
  :: atomic { LEADS(p) && m_pend[p] != 0 && !HASJOB(m_pend[p]) && !(EG && m_jc[p] != 0) && CONFIRMED(p, m_pend[p]) && FREESLOT -> create_first: d_step {
       free_slot(h_s);
       j_tok[h_s] = m_pend[p]; j_ex[h_s] = 1; j_susp[h_s] = CREATE_SUSPENDED; j_fin[h_s] = 1; j_fence[h_s] = m_pf[p];
       /* the early gate: the pass remembers its Job (jobsCreated), which may work,
        * and may even be gone, before its status write: it never creates it again */
       if :: EG -> m_jc[p] = h_s + 1 :: else fi;
       printf("MODEL: p%d created Job t%d (fence %d), no status records it yet\n", p, m_pend[p], m_pf[p]);
       END_STEP } }
  /* record: status from the Job (its UID, token, fence, occurrence), lastFence, the
   * lease in the ledger; a Job of the name with another fence: StaleJob. A lease lost
   * before its Job exists is recorded with no Job, and stops. */
  :: atomic { LEADS(p) && m_pend[p] != 0 && (HASJOB(m_pend[p]) || EG && m_jc[p] != 0 || k_st[p] == LOST || k_dlr[p]) -> record_job: d_step {
       a_tok = m_pend[p]; a_ph = RUNNING; a_f = m_pf[p]; led[a_tok] = LIVE;
       if :: a_f > lfence -> lfence = a_f :: else fi;
       if :: t_occ[a_tok] == onext -> onext++ :: else -> trig = 1 fi;
       job_of(a_tok, h_s);
       if
       :: h_s < NJ ->
          a_slot = h_s + 1;
          printf("MODEL: p%d recorded run t%d (fence %d) with its Job\n", p, a_tok, a_f);
          if :: j_fence[h_s] != a_f -> a_ph = STOPPING; printf("MODEL: p%d finds Job t%d with another fence: StaleJob\n", p, a_tok) :: else fi
       :: h_s == NJ && EG && m_jc[p] != 0 ->
          a_slot = GONEJ; printf("MODEL: p%d recorded run t%d (fence %d), its Job already gone\n", p, a_tok, a_f)
       :: else -> printf("MODEL: p%d recorded run t%d (fence %d), lease lost before its Job\n", p, a_tok, a_f)
       fi;
       m_pend[p] = 0; m_pf[p] = 0; if :: EG -> m_jc[p] = 0 :: else fi;
       END_STEP } }
  /* adopt a Job no status records (a manager died between the Job and the status
   * write, or an old leader created it): when the key holds its token and the ledger
   * does not record its run as over; the run is recorded from the Job's annotations
   * (fence into lastFence) and its lease resumed. Every other unrecorded Job is left
   * to the stop controller. */
  :: atomic { LEADS(p) && A_MAY && a_tok == 0 && m_pend[p] == 0 && !m_rel[p] && ADOPTS(0) -> adopt_unrecorded: d_step { adopt_job(p, 0) } }
  :: atomic { LEADS(p) && A_MAY && a_tok == 0 && m_pend[p] == 0 && !m_rel[p] && ADOPTS(1) -> d_step { adopt_job(p, 1) } }
  :: atomic { LEADS(p) && A_MAY && a_tok == 0 && m_pend[p] == 0 && !m_rel[p] && ADOPTS(2) -> d_step { adopt_job(p, 2) } }
#ifdef HOLE_JOBFIRST_GATE_EARLY
  /* the hole: the pass that created the Job confirms the lease and opens its gate
   * before the status write */
  :: atomic { LEADS(p) && m_pend[p] != 0 && HASSUSP(m_pend[p]) && rkey == m_pend[p] && rttl > SB -> gate_early: d_step {
       job_of(m_pend[p], h_s); j_susp[h_s] = 0;
       printf("MODEL: p%d confirmed t%d in the store: Job unsuspended before status records it\n", p, m_pend[p]);
       END_STEP } }
#endif
#ifdef EARLY_GATE
/* the Job this pass created, waiting at its gate: the code knows it by its UID
 * (jobsCreated), the model by its name and fence; another Job of the name (an old
 * leader's late create) is not its to open */
#define MINE(p, s) (SUSPJ(s, m_pend[p]) && j_fence[s] == m_pf[p])
#define MINESUSP(p) (MINE(p, 0) || MINE(p, 1) || MINE(p, 2))
/* the early order is a scheduled run's: a run the trigger started is recorded
 * before its gate opens, since status answers the trigger and a Job's annotation
 * may not (runcore.RecordableFromJob) (HOLE_TRIGGER_OPENS_EARLY: it opens first
 * too) */
#if defined(TRIGGER) && !defined(HOLE_TRIGGER_OPENS_EARLY)
#define EARLY_OK(p) (!((t_trg >> m_pend[p]) & 1))
#else
#define EARLY_OK(p) 1
#endif
  /* the early gate: the pass that created the Job confirms the lease (a renewal
   * sent after the Job exists, more than the stop budget left) and opens the gate
   * before its status write, in two steps as for a recorded run; a lease it cannot
   * confirm gets its Job deleted, never unsuspended (the status write records the
   * run with its deleted Job, which stops it) */
  :: atomic { LEADS(p) && m_pend[p] != 0 && MINESUSP(p) && g_tok[p] != m_pend[p] && EARLY_OK(p) -> confirm_first: d_step {
       if
       :: rkey == m_pend[p] && rttl > SB -> g_tok[p] = m_pend[p]; printf("MODEL: p%d confirmed t%d in the store before status records it\n", p, m_pend[p])
       :: else -> stop_job(m_pend[p]); printf("MODEL: p%d could not confirm t%d: Job deleted\n", p, m_pend[p])
       fi;
       END_STEP } }
  :: atomic { LEADS(p) && m_pend[p] != 0 && g_tok[p] == m_pend[p] && MINESUSP(p) && EARLY_OK(p) -> open_first: d_step {
       if :: MINE(p, 0) -> h_s = 0 :: MINE(p, 1) -> h_s = 1 :: MINE(p, 2) -> h_s = 2 fi;
       j_susp[h_s] = 0; g_tok[p] = 0;
       printf("MODEL: p%d opens the gate of t%d: Job unsuspended, no status records it yet\n", p, m_pend[p]);
       END_STEP } }
#endif
#endif
#ifdef EARLY_GATE
/* the early gate: the gate of a recorded run opens only the Job status records (the
 * code compares its UID): a Job of the name created later (an old leader's late
 * create, after the run's own Job went) is not the run's */
#define RECSUSP (a_slot != 0 && a_slot != GONEJ && SUSPJ(a_slot - 1, a_tok))
#else
#define RECSUSP HASSUSP(a_tok)
#endif
  /* the start gate (openGate), two steps. confirm: a renewal finds the run's lease
   * in the store with more than the stop budget left; a Job whose lease is not
   * confirmed is deleted, never unsuspended */
  :: atomic { LEADS(p) && a_ph == RUNNING && RECSUSP && g_tok[p] != a_tok -> confirm: d_step {
       if
       :: rkey == a_tok && rttl > SB || XKEY(a_tok) -> g_tok[p] = a_tok; printf("MODEL: p%d confirmed t%d in the store\n", p, a_tok)
       :: else -> stop_job(a_tok); printf("MODEL: p%d could not confirm t%d: Job deleted\n", p, a_tok)
       fi;
       END_STEP } }
  /* open: the write that unsuspends the Job (resourceVersion precondition), sent
   * right after the confirmation: within the tick (the clock clears a confirmation
   * at the next tick), and only by a manager that leads and has not paused since the
   * renewal that confirmed it (the guard; a pause clears it) */
  :: atomic { LEADS(p) && a_ph == RUNNING && g_tok[p] == a_tok && RECSUSP -> open: d_step {
       job_of(a_tok, h_s); if :: EG -> h_s = a_slot - 1 :: else fi; j_susp[h_s] = 0; g_tok[p] = 0;
       printf("MODEL: p%d opens the gate of t%d: Job unsuspended\n", p, a_tok);
       END_STEP } }
  /* record the Job's UID, or adopt a Job of the run's name: the same fence, else
   * StaleJob */
  :: atomic { LEADS(p) && a_tok != 0 && a_slot == 0 && HASJOB(a_tok) -> adopt: d_step {
       job_of(a_tok, h_s); a_slot = h_s + 1; m_jc[p] = 0;
       if
       :: j_fence[h_s] != a_f -> a_ph = STOPPING; printf("MODEL: p%d finds Job t%d with another fence: StaleJob\n", p, a_tok)
       :: else
       fi;
       END_STEP } }
  /* running: the lease lost or at its deadline, or the Job deleted: beginStop. A
   * pass of running() first takes the UID of a Job this process created from
   * memory (jobsCreated), and its status write records it. */
  :: atomic { LEADS(p) && a_ph == RUNNING && k_tok[p] == a_tok && (k_st[p] == LOST || k_dlr[p]) -> stop_lost: d_step {
       printf("MODEL: p%d marks run t%d Stopping (lease lost or at its deadline)\n", p, a_tok); a_ph = STOPPING;
       if :: a_slot == 0 && m_jc[p] != 0 -> a_slot = m_jc[p]; m_jc[p] = 0 :: else fi } }
#if !JF
  :: atomic { LEADS(p) && a_ph == RUNNING && a_slot == 0 && m_jc[p] != 0 && j_del[m_jc[p] - 1] -> stop_deleted_unrecorded: d_step {
       printf("MODEL: p%d marks run t%d Stopping (its Job is deleted)\n", p, a_tok); a_ph = STOPPING;
       a_slot = m_jc[p]; m_jc[p] = 0 } }
#endif
  :: atomic { LEADS(p) && a_ph == RUNNING && a_slot != 0 && (a_slot == GONEJ || j_del[a_slot - 1]) -> stop_deleted: d_step {
       printf("MODEL: p%d marks run t%d Stopping (its Job is deleted)\n", p, a_tok); a_ph = STOPPING } }
  /* release: the Job finished, or the run stopped and no Pod of it is seen */
  :: atomic { LEADS(p) && a_tok != 0 && !m_rel[p] &&
              (a_ph == RUNNING && a_slot != 0 && a_slot != GONEJ && j_cond[a_slot - 1] != JRUN ||
               a_ph == STOPPING && !PODSOF(a_tok) && !JOBBUSY(a_tok) || a_ph == RELEASING) -> release: d_step {
       h_o = t_occ[a_tok];
#if defined(GUARD) && !defined(HOLE_RELEASE_IGNORES_UNCLEAN)
       /* guardedEndUnclean: a Pod may still run where the API server does not show
        * it, unless the run's Job completed cleanly or the run never had a Job */
#ifdef HOLE_UNCLEAN_BY_RECORDED_UID
       /* the hole: a run whose Job UID status has not recorded had no Job */
       if
       :: a_slot != 0 && (a_slot == GONEJ || j_cond[a_slot - 1] != JOK) -> m_left[p] = 1
       :: else
       fi;
#else
       /* a Job of the run's name (the lease finalizer keeps it until the release)
        * decides; with none left, nothing says that no Pod of it ran */
       job_of(a_tok, h_s);
       if
       :: h_s == NJ || j_cond[h_s] != JOK -> m_left[p] = 1
       :: else
       fi;
#endif
#endif
       if
       :: m_left[p] -> printf("MODEL: p%d leaves the lease of t%d to expire\n", p, a_tok)
       :: !m_left[p] && (a_ph == RUNNING || a_ph == RELEASING) && j_cond[a_slot - 1] == JOK ->
          /* complete.lua: the marker when the key is ours or absent, then DEL */
          if
          :: rkey == a_tok || rkey == 0 ->
             printf("MODEL: p%d completes occurrence %d with t%d\n", p, h_o, a_tok);
             REP_W; write_marker(p, h_o, 1);
#if defined(REPL) && !defined(HOLE_MARKER_UNACKED)
             /* with minReplicaAcks: the marker with the lease kept, WAIT answered,
              * then release.lua (complete_unacked: WAIT not answered) */
             REP_SYNC;
             if :: rkey == a_tok -> REP_W; rkey = 0; rttl = 0 :: else fi
#else
             if :: rkey == a_tok -> rkey = 0; rttl = 0 :: else fi
#endif
          :: else -> printf("MODEL: p%d: the key is another's, the done-marker of occurrence %d is not written\n", p, h_o)
          fi
       :: else ->
          printf("MODEL: p%d releases t%d\n", p, a_tok);
          if :: rkey == a_tok -> REP_W; rkey = 0; rttl = 0 :: else fi     /* release.lua */
       fi;
       untrack(p); m_rel[p] = 1;
       END_STEP } }
#if defined(REPL) && !defined(HOLE_MARKER_UNACKED)
  /* a completion whose WAIT too few replicas answer: the marker is written, the
   * lease kept (and renewed); the completion is tried again */
  :: atomic { LEADS(p) && a_tok != 0 && !m_rel[p] && (a_ph == RUNNING || a_ph == RELEASING) && a_slot != 0 && a_slot != GONEJ &&
              j_cond[a_slot - 1] == JOK && (rkey == a_tok || rkey == 0) -> complete_unacked: d_step {
       h_o = t_occ[a_tok];
       printf("MODEL: p%d writes the marker of occurrence %d, too few replicas acknowledge it: the lease is kept\n", p, h_o);
       REP_W; write_marker(p, h_o, 0); a_ph = RELEASING; END_STEP } }
#endif
  /* the run moves to lastRun, the ledger keeps its lease, the finalizer goes */
  :: atomic { LEADS(p) && m_rel[p] -> finish: d_step {
       if :: m_left[p] -> led[a_tok] = LEFT :: else -> led[a_tok] = RELD fi;
       LASTRUN(a_tok, TTL);
       job_of(a_tok, h_s); if :: h_s < NJ -> j_fin[h_s] = 0 :: else fi;
       printf("MODEL: p%d run t%d is over\n", p, a_tok);
#ifndef GUARD
       /* without the pod guard no Pod, key or Job of a finished run is left: its
        * ghosts are reset so that they do not tell states apart */
       t_vl[a_tok] = 0; t_ep[a_tok] = 0; t_occ[a_tok] = 0;
#endif
       a_tok = 0; a_ph = 0; a_f = 0; a_slot = 0; m_rel[p] = 0; m_left[p] = 0;
       END_STEP } }
  /* unclaimed Jobs that finished, or whose Pods are gone, lose the finalizer; the
   * history limit deletes finished ones */
  :: atomic { LEADS(p) && j_ex[0] && j_fin[0] && j_tok[0] != a_tok && (j_cond[0] != JRUN || j_del[0] && !SEENALIVE(0)) && CAUGHT_UP(0) -> drop_finalizer: d_step { FOLD_FENCE(0); FOLD_OCC(0); j_fin[0] = 0 } }
  :: atomic { LEADS(p) && j_ex[1] && j_fin[1] && j_tok[1] != a_tok && (j_cond[1] != JRUN || j_del[1] && !SEENALIVE(1)) && CAUGHT_UP(1) -> d_step { FOLD_FENCE(1); FOLD_OCC(1); j_fin[1] = 0 } }
  :: atomic { LEADS(p) && j_ex[2] && j_fin[2] && j_tok[2] != a_tok && (j_cond[2] != JRUN || j_del[2] && !SEENALIVE(2)) && CAUGHT_UP(2) -> d_step { FOLD_FENCE(2); FOLD_OCC(2); j_fin[2] = 0 } }
  :: atomic { LEADS(p) && j_ex[0] && !j_fin[0] && !j_del[0] && j_cond[0] != JRUN && j_tok[0] != a_tok -> history: d_step {  printf("MODEL: history limit deletes Job t%d\n", j_tok[0]); j_del[0] = 1 } }
  :: atomic { LEADS(p) && j_ex[1] && !j_fin[1] && !j_del[1] && j_cond[1] != JRUN && j_tok[1] != a_tok -> d_step { printf("MODEL: history limit deletes Job t%d\n", j_tok[1]); j_del[1] = 1 } }
  :: atomic { LEADS(p) && j_ex[2] && !j_fin[2] && !j_del[2] && j_cond[2] != JRUN && j_tok[2] != a_tok -> d_step { printf("MODEL: history limit deletes Job t%d\n", j_tok[2]); j_del[2] = 1 } }
#ifdef SHARDS
  /* shard a after the move: a pass in flight cannot write status any more (the
   * relabel changed the resourceVersion); its unrecorded lease is left to take-up
   * (the early gate: once its Job exists, the Job is the run's record, and shard a
   * renews its lease until shard b has taken it over, as for a recorded run) */
  :: atomic { p == 0 && moved && m_pend[0] != 0 -> write_fails: d_step {
       printf("MODEL: shard a's status write for t%d fails: the object moved\n", m_pend[0]);
       m_pend[0] = 0; m_pf[0] = 0;
       if :: HANDS_JOBS && m_jc[0] != 0 -> m_jc[0] = 0 :: else -> untrack(0) fi } }
  :: atomic { p == 0 && moved && m_rel[0] -> release_write_fails: d_step { m_rel[0] = 0; m_left[0] = 0 } }
#ifndef HOLE_SHARD_BREAK_BEFORE_MAKE
  /* make before break: shard a renews until shard b has taken the run over (and
   * first issues a stop its keeper asked for: handing over must not drop it)... */
  :: atomic { p == 0 && moved && owner_b && k_tok[0] != 0 && !OWES(0) -> handed_over: d_step {
       printf("MODEL: shard a sees shard b own the run: stops renewing\n"); untrack(0) } }
  /* ... or, when shard b does not come within the hand-over timeout, stops the
   * run and renews until its Pods are gone */
  :: atomic { p == 0 && moved && !owner_b && ho_left == 0 && k_tok[0] != 0 && !ho_stop -> handover_timeout: d_step {
       printf("MODEL: shard b did not come: shard a stops the run\n");
       ho_stop = 1; stop_job(k_tok[0]); END_STEP } }
  :: atomic { p == 0 && ho_stop && k_tok[0] != 0 && !PODSOF(k_tok[0]) -> handover_done: d_step { untrack(0) } }
#endif
  /* shard b: firstSight renews the object's recorded leases before anything else,
   * then writes its name into status, only while its keeper tracks every
   * lease-holding run of the object. A run whose store it cannot resolve yet (its
   * storeRef Secret not readable there yet) is not tracked, and it does not claim:
   * shard a renews on (HOLE_SHARD_CLAIM_UNTRACKED: it claims all the same) */
  :: atomic { p == 1 && moved && !seen_b -> first_sight: d_step {
       printf("MODEL: shard b takes the object over\n");
       seen_b = 1;
       track_handed(1);
       owner_b = 1 } }
  :: atomic { p == 1 && moved && !seen_b && (a_tok != 0 || HANDED_JOB) -> store_unresolved: d_step {
       printf("MODEL: shard b cannot resolve the store of run t%d yet: not tracked\n", a_tok);
       seen_b = 1; sh_unres = 1;
#ifdef HOLE_SHARD_CLAIM_UNTRACKED
       printf("MODEL: shard b names itself in status all the same\n"); owner_b = 1
#else
       skip
#endif
     } }
  /* a pass of shard b meanwhile stops a run whose store it cannot resolve (its
   * status write and the Job's delete need no store) */
  :: atomic { p == 1 && sh_unres && a_ph == RUNNING -> stop_unresolved: d_step {
       printf("MODEL: shard b marks run t%d Stopping (its store cannot be resolved)\n", a_tok);
       a_ph = STOPPING; stop_job(a_tok); END_STEP } }
  /* the store resolves: shard b's next pass tracks the run, then claims it */
  :: atomic { p == 1 && sh_unres -> track_late: d_step {
       sh_unres = 0; sh_late = 1;
       printf("MODEL: shard b resolves the store: tracks run t%d and names itself in status\n", a_tok);
       track_handed(1);
       owner_b = 1 } }
#endif
#if defined(LATE) && !JF
  /* skipLate: a run status records with no Job UID whose Job this pass does not
   * know of (no jobsCreated) is skipped late and its lease released, once a live
   * read confirms that no Job of it exists, whatever status says of its UID
   * (HOLE_SKIP_ON_STALE_CACHE: the cache, which may not show the Job yet, decides) */
#ifdef HOLE_SKIP_ON_STALE_CACHE
#define NOJOB_LIVE(t) 1
#else
#define NOJOB_LIVE(t) (!HASJOB(t))
#endif
  :: atomic { LEADS(p) && a_ph == RUNNING && a_slot == 0 && m_jc[p] == 0 && NOJOB_LIVE(a_tok) -> skip_late: d_step {
       printf("MODEL: p%d finds no Job of run t%d: skipped late, lease released\n", p, a_tok);
       if :: rkey == a_tok -> rkey = 0; rttl = 0 :: else fi;
       untrack(p); m_rel[p] = 1; gh_late = 1 } }
#endif
#if defined(STALE) && defined(HOLE_NOT_LEADING)
  /* The deposed leader, awake, without the guard: full passes on its cache as of
   * before the pause (each at most once; its status writes fail). I6: it releases
   * no lease that the leader's run holds. */
  /* the run it had acquired, intent recorded: acquire it again with its token */
  :: atomic { p == 1 && pst[1] == AWAKE && c_pend != 0 -> stale_acquire: d_step {
       printf("MODEL: the deposed leader acquires t%d again (its cache: status not yet written)\n", c_pend);
       h_t = c_pend; acquire(h_t, t_occ[h_t], h_r, h_f); c_pend = 0; END_STEP } }
  /* a run its cache shows with no Job UID and no Job: skipped late (a live read) */
  :: atomic { p == 1 && pst[1] == AWAKE && c_tok != 0 && c_ph == RUNNING && c_slot == 0 && !c_job && NOJOB_LIVE(c_tok) -> stale_skip: d_step {
       printf("MODEL: the deposed leader finds no Job of t%d: skips it late, releases its lease\n", c_tok);
       CHECK(!(rkey == c_tok && a_tok == c_tok && pst[0] == UP), "I6: a manager that does not lead releases t%d, which the leader's run holds", c_tok);
       if :: rkey == c_tok -> rkey = 0; rttl = 0 :: else fi;
       c_tok = 0 } }
  /* a run its cache shows with no Job: create it (suspended) */
  :: atomic { p == 1 && pst[1] == AWAKE && c_tok != 0 && c_ph == RUNNING && c_slot == 0 && !c_job && !HASJOB(c_tok) && FREESLOT -> stale_create: d_step {
       printf("MODEL: the deposed leader creates Job t%d (fence %d)\n", c_tok, c_f);
       free_slot(h_s);
       j_tok[h_s] = c_tok; j_ex[h_s] = 1; j_susp[h_s] = CREATE_SUSPENDED; j_fin[h_s] = 1; j_fence[h_s] = c_f;
       c_job = 1; END_STEP } }
  /* the gate of a run its cache shows: confirmed (a renewal) and opened */
  :: atomic { p == 1 && pst[1] == AWAKE && c_tok != 0 && c_ph == RUNNING && HASSUSP(c_tok) &&
              (g_tok[1] == c_tok || rkey == c_tok && rttl > SB) -> stale_open: d_step {
       printf("MODEL: the deposed leader opens the gate of t%d\n", c_tok);
       job_of(c_tok, h_s); j_susp[h_s] = 0; g_tok[1] = 0; c_tok = 0; END_STEP } }
#endif
#ifdef PAUSE
  /* the old leader, awake after its pause, sends the Job create it was about to
   * send (its status writes fail: the resourceVersion changed) */
  :: atomic { p == 1 && pst[1] == AWAKE && m_cre[1] != 0 && !m_crd -> paused_create: d_step {
       h_t = m_cre[1];
       printf("MODEL: the old leader sends its Job create for t%d (fence %d)\n", h_t, m_cf[1]);
       if
       :: !HASJOB(h_t) && FREESLOT ->
          free_slot(h_s);
          j_tok[h_s] = h_t; j_ex[h_s] = 1; j_susp[h_s] = CREATE_SUSPENDED; j_fin[h_s] = 1; j_fence[h_s] = m_cf[1];
          /* Job-first: its status write comes next, and fails; the gate stays closed.
           * The early gate: its confirmation comes next, which the guard refuses */
          m_crd = (CREATE_SUSPENDED && (!JF || EG))
       :: else
       fi;
       if :: !m_crd -> m_cre[1] = 0; m_cf[1] = 0 :: else fi;
       END_STEP } }
  /* then it confirms the lease in the store before it unsuspends, or deletes the
   * Job (it may also exit in between: a suspended Job is never started) */
  :: atomic { p == 1 && pst[1] == AWAKE && m_crd && NOT_LEADING_ACTS -> paused_confirm: d_step {
       h_t = m_cre[1];
       if
       :: rkey == h_t && rttl > SB && HASSUSP(h_t) ->
          job_of(h_t, h_s); j_susp[h_s] = 0;
          printf("MODEL: the old leader confirmed t%d in the store: Job unsuspended\n", h_t)
       :: else ->
          stop_job(h_t); printf("MODEL: the old leader could not confirm t%d: Job deleted\n", h_t)
       fi;
       m_cre[1] = 0; m_cf[1] = 0; m_crd = 0;
       END_STEP } }
#endif
  od
}

/* The Job controller and the kubelets: a Pod starts, succeeds or fails; a Job
 * whose deletion was asked for goes once its finalizer and visible Pods are gone. */
#ifdef GUARD
/* the pod guard's startup gate: the workload starts once the guard's first read
 * confirms the lease with more than margin + grace left (GUARD_READS_FENCE, an
 * order not yet taken: and the fence counter still at its Job's fence) */
#ifdef GUARD_READS_FENCE
#define GATE(s) (rkey == j_tok[s] && rttl > SB && rfctr == j_fence[s])
#else
#define GATE(s) (rkey == j_tok[s] && rttl > SB)
#endif
#else
#define GATE(s) 1
#endif
#define STARTABLE(s) (j_ex[s] && !j_susp[s] && !j_del[s] && j_cond[s] == JRUN && p_st[s] == PNONE)
/* I9: an occurrence's work starts once: no Pod of a second run of it starts (a
 * run-now trigger runs an occurrence again on purpose: not checked with TRIGGER) */
#if !defined(TRIGGER)
#define I9_START(t) \
    CHECK(!ISTOK(t) || o_run[t_occ[t]] == 0 || o_run[t_occ[t]] == (t), "I9: occurrence %d works a second time", t_occ[t]); \
    if :: ISTOK(t) -> o_run[t_occ[t]] = (t) :: else fi
#else
#define I9_START(t) skip
#endif
/* I9T: with the early gate, the run-now trigger's work starts once: no Pod of a
 * second run it started starts after one of its runs' Pods did */
#if defined(TRIGGER) && defined(EARLY_GATE)
#define I9T_START(t) \
    if \
    :: (t_trg >> (t)) & 1 -> \
       CHECK(trig_run == 0 || trig_run == (t), "I9T: the run-now trigger's work starts a second time (t%d)", t); \
       trig_run = (t) \
    :: else \
    fi
#else
#define I9T_START(t) skip
#endif
inline kube_start(s) {
  atomic { STARTABLE(s) && GATE(s) -> d_step {
    printf("MODEL: Pod of Job t%d starts (fence %d)\n", j_tok[s], j_fence[s]);
    i1_start(t_ep[j_tok[s]], p_ovl[s]);
    /* I3: with Strict, a fence handed to work is higher than every one before */
    if
    :: t_ep[j_tok[s]] == epoch ->
       CHECK(j_fence[s] > lstart, "I3: a Pod starts with fence %d, not above the fence already handed to work", j_fence[s])
    :: else
    fi;
    if :: j_fence[s] > lstart -> lstart = j_fence[s] :: else fi;
    I9_START(j_tok[s]);
    I9T_START(j_tok[s]);
    p_st[s] = PRUN;
    END_STEP
  } }
}
inline kube_end(s, cond) {
  atomic { p_st[s] == PRUN -> d_step {
    p_st[s] = PDEAD; p_ovl[s] = 0;
    if
    :: cond == JOK -> printf("MODEL: Pod of Job t%d succeeds\n", j_tok[s])
    :: else -> printf("MODEL: Pod of Job t%d fails\n", j_tok[s])
    fi;
    if :: j_ex[s] && j_cond[s] == JRUN && !p_inv[s] -> j_cond[s] = cond :: else fi;
    if :: !j_ex[s] -> clear_slot(s) :: else fi
  } }
}
inline kube_refused(s) {
  /* the guard does not confirm the lease: the Pod fails without working */
  atomic { STARTABLE(s) && !GATE(s) -> d_step {
    printf("MODEL: the pod guard of Job t%d does not confirm its lease: the Pod fails unstarted\n", j_tok[s]);
    p_st[s] = PDEAD; j_cond[s] = JFAIL } }
}
inline kube_vanish(s) {
  /* the node is cut off and the Pod force-deleted: the API server no longer shows
   * it, its containers still run; the Job fails (backoffLimit 0) */
  atomic { p_st[s] == PRUN && !p_inv[s] && j_ex[s] -> d_step {
    printf("MODEL: Pod of Job t%d vanishes from the API server, still running\n", j_tok[s]);
    p_inv[s] = 1;
    if :: j_cond[s] == JRUN -> j_cond[s] = JFAIL :: else fi
  } }
}
inline kube_gone(s) {
  atomic { j_ex[s] && j_del[s] && !j_fin[s] && !SEENALIVE(s) -> d_step {
    printf("MODEL: Job t%d is gone\n", j_tok[s]);
    j_ex[s] = 0; j_susp[s] = 0; j_del[s] = 0; j_cond[s] = JRUN; j_fence[s] = 0;
    if :: a_slot == s + 1 -> a_slot = GONEJ :: else fi;
    if :: !ALIVE(s) -> clear_slot(s) :: else fi
  } }
}

active proctype Kube() {
  do
  :: kube_start(0)
  :: kube_start(1)
  :: kube_start(2)
  :: kube_end(0, JOK)
  :: kube_end(1, JOK)
  :: kube_end(2, JOK)
  :: kube_end(0, JFAIL)
  :: kube_end(1, JFAIL)
  :: kube_end(2, JFAIL)
#ifdef GUARD
  :: kube_refused(0)
  :: kube_refused(1)
  :: kube_refused(2)
  :: kube_vanish(0)
  :: kube_vanish(1)
  :: kube_vanish(2)
#endif
  :: kube_gone(0)
  :: kube_gone(1)
  :: kube_gone(2)
  od
}

/* The other holder of the key. */
active proctype Other() {
  do
#if defined(MARKEXP)
  /* cluster B's run of occurrence 1 (its token FV): it starts late, but never past
   * the latest start; a done-marker makes it Skipped; a busy key makes it wait */
  :: atomic { !b_done && !fw && START_OK && (rkey == 0 || MARKED(1)) -> b_acquire: d_step {
       if
       :: MARKED(1) -> b_done = 1; printf("MODEL: cluster B finds occurrence 1 done: Skipped\n")
       :: else ->
          printf("MODEL: cluster B acquires occurrence 1 and works\n");
          i1_start(epoch, fw_ovl);
          rkey = FV; rttl = TTL; fw = 1; fw_left = TTL; fw_ep = epoch
       fi;
       END_STEP } }
  /* it completes: the done-marker (I2), then DEL */
  :: atomic { fw && rkey == FV -> b_complete: d_step {
       printf("MODEL: cluster B completes occurrence 1\n");
       rmark[1] = FV;
       CHECK(mk_by[1] == 0 || mk_by[1] == FV, "I2: occurrence %d completed by a second run", 1);
       mk_by[1] = FV;
       rkey = 0; rttl = 0; fw = 0; fw_left = 0; fw_ep = 0; fw_ovl = 0; b_done = 1 } }
#elif !defined(TWIN)
  :: atomic { rkey == 0 && !fw -> other_acquire: d_step {
       printf("MODEL: the other holder takes the key and works\n");
       i1_start(epoch, fw_ovl);
       REP_W; rkey = FV; rttl = TTL; fw = 1; fw_left = TTL; fw_ep = epoch;
       END_STEP } }
#endif
#ifdef TWIN
  /* cluster B: its manager starts, and goes */
  :: atomic { tw_st == 0 -> twin_start: d_step {
       printf("MODEL: cluster B's manager starts, claiming A's identity\n"); tw_st = 1; id_left = IDT } }
  :: atomic { tw_st == 1 && !fw -> twin_leave: d_step {
       printf("MODEL: cluster B's manager goes\n"); tw_st = 2; id_left = IDT } }
  /* B's heartbeat finds the store down once (A's may be written over meanwhile):
   * the beats count from zero again (HOLE_IDENTITY_OUTAGE: an outage counted as
   * settled, so B acts as soon as the store answers) */
  :: atomic { tw_st == 1 && !dup && !hb_out -> twin_beat_down: d_step {
       printf("MODEL: cluster B's heartbeat finds the store down\n"); hb_out = 1;
#ifdef HOLE_IDENTITY_OUTAGE
       b_settled = 1
#else
       id_left = IDT
#endif
       } }
  /* a run of B takes the free key with a token minted for A's next occurrence:
   * the same cluster name, object UID and occurrence */
  :: atomic { B_MAY && !fw && rkey == 0 && onext <= NOCC && !MARKED(onext) && tnext <= NT -> twin_acquire: d_step {
       h_t = tnext; tnext++; t_occ[h_t] = onext; t_ep[h_t] = epoch; t_vl[h_t] = TTL;
       printf("MODEL: cluster B acquires t%d for occurrence %d and works\n", h_t, onext);
       i1_start(epoch, fw_ovl);
       rkey = h_t; rttl = TTL; fw = 1; fw_left = TTL; fw_ep = epoch; tw_tok = h_t;
       END_STEP } }
  /* B's take-up: the key holds a token minted for its run that B's status never
   * recorded (A recorded it after the snapshot) and whose Job B does not have */
  :: atomic { B_MAY && !fw && ISTOK(rkey) && t_occ[rkey] != 0 && !MARKED(t_occ[rkey]) -> twin_takeup: d_step {
       printf("MODEL: cluster B takes up t%d and works\n", rkey);
       i1_start(epoch, fw_ovl);
       tw_tok = rkey; rttl = TTL; fw = 1; fw_left = TTL; fw_ep = epoch;
       END_STEP } }
  :: atomic { fw -> twin_release: d_step {
       if :: rkey == tw_tok -> rkey = 0; rttl = 0 :: else fi;
       fw = 0; fw_left = 0; fw_ep = 0; fw_ovl = 0; tw_tok = 0 } }
#endif
#ifdef STALE_VALUE
  /* done early: compare-and-DEL; or it crashed and its key expires */
  :: atomic { fw -> other_release: d_step { fw = 0; fw_left = 0; fw_ep = 0; fw_ovl = 0; if :: rkey == FV -> rkey = 0; rttl = 0 :: else fi } }
  :: atomic { fw -> other_crash: d_step { fw = 0; fw_left = 0; fw_ep = 0; fw_ovl = 0 } }
  :: atomic { rkey == 0 -> stale_value: d_step { printf("MODEL: a client writes a value without expiry\n"); rkey = FX; rttl = 0 } }                    /* SET without PX */
#endif
  od
}

#ifdef FORGE
/* The tenant forges, once, a Job naming the GuardedJob: waiting at the manager's
 * gate, its token XT, a fence of its choice, occurrence 1, its own key. */
bit forged;
active proctype Forger() {
  do
  :: atomic { !forged && FREESLOT -> forge_job: d_step {
       free_slot(h_s);
       j_tok[h_s] = XT; j_ex[h_s] = 1; j_susp[h_s] = 1; j_fence[h_s] = rfctr + 1; t_occ[XT] = 1; forged = 1;
       printf("MODEL: the tenant creates Job t%d naming the GuardedJob: its own token and key, fence %d\n", XT, rfctr + 1);
       END_STEP } }
  od
}
#endif

#ifdef RETELL
/* The tenant changes, once, what the run annotation of a Job waiting at its gate
 * says started its run. */
active proctype Reteller() {
  do
  :: atomic { !gh_retold && j_tok[0] != 0 && j_ex[0] && j_susp[0] && !j_del[0] -> retell_job: d_step {
       j_told[0] = 1; gh_retold = 1;
       printf("MODEL: the tenant edits Job t%d: its annotation names another start\n", j_tok[0]) } }
  :: atomic { !gh_retold && j_tok[1] != 0 && j_ex[1] && j_susp[1] && !j_del[1] -> d_step {
       j_told[1] = 1; gh_retold = 1;
       printf("MODEL: the tenant edits Job t%d: its annotation names another start\n", j_tok[1]) } }
  :: atomic { !gh_retold && j_tok[2] != 0 && j_ex[2] && j_susp[2] && !j_del[2] -> d_step {
       j_told[2] = 1; gh_retold = 1;
       printf("MODEL: the tenant edits Job t%d: its annotation names another start\n", j_tok[2]) } }
  od
}
#endif

/* Faults: a manager crash (at any step: every step is atomic), the leader's pause
 * (a new leader takes over), the restart, Redis losing its data, the move. */
#if defined(CRASH) || defined(PAUSE) || defined(DATALOSS) || defined(SHARDS) || defined(REPL)
active proctype Faults() {
  do
#ifdef CRASH
  :: atomic { crashed < CRASHES && pst[0] == UP -> crash: d_step {
       printf("MODEL: the manager crashes\n");
       crashed++; pst[0] = DOWN; p_left[0] = HANDOVER; forget(0) } }
#endif
#ifdef PAUSE
  /* the leader pauses, between two steps or just before it sends a Job create; a
   * new leader starts with no memory. The old leader's keeper keeps what it knew
   * of the lease (a renewal in flight is never answered; failing counts as held,
   * and the I4 ghost starts afresh unless the deadline was reached: neither
   * matters to a process that no longer leads, whose first renewal is answered);
   * while paused it sends nothing and judges nothing, and its deadline passes. */
#ifdef STALE
#define SNAPSHOT c_tok = a_tok; c_ph = a_ph; c_f = a_f; c_slot = a_slot; c_job = HASJOB(a_tok); c_pend = m_pend[0]
#define UNSNAP   c_tok = 0; c_ph = 0; c_f = 0; c_slot = 0; c_job = 0; c_pend = 0
#else
#define SNAPSHOT skip
#define UNSNAP   skip
#endif
#define PAUSE_LEADER \
       paused = 1; pst[1] = PAUSED; pst[0] = DOWN; p_left[0] = HANDOVER; \
       k_tok[1] = k_tok[0]; k_dl[1] = k_dl[0]; k_dlr[1] = k_dlr[0]; k_fo[1] = k_fo[0]; \
       k_st[1] = (k_st[0] == LOST -> LOST : HELD); k_unans[1] = k_dlr[0] && k_unans[0]; \
       g_tok[1] = g_tok[0]; SNAPSHOT; \
       forget(0)
  :: atomic { !paused && pst[0] == UP -> pause: d_step {
       printf("MODEL: the leader pauses; a new leader takes over\n"); PAUSE_LEADER } }
#ifdef INFLIGHT
  /* ... with a renewal of a FailOpen lease in flight, sent while it still led */
  :: atomic { !paused && pst[0] == UP && k_tok[0] != 0 && k_st[0] != LOST && REACQ_ON(0) -> pause_inflight: d_step {
       printf("MODEL: the leader pauses with a renewal of t%d in flight; a new leader takes over\n", k_tok[0]);
       fl_st = 1; fl_tok = k_tok[0]; PAUSE_LEADER } }
  /* the renewal lands: it extends the key, or takes it back if absent */
  :: atomic { fl_st == 1 -> inflight_lands: d_step {
       if
       :: rkey == fl_tok -> rttl = TTL; fl_res = FL_OK
       :: rkey == 0 -> rkey = fl_tok; rttl = TTL; fl_res = FL_REACQ;
          printf("MODEL: the renewal of t%d sent before the pause lands: the key was absent, it takes it back\n", fl_tok)
       :: else -> fl_res = FL_LOST
       fi;
       if :: pst[1] == PAUSED || pst[1] == AWAKE && k_tok[1] == fl_tok -> fl_st = 2 :: else -> fl_st = 0; fl_tok = 0; fl_res = 0 fi } }
  /* its reply, read after the wake */
  :: atomic { fl_st == 2 && pst[1] == AWAKE -> inflight_reply: d_step {
       if
#ifndef HOLE_INFLIGHT_REACQUIRE_RENEWED
       :: fl_res == FL_REACQ || fl_res == FL_LOST -> lose(1);
          printf("MODEL: the old leader's keeper: t%d sent before the pause, taken back or not held: lost\n", fl_tok)
#else
       :: fl_res == FL_LOST -> lose(1)
       :: fl_res == FL_REACQ ->
          printf("MODEL: the old leader's keeper takes the reply of t%d sent before the pause for a renewal\n", fl_tok);
          old_renew()
#endif
       :: fl_res == FL_OK -> old_renew()    /* it proves little: renew again */
       fi;
       fl_st = 0; fl_tok = 0; fl_res = 0 } }
#endif
#ifdef LAPSE
  /* the leader pauses and nobody takes over: it wakes up still leading (its
   * leader-lease renewal succeeds again); its keeper renews before it judges, and a
   * start gate confirmed before the pause is confirmed again before it opens. The
   * pause falls between a confirmation and its write, as long as it likes: no Pod
   * of the run works yet (one that works while its manager is paused past the
   * lease is the pod guard's to stop: nothing else can) */
  :: atomic { !paused && pst[0] == UP && g_tok[0] != 0 -> lapse: d_step {
       printf("MODEL: the leader pauses; nobody takes over\n"); paused = 1; lapsed = 1; pst[0] = PAUSED } }
  :: atomic { lapsed && pst[0] == PAUSED -> lapse_wake: d_step {
       printf("MODEL: the leader wakes up, still leading\n"); pst[0] = UP;
       if :: k_tok[0] != 0 && k_st[0] != LOST -> k_due[0] = 1 :: else fi;
#ifndef HOLE_GATE_STALE_CONFIRM
       g_tok[0] = 0
#else
       skip          /* the hole: the confirmation from before the pause still opens */
#endif
     } }
#endif
#if !JF
  :: atomic { !paused && pst[0] == UP && a_ph == RUNNING && a_slot == 0 && !HASJOB(a_tok) && CONFIRMED(0, a_tok) -> pause_before_create: d_step {
       printf("MODEL: the leader pauses just before it creates Job t%d; a new leader takes over\n", a_tok);
       m_cre[1] = a_tok; m_cf[1] = a_f; PAUSE_LEADER } }
#else
  /* Job-first: the create follows the acquisition, before any status write */
  :: atomic { !paused && pst[0] == UP && m_pend[0] != 0 && !HASJOB(m_pend[0]) && CONFIRMED(0, m_pend[0]) -> pause_before_create: d_step {
       printf("MODEL: the leader pauses just before it creates Job t%d; a new leader takes over\n", m_pend[0]);
       m_cre[1] = m_pend[0]; m_cf[1] = m_pf[0]; PAUSE_LEADER } }
#endif
  /* the old leader wakes up. Its keeper notices the pause and renews before it
   * judges a deadline that passed meanwhile (the renewal is due: it is urgent);
   * a manager that lost its leadership stops taking keys back before it renews
   * alone (REACQ_ON). */
  :: atomic { pst[1] == PAUSED -> wake: d_step {  printf("MODEL: the old leader wakes up\n"); pst[1] = AWAKE;
#ifdef HOLE_PAUSED_KEEPER
       /* the hole: it judges the deadlines first, with evidence as old as the pause */
       if
       :: k_tok[1] != 0 && k_st[1] != LOST && k_dl[1] == 0 && !k_dlr[1] ->
          k_dlr[1] = 1; printf("MODEL: the old leader's keeper reports t%d at its deadline before it renews\n", k_tok[1])
       :: else
       fi;
#endif
       if :: k_tok[1] != 0 && k_st[1] != LOST && !(fl_st != 0 && fl_tok == k_tok[1]) -> old_renew() :: else fi;
#ifndef HOLE_GATE_STALE_CONFIRM
       g_tok[1] = 0;        /* a confirmation from before the pause opens nothing */
#endif
       skip
     } }
  /* it finds out that it lost the leadership and exits */
  :: atomic { pst[1] == AWAKE -> exit: d_step { pst[1] = GONE; forget(1); UNSNAP; if :: fl_st == 2 -> fl_st = 0; fl_tok = 0; fl_res = 0 :: else fi } }
#endif
#if defined(CRASH) || defined(PAUSE)
  /* the restarted manager, or the new leader, renews every recorded lease first */
  :: atomic { pst[0] == DOWN -> resume: d_step {
       printf("MODEL: the manager starts and resumes the recorded leases\n");
       pst[0] = UP; p_left[0] = 0;
       if
       :: a_tok != 0 -> track_resumed(0, a_tok)
       /* the early gate: with no recorded run, the lease of an unrecorded running Job
        * whose key holds its token (one lease per manager in the model) */
       :: a_tok == 0 && RESUMES(0) -> track_resumed(0, j_tok[0]); GH_RSU
       :: a_tok == 0 && RESUMES(1) -> track_resumed(0, j_tok[1]); GH_RSU
       :: a_tok == 0 && RESUMES(2) -> track_resumed(0, j_tok[2]); GH_RSU
       :: else
       fi } }
#endif
#ifdef DATALOSS
  :: atomic { !lost_data -> data_loss: d_step {
       printf("MODEL: Redis restarts without its data\n");
       lost_data = 1; epoch = 1;
       rkey = 0; rttl = 0; rfctr = 0;
       for (h_i : 1 .. NOCC) { rmark[h_i] = 0; mk_by[h_i] = 0 };
       END_STEP } }
#endif
#ifdef REPL
  /* the replica catches up */
  :: atomic { s_lag -> replicate: d_step { REP_SYNC } }
  /* the replica is promoted: the master's last write is lost if it had not
   * reached it */
  :: atomic { !failed_over -> failover: d_step {
       failed_over = 1;
       if
       :: s_lag ->
          printf("MODEL: failover: the new master lacks the last write (key %d, marker %d)\n", s_key, s_mark[1]);
          rkey = s_key; rttl = s_ttl; rmark[1] = s_mark[1]; epoch = 1
       :: else -> printf("MODEL: failover: the new master has every write\n")
       fi;
       REP_SYNC } }
#endif
#ifdef SHARDS
  /* the GuardedJob is relabelled into shard b */
  :: atomic { !moved -> move: d_step {
  printf("MODEL: the GuardedJob moves to shard b\n");
       moved = 1;
#ifdef HOLE_SHARD_BREAK_BEFORE_MAKE
       untrack(0)       /* shard a stops renewing at once */
#else
       ho_left = HT
#endif
     } }
#endif
  od
}
#endif

#ifdef UNLOCK
/* A tenant's unlock request naming the holder it sees, carried out by the manager:
 * its own check (liveHolder), then unlock.lua. */
inline unlock_script(v) {
  if
  :: SCRIPT_REFUSES_LIVE && ISTOK(v) && rttl > 0 -> printf("MODEL: unlock.lua refuses t%d: it has a ttl\n", v)
  :: else -> printf("MODEL: unlock deletes the key (%d)\n", v); rkey = 0; rttl = 0
  fi
}
inline unlock_by_a(v) {
  if
  :: a_tok == v || k_tok[0] == v && k_st[0] != LOST || m_pend[0] == v || JOBBUSY(v) -> h_r = 1
  :: else
  fi;
#if UNLOCK_READS_LEDGER
  if
  :: led[v] == LIVE || led[v] == LEFT && t_vl[v] > 0 ->                        /* the ledger */
     if :: h_r == 0 && !(l_tok == v && l_fl > 0) -> gh_refl = 1 :: else fi;
     h_r = 1
  :: else
  fi;
#else
  if :: l_tok == v && l_fl > 0 -> h_r = 1 :: else fi;                            /* lastRun */
#endif
  if
  :: h_r == 0 -> unlock_script(v)
  :: else -> printf("MODEL: the manager refuses to unlock t%d\n", v)
  fi
}

active proctype Tenant() {
  do
  :: atomic { ISTOK(rkey) -> unlock_a: d_step {  h_t = rkey; unlock_by_a(h_t); END_STEP } }
#ifdef CLUSTER_B
  /* cluster B's manager knows none of cluster A's runs */
  :: atomic { ISTOK(rkey) -> unlock_b: d_step {  h_t = rkey; printf("MODEL: cluster B's tenant unlocks\n"); unlock_script(h_t); END_STEP } }
#endif
  /* a value without expiry, or the other holder's once it stopped working */
  :: atomic { rkey == FX || rkey == FV && !fw -> unlock_foreign: d_step {  printf("MODEL: unlock deletes a foreign value (%d)\n", rkey); rkey = 0; rttl = 0; gh_funl = 1 } }
  od
}
#endif

init {
  d_step {
    pst[0] = UP;
#ifdef SHARDS
    pst[1] = UP;
#endif
  };
  atomic {
    run Keeper(0); run Stopper(0); run Reconciler(0);
#if defined(SHARDS)
    run Keeper(1);
#endif
#if defined(PAUSE) || defined(SHARDS)
    run Stopper(1); run Reconciler(1);      /* the old leader's renewals: old_renew */
#endif
  }
}

/* ------------------------------------------------------------------ probes */

/* Situations each configuration must reach, so that a verification without a
 * violation is not one of a model that never gets there: make model-check runs
 * each claim (pan -N probe_...) and fails unless it is violated. */

/* Job-first: a Job whose run no status ever recorded, deleted */
#define NEVERREC_DEL (j_del[0] && led[j_tok[0]] == 0 || j_del[1] && led[j_tok[1]] == 0 || j_del[2] && led[j_tok[2]] == 0)
#ifdef EARLY_GATE
/* the early gate: a restart renewed the lease of an unrecorded Job whose Pod works;
 * an opened Job no status ever recorded, deleted while its Pod worked */
#define OPENED_DEL(s) (j_del[s] && !j_susp[s] && led[j_tok[s]] == 0 && ALIVE(s))
ltl probe_resumed_unrecorded { [] !(gh_rsu && k_tok[0] != 0 && led[k_tok[0]] == 0 && PODSOF(k_tok[0])) }
ltl probe_opened_unrecorded_stopped { [] !(OPENED_DEL(0) || OPENED_DEL(1) || OPENED_DEL(2)) }
#endif
#if defined(CFG_RUN)
ltl probe_complete           { [] !(rmark[1] != 0 && rmark[2] != 0) }
ltl probe_takeup             { [] !(a_tok == 1 && a_f == 2 && !lost_data) }      /* t1 acquired twice: taken up */
ltl probe_resume_stop        { [] !(crashed > 0 && pst[0] == UP && k_dlr[0]) }
ltl probe_overlap_after_loss { [] !(fw && (ALIVE(0) || ALIVE(1) || ALIVE(2)) || ALIVE(0) && (ALIVE(1) || ALIVE(2)) || ALIVE(1) && ALIVE(2)) }
ltl probe_floor_after_loss   { [] !(a_tok != 0 && t_ep[a_tok] == 1 && a_f >= 2 && rfctr == a_f && lfence >= 1) }
#ifdef JOB_FIRST
ltl probe_adopted            { [] !(gh_adopt && crashed > 0 && a_tok != 0 && PODSOF(a_tok)) }
ltl probe_unrecorded_stopped { [] !(crashed > 0 && NEVERREC_DEL) }
#endif
#elif defined(CFG_PAUSE)
ltl probe_two_runs           { [] !(lstart >= 2) }
#if JF
ltl probe_old_create_deleted { [] !(pst[1] == AWAKE && m_cre[1] == 0 && (j_susp[0] && j_del[0] || j_susp[1] && j_del[1] || j_susp[2] && j_del[2])) }
#else
/* the old leader's late Job, never opened (the guard), deleted by the new leader */
#define LATEJOB_DEL(s) (j_tok[s] == m_cre[1] && j_susp[s] && j_del[s])
ltl probe_old_create_deleted { [] !(pst[1] == AWAKE && m_crd && (LATEJOB_DEL(0) || LATEJOB_DEL(1) || LATEJOB_DEL(2))) }
#endif
ltl probe_paused_past_deadline { [] !(pst[1] == PAUSED && k_tok[1] == a_tok && k_dl[1] == 0 && !k_dlr[1] && JOBBUSY(a_tok) && rkey == a_tok && rttl > SB) }
ltl probe_take_back_due      { [] !(pst[0] == UP && k_fo[0] && k_due[0] && rkey == 0 && k_st[0] != LOST) }
#ifdef JOB_FIRST
ltl probe_adopted            { [] !(gh_adopt && paused && a_tok != 0 && PODSOF(a_tok)) }
ltl probe_unrecorded_stopped { [] !(paused && NEVERREC_DEL) }
#endif
#elif defined(CFG_DEPOSED)
/* the guard is what keeps the deposed leader from writing back a key the new leader
 * released, and from releasing the lease of the new leader's run */
ltl probe_stale_reacquire    { [] !(pst[1] == AWAKE && c_pend != 0 && led[c_pend] == RELD && rkey == 0) }
ltl probe_stale_release      { [] !(pst[1] == AWAKE && c_tok != 0 && c_slot == 0 && !c_job && !HASJOB(c_tok) && a_tok == c_tok && rkey == c_tok && pst[0] == UP) }
ltl probe_lapse_expired      { [] !(lapsed && pst[0] == UP && a_tok != 0 && rkey != a_tok && HASSUSP(a_tok)) }
ltl probe_skipped_late       { [] !(gh_late && paused && !lapsed) }
ltl probe_inflight_ghost     { [] !(fl_st == 2 && fl_res == FL_REACQ && led[fl_tok] == RELD && pst[1] == AWAKE) }
#elif defined(CFG_MARKER)
ltl probe_late_skipped       { [] !(b_done && mk_by[1] != 0 && mk_by[1] != FV && age >= LATEST && rmark[1] != 0) }
ltl probe_marker_expired     { [] !(age > LATEST && rmark[1] == 0 && mk_by[1] != 0) }
#elif defined(CFG_TRIGGER)
ltl probe_trigger_after_crash { [] !(trig && crashed > 0 && a_tok != 0 && (t_trg >> a_tok) & 1 && PODSOF(a_tok)) }
ltl probe_adopted            { [] !(gh_adopt && crashed > 0 && a_tok != 0 && PODSOF(a_tok)) }
#elif defined(CFG_RETELL)
ltl probe_retold_stopped      { [] !(gh_retold && crashed > 0 && (j_told[0] && j_del[0] || j_told[1] && j_del[1] || j_told[2] && j_del[2])) }
ltl probe_adopted             { [] !(gh_adopt && crashed > 0 && a_tok != 0 && PODSOF(a_tok)) }
#elif defined(CFG_ADOPT)
ltl probe_forged_stopped     { [] !(forged && (j_tok[0] == XT && j_del[0] && p_st[0] == PNONE || j_tok[1] == XT && j_del[1] && p_st[1] == PNONE) && rmark[1] != 0) }
#elif defined(CFG_LEFT)
ltl probe_left_to_expire     { [] !(led[1] == LEFT && rkey == 1 && (p_inv[0] && ALIVE(0))) }
ltl probe_guard_stop         { [] !(p_inv[0] && p_st[0] == PTERM || p_inv[1] && p_st[1] == PTERM) }
ltl probe_trigger_run        { [] !(trig && a_tok != 0 && t_occ[a_tok] == 1 && onext == 3) }
ltl probe_unlock_refused_ledger { [] !(gh_refl) }
#elif defined(CFG_GUARD)
ltl probe_stopped_vanished_pod { [] !(a_ph == STOPPING && k_dlr[0] && (p_inv[0] && ALIVE(0) || p_inv[1] && ALIVE(1))) }
ltl probe_gate_refuses       { [] !(j_cond[0] == JFAIL && p_st[0] == PDEAD && j_tok[0] != 0 && !p_inv[0] && rkey != j_tok[0]) }
#ifdef JOB_FIRST
ltl probe_adopted            { [] !(gh_adopt && crashed > 0 && a_tok != 0 && PODSOF(a_tok)) }
ltl probe_unrecorded_stopped { [] !(crashed > 0 && NEVERREC_DEL) }
#endif
#elif defined(CFG_UNLOCK)
ltl probe_complete           { [] !(rmark[1] != 0) }
ltl probe_foreign_unlocked   { [] !(gh_funl && ISTOK(rkey)) }
#elif defined(CFG_TWIN)
ltl probe_run_goes_on_dup    { [] !(dup && a_tok != 0 && JOBBUSY(a_tok)) }
ltl probe_runs_after_dup     { [] !(gh_dup && !dup && tw_st == 2 && m_pend[0] != 0) }
#elif defined(CFG_REPL)
ltl probe_complete           { [] !(rmark[1] != 0 && a_tok == 0 && !failed_over) }
ltl probe_marker_kept        { [] !(failed_over && epoch && ISTOK(rkey) && rmark[1] == rkey) }
ltl probe_lease_kept         { [] !(failed_over && epoch && rmark[1] == 0 && a_ph == RELEASING && rkey == a_tok) }
#elif defined(CFG_SHARD)
ltl probe_handed_over        { [] !(moved && owner_b && k_tok[0] == 0 && k_tok[1] != 0 && a_tok != 0) }
ltl probe_handover_timeout   { [] !(ho_stop) }
ltl probe_complete_in_b      { [] !(moved && seen_b && rmark[1] != 0) }
ltl probe_claim_waits_store  { [] !(sh_unres && !owner_b && a_tok != 0 && k_tok[0] == a_tok && k_st[0] == HELD && JOBBUSY(a_tok)) }
ltl probe_handed_over_late   { [] !(sh_late && owner_b && k_tok[0] == 0 && k_tok[1] == a_tok && a_tok != 0 && PODSOF(a_tok)) }
#endif

#endif /* GRANTS */
