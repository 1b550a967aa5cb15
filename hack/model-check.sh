#!/usr/bin/env bash
# make model-check: verifies the model of the run protocol (model/run.pml) with spin.
# docs/reliability.md ("The protocol model") says what it checks.
#
#   hack/model-check.sh                   everything: every configuration, its probes, every hole
#   hack/model-check.sh HOLE_PAUSED_CREATE   one hole switch (or a configuration: RUN, PAUSE, ...)
#
# Each configuration must verify with no violation, search its whole state space
# (no depth limit hit) and fire every step of the model at least once; each probe
# (a situation the configuration must be able to reach) must be reached; each hole
# switch must produce a violation, whose shortest trail is printed; a switch of the
# Job-first order (shown in a JOBFIRST_ configuration) must also leave the verifier
# of the configuration without Job-first unchanged. Anything else fails. MODEL_JOBS (default 2) verifiers run at once; MODEL_KEEP=DIR keeps the
# generated verifiers and trails in DIR; MODEL_DEFINES adds spin defines, e.g.
# MODEL_DEFINES=-DCRASHES=2 (a deeper search than CI's, minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
model=$root/model/run.pml

hack/ensure-spin.sh

# configuration: the probes it must reach (name: a state it reaches)
declare -A probes=(
  [RUN]="complete takeup resume_stop overlap_after_loss floor_after_loss"
  [PAUSE]="two_runs old_create_deleted paused_past_deadline take_back_due"
  [MARKER]="late_skipped marker_expired"
  [ADOPT]="forged_stopped"
  [RETELL]="retold_stopped adopted"
  [DEPOSED]="stale_reacquire stale_release lapse_expired skipped_late inflight_ghost"
  [LEFT]="left_to_expire guard_stop trigger_run unlock_refused_ledger"
  [GUARD]="stopped_vanished_pod gate_refuses"
  [UNLOCK]="complete foreign_unlocked"
  [SHARD]="handed_over handover_timeout complete_in_b claim_waits_store handed_over_late"
  [TWIN]="run_goes_on_dup runs_after_dup"
  [REPL]="complete marker_kept lease_kept"
  [GRANTS]="refused set_moved"
  [JOBFIRST_RUN]="complete takeup resume_stop overlap_after_loss floor_after_loss adopted unrecorded_stopped"
  [JOBFIRST_PAUSE]="two_runs old_create_deleted paused_past_deadline take_back_due adopted unrecorded_stopped"
  [JOBFIRST_GUARD]="stopped_vanished_pod gate_refuses adopted unrecorded_stopped"
  [EARLY_RUN]="complete takeup resume_stop overlap_after_loss floor_after_loss adopted unrecorded_stopped resumed_unrecorded opened_unrecorded_stopped"
  [EARLY_PAUSE]="two_runs old_create_deleted paused_past_deadline take_back_due adopted unrecorded_stopped resumed_unrecorded"
  [EARLY_GUARD]="stopped_vanished_pod gate_refuses adopted unrecorded_stopped resumed_unrecorded"
  [EARLY_SHARD]="handed_over handover_timeout complete_in_b claim_waits_store handed_over_late"
  [EARLY_UNLOCK]="complete foreign_unlocked"
  [EARLY_TWIN]="run_goes_on_dup runs_after_dup"
  [EARLY_REPL]="complete marker_kept lease_kept"
  [EARLY_TRIGGER]="trigger_after_crash adopted"
)
# configuration: the steps (labels in the model) it compiles but cannot fire
# (only the old leader's and the tenant's Jobs are unclaimed; LEFT, UNLOCK, MARKER and
# ADOPT never lose a lease; in TWIN cluster B's runs never start; UNLOCK, SHARD, REPL,
# DEPOSED, MARKER and ADOPT have one occurrence; the leadership guard keeps a deposed
# leader from confirming its late Job; in the Job-first order a run is recorded with
# its Job, and no leader opens the gate of a run whose status write failed; in ADOPT
# only the tenant's Job is unrecorded, and it is never adopted; RETELL has one
# occurrence, and its recorded runs' Jobs are recorded with them)
declare -A unfired=(
  [RUN]="stop_unclaimed drop_finalizer"
  [PAUSE]="paused_confirm"
  [DEPOSED]="skip_forbid paused_confirm"
  [ADOPT]="renew_lost stop_reported stop_stopping skip_forbid stop_lost stop_deleted drop_finalizer adopt_unrecorded adopt"
  [MARKER]="renew_lost stop_reported stop_stopping stop_unclaimed skip_forbid stop_lost stop_deleted_unrecorded stop_deleted drop_finalizer"
  [LEFT]="renew_lost stop_reported stop_stopping stop_unclaimed stop_lost stop_deleted_unrecorded stop_deleted drop_finalizer unlock_foreign"
  [GUARD]="stop_unclaimed drop_finalizer"
  [UNLOCK]="renew_lost stop_reported stop_stopping stop_unclaimed skip_forbid stop_lost stop_deleted_unrecorded stop_deleted drop_finalizer"
  [SHARD]="stop_unclaimed skip_forbid drop_finalizer"
  [TWIN]="stop_unclaimed drop_finalizer twin_acquire twin_takeup twin_release"
  [REPL]="stop_unclaimed skip_forbid drop_finalizer"
  [GRANTS]=""
  [JOBFIRST_RUN]="adopt"
  [RETELL]="stop_stopping skip_forbid adopt"
  [JOBFIRST_PAUSE]="paused_confirm"
  [JOBFIRST_GUARD]="adopt"
  [EARLY_RUN]="adopt"
  [EARLY_PAUSE]="paused_confirm"
  [EARLY_GUARD]="adopt"
  [EARLY_SHARD]="stop_unclaimed skip_forbid drop_finalizer adopt"
  [EARLY_UNLOCK]="renew_lost stop_reported stop_stopping stop_unclaimed skip_forbid stop_lost stop_deleted_unrecorded stop_deleted drop_finalizer schedule_past_job adopt_unrecorded adopt"
  [EARLY_TWIN]="stop_unclaimed drop_finalizer twin_acquire twin_takeup twin_release schedule_past_job adopt_unrecorded adopt"
  [EARLY_REPL]="stop_unclaimed skip_forbid drop_finalizer schedule_past_job adopt_unrecorded adopt"
  [EARLY_TRIGGER]="stop_stopping skip_forbid adopt"
)
configs=(EARLY_PAUSE RUN PAUSE DEPOSED MARKER ADOPT RETELL LEFT GUARD UNLOCK SHARD TWIN REPL GRANTS JOBFIRST_RUN JOBFIRST_PAUSE JOBFIRST_GUARD EARLY_RUN EARLY_GUARD
  EARLY_SHARD EARLY_UNLOCK EARLY_TWIN EARLY_REPL EARLY_TRIGGER)
