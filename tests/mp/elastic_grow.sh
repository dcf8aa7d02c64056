#!/bin/bash
# elastic_grow.sh WEFTRUN MP_ELASTIC_GROW CASE - an elastic job that grows
# under --host-discovery-script (the script prints a file the test, or rank
# 0, rewrites); mp_elastic_grow.c checks the ranks' side (generations,
# sizes, the state new workers receive, the parameters against its
# reference), this script weftrun's messages and exit status.
#   grow: 2 workers on localhost:2; at step 15 rank 0 rewrites the file to
#         localhost:4: weftrun starts workers 2 and 3, the members learn of
#         them at that commit and re-form generation 2 with all four; every
#         worker passes, the job exits 0.
#   flap: 3 workers on localhost:3; worker 2 dies at step 12: localhost
#         cools down (--blacklist-cooldown-range 3 6: 3 s), the two
#         survivors re-form generation 2; after the cool-down weftrun starts
#         worker 3 on the freed slot, and generation 3 takes it in (it
#         checks it started no sooner than 3 s after the death).
#   shrink: 3 workers on localhost:3; at step 15 rank 0 rewrites the file
#         to localhost:2: weftrun removes worker 2 (the highest id), the
#         members learn it at that commit ("removed"), generation 2 forms
#         with workers 0 and 1, weftrun stops worker 2; the two finish equal
#         to the reference, no worker counts as lost, the job exits 0.
#   shrink_min_np: the same with --min-np 2, but rank 0 rewrites the file
#         to localhost:1: only worker 2 is removed (removing worker 1 too
#         would leave fewer than --min-np), weftrun says so, and the job
#         ends on workers 0 and 1 as above.
#   errors: discovery scripts that fail or print a bad line: weftrun names
#         the problem and does not start the job.
set -u
WEFTRUN=$1 PROG=$2 CASE=$3
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
OUT=$DIR/out
fail() { echo "FAIL: $*"; echo "--- weftrun's output:"; cat "$OUT"; exit 1; }
case $CASE in
grow)
  echo localhost:2 >"$DIR/hosts"
  "$WEFTRUN" -np 2 --min-np 2 --max-np 4 --host-discovery-script "cat $DIR/hosts" --elastic-timeout 30 \
    --timeout 100 "$PROG" --steps 30 --commit-every 5 --workers 2 --grow-step 15 --grow-to 4 \
    --hosts-file "$DIR/hosts" >"$OUT" 2>&1
  rc=$?
  [ $rc -eq 0 ] || fail "weftrun exited $rc"
  for w in 2 3; do
    grep -q "weftrun: elastic: host discovery: starting worker $w on host localhost" "$OUT" ||
      fail "no message starting worker $w"
  done
  grep -q "weftrun: elastic: generation 2: 4 ranks (workers 0, 1, 2, 3)" "$OUT" || fail "no generation 2 of 4"
  for w in 0 1 2 3; do grep -q "PASS: worker $w " "$OUT" || fail "worker $w did not pass"; done
  grep -q "PASS: worker 2 (joined in generation 2)" "$OUT" || fail "worker 2 did not join in generation 2"
  echo "PASS: grow"
  ;;
flap)
  echo localhost:3 >"$DIR/hosts"
  "$WEFTRUN" -np 3 --min-np 2 --max-np 3 --host-discovery-script "cat $DIR/hosts" --elastic-timeout 30 \
    --blacklist-cooldown-range 3 6 --timeout 100 "$PROG" --steps 30 --commit-every 5 --workers 3 \
    --die-worker 2 --die-step 12 --cooldown 3 --hosts-file "$DIR/hosts" >"$OUT" 2>&1
  rc=$?
  [ $rc -eq 0 ] || fail "weftrun exited $rc"
  grep -q "weftrun: elastic: host localhost cools down for 3 s (failure 1 there)" "$OUT" || fail "no cool-down"
  grep -q "weftrun: elastic: generation 2: 2 ranks (workers 0, 1)" "$OUT" || fail "no generation 2 of the survivors"
  grep -q "weftrun: elastic: host discovery: starting worker 3 on host localhost" "$OUT" || fail "worker 3 not started"
  grep -q "weftrun: elastic: generation 3: 3 ranks (workers 0, 1, 3)" "$OUT" || fail "no generation 3 with worker 3"
  for w in 0 1 3; do grep -q "PASS: worker $w " "$OUT" || fail "worker $w did not pass"; done
  echo "PASS: flap"
  ;;
