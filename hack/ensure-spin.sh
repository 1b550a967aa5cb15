#!/usr/bin/env bash
# Installs the spin model checker from Debian when it is missing (make model-check).
# spin writes its verifier as C; the machine's gcc compiles it.
set -euo pipefail
if command -v spin >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "Installing spin with apt-get..." >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq spin gcc >/dev/null
