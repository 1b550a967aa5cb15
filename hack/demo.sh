#!/usr/bin/env bash
# A one-command local demo of GuardedJob (`make demo`, `make demo-down`).
#
# Usage: hack/demo.sh [up|down]
#   up (default): start etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
#       kwok (playing the kubelet of one fake node), redis-server and the manager, all
#       on 127.0.0.1 only; install the CRD, apply hack/demo/guardedjob.yaml (a run every
#       minute), trigger a run at once and show it as it happens. Then keep running
#       until Ctrl-C (or `hack/demo.sh down` from another terminal).
#   down: stop everything a previous `up` started, by the PIDs it recorded.
#
# Environment:
#   DEMO_DIR       state directory (pids, logs, certificates, kubeconfig, etcd data);
#                  default <repo>/.demo
#   DEMO_ONESHOT=1 exit 0 once the first run has succeeded (its Job Complete and
#                  status.lastRun.result Succeeded), stopping everything; exit non-zero
#                  with the end of the logs if that does not happen within DEMO_TIMEOUT
#   DEMO_TIMEOUT   seconds to wait for the first run (default 180)
#
# Nothing listens on anything but 127.0.0.1, and nothing sends traffic anywhere else:
# the Pod IPs kwok makes up are never contacted.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
state="${DEMO_DIR:-$repo/.demo}"
oneshot="${DEMO_ONESHOT:-0}"
timeout="${DEMO_TIMEOUT:-180}"

gj_name=demo-settlement
gj_ns=default
cluster_name=demo
node_name=kwok-node-0
# Stopped in this order (the reverse of the start order): the manager first, so it
# never sees its store or API server go away under it.
components=(manager kwok kube-scheduler kube-controller-manager kube-apiserver redis etcd)

if [[ -t 1 ]]; then
  bold=$'\033[1m' blue=$'\033[1;34m' yellow=$'\033[1;33m' red=$'\033[1;31m' green=$'\033[1;32m' reset=$'\033[0m'
else
  bold="" blue="" yellow="" red="" green="" reset=""
fi
log() { printf '%s==>%s %s\n' "$blue" "$reset" "$*"; }
warn() { printf '%s==>%s %s\n' "$yellow" "$reset" "$*" >&2; }
die() {
  printf '%s==> %s%s\n' "$red" "$*" "$reset" >&2
  exit 1
}

# ---------------------------------------------------------------------------------------
# Processes: started with setsid (so Ctrl-C reaches only this script, which then stops
# them in order), recorded as <name>.pid plus the executable in <name>.exe, and stopped
# only by that PID, after checking that the PID still runs that executable.

# alive NAME succeeds if the recorded process of NAME is running its recorded executable.
alive() {
  local name="$1" pid exe actual st
  [[ -f $state/pids/$name.pid && -f $state/pids/$name.exe ]] || return 1
  pid="$(<"$state/pids/$name.pid")"
  exe="$(<"$state/pids/$name.exe")"
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  actual="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
  [[ $actual == "$exe" || $actual == "$exe (deleted)" ]] || return 1
  # A zombie (exited, not yet reaped by this shell) is not running.
  st="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [[ $st != Z ]]
}

# start NAME BINARY ARGS... runs BINARY in a session of its own, output in logs/NAME.log.
start() {
  local name="$1" bin="$2" exe pid i
  shift 2
  exe="$(readlink -f "$bin")"
  setsid "$bin" "$@" </dev/null >"$state/logs/$name.log" 2>&1 &
  pid=$!
  echo "$pid" >"$state/pids/$name.pid"
  echo "$exe" >"$state/pids/$name.exe"
  # setsid execs the binary in the same process; wait until it has.
  for ((i = 0; i < 50; i++)); do
    alive "$name" && return 0
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo Z)" != Z ]] || break
    sleep 0.1
  done
  tail_log "$name" 30
  die "$name did not start (log: $state/logs/$name.log)"
}

# stop NAME sends SIGTERM to the recorded process of NAME, waits up to 15 s, then SIGKILL.
stop() {
  local name="$1" pid i
  [[ -f $state/pids/$name.pid ]] || return 0
  pid="$(<"$state/pids/$name.pid")"
  if alive "$name"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
      alive "$name" || break
      sleep 0.1
    done
    if alive "$name"; then
      warn "$name (pid $pid) did not stop within 15s: killing it"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do
        alive "$name" || break
        sleep 0.1
      done
    fi
    echo "stopped $name (pid $pid)"
    stopped_any=true
  fi
  # Reap it if it is a child of this shell.
  wait "$pid" 2>/dev/null || true
  rm -f "$state/pids/$name.pid" "$state/pids/$name.exe"
}

