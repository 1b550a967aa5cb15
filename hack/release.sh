#!/usr/bin/env bash
# Writes the files of release VERSION into DIST (default dist/):
#
#   install.yaml                      config/default with the image IMAGE_REPO:VERSION
#   crds.yaml                         the CRDs alone (for GitOps, or Helm with crds.enabled=false)
#   guardedjob-VERSION.tgz            the Helm chart, version and appVersion VERSION,
#                                     image.repository IMAGE_REPO
#   kubectl-guardedjob_vVERSION_OS_ARCH.tar.gz (.zip for Windows)
#                                     the kubectl plugin and LICENSE, for linux and darwin
#                                     on amd64 and arm64, and windows on amd64
#   krew-guardedjob.yaml              a krew plugin manifest (the krew index's
#                                     plugins/guardedjob.yaml): each archive's URI under
#                                     RELEASE_URL and its sha256
#   guardedjob-manager-VERSION.oci.tar
#                                     the manager image for IMAGE_PLATFORMS: a tar of an
#                                     OCI image layout (hack/ociimage), tag VERSION
#   guardedjob-manager-VERSION.digest its image index's digest (sha256:...), to pin
#   guardedjob-manager-VERSION.cdx.json
#                                     its SBOM: the Go modules in its binaries (CycloneDX)
#   checksums.txt                     sha256 of every file above (sha256sum -c checks it)
#
# Every file is at the top of DIST, as a release page lists its assets, so that
# `sha256sum -c checksums.txt` works on the downloaded files.
#
# Usage: hack/release.sh VERSION        (make release VERSION=X.Y.Z runs it)
# Environment: IMAGE_REPO (where the image is pushed, registry host first; the
# installer and the chart name IMAGE_REPO:VERSION), ALLOW_LOCAL_IMAGE=1 (accept an
# IMAGE_REPO without a registry host), RELEASE_URL (default the GitHub release
# download URL of vVERSION), DIST, HELM and KUBECTL (default from PATH),
# SOURCE_DATE_EPOCH (default the commit's time: archive and image timestamps),
# RELEASE_PLATFORMS (default every platform krew lists: "linux/amd64 linux/arm64
# darwin/amd64 darwin/arm64 windows/amd64") and IMAGE_PLATFORMS (default
# "linux/amd64 linux/arm64"); a test may build fewer, since each one compiles the
# dependencies again.
#
# The image is built, not pushed: push it with make image-push
# IMAGE_SOURCE=dist/guardedjob-manager-X.Y.Z.oci.tar VERSION=X.Y.Z IMAGE_REPO=...
# (docs/image.md), before anyone applies the installer.
#
# Needs bash, git, GNU tar, gzip, zip, sha256sum and Go.
#
# A release X.Y.Z (not a pre-release) needs the tree at X.Y.Z: the alerts in
# config/prometheus link the runbooks of vX.Y.Z (the script says how to set them).
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 VERSION (X.Y.Z)" >&2
  exit 2
