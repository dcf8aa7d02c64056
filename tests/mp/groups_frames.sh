#!/usr/bin/env bash
# groups_frames.sh WEFTRUN MP_GROUPS NP - a keyed group resolves through the
# leader once per rank: mp_groups --frames resolves key 31 five times and key
# 32 twice on every rank; with the coordinator's debug log on, each rank must
# have sent exactly one GROUP_JOIN per key, and the leader (rank 0) received
# exactly NP per key.
. "$(dirname "$0")/frames_lib.sh"
for key in 31 32; do
  for ((r = 0; r < NP; r++)); do
    n=$(count "GROUP_JOIN (kind 0, key $key, size $NP) sent to the group leader" $r)
    [ "$n" -eq 1 ] || fail "rank $r sent $n JOINs for key $key, want 1"
  done
  n=$(count "group leader: GROUP_JOIN (kind 0, key $key, size $NP) from rank" 0)
  [ "$n" -eq "$NP" ] || fail "the leader received $n JOINs for key $key, want $NP"
done
finish groups_frames