# hole switch: the configuration that shows it
declare -A holes=(
  [HOLE_TAKEUP_LEFT_LEASE]=LEFT
  [HOLE_UNLOCK_LIVE_FOREIGN]=UNLOCK
  [HOLE_SHARD_BREAK_BEFORE_MAKE]=SHARD
  [HOLE_UNLOCK_AFTER_LASTRUN_OVERWRITTEN]=LEFT
  [HOLE_DEADLINE_FROM_REPLY]=RUN
  [HOLE_PAUSED_CREATE]=PAUSE
  [HOLE_SLOW_HANDOVER]=RUN
  [HOLE_ACQUIRE_IGNORES_MARKER]=LEFT
  [HOLE_STRICT_WITHOUT_FLOOR]=RUN
  [HOLE_UNCLEAN_BY_RECORDED_UID]=GUARD
  [HOLE_RELEASE_IGNORES_UNCLEAN]=GUARD
  [HOLE_PAUSED_KEEPER]=PAUSE
  [HOLE_RENEW_ONLY_REACQUIRE]=PAUSE
  [HOLE_DUPLICATE_IDENTITY]=TWIN
  [HOLE_IDENTITY_WINDOW]=TWIN
  [HOLE_IDENTITY_OUTAGE]=TWIN
  [HOLE_IDENTITY_OWN_STORE_ONLY]=TWIN
  [HOLE_MARKER_UNACKED]=REPL
  [HOLE_JOBFIRST_GATE_EARLY]=JOBFIRST_RUN
  [HOLE_JOBFIRST_ADOPT_ANY]=JOBFIRST_PAUSE
  [HOLE_JOBFIRST_NO_FLOOR]=JOBFIRST_RUN
  [HOLE_EARLY_RESUME_SKIPS_UNRECORDED]=EARLY_RUN
  [HOLE_EARLY_STOPPER_KEEPS_UNHELD]=EARLY_RUN
  [HOLE_EARLY_FLOOR_WITHOUT_JOBS]=EARLY_RUN
  [HOLE_EARLY_FINALIZER_BEFORE_FLOOR]=EARLY_RUN
  [HOLE_EARLY_SCHEDULE_IGNORES_JOBS]=EARLY_RUN
  [HOLE_EARLY_HANDOVER_RECORDED_ONLY]=EARLY_SHARD
  [HOLE_TRIGGER_OPENS_EARLY]=EARLY_TRIGGER
  [HOLE_NOT_LEADING]=DEPOSED
  [HOLE_INFLIGHT_REACQUIRE_RENEWED]=DEPOSED
  [HOLE_SKIP_ON_STALE_CACHE]=DEPOSED
  [HOLE_GATE_STALE_CONFIRM]=DEPOSED
  [HOLE_MARKER_EXPIRES_EARLY]=MARKER
  [HOLE_ADOPT_TRUSTS_ANNOTATION]=ADOPT
  [HOLE_ADOPT_TRUSTS_START]=RETELL
  [HOLE_SHARD_CLAIM_UNTRACKED]=SHARD
  [HOLE_GRANTS_UNPUBLISHED]=GRANTS
  [HOLE_GRANTS_PUBLICATION_LAPSE]=GRANTS
  [HOLE_GRANTS_REFUSE_ACQUIRE_ONLY]=GRANTS
)
hole_order=(HOLE_TAKEUP_LEFT_LEASE HOLE_UNLOCK_LIVE_FOREIGN HOLE_SHARD_BREAK_BEFORE_MAKE
  HOLE_UNLOCK_AFTER_LASTRUN_OVERWRITTEN HOLE_DEADLINE_FROM_REPLY HOLE_PAUSED_CREATE HOLE_SLOW_HANDOVER
  HOLE_UNCLEAN_BY_RECORDED_UID HOLE_RELEASE_IGNORES_UNCLEAN HOLE_PAUSED_KEEPER HOLE_RENEW_ONLY_REACQUIRE
  HOLE_DUPLICATE_IDENTITY HOLE_IDENTITY_WINDOW HOLE_IDENTITY_OUTAGE HOLE_IDENTITY_OWN_STORE_ONLY HOLE_MARKER_UNACKED
  HOLE_ACQUIRE_IGNORES_MARKER HOLE_STRICT_WITHOUT_FLOOR
  HOLE_JOBFIRST_ADOPT_ANY HOLE_JOBFIRST_GATE_EARLY HOLE_JOBFIRST_NO_FLOOR
  HOLE_EARLY_RESUME_SKIPS_UNRECORDED HOLE_EARLY_STOPPER_KEEPS_UNHELD HOLE_EARLY_FLOOR_WITHOUT_JOBS HOLE_EARLY_FINALIZER_BEFORE_FLOOR
  HOLE_EARLY_SCHEDULE_IGNORES_JOBS HOLE_EARLY_HANDOVER_RECORDED_ONLY HOLE_TRIGGER_OPENS_EARLY
  HOLE_NOT_LEADING HOLE_INFLIGHT_REACQUIRE_RENEWED HOLE_SKIP_ON_STALE_CACHE HOLE_GATE_STALE_CONFIRM
  HOLE_MARKER_EXPIRES_EARLY HOLE_ADOPT_TRUSTS_ANNOTATION HOLE_ADOPT_TRUSTS_START HOLE_SHARD_CLAIM_UNTRACKED
  HOLE_GRANTS_UNPUBLISHED HOLE_GRANTS_PUBLICATION_LAPSE HOLE_GRANTS_REFUSE_ACQUIRE_ONLY)