fi
version=$1
if [[ ! $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "VERSION must be a semantic version without a leading v, such as 1.2.3 or 1.2.3-rc.1; got '$version'" >&2
  exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"

# kustomize users apply config/ at the release's tag, so its alerts must link to this
# release's runbooks (the chart's links follow its appVersion, which helm package sets
# below). A pre-release may come from any tree.
if [[ $version != *-* ]]; then
  rules="$root/config/prometheus/guardedjob.rules.yaml"
  if grep 'runbook_url:' "$rules" | grep -qv "/blob/v$version/docs/"; then
    echo "config/prometheus links the runbooks of another release than $version; before releasing, run" >&2
    echo "  sed -i 's|/blob/v[^/]*/docs/|/blob/v$version/docs/|' config/prometheus/guardedjob.rules.yaml config/prometheus/alerts.yaml charts/guardedjob/README.md && make manifests" >&2
    echo "and set appVersion: \"$version\" in charts/guardedjob/Chart.yaml (make test-ops checks that the two agree)" >&2
    exit 1
  fi
fi

# The installer and the chart make every node pull IMAGE_REPO:VERSION. A name
# without a registry host first (guardedjob-manager, team/guardedjob-manager) is
# looked for on Docker Hub, where this image is not: refuse it unless asked.
image_repo=${IMAGE_REPO:-guardedjob-manager}
registry=${image_repo%%/*}
if [[ $image_repo != */* || ($registry != *.* && $registry != *:* && $registry != localhost) ]] && [[ ${ALLOW_LOCAL_IMAGE:-} != 1 ]]; then
  echo "IMAGE_REPO=$image_repo names no registry: the installer and the chart would make nodes pull $image_repo:$version from Docker Hub." >&2
  echo "Set IMAGE_REPO to the repository you push the image to, registry host first:" >&2
  echo "  make release VERSION=$version IMAGE_REPO=registry.example.com/team/guardedjob-manager   (Docker Hub: docker.io/USER/guardedjob-manager)" >&2
  echo "or, for nodes that have the image loaded by hand (kind load, ctr import), ALLOW_LOCAL_IMAGE=1." >&2
  exit 1
fi
dist=${DIST:-$root/dist}
mkdir -p "$dist"
dist="$(cd "$dist" && pwd -P)"
release_url=${RELEASE_URL:-https://github.com/guardedjob/guardedjob/releases/download/v$version}
release_url=${release_url%/}
helm=${HELM:-helm}

commit="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
if [[ $commit != unknown && -n "$(git -C "$root" status --porcelain 2>/dev/null)" ]]; then
  commit+="-dirty"
fi
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Only the files this script writes are replaced; anything else in DIST stays.
rm -f "$dist/install.yaml" "$dist/crds.yaml" "$dist/checksums.txt" "$dist/krew-guardedjob.yaml" \
  "$dist"/guardedjob-*.tgz "$dist"/kubectl-guardedjob_* "$dist"/guardedjob-manager-*

echo "Release $version (commit $commit) into $dist" >&2

"$root/hack/render-manifests.sh" "$image_repo:$version" >"$dist/install.yaml"

for crd in "$root"/config/crd/bases/*.yaml; do
  cat "$crd"
done >"$dist/crds.yaml"

# The chart, with the release's image repository as its default.
cp -R "$root/charts/guardedjob" "$work/guardedjob"
values="$work/guardedjob/values.yaml"
if [[ "$(grep -c '^  repository: ' "$values")" != 1 ]]; then
  echo "charts/guardedjob/values.yaml: want exactly one '  repository:' line (image.repository)" >&2
  exit 1
fi
sed -i "s|^  repository: .*|  repository: $image_repo|" "$values"
"$helm" package "$work/guardedjob" --version "$version" --app-version "$version" -d "$dist" >&2

# The kubectl plugin, static and without local paths, for every platform krew lists.
read -r -a platforms <<<"${RELEASE_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64}"
for platform in "${platforms[@]}"; do
  os=${platform%/*} arch=${platform#*/}
  bin=kubectl-guardedjob
  [[ $os == windows ]] && bin+=.exe
  dir="$work/plugin-$os-$arch"
  mkdir -p "$dir"
  echo "Building $bin for $os/$arch" >&2
  (cd "$root" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath \
    -ldflags "-s -w -X main.version=$version -X main.commit=$commit" -o "$dir/$bin" ./cmd/kubectl-guardedjob)
  cp "$root/LICENSE" "$dir/LICENSE"
  touch -d "@$epoch" "$dir/$bin" "$dir/LICENSE"
  name="kubectl-guardedjob_v${version}_${os}_${arch}"
  if [[ $os == windows ]]; then
    (cd "$dir" && zip -q -X "$dist/$name.zip" "$bin" LICENSE)
  else
    tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner -C "$dir" -cf - "$bin" LICENSE |
      gzip -n >"$dist/$name.tar.gz"
  fi
done

# The krew manifest (kubectl krew install --manifest=krew-guardedjob.yaml).
{
  cat <<EOF
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: guardedjob
spec:
  version: v$version
  homepage: https://github.com/guardedjob/guardedjob
  shortDescription: Run, suspend and inspect GuardedJobs and their Redis locks
  description: |
    Operates GuardedJobs, scheduled Jobs that hold a Redis lease while they run:
    trigger a run now, suspend and resume, and read what the lock store says right
    now (holder, expiry, fencing number, done-marker); list every lock in use and
    remove a stale one after confirmation.
  caveats: |
    The plugin needs access to GuardedJobs, not to Redis. run, suspend and resume
    patch the GuardedJob; status, locks and unlock ask the manager to read the lock
    store through an annotation on it, which also needs patch on guardedjobs in its
    namespace (the edit role); with view only they show the last answer recorded.
    No store credentials are involved. Admins who hold them can have status, locks
    and unlock read the store directly instead, with --redis-secret NAMESPACE/NAME
    or GUARDEDJOB_REDIS_URL (docs/kubectl-plugin.md, direct store access).
  platforms:
EOF
  for platform in "${platforms[@]}"; do
    os=${platform%/*} arch=${platform#*/}
    bin=kubectl-guardedjob ext=tar.gz
    if [[ $os == windows ]]; then bin+=.exe ext=zip; fi
    archive="kubectl-guardedjob_v${version}_${os}_${arch}.$ext"
    sum="$(sha256sum "$dist/$archive" | cut -d' ' -f1)"
    cat <<EOF
  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: $release_url/$archive
    sha256: $sum
    bin: $bin
EOF
  done
} >"$dist/krew-guardedjob.yaml"

# The manager image, from scratch (hack/ociimage), with the binaries the Dockerfile
# builds, stamped like the plugin.
read -r -a image_platforms <<<"${IMAGE_PLATFORMS:-linux/amd64 linux/arm64}"
image_args=()
for platform in "${image_platforms[@]}"; do
  os=${platform%%/*} arch=${platform#*/}
  arch=${arch%%/*}
  dir="$work/image-$os-$arch"
  for cmd in manager guard; do
    echo "Building $cmd for $platform" >&2
    (cd "$root" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath \
      -ldflags "-s -w -X main.version=$version -X main.commit=$commit" -o "$dir/$cmd" ./cmd/$cmd)
  done
  image_args+=("$platform=$dir")
done
go build -C "$root/hack/ociimage" -o "$work/ociimage" .
image="guardedjob-manager-$version"
"$work/ociimage" build -o "$work/image" -archive "$dist/$image.oci.tar" -sbom "$dist/$image.cdx.json" \
  -version "$version" -revision "$commit" -created "$epoch" "${image_args[@]}" >"$dist/$image.digest"
echo "Image $image_repo:$version: $(cat "$dist/$image.digest")" >&2

(cd "$dist" && sha256sum install.yaml crds.yaml "guardedjob-$version.tgz" kubectl-guardedjob_v"$version"_* krew-guardedjob.yaml \
  "$image.oci.tar" "$image.digest" "$image.cdx.json") >"$dist/checksums.txt"

echo "Wrote:" >&2
(cd "$dist" && cut -d' ' -f3 checksums.txt && echo checksums.txt) | sed 's/^/  /' >&2
