#!/usr/bin/env bash
# remote_paths.sh WEFTRUN MP_REMOTE_ORDER NP - which way mp_remote_order's
# remote frames went between the ranks of this host, from the line each
# rank's engine logs at finalize ("remote mailboxes: A frames received
# through the mailboxes, B from this host's ranks through the engine; C
# sent through the mailboxes, D to this host's ranks through the engine"),
# and that their order held across the two ways:
#  - default: every rank received frames both ways (A > 0: the remote
#    rings; B > 0: its caller's frames over a slot, on the engine's path);
#  - WEFT_REMOTE_MAILBOX=0 on every rank (the fallback): nothing went
#    through the rings (A = C = 0), everything through the engine.
# Both jobs must pass (mp_remote_order checks each callee ran its caller's
# calls in the order they were made, and that a delete sent right after a
# put found the object).
. "$(dirname "$0")/joblib.sh"
for mb in 1 0; do
  WEFT_REMOTE_MAILBOX=$mb WEFT_LOG_LEVEL=info WEFT_LOG_SUBSYS=engine "$WR" -np "$NP" --timeout 100 \
    --output-filename "$T/mb$mb" "$BIN" || fail "the job with WEFT_REMOTE_MAILBOX=$mb failed (exit $?)"
  for ((r = 0; r < NP; r++)); do
    line=$(grep -o "remote mailboxes: [0-9]* frames received through the mailboxes, [0-9]* from this host's ranks \
through the engine; [0-9]* sent through the mailboxes, [0-9]* to this host's ranks through the engine" \
      "$T/mb$mb/rank.$r/stderr")
    [ -n "$line" ] || { fail "WEFT_REMOTE_MAILBOX=$mb: rank $r logged no remote mailbox line"; continue; }
    read -r a b c d < <(echo "$line" | sed 's/[^0-9 ]//g' | awk '{print $1, $2, $3, $4}')
    echo "WEFT_REMOTE_MAILBOX=$mb rank $r: received $a through the rings, $b through the engine; sent $c, $d"
    if [ "$mb" = 1 ]; then
      [ "$a" -gt 0 ] || fail "rank $r received nothing through the remote rings"
      [ "$b" -gt 0 ] || fail "rank $r received nothing from this host's ranks through the engine (frames over a slot)"
      [ "$c" -gt 0 ] || fail "rank $r sent nothing through the remote rings"
    else
      [ "$a" -eq 0 ] && [ "$c" -eq 0 ] || fail "WEFT_REMOTE_MAILBOX=0: rank $r still used the rings ($a in, $c out)"
      [ "$b" -gt 0 ] || fail "WEFT_REMOTE_MAILBOX=0: rank $r received nothing through the engine"
    fi
  done
done
finish remote_paths
