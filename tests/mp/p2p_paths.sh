#!/usr/bin/env bash
# p2p_paths.sh WEFTRUN MP_P2P_FAST NP - which way mp_p2p_fast's messages
# went, from the line each rank's engine logs at finalize ("point-to-point
# mailboxes: I messages received inline, R read across processes"): with
# cross-memory reads allowed (the default), every rank read its large
# messages (R > 0) and copied its small ones (I > 0); with WEFT_CMA=0, no
# rank read any (R = 0: they took the engine's path). Both runs must pass.
. "$(dirname "$0")/joblib.sh"
for cma in 1 0; do
  WEFT_CMA=$cma WEFT_LOG_LEVEL=info WEFT_LOG_SUBSYS=engine "$WR" -np "$NP" --timeout 100 \
    --output-filename "$T/cma$cma" "$BIN" || fail "the job with WEFT_CMA=$cma failed (exit $?)"
  for ((r = 0; r < NP; r++)); do
    line=$(grep -o "point-to-point mailboxes: [0-9]* messages received inline, [0-9]* read across processes" \
      "$T/cma$cma/rank.$r/stderr")
    [ -n "$line" ] || { fail "WEFT_CMA=$cma: rank $r logged no mailbox line"; continue; }
    read -r inl rd < <(echo "$line" | sed 's/[^0-9 ]//g' | awk '{print $1, $2}')
    echo "WEFT_CMA=$cma rank $r: $inl inline, $rd read across processes"
    [ "$inl" -gt 0 ] || fail "WEFT_CMA=$cma: rank $r received nothing inline"
    if [ "$cma" = 1 ]; then
      [ "$rd" -gt 0 ] || fail "rank $r read nothing across processes: its large messages took another way"
    else
      [ "$rd" -eq 0 ] || fail "WEFT_CMA=0: rank $r still read $rd messages across processes"
    fi
  done
done
finish p2p_paths
