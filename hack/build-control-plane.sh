#!/usr/bin/env bash
# Builds the Kubernetes control plane binaries from Go modules (no release downloads
# are reachable here) into a cache directory outside the checkout, so that CI runs on
# the same machine reuse them.
#
# Usage: hack/build-control-plane.sh [--demo | --kubectl | --dir | --min | --min-dir]
#   default:   kube-apiserver, etcd (what envtest needs) and kubectl
#   --demo:    also kube-controller-manager, kube-scheduler and kwok
#   --kubectl: kubectl only
#   --dir:     build nothing, only print the output directory
#   --min:     kube-apiserver and etcd of the oldest Kubernetes the operator supports
#              (hack/tools/k8s-min, hack/tools/etcd-min; make test-min-k8s)
# CONTROL_PLANE_ONLY="etcd" builds only the named binaries of the mode's set (make
# prepare builds the k8s wrapper's ones and the others side by side: they share no
# packages, so neither waits for the other's downloads and links).
#   --min-dir: build nothing, only print --min's output directory
#
# kubectl is built from the same k8s.io/kubernetes version as the API server, so the
# tests, the demo and the Makefile never depend on the machine's kubectl.
#
# Progress goes to stderr; the only line on stdout is the absolute output directory,
# so that `KUBEBUILDER_ASSETS=$(hack/build-control-plane.sh)` works.
# The output directory is ${GUARDEDJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/guardedjob}/k8s-<version>.
# Versions come from the wrapper modules under hack/tools/{k8s,etcd} (with --min,
# hack/tools/{k8s-min,etcd-min}).
set -euo pipefail

usage() {
  echo "usage: $0 [--demo | --kubectl | --dir | --min | --min-dir]" >&2
  exit 2
}

mode=test
case $# in
  0) ;;
  1)
    case $1 in
      --demo) mode=demo ;;
      --kubectl) mode=kubectl ;;
      --dir) mode=dir ;;
      --min) mode=min ;;
      --min-dir) mode=min-dir ;;
      *) usage ;;
    esac
    ;;
  *) usage ;;
esac

log() { echo "build-control-plane: $*" >&2; }

tools_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/tools"

# A go.work above the checkout would pull the wrappers into a workspace and change
# their dependency graphs.
export GOWORK=off
export CGO_ENABLED=0

# module_version DIR MODULE prints the version of MODULE that the wrapper in DIR
# requires.
module_version() {
  go list -C "$1" -m -f '{{.Version}}' "$2"
}

k8s_wrapper=k8s etcd_wrapper=etcd
if [[ $mode == min || $mode == min-dir ]]; then
  k8s_wrapper=k8s-min etcd_wrapper=etcd-min
  # An old Kubernetes names an old go line; build it with this Go, never a
  # downloaded toolchain.
  export GOTOOLCHAIN=local
fi
k8s_version="$(module_version "$tools_dir/$k8s_wrapper" k8s.io/kubernetes)"
cache_root="${GUARDEDJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/guardedjob}"
mkdir -p "$cache_root/k8s-$k8s_version"
out_dir="$(cd "$cache_root/k8s-$k8s_version" && pwd -P)"
if [[ $mode == dir || $mode == min-dir ]]; then
  echo "$out_dir"
  exit 0
fi

tmp=""
trap '[[ -z $tmp ]] || rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# built BINARY PACKAGE MODULE VERSION succeeds if BINARY exists and was built from
# PACKAGE in MODULE at VERSION. The module shows up as "mod" when it holds the main
# package (even when built from a wrapper) and as "dep" otherwise.
built() {
  [[ -x $1 ]] || return 1
  go version -m "$1" 2>/dev/null | awk -v p="$2" -v m="$3" -v v="$4" '
    $1 == "path" && $2 == p { path = 1 }
    ($1 == "mod" || $1 == "dep") && $2 == m && $3 == v { mod = 1 }
    END { exit !(path && mod) }'
}

