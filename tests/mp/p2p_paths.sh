#!/usr/bin/env bash
# p2p_paths.sh WEFTRUN MP_P2P_FAST NP - which way mp_p2p_fast's messages
# went, from the line each rank's engine logs at finalize ("point-to-point
# mailboxes: I messages received inline, R read across processes"): with
# cross-memory reads allowed (the default), every rank read its large
# messages (R > 0) and copied its small ones (I > 0); with WEFT_CMA=0, no
# rank read any (R = 0: they took the engine's path). Both runs must pass.
# Beyond the read limit ("(B beyond 256 KiB)"), a message is read only while
# its sender receives a large one too: mp_p2p_fast's ring shift of K_BIG = 3
# 1 MiB messages, each rank's receive posted first, is read (B = 3 on every
# rank), its one-way 1 MiB message from rank 0 to rank 1 is not (rank 1's
# B is still 3); with WEFT_CMA=0, B = 0.
. "$(dirname "$0")/joblib.sh"
for cma in 1 0; do
  WEFT_CMA=$cma WEFT_LOG_LEVEL=info WEFT_LOG_SUBSYS=engine "$WR" -np "$NP" --timeout 100 \
    --output-filename "$T/cma$cma" "$BIN" || fail "the job with WEFT_CMA=$cma failed (exit $?)"
  for ((r = 0; r < NP; r++)); do
    line=$(grep -o "point-to-point mailboxes: [0-9]* messages received inline, [0-9]* read across processes ([0-9]* beyond" \
      "$T/cma$cma/rank.$r/stderr")
    [ -n "$line" ] || { fail "WEFT_CMA=$cma: rank $r logged no mailbox line"; continue; }
    read -r inl rd big < <(echo "$line" | sed 's/[^0-9 ]//g' | awk '{print $1, $2, $3}')
    echo "WEFT_CMA=$cma rank $r: $inl inline, $rd read across processes, $big of them large"
    [ "$inl" -gt 0 ] || fail "WEFT_CMA=$cma: rank $r received nothing inline"
    if [ "$cma" = 1 ]; then
      [ "$rd" -gt 0 ] || fail "rank $r read nothing across processes: its large messages took another way"
      [ "$big" -eq 3 ] || fail "rank $r read $big messages beyond the read limit, expected the ring shift's 3"
    else
      [ "$rd" -eq 0 ] || fail "WEFT_CMA=0: rank $r still read $rd messages across processes"
      [ "$big" -eq 0 ] || fail "WEFT_CMA=0: rank $r still read $big large messages"
    fi
  done
done
finish p2p_paths
