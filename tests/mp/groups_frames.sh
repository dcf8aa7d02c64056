#!/usr/bin/env bash
# groups_frames.sh WEFTRUN MP_GROUPS NP - a keyed group resolves through the
# leader once per rank: mp_groups --frames resolves key 31 five times and key
# 32 twice on every rank; with the coordinator's debug log on, each rank must
# have sent exactly one GROUP_JOIN per key, and the leader (rank 0) received
# exactly NP per key.
set -u
WR=$1
BIN=$2
NP=$3
T=$(mktemp -d "${TMPDIR:-/tmp}/weft_gframes.XXXXXX")
trap 'rm -rf "$T"' EXIT
FAILS=0
fail() {
  echo "FAIL: $*"
  FAILS=$((FAILS + 1))
}
WEFT_LOG_LEVEL=debug WEFT_LOG_SUBSYS=coord "$WR" -np "$NP" --timeout 100 --output-filename "$T/out" "$BIN" --frames ||
  fail "the job failed (exit $?)"
for key in 31 32; do
  for ((r = 0; r < NP; r++)); do
    n=$(grep -c "GROUP_JOIN (kind 0, key $key, size $NP) sent to the group leader" "$T/out/rank.$r/stderr")
    [ "$n" -eq 1 ] || fail "rank $r sent $n JOINs for key $key, want 1"
  done
  n=$(grep -c "group leader: GROUP_JOIN (kind 0, key $key, size $NP) from rank" "$T/out/rank.0/stderr")
  [ "$n" -eq "$NP" ] || fail "the leader received $n JOINs for key $key, want $NP"
done
[ "$FAILS" -eq 0 ] && echo "PASS: groups_frames np$NP"
exit $((FAILS > 0))