# build NAME WRAPPER MODULE PACKAGE [go build flags...] builds PACKAGE from the
# wrapper module hack/tools/WRAPPER into $out_dir/NAME, unless a binary built from
# the same MODULE version is already there.
build() {
  local name="$1" wrapper="$2" module="$3" pkg="$4"
  shift 4
  local dir="$tools_dir/$wrapper" dest="$out_dir/$name" version start
  if [[ -n ${CONTROL_PLANE_ONLY:-} && " $CONTROL_PLANE_ONLY " != *" $name "* ]]; then
    return
  fi
  version="$(module_version "$dir" "$module")"
  if built "$dest" "$pkg" "$module" "$version"; then
    log "$name: $module $version already built"
    return
  fi
  log "$name: building $pkg from $module $version (minutes on a cold build cache)"
  start=$SECONDS
  # Built under a temporary name and renamed, so an interrupted build never leaves a
  # binary that looks complete.
  tmp="$out_dir/.$name.tmp.$$"
  go build -C "$dir" -trimpath -o "$tmp" "$@" "$pkg"
  mv -f "$tmp" "$dest"
  tmp=""
  log "$name: done in $((SECONDS - start))s"
}

# build_set WRAPPER MODULE LDFLAGS NAME=PACKAGE... builds the named binaries of one
# wrapper module that are missing, in one go build: the go command then schedules
# every package of all of them at once, so that one binary's link or a large
# package's compile never leaves the other core idle (built one by one, the
# control plane's cold build kept the second core idle for minutes).
build_set() {
  local wrapper="$1" module="$2" ldflags="$3"
  shift 3
  local dir="$tools_dir/$wrapper" version start names=() pkgs=() entry name pkg
  version="$(module_version "$dir" "$module")"
  for entry in "$@"; do
    name="${entry%%=*}" pkg="${entry#*=}"
    if [[ -n ${CONTROL_PLANE_ONLY:-} && " $CONTROL_PLANE_ONLY " != *" $name "* ]]; then
      continue
    fi
    if built "$out_dir/$name" "$pkg" "$module" "$version"; then
      log "$name: $module $version already built"
      continue
    fi
    names+=("$name") pkgs+=("$pkg")
  done
  ((${#names[@]} > 0)) || return 0
  log "${names[*]}: building from $module $version (minutes on a cold build cache)"
  start=$SECONDS
  # Built into a temporary directory and renamed, so an interrupted build never
  # leaves a binary that looks complete.
  tmp="$(mktemp -d "$out_dir/.build.XXXXXX")"
  go build -C "$dir" -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}"
  for i in "${!names[@]}"; do
    mv -f "$tmp/${pkgs[$i]##*/}" "$out_dir/${names[$i]}"
  done
  rm -rf "$tmp"
  tmp=""
  log "${names[*]}: done in $((SECONDS - start))s"
}

# Stripped like release builds (about 30% smaller; panics still have stack traces).
strip="-s -w"
# Release builds stamp the version into component-base; without it the binaries
# report v0.0.0-master, which also shows up in the API server's /version.
k8s_minor="${k8s_version#v*.}"
k8s_minor="${k8s_minor%%.*}"
k8s_major="${k8s_version#v}"
k8s_major="${k8s_major%%.*}"
k8s_ldflags="$strip -X k8s.io/component-base/version.gitVersion=$k8s_version"
k8s_ldflags+=" -X k8s.io/component-base/version.gitMajor=$k8s_major"
k8s_ldflags+=" -X k8s.io/component-base/version.gitMinor=$k8s_minor"
k8s_ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"

if [[ $mode == min ]]; then
  build kube-apiserver "$k8s_wrapper" k8s.io/kubernetes k8s.io/kubernetes/cmd/kube-apiserver -ldflags "$k8s_ldflags"
  build etcd "$etcd_wrapper" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3 -ldflags "$strip"
  echo "$out_dir"
  exit 0
fi
k8s_set=(kubectl=k8s.io/kubernetes/cmd/kubectl)
case $mode in
  test) k8s_set+=(kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver) ;;
  demo)
    k8s_set+=(kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver
      kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager
      kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler)
    ;;
esac
build_set k8s k8s.io/kubernetes "$k8s_ldflags" "${k8s_set[@]}"
if [[ $mode == kubectl ]]; then
  echo "$out_dir"
  exit 0
fi
build etcd etcd go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3 -ldflags "$strip"
if [[ $mode == demo ]]; then
  # kwok is built against the API server's k8s.io modules, not the ones it was
  # released with, so that it compiles none of them a second time.
  build kwok k8s sigs.k8s.io/kwok sigs.k8s.io/kwok/cmd/kwok -ldflags "$strip"
fi

echo "$out_dir"
