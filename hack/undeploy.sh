#!/usr/bin/env bash
# Removes GuardedJob from the cluster in your kubeconfig, in the order that lets
# running work end cleanly:
#   1. delete every GuardedJob; the manager stops each run (onDelete: Stop) or waits
#      for it to finish (onDelete: Wait), releases its lease and drops the finalizer;
#   2. wait until no GuardedJob is left, up to UNDEPLOY_TIMEOUT (default 10m);
#   3. only then remove the manager, its RBAC and namespace, and the CRD.
# Removing the manager first would leave finalizers nobody removes and leases nobody
# releases. If the wait runs out, nothing else is removed: the script lists what is
# still running and exits 1.
#
# Usage: UNDEPLOY_TIMEOUT=10m hack/undeploy.sh   (s, m or h; a bare number is seconds)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
crd=guardedjobs.batch.guardedjob.dev
timeout=${UNDEPLOY_TIMEOUT:-10m}
kubectl=${KUBECTL:-kubectl}

case $timeout in
  *h) seconds=$(( ${timeout%h} * 3600 )) ;;
  *m) seconds=$(( ${timeout%m} * 60 )) ;;
  *s) seconds=${timeout%s} ;;
  *[!0-9]* | "") echo "UNDEPLOY_TIMEOUT=$timeout: want a duration such as 90s, 10m or 1h" >&2; exit 2 ;;
  *) seconds=$timeout ;;
esac

log() { echo "undeploy: $*" >&2; }

# The still-running view: every GuardedJob left, its onDelete policy and the Jobs of
# its active runs. It fails when the API server does not answer: that is no answer,
# never "none left".
remaining() {
  "$kubectl" get guardedjobs --all-namespaces --ignore-not-found "$@" \
    -o custom-columns='NAMESPACE:.metadata.namespace,NAME:.metadata.name,ONDELETE:.spec.onDelete,ACTIVE JOBS:.status.active[*].jobName'
}

# Whether the CRD is installed: a lookup that fails is no answer either, never "not
# installed" (which would remove the manager at once).
if ! installed="$("$kubectl" get crd "$crd" --ignore-not-found -o name)"; then
  log "the API server did not answer whether $crd exists; nothing is removed: run it again"
  exit 1
fi
if [[ -n $installed ]]; then
  log "deleting every GuardedJob; their runs stop or finish before the manager goes"
  "$kubectl" delete guardedjobs --all --all-namespaces --wait=false >/dev/null
  deadline=$(( SECONDS + seconds ))
  while :; do
    if left="$(remaining --no-headers 2>/dev/null)" && [[ -z $left ]]; then
      break
    fi
    if (( SECONDS >= deadline )); then
      log "gave up after $timeout; still running (the manager and the CRD are left in place):"
      remaining >&2 || log "(the API server did not answer the list of GuardedJobs)"
      log "wait longer (UNDEPLOY_TIMEOUT=30m make undeploy), or stop those Jobs yourself and run it again"
      exit 1
    fi
    sleep 2
  done
  log "no GuardedJob left"
fi

# The namespace finishes terminating in the background; nothing below depends on it.
log "removing the manager, its RBAC and namespace"
"$kubectl" delete --ignore-not-found --wait=false -k "$root/config/manager"
"$kubectl" delete --ignore-not-found --wait=false -k "$root/config/rbac"
log "removing the CRD"
"$kubectl" delete --ignore-not-found -k "$root/config/crd"
log "done"