down() {
  local name
  [[ -d $state/pids ]] || { echo "nothing to stop (no $state/pids)"; return 0; }
  # Tells a running `up` that the stop is intended.
  touch "$state/pids/stopping"
  stopped_any=false
  for name in "${components[@]}"; do
    stop "$name"
  done
  $stopped_any || echo "nothing was running (DEMO_DIR=$state)"
}

tail_log() {
  local name="$1" n="${2:-20}"
  [[ -s $state/logs/$name.log ]] || return 0
  echo "----- last $n lines of $state/logs/$name.log -----" >&2
  tail -n "$n" "$state/logs/$name.log" >&2
}

tail_logs() {
  local name
  for name in "${components[@]}"; do
    tail_log "$name" "${1:-20}"
  done
}

# ---------------------------------------------------------------------------------------
# Helpers.

used_ports=" "
# free_port VAR sets VAR to a TCP port on 127.0.0.1 that nothing listens on, below the
# ephemeral range so that outgoing connections do not take it meanwhile, and that no
# earlier call gave (it runs in this shell, not a subshell, so that it remembers them).
free_port() {
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + RANDOM % 12000))
    [[ $used_ports == *" $p "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      used_ports+="$p "
      printf -v "$1" '%s' "$p"
      return
    fi
  done
  die "no free port found on 127.0.0.1"
}

# wait_for DESCRIPTION SECONDS COMMAND... retries COMMAND every 0.25 s.
wait_for() {
  local what="$1" secs="$2" deadline
  shift 2
  deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { tail_logs 30; die "timed out after ${secs}s waiting for $what"; }
    sleep 0.25
  done
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# http_ok PORT PATH succeeds if GET http://127.0.0.1:PORT/PATH answers 200.
http_ok() {
  local line
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
  IFS= read -r -t 5 line <&3 || { exec 3<&-; return 1; }
  exec 3<&-
  [[ $line == "HTTP/1."?" 200"* ]]
}

# The kubectl built beside the control plane, at the API server's version.
k() { "$bin_dir/kubectl" --kubeconfig "$state/kubeconfig" "$@"; }
rcli() { redis-cli -h 127.0.0.1 -p "$redis_port" "$@"; }

node_schedulable() {
  [[ "$(k get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]] &&
    [[ -z "$(k get node "$node_name" -o jsonpath='{.spec.taints}')" ]]
}

kubeconfig() { # FILE TOKEN USER
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: guardedjob-demo
  cluster:
    server: https://127.0.0.1:$apiserver_port
    certificate-authority: $state/pki/ca.crt
users:
- name: $3
  user:
    token: $2
contexts:
- name: guardedjob-demo
  context:
    cluster: guardedjob-demo
    user: $3
    namespace: default
current-context: guardedjob-demo
EOF
  chmod 600 "$1"
}

random_token() { openssl rand -hex 24; }

# ---------------------------------------------------------------------------------------
# up

prepare_state() {
  local name
  mkdir -p "$state"
  for name in "${components[@]}"; do
    if alive "$name"; then
      die "the demo is already running ($name has pid $(<"$state/pids/$name.pid")); stop it with: $0 down  (DEMO_DIR=$state)"
    fi
  done
  # Only what this script creates is removed: DEMO_DIR may be any directory.
  rm -rf "$state/pids" "$state/logs" "$state/pki" "$state/etcd" "$state/redis" \
    "$state/kubeconfig" "$state/manager.kubeconfig" "$state/tokens.csv" "$state/node.yaml"
  mkdir -p "$state/pids" "$state/logs" "$state/pki" "$state/redis"
  chmod 700 "$state/pki"
}

make_certs() {
  local pki="$state/pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=guardedjob-demo-ca" \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
  openssl x509 -req -days 30 -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -out "$pki/apiserver.crt" \
    -extfile <(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n') 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  admin_token="$(random_token)"
  manager_token="$(random_token)"
  # token,user,uid,"groups": the admin (kubectl and the control plane components) is in
  # system:masters; the manager is a plain user bound to config/rbac's guardedjob-manager-role.
  {
    echo "$admin_token,admin,admin,\"system:masters\""
    echo "$manager_token,guardedjob-manager,guardedjob-manager,\"system:authenticated\""
  } >"$state/tokens.csv"
  chmod 600 "$state/tokens.csv"
}

start_cluster() {
  local etcd_port etcd_peer_port
  free_port etcd_port
  free_port etcd_peer_port
  free_port apiserver_port
  free_port redis_port

  log "Starting etcd on 127.0.0.1:$etcd_port"
  start etcd "$bin_dir/etcd" \
    --name demo --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "demo=http://127.0.0.1:$etcd_peer_port" --log-level warn
  wait_for "etcd" 30 port_open "$etcd_port"

  log "Starting kube-apiserver on 127.0.0.1:$apiserver_port"
  start kube-apiserver "$bin_dir/kube-apiserver" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$apiserver_port" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --tls-cert-file="$state/pki/apiserver.crt" --tls-private-key-file="$state/pki/apiserver.key" \
    --client-ca-file="$state/pki/ca.crt" \
    --token-auth-file="$state/tokens.csv" --anonymous-auth=false \
    --authorization-mode=RBAC \
    --service-account-key-file="$state/pki/sa.pub" \
    --service-account-signing-key-file="$state/pki/sa.key" \
    --service-account-issuer="https://127.0.0.1:$apiserver_port" \
    --service-cluster-ip-range=10.96.0.0/16 \
    --endpoint-reconciler-type=none \
    --allow-privileged=false
  kubeconfig "$state/kubeconfig" "$admin_token" admin
  wait_for "kube-apiserver /readyz" 90 k get --raw /readyz

  log "Starting kube-controller-manager, kube-scheduler and kwok"
  start kube-controller-manager "$bin_dir/kube-controller-manager" \
    --kubeconfig="$state/kubeconfig" --secure-port=0 --leader-elect=false \
    --controllers=job-controller,node-lifecycle-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,pod-garbage-collector-controller \
    --service-account-private-key-file="$state/pki/sa.key" --root-ca-file="$state/pki/ca.crt" \
    --use-service-account-credentials=false
  start kube-scheduler "$bin_dir/kube-scheduler" \
    --kubeconfig="$state/kubeconfig" --secure-port=0 --leader-elect=false
  start kwok "$bin_dir/kwok" \
    --kubeconfig="$state/kubeconfig" --config="$repo/hack/demo/kwok-stages.yaml" \
    --manage-all-nodes=true --node-port=0 --node-ip=127.0.0.1

  cat >"$state/node.yaml" <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $node_name
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/arch: amd64
    kubernetes.io/hostname: $node_name
    kubernetes.io/os: linux
    kubernetes.io/role: agent
    type: kwok
EOF
  k apply -f "$state/node.yaml" >/dev/null
  wait_for "node $node_name Ready and untainted" 90 node_schedulable
  wait_for "the default ServiceAccount" 60 k -n "$gj_ns" get serviceaccount default

  log "Starting redis-server on 127.0.0.1:$redis_port"
  start redis "$(command -v redis-server)" \
    --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no \
    --dir "$state/redis" --daemonize no
  wait_for "redis-server" 30 rcli ping
}

start_manager() {
  log "Installing the CRD and the manager's RBAC role"
  k apply --server-side -f "$repo/config/crd/bases" >/dev/null
  k apply --server-side -f "$repo/config/rbac/role.yaml" >/dev/null
  k create clusterrolebinding guardedjob-manager --clusterrole=guardedjob-manager-role --user=guardedjob-manager \
    --dry-run=client -o yaml | k apply --server-side -f - >/dev/null
  wait_for "the CRDs" 60 k wait --for=condition=Established --timeout=5s crd/guardedjobs.batch.guardedjob.dev \
    crd/guardedjobruns.batch.guardedjob.dev crd/guardedjobbackfills.batch.guardedjob.dev
  kubeconfig "$state/manager.kubeconfig" "$manager_token" guardedjob-manager

  # Chosen just before the manager binds it: other servers on the machine may have
  # taken a port chosen while the control plane started.
  free_port probe_port
  log "Starting the manager ($manager_bin, cluster name '$cluster_name', /readyz on 127.0.0.1:$probe_port)"
  start manager "$manager_bin" \
    --kubeconfig="$state/manager.kubeconfig" \
    --redis-url="redis://127.0.0.1:$redis_port/0" \
    --cluster-name="$cluster_name" \
    --metrics-bind-address=0 \
    --health-probe-bind-address="127.0.0.1:$probe_port" \
    --leader-elect=false
  wait_for "the manager's /readyz" 60 http_ok "$probe_port" /readyz
}

# ---------------------------------------------------------------------------------------
# Watching the run.

gj_field() { k -n "$gj_ns" get gj "$gj_name" -o jsonpath="$1" 2>/dev/null || true; }

job_state() { # JOB -> Complete, Failed or Running
  local conds
  conds="$(k -n "$gj_ns" get job "$1" -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}' 2>/dev/null)" || {
    echo Missing
    return
  }
  case " $conds " in
    *" Complete "*) echo Complete ;;
    *" Failed "*) echo Failed ;;
    *) echo Running ;;
  esac
}

section() { printf '\n%s--- %s%s\n' "$bold" "$*" "$reset"; }

show_gj() {
  section "kubectl get gj"
  k -n "$gj_ns" get gj || true
  section "kubectl get gj -o wide"
  k -n "$gj_ns" get gj -o wide || true
}

show_jobs() {
  section "kubectl get jobs"
  k -n "$gj_ns" get jobs -l "batch.guardedjob.dev/guardedjob=$gj_name" 2>/dev/null | grep . || k -n "$gj_ns" get jobs || true
}

show_describe() {
  section "kubectl describe gj $gj_name"
  k -n "$gj_ns" describe gj "$gj_name" || true
}

show_redis() {
  local key="$gj_ns:$gj_name" fence_key="$gj_ns:$gj_name:fence"
  section "redis-cli GET $key (lease value: <cluster>/<namespace>/<job>#<secret>), PTTL, and the fence counter"
  echo "GET $key -> $(rcli GET "$key")"
  echo "PTTL $key -> $(rcli PTTL "$key") ms"
  echo "GET $fence_key -> $(rcli GET "$fence_key")"
  if [[ -n $occurrence_key && -n $(rcli GET "$occurrence_key") ]]; then
    echo "GET $occurrence_key (done-marker of the occurrence) -> $(rcli GET "$occurrence_key")"
  fi
}

processes_ok() {
  local name
  if [[ -e $state/pids/stopping ]]; then
    log "Stopped by '$0 down'"
    stopped_elsewhere=true
    exit 0
  fi
  for name in "${components[@]}"; do
    alive "$name" || { warn "$name (pid $(cat "$state/pids/$name.pid" 2>/dev/null)) is not running any more"; return 1; }
  done
}

# watch_runs follows the GuardedJob, printing what changes. It returns 0 after the first
# run succeeded in DEMO_ONESHOT mode, and 1 when it failed or timed out; otherwise it
# goes on until interrupted.
first_done=false
stopped_elsewhere=false
occurrence_key=""
watch_runs() {
  local deadline=$((SECONDS + timeout)) last_gj="" last_jobs="" held_shown="" done_job="" line jobs
  local lock holder fence result run_job active_job js seen_holder=""
  while :; do
    if ! processes_ok; then
      tail_logs 30
      return 1
    fi
    line="$(k -n "$gj_ns" get gj "$gj_name" -o jsonpath='{.status.lock.state}|{.status.lock.holder}|{.status.lock.fence}|{.status.lastRun.result}|{.status.lastRun.jobName}|{.status.active[0].jobName}|{.status.active[0].phase}|{.status.lastFence}' 2>/dev/null)" || {
      sleep 1
      continue
    }
    IFS='|' read -r lock holder fence result run_job active_job _ _ <<<"$line"
    if [[ $line != "$last_gj" ]]; then
      last_gj="$line"
      show_gj
    fi
    jobs="$(k -n "$gj_ns" get jobs -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.status=="True")].type},{.status.active},{.status.succeeded},{.status.failed};{end}' 2>/dev/null || true)"
    if [[ $jobs != "$last_jobs" ]]; then
      last_jobs="$jobs"
      [[ -z $jobs ]] || show_jobs
    fi
    # While a run holds the lease: who holds it, with which fence, and the key in Redis.
    if [[ $lock == Held && -n $active_job && $held_shown != "$active_job" ]]; then
      held_shown="$active_job"
      seen_holder="$holder"
      occurrence_key="$(gj_field '{.status.active[0].occurrenceKey}')"
      show_describe
      show_redis
      section "the fence in the run's Pod (env $gj_ns/$active_job)"
      k -n "$gj_ns" get pods -l "job-name=$active_job" \
        -o jsonpath='{range .items[*]}{.metadata.name}: {range .spec.containers[*].env[*]}{.name}={.value} {end}{"\n"}{end}' || true
    fi
    # The first run that finished.
    if [[ -n $result && -n $run_job && $done_job != "$run_job" ]]; then
      js="$(job_state "$run_job")"
      if [[ $result != Succeeded || $js == Complete || $js == Missing ]]; then
        done_job="$run_job"
        show_describe
        show_redis
        fence="$(gj_field '{.status.lastRun.fence}')"
        if [[ $result == Succeeded && $js == Complete ]]; then
          if [[ $held_shown != "$run_job" ]]; then
            seen_holder="$cluster_name/$gj_ns/$run_job"
            warn "the run finished before its lease was seen held: the holder shown is derived from the Job name"
          fi
          printf '\n%s==> Run %s succeeded: holder=%s fence=%s (Job Complete, lease released)%s\n' \
            "$green" "$run_job" "$seen_holder" "$fence" "$reset"
          if ! $first_done; then
            first_done=true
            section "kubectl get guardedjobruns (the run-now request and what became of it)"
            k -n "$gj_ns" get guardedjobruns -o wide || true
            section "kubectl guardedjob history $gj_name (what happened, after the events have expired too)"
            KUBECONFIG="$state/kubeconfig" "$plugin_bin" -n "$gj_ns" history "$gj_name" || true
            [[ $oneshot != 1 ]] || return 0
            print_howto
          fi
        else
          warn "Run $run_job ended with result '$result' (Job: $js): $(gj_field '{.status.lastRun.message}')"
          # A run skipped or busy (say the scheduled one beside the triggered one) is no
          # failure of the demo; anything else is.
          if ! $first_done && [[ $oneshot == 1 && $result != Skipped && $result != Busy && $result != Succeeded ]]; then
            tail_logs 30
            return 1
          fi
        fi
      fi
    fi
    if ! $first_done && ((SECONDS > deadline)); then
      warn "no successful run within ${timeout}s"
      show_describe
      tail_logs 40
      [[ $oneshot != 1 ]] || return 1
      deadline=$((SECONDS + 1000000))
    fi
    sleep 1
  done
}

print_howto() {
  cat <<EOF

${bold}The demo keeps running; a run starts every minute.${reset} Explore it from another terminal:

  export KUBECONFIG=$state/kubeconfig PATH=$bin_dir:\$PATH   # kubectl at the API server's version
  kubectl get gj,jobs,pods
  kubectl describe gj $gj_name
  $plugin_bin history $gj_name      # the kubectl plugin: kubectl guardedjob history
  kubectl create -f $repo/hack/demo/run-now.yaml   # run now: a GuardedJobRun request
  kubectl get gjrun                 # each request's phase, result and Job
  redis-cli -p $redis_port GET $gj_ns:$gj_name
  tail -f $state/logs/manager.log

Ctrl-C here (or \`make demo-down\`) stops everything the demo started.

EOF
}

up() {
  local t0=$SECONDS rc
  command -v openssl >/dev/null || die "openssl is not on PATH"
  command -v setsid >/dev/null || die "setsid (util-linux) is not on PATH"
  prepare_state
  # From here on, every exit stops what was started.
  trap 'rc=$?; trap - EXIT; trap "" INT TERM; if ((rc != 0)); then warn "stopping the demo (exit $rc)"; fi; $stopped_elsewhere || down; exit $rc' EXIT
  trap 'echo; log "Interrupted: stopping the demo"; exit 130' INT
  trap 'exit 143' TERM

  log "Making sure redis-server is installed"
  "$repo/hack/ensure-redis.sh"
  log "Building the control plane (cached after the first time: minutes on a fresh machine)"
  bin_dir="$("$repo/hack/build-control-plane.sh" --demo)"
  # A prebuilt manager (make test builds one for every test) or one built here
  # with the release build's flags.
  manager_bin=${GUARDEDJOB_MANAGER_BIN:-$repo/bin/manager}
  if [[ -z ${GUARDEDJOB_MANAGER_BIN:-} ]]; then
    log "Building the manager (bin/manager)"
    (cd "$repo" && CGO_ENABLED=0 go build -trimpath -o bin/manager ./cmd/manager)
  fi
  plugin_bin=${GUARDEDJOB_PLUGIN_BIN:-$repo/bin/kubectl-guardedjob}
  if [[ -z ${GUARDEDJOB_PLUGIN_BIN:-} ]]; then
    log "Building the kubectl plugin (bin/kubectl-guardedjob)"
    (cd "$repo" && CGO_ENABLED=0 go build -trimpath -o bin/kubectl-guardedjob ./cmd/kubectl-guardedjob)
  fi

  make_certs
  start_cluster
  start_manager
  log "Everything is up after $((SECONDS - t0))s. To explore: export KUBECONFIG=$state/kubeconfig"

  log "Applying hack/demo/guardedjob.yaml and asking for a run now (hack/demo/run-now.yaml, a GuardedJobRun)"
  k apply -f "$repo/hack/demo/guardedjob.yaml"
  k create -f "$repo/hack/demo/run-now.yaml"

  rc=0
  watch_runs || rc=$?
  if ((rc == 0)); then
    log "DEMO_ONESHOT: the first run succeeded after $((SECONDS - t0))s; stopping"
  fi
  exit "$rc"
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *)
    echo "usage: $0 [up|down]" >&2
    exit 2
    ;;
esac
