#!/usr/bin/env bash
# steps_frames.sh WEFTRUN MP_STEPS NP - a step sequence is fetched from the
# group leader once per member: mp_steps --frames calls weft_step_next of
# key 99 nine times and retires once on every rank; with the coordinator's
# debug log on, each rank but the leader (rank 0) must have sent exactly one
# STEP_REQ, the leader none, and the leader must have received NP-1.
set -u
WR=$1
BIN=$2
NP=$3
T=$(mktemp -d "${TMPDIR:-/tmp}/weft_sframes.XXXXXX")
trap 'rm -rf "$T"' EXIT
FAILS=0
fail() {
  echo "FAIL: $*"
  FAILS=$((FAILS + 1))
}
WEFT_LOG_LEVEL=debug WEFT_LOG_SUBSYS=coord "$WR" -np "$NP" --timeout 100 --output-filename "$T/out" "$BIN" --frames ||
  fail "the job failed (exit $?)"
for ((r = 0; r < NP; r++)); do
  n=$(grep -c "STEP_REQ (group 0, graph key 99) sent to the group leader, rank 0" "$T/out/rank.$r/stderr")
  want=1
  [ "$r" -eq 0 ] && want=0
  [ "$n" -eq "$want" ] || fail "rank $r sent $n STEP_REQs for key 99, want $want"
done
n=$(grep -c "group leader: STEP_REQ (group 0, graph key 99) from rank" "$T/out/rank.0/stderr")
[ "$n" -eq $((NP - 1)) ] || fail "the leader received $n STEP_REQs for key 99, want $((NP - 1))"
[ "$FAILS" -eq 0 ] && echo "PASS: steps_frames np$NP"
exit $((FAILS > 0))
