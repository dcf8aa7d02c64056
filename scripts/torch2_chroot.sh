#!/usr/bin/env bash
# torch2_chroot.sh - weft's Python suite on a torch 2.x without a GPU machine:
# Debian 13 (trixie) packages torch 2.x (python3-torch), so a trixie chroot
# built with debootstrap from Debian's own archive gives one. The script
# makes the chroot (once; about 2 GB), copies this working tree's tracked
# files into it, builds weft there (GCC 14, Python 3.13, -DWEFT_WERROR=ON,
# without MPI) and runs the Python tests (ctest -R '^py\.').
#
#   scripts/torch2_chroot.sh [DIR]     DIR: the chroot (default /var/tmp/weft-trixie)
#
# Needs root (debootstrap, chroot, bind mounts) and the network to Debian's
# archive. Exit status: ctest's. Environment: WEFT_TORCH2_CTEST_ARGS, more
# ctest arguments (default: -j2 --timeout 600).
set -euo pipefail
R=${1:-/var/tmp/weft-trixie}
src=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "torch2_chroot.sh: needs root (debootstrap, chroot, bind mounts)" >&2; exit 2; }
if ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap
fi
if [ ! -x "$R/usr/bin/python3" ] || ! chroot "$R" /usr/bin/python3 -c 'import torch, sklearn' >/dev/null 2>&1; then
  echo "=== debootstrap trixie into $R"
  debootstrap --variant=minbase \
    --include=python3-torch,python3-numpy,python3-pytest,python3-cloudpickle,python3-sklearn,python3-dev,gcc,make,cmake,pkg-config,libssl-dev,libyaml-dev,procps,iproute2,util-linux \
    trixie "$R"
fi
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[$i]}" 2>/dev/null || umount -l "${mounted[$i]}"; done
}
trap cleanup EXIT
for d in proc sys dev dev/shm dev/pts; do
  if ! mountpoint -q "$R/$d"; then
    mount --bind "/$d" "$R/$d"
    mounted+=("$R/$d")
  fi
done
echo "=== copying the working tree's tracked files to $R/root/weft"
rm -rf "$R/root/weft"
mkdir -p "$R/root/weft"
git -C "$src" ls-files -z | (cd "$src" && tar --null -T - -cf -) | tar -xf - -C "$R/root/weft"
# shellcheck disable=SC2016 # expanded in the chroot
chroot "$R" /bin/bash -c '
  set -e
  cd /root/weft
  python3 -c "import sys, torch; print(\"=== torch\", torch.__version__, \"on Python\", sys.version.split()[0])" 2>&1 |
    grep "^==="
  cmake -S . -B build -DWEFT_WITH_MPI=OFF -DWEFT_WERROR=ON -DWEFT_TESTS_NO_SKIP=ON >build.cfg.log
  cmake --build build -j"$(nproc)" >build.log 2>&1 || { tail -30 build.log; exit 1; }
  echo "=== built with $(gcc --version | head -1)"
  ctest --test-dir build -R "^py\\." $0' "${WEFT_TORCH2_CTEST_ARGS:--j2 --timeout 600}"
