#!/usr/bin/env bash
# steps_frames.sh WEFTRUN MP_STEPS NP - a step sequence is fetched from the
# group leader once per member: mp_steps --frames calls weft_step_next of
# key 99 nine times and retires once on every rank; with the coordinator's
# debug log on, each rank but the leader (rank 0) must have sent exactly one
# STEP_REQ, the leader none, and the leader must have received NP-1.
. "$(dirname "$0")/frames_lib.sh"
for ((r = 0; r < NP; r++)); do
  n=$(count "STEP_REQ (group 0, graph key 99) sent to the group leader, rank 0" $r)
  want=1
  [ "$r" -eq 0 ] && want=0
  [ "$n" -eq "$want" ] || fail "rank $r sent $n STEP_REQs for key 99, want $want"
done
n=$(count "group leader: STEP_REQ (group 0, graph key 99) from rank" 0)
[ "$n" -eq $((NP - 1)) ] || fail "the leader received $n STEP_REQs for key 99, want $((NP - 1))"
finish steps_frames
