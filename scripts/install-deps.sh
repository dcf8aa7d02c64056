#!/usr/bin/env bash
# install-deps.sh - installs the Debian packages weft needs to build and
# test, if any is missing. Uses sudo when not root. Extra packages may be
# named as arguments (e.g. clang for the fuzzers).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libssl-dev iproute2 procps "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
echo "install-deps: installing ${missing[*]}" >&2
$sudo apt-get update -qq || true
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
