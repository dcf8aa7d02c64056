#!/usr/bin/env bash
# install-deps.sh [--python] [extra packages...] - installs the Debian
# packages weft needs to build and test, if any is missing (sudo when not
# root). --python adds what the Python/PyTorch binding, its tests and the
# demo need (Debian's python3-torch, numpy, pytest, scikit-learn, cloudpickle). Open MPI
# (libopenmpi-dev, openmpi-bin) is always installed: weft builds its MPI
# support (-DWEFT_WITH_MPI=AUTO) and MPI test suite when it finds it;
# libyaml-dev gives weftrun --config-file (horovodrun's YAML).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libssl-dev libyaml-dev iproute2 procps libopenmpi-dev openmpi-bin)
for a in "$@"; do
  case "$a" in
    --python) pkgs+=(python3 python3-dev python3-numpy python3-torch python3-pytest python3-sklearn python3-cloudpickle) ;;
    *) pkgs+=("$a") ;;
  esac
done
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
