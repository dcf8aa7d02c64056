#!/bin/bash
# elastic.sh WEFTRUN MP_ELASTIC CASE - weftrun elastic cases checked on
# weftrun's own output (mp_elastic.c checks the ranks' side).
#   min_np: worker 2 of 3 dies under --min-np 3: weftrun stops the job,
#           saying how many workers are left and naming --min-np, exits
#           non-zero (the lost worker's 137), well before its --timeout, and
#           no survivor finishes training.
#   straggler: worker 2 dies, worker 1 sleeps 30 s before asking again
#           (--min-np 1, --elastic-timeout 2): weftrun leaves worker 1 out
#           after 2 s, naming it, and stops it; worker 0 finishes alone with
#           the reference's parameters, and the job exits 0.
#   reset_limit: worker 2 dies under --reset-limit 0: weftrun refuses to
#           re-form, says why, exits non-zero.
#   usage:  bad elastic command lines are refused, naming the problem
#           (host discovery's options too); -np defaults to --min-np.
#   fail_at_exit: worker 1 exits 7 after training, before the others exit
#           0: no world went on without it, so the job fails with its 7.
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
straggler)
  start=$(date +%s)
  "$WEFTRUN" -np 3 --min-np 1 --elastic-timeout 2 --grace 1 --timeout 100 "$PROG" --steps 60 --commit-every 10 \
    --die-worker 2 --die-step 23 --slow-worker 1 --slow-seconds 30 >"$OUT" 2>&1
  rc=$? took=$(( $(date +%s) - start ))
  [ $rc -eq 0 ] || fail "weftrun exited $rc, expected 0"
  grep -q "weftrun: elastic: worker 1 (pid [0-9]*) did not ask for a place in generation 2 within --elastic-timeout 2 s; leaving it out and stopping it" "$OUT" ||
    fail "no message leaving worker 1 out"
  grep -q "weftrun: elastic: generation 2: 1 rank (workers 0)" "$OUT" || fail "generation 2 is not worker 0 alone"
  grep -q "^\[0\] PASS: worker 0" "$OUT" || fail "worker 0 did not finish with the reference's parameters"
  [ $took -lt 25 ] || fail "took ${took} s: worker 1 was not stopped (it sleeps 30 s)"
  echo "PASS: straggler: left out and stopped; worker 0 finished alone in ${took} s"
  ;;
reset_limit)
  "$WEFTRUN" -np 3 --min-np 2 --reset-limit 0 --elastic-timeout 30 --timeout 100 "$PROG" --steps 60 \
    --commit-every 10 --die-worker 2 --die-step 23 --expect-stop >"$OUT" 2>&1
  rc=$?
  [ $rc -ne 0 ] || fail "weftrun exited 0"
  [ $rc -ne 124 ] || fail "weftrun's --timeout stopped the job (a hang, not a clean stop)"
  grep -q "weftrun: elastic: the world would be re-formed a 1st time, past --reset-limit 0; stopping the job" "$OUT" ||
    fail "no message naming --reset-limit"
  ! grep -q "PASS" "$OUT" || fail "a survivor finished training"
  echo "PASS: reset_limit: stopped with status $rc"
  ;;
fail_at_exit)
  "$WEFTRUN" -np 3 --min-np 2 --elastic-timeout 30 --timeout 100 "$PROG" --steps 30 --commit-every 10 \
    --die-worker 99 --fail-at-exit 1 >"$OUT" 2>&1
  rc=$?
  [ $rc -eq 7 ] || fail "weftrun exited $rc, expected worker 1's 7"
  grep -q "weftrun: elastic: worker [02] finished, but worker 1 was lost after generation 1 formed and no world was formed without it; the job fails with its status 7" "$OUT" ||
    fail "no message naming worker 1's unrecovered failure"
  echo "PASS: fail_at_exit: the job failed with worker 1's status"
  ;;
usage)
  # bad elastic command lines: exit 2, the message naming the problem, nothing started
  check() { # expected-message args...
    local want=$1; shift
    "$WEFTRUN" "$@" "$PROG" >"$OUT" 2>&1; local rc=$?
    [ $rc -eq 2 ] || fail "weftrun $* exited $rc, expected 2"
    grep -qF -- "$want" "$OUT" || fail "weftrun $*: no '$want'"
  }
  check "elastic mode wants --min-np <= -np <= --max-np, not 3 <= 2 <= 2" -np 2 --min-np 3
  check "elastic mode wants --min-np <= -np <= --max-np, not 1 <= 4 <= 3" -np 4 --min-np 1 --max-np 3
  check "--elastic-timeout and --reset-limit need elastic mode" -np 2 --reset-limit 1
  check "--elastic-timeout wants a number of seconds above 0" -np 2 --min-np 1 --elastic-timeout 0
  check "--reset-limit wants a number from 0 to 1000000, not '-1'" -np 2 --min-np 1 --reset-limit -1
  check "--min-np wants a number from 1 to 1000000, not 'x'" --min-np x
  check "--host-discovery-script tells the hosts: give no -H/--hostfile with it" --min-np 1 -H localhost:2 \
    --host-discovery-script ./d.sh
  check "--slots-per-host and --blacklist-cooldown-range need --host-discovery-script" --min-np 1 --slots-per-host 2
  check "--blacklist-cooldown-range wants 0 < MIN <= MAX, not 5 2" --min-np 1 --host-discovery-script ./d.sh \
    --blacklist-cooldown-range 5 2
  # -np defaults to --min-np: a one-worker job that trains alone
  "$WEFTRUN" --min-np 1 --timeout 60 "$PROG" --workers 1 --die-worker 99 --steps 20 >"$OUT" 2>&1 ||
    fail "weftrun --min-np 1 (no -np) exited $?"
  grep -q "PASS: worker 0" "$OUT" || fail "--min-np 1 without -np did not run one worker"
  echo "PASS: usage"
  ;;
*) echo "unknown case $CASE"; exit 2 ;;
esac