shrink | shrink_min_np)
  echo localhost:3 >"$DIR/hosts"
  [ "$CASE" = shrink ] || echo localhost:1 >"$DIR/hosts.next" # rank 0 renames it over the hosts file
  "$WEFTRUN" -np 3 --min-np 2 --max-np 3 --host-discovery-script "cat $DIR/hosts" --elastic-timeout 30 \
    --timeout 100 "$PROG" --steps 30 --commit-every 5 --workers 3 --grow-step 15 --grow-to 2 \
    --hosts-file "$DIR/hosts" >"$OUT" 2>&1
  rc=$?
  [ $rc -eq 0 ] || fail "weftrun exited $rc"
  n=2; [ "$CASE" = shrink ] || n=1
  grep -q "weftrun: elastic: host discovery lists $n slots\? on host localhost: worker 2 is removed when the members" \
    "$OUT" || fail "no message removing worker 2"
  if [ "$CASE" = shrink_min_np ]; then
    grep -q "weftrun: elastic: host discovery lists 1 slot on host localhost, but removing worker 1 would leave fewer \
than --min-np 2 workers; it stays" "$OUT" || fail "no message keeping worker 1 for --min-np"
    [ "$(grep -c "but removing worker 1" "$OUT")" = 1 ] || fail "the --min-np message is not said once"
  fi
  grep -q "weftrun: elastic: generation 2: 2 ranks (workers 0, 1)" "$OUT" || fail "no generation 2 of workers 0, 1"
  grep -q "weftrun: elastic: worker 2 (pid [0-9]* on host localhost) removed by host discovery: the members re-formed" \
    "$OUT" || fail "worker 2 not stopped after the re-formation"
  for w in 0 1; do grep -q "PASS: worker $w " "$OUT" || fail "worker $w did not pass"; done
  ! grep -q "FAIL\|remain (\|cools down\|gets no new workers\|starting worker" "$OUT" ||
    fail "a failure, a lost worker, a cool-down or a new worker"
  echo "PASS: $CASE"
  ;;
errors)
  # a discovery script that fails or prints a bad line: reported, the job is not started (exit 1) once
  # --elastic-timeout passes without --min-np slots; nothing runs
  bad() { # expected-message script
    "$WEFTRUN" -np 2 --min-np 2 --elastic-timeout 1 --host-discovery-script "$2" --timeout 30 "$PROG" \
      --grow-step 1 --hosts-file "$DIR/none" >"$OUT" 2>&1
    local rc=$?
    [ $rc -eq 1 ] || fail "script '$2': weftrun exited $rc, expected 1"
    grep -qF -- "$1" "$OUT" || fail "script '$2': no '$1'"
    grep -qF "host discovery found 0 slots, fewer than --min-np 2, within --elastic-timeout 1 s; not starting the job" \
      "$OUT" || fail "script '$2': no message saying the job does not start"
    ! grep -q "PASS\|FAIL" "$OUT" || fail "script '$2': a worker ran"
  }
  bad "host discovery: the script printed 'not a host!', not HOST or HOST:SLOTS" "echo 'not a host!'"
  bad "host discovery: the script 'exit 3' exited with status 3" "exit 3"
  bad "host discovery: the script printed 'localhost:x': bad slot count (0..4096)" "echo localhost:x"
  echo "PASS: errors"
  ;;
*) echo "unknown case $CASE"; exit 2 ;;
esac
