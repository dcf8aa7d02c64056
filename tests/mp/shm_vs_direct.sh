#!/bin/sh
# shm_vs_direct.sh WEFTRUN NP PROGRAM [ARGS...]: runs PROGRAM (mp_shm) under
# weftrun twice, the reductions forced to the staged shared-memory algorithms
# and then to direct (no staging regions at all), and compares the digests
# rank 0 wrote (--digest): every result must be identical, bit for bit. A
# forced algorithm that declines is a failure too (it would compare direct
# with itself), and mp_shm checks that every operation ran the forced one.
# The one-host fast path is off (WEFT_FAST=0): it would take the small
# operations in both runs, and compare itself with itself.
set -u
WR=$1
NP=$2
shift 2
D=$(mktemp -d "${TMPDIR:-/tmp}/shm_vs_direct.XXXXXX") || exit 1
trap 'rm -rf "$D"' EXIT INT TERM
WEFT_FAST=0 WEFT_ALGO_ALLREDUCE=shm WEFT_ALGO_REDUCESCATTER=shm "$WR" -np "$NP" --timeout 110 "$@" --digest "$D/shm" \
  >"$D/out.shm" 2>"$D/err.shm" || { cat "$D/out.shm" "$D/err.shm"; echo "FAIL: the shm run failed"; exit 1; }
if grep -q "declines" "$D/err.shm"; then
  cat "$D/err.shm"
  echo "FAIL: the shm algorithms declined"
  exit 1
fi
WEFT_FAST=0 WEFT_ALGO_ALLREDUCE=direct WEFT_ALGO_REDUCESCATTER=direct WEFT_SHM_STAGE_BYTES=0 "$WR" -np "$NP" --timeout 110 "$@" \
  --digest "$D/direct" >"$D/out.direct" 2>"$D/err.direct" ||
  { cat "$D/out.direct" "$D/err.direct"; echo "FAIL: the direct run failed"; exit 1; }
n=$(wc -l <"$D/shm")
[ "$n" -gt 0 ] || { echo "FAIL: no digests written"; exit 1; }
if ! cmp -s "$D/shm" "$D/direct"; then
  diff "$D/shm" "$D/direct" | head -20
  echo "FAIL: shm and direct results differ"
  exit 1
fi
echo "PASS: $n results identical under shm and direct"