jobs=()
if (($# == 0)); then
  for c in "${configs[@]}"; do jobs+=("config $c"); done
  for h in "${hole_order[@]}"; do jobs+=("hole $h"); done
else
  for a in "$@"; do
    if [[ -n "${holes[$a]:-}" ]]; then jobs+=("hole $a")
    elif [[ -n "${probes[$a]:-}" ]]; then jobs+=("config $a")
    else echo "model-check: unknown configuration or hole switch: $a" >&2; exit 2
    fi
  done
fi

if [[ -n "${MODEL_KEEP:-}" ]]; then
  work=$(mkdir -p "$MODEL_KEEP" && cd "$MODEL_KEEP" && pwd)
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/model-check.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi

# The verifier: exhaustive, states stored whole (COLLAPSE compresses them
# losslessly), safety only; memory bounded. The breadth-first verifiers of the
# probes and holes stop early: compiling them fast matters more, and a smaller hash
# table (-w20) spares clearing memory they never use.
cc_flags=(-O1 -w -DCOLLAPSE -DSAFETY -DMEMLIM=3072)
cc_quick=(-O0 -w -DCOLLAPSE -DSAFETY -DMEMLIM=3072 -DBFS)

# build DIR CFG [spin -D flags...]: generates and compiles the verifiers into DIR:
# pan (no claim: the invariants) and, when asked, pan_bfs (breadth-first).
build() {
  local dir=$1 cfg=$2; shift 2
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  (cd "$dir" && spin -DCFG_"$cfg" ${MODEL_DEFINES:-} "$@" -a "$model" >spin.log 2>&1) || { cat "$dir/spin.log"; return 1; }
}

run_config() {
  local cfg=$1 dir=$work/config-$1 out
  build "$dir" "$cfg" || return 1
  (cd "$dir" && gcc "${cc_flags[@]}" -DNOCLAIM -o pan pan.c && gcc "${cc_quick[@]}" -o pan_bfs pan.c) || return 1
  local start=$SECONDS
  (cd "$dir" && ./pan -m100000 >pan.out 2>&1) || true
  out=$dir/pan.out
  local states depth secs
  states=$(awk '/states, stored$/{print $1; exit}' "$out")
  depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out" | head -1)
  secs=$((SECONDS - start))
  if ! grep -q 'errors: 0$' "$out"; then
    echo "FAIL config $cfg: the model finds a violation:"
    grep -E 'violated|errors:' "$out" | head -5
    # shellcheck disable=SC2086
    (cd "$dir" && spin -DCFG_"$cfg" ${MODEL_DEFINES:-} -t -k run.pml.trail "$model" 2>&1 | sed -n 's/^ *MODEL: //p' | sed 's/  */ /g; s/ *$//; s/^/      /') || true
    return 1
  fi
  if grep -qi 'search depth too small\|max search depth too small' "$out"; then
    echo "FAIL config $cfg: the search was cut at its depth limit"
    return 1
  fi
  # Every labelled step fires, but those the configuration cannot fire: spin's
  # "unreached" report names each step whose guard never passed by the line of
  # its d_step, which carries the step's label.
  local line label never=()
  while read -r line; do
    label=$(sed -n "${line}s/.*[>{] *\([a-z_]*\): d_step.*/\1/p" "$model")
    if [[ -n $label && " ${unfired[$cfg]} " != *" $label "* ]]; then never+=("$label"); fi
  done < <(sed -n 's/.*run\.pml:\([0-9]*\), state [0-9]*, "D_STEP.*/\1/p' "$out" | sort -un)
  if ((${#never[@]} > 0)); then
    echo "FAIL config $cfg: steps of the model that never fire: ${never[*]}"
    return 1
  fi
  local missed=() p
  for p in ${probes[$cfg]}; do
    (cd "$dir" && ./pan_bfs -w20 -N "probe_$p" >"probe_$p.out" 2>&1) || true
    grep -q 'errors: 1$' "$dir/probe_$p.out" || missed+=("$p")
  done
  if ((${#missed[@]} > 0)); then
    echo "FAIL config $cfg: situations it never reaches: ${missed[*]}"
    return 1
  fi
  echo "PASS config $cfg: no violation in $states states (depth $depth, ${secs}s); reaches: ${probes[$cfg]}"
}

run_hole() {
  local hole=$1 cfg=${holes[$1]} dir=$work/$1 out
  build "$dir" "$cfg" -D"$hole" || return 1
  (cd "$dir" && gcc "${cc_quick[@]}" -DNOCLAIM -o pan pan.c) || return 1
  (cd "$dir" && ./pan -w20 >pan.out 2>&1) || true
  out=$dir/pan.out
  if ! grep -q 'violated' "$out" || [[ ! -f "$dir/run.pml.trail" ]]; then
    echo "FAIL hole $hole: the model finds no violation with the hole in (config $cfg)"
    return 1
  fi
  local trail what steps line
  # shellcheck disable=SC2086
  trail=$(cd "$dir" && spin -DCFG_"$cfg" ${MODEL_DEFINES:-} -D"$hole" -t -k run.pml.trail "$model" 2>&1 |
    sed -n 's/^ *MODEL: //p' | sed 's/  */ /g; s/ *$//') || true
  what=$(sed -n 's/^VIOLATION //p' <<<"$trail" | head -1)
  if [[ -z $what ]]; then
    echo "FAIL hole $hole: the violation is not one of the invariants:"
    grep -m1 'violated' "$out"
    return 1
  fi
  steps=$(sed -n 's/.*(at depth \([0-9]*\)).*/\1/p' "$out" | head -1)
  local off="" base=""
  case $cfg in
    # without Job-first (or without the early gate) the switch must change
    # nothing: the same verifier
    JOBFIRST_*) base=${cfg#JOBFIRST_} ;;
    EARLY_*) base=JOBFIRST_${cfg#EARLY_} ;;
  esac
  if [[ -n $base ]]; then
    build "$dir/off" "$base" && (cd "$dir/off" && mv pan.c pan_plain.c) && build "$dir/off" "$base" -D"$hole" || return 1
    if ! cmp -s "$dir/off/pan.c" "$dir/off/pan_plain.c"; then
      echo "FAIL hole $hole: it changes configuration $base, which is not Job-first"
      return 1
    fi
    off="; no effect in $base"
  fi
  echo "PASS hole $hole: config $cfg violates $what (trail of $steps steps$off)"
  echo "    shortest trail (spin -DCFG_$cfg -D$hole -t -k TRAIL model/run.pml):"
  while IFS= read -r line; do echo "      $line"; done <<<"$trail"
}

run_job() {
  local kind=$1 name=$2 log=$work/$1-$2.log
  if [[ $kind == config ]]; then run_config "$name" >"$log" 2>&1; else run_hole "$name" >"$log" 2>&1; fi
}

start=$SECONDS
max=${MODEL_JOBS:-2}
pids=()
names=()
for j in "${jobs[@]}"; do
  while (($(jobs -rp | wc -l) >= max)); do wait -n || true; done
  # shellcheck disable=SC2086
  run_job $j &
  pids+=($!)
  names+=("$j")
done
passed=0
failed=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" 2>/dev/null || true   # the verdict is the log's PASS line
  read -r kind name <<<"${names[$i]}"
  cat "$work/$kind-$name.log"
  if grep -q '^PASS' "$work/$kind-$name.log"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "model-check: $((SECONDS - start))s"
echo "model-check: $passed passed, $failed failed"
((failed == 0))
