#!/bin/bash
# elastic.sh WEFTRUN MP_ELASTIC CASE - weftrun elastic cases checked on
# weftrun's own output (mp_elastic.c checks the ranks' side).
#   min_np: worker 2 of 3 dies under --min-np 3: weftrun stops the job,
#           saying how many workers are left and naming --min-np, exits
#           non-zero (the lost worker's 137), well before its --timeout, and
#           no survivor finishes training.
set -u
WEFTRUN=$1 PROG=$2 CASE=$3
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
fail() { echo "FAIL: $*"; echo "--- weftrun's output:"; cat "$OUT"; exit 1; }
case $CASE in
min_np)
  start=$(date +%s)
  "$WEFTRUN" -np 3 --min-np 3 --elastic-timeout 30 --timeout 100 "$PROG" --steps 60 --commit-every 10 \
    --die-worker 2 --die-step 23 --expect-stop >"$OUT" 2>&1
  rc=$? took=$(( $(date +%s) - start ))
  [ $rc -ne 0 ] || fail "weftrun exited 0"
  [ $rc -ne 124 ] || fail "weftrun's --timeout stopped the job (a hang, not a clean stop)"
  grep -q "weftrun: elastic: worker 2 (pid [0-9]*) was killed by signal 9" "$OUT" || fail "no message naming worker 2's death"
  grep -q "weftrun: elastic: 2 workers left (0, 1), fewer than --min-np 3; stopping the job" "$OUT" ||
    fail "no message saying the job stops for --min-np"
  ! grep -q "PASS" "$OUT" || fail "a survivor finished training"
  [ $rc -eq 137 ] || fail "exit status $rc, expected 137 (the lost worker's SIGKILL)"
  echo "PASS: min_np: weftrun stopped the job in ${took} s with status $rc"
  ;;
*) echo "unknown case $CASE"; exit 2 ;;
esac
