#!/usr/bin/env bash
# Installs redis-server from Debian when it is missing. The tests start their own
# servers on loopback; the package's service is never used.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "Installing redis-server with apt-get..." >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
# The package may start a system service on port 6379; the project never uses it.
if command -v systemctl >/dev/null 2>&1; then $sudo systemctl disable --now redis-server >/dev/null 2>&1 || true; fi
