#!/usr/bin/env bash
# Fails when a module that both the operator and the control plane's wrapper module
# (hack/tools/k8s) build packages from is at different versions in the two: each
# package they share is then compiled twice, minutes on a fresh 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOWORK=off

# deps DIR [-test] PACKAGES... prints "module version" for every module DIR's build of
# PACKAGES (and of their tests, with -test) compiles packages from.
deps() {
  local dir=$1 test=$2
  shift 2
  go list -C "$dir" -deps ${test:+"$test"} -f '{{with .Module}}{{if not .Main}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}{{end}}' "$@" | sort -u
}

ours="$(deps . -test ./...)"
theirs="$(deps hack/tools/k8s "" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl helm.sh/helm/v3/cmd/helm sigs.k8s.io/controller-tools/cmd/controller-gen)"
differ="$(join <(echo "$ours") <(echo "$theirs") | awk '$2 != $3 { printf "  %s: %s here, %s in hack/tools/k8s\n", $1, $2, $3 }')"
if [[ -n $differ ]]; then
  echo "Modules the operator and hack/tools/k8s both build are at different versions; raise the lower one (go get MODULE@VERSION in that module, then go mod tidy):" >&2
  echo "$differ" >&2
  exit 1
fi
