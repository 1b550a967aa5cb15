#!/usr/bin/env bash
# Renders config/default with the manager image set to IMAGE through kustomize's
# `images:` transformer, on stdout. kustomize's `edit` command is not needed: the
# overlay is a temporary kustomization next to nothing in the checkout.
#
# Usage: hack/render-manifests.sh IMAGE   (KUBECTL names the kubectl to run)
#   IMAGE is REPOSITORY[:TAG] or REPOSITORY@sha256:DIGEST.
set -euo pipefail

if [[ $# -ne 1 || -z $1 ]]; then
  echo "usage: $0 IMAGE" >&2
  exit 2
fi
image=$1
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"

# Split the reference: a digest after '@', else a tag after the last ':' that follows
# the last '/' (a registry port such as registry:5000/x is not a tag).
# Without either, the tag is latest, as docker would read it.
name=$image tag=latest digest=""
if [[ $image == *@* ]]; then
  name=${image%%@*} tag="" digest=${image#*@}
elif [[ ${image##*/} == *:* ]]; then
  name=${image%:*} tag=${image##*:}
fi

overlay="$(mktemp -d)"
trap 'rm -rf "$overlay"' EXIT
# kustomize only accepts relative paths for resources.
base="$(realpath --relative-to="$overlay" "$root/config/default")"
{
  echo "resources:"
  echo "- $base"
  echo "images:"
  echo "- name: guardedjob-manager"
  echo "  newName: $name"
  if [[ -n $tag ]]; then echo "  newTag: \"$tag\""; fi
  if [[ -n $digest ]]; then echo "  digest: $digest"; fi
} >"$overlay/kustomization.yaml"
"${KUBECTL:-kubectl}" kustomize "$overlay"
