#!/usr/bin/env bash
# fault_test.sh - runs one case of the fault matrix (docs: the reliability
# matrix in the shared reference, items 1-13, 15):
#   fault_test.sh CASE BINDIR WEFTRUN
# CASE is the ctest name without "fault." (e.g. 1.sigkill_allreduce); BINDIR
# holds fault_peers, fault_semantics, fault_fake_peer and fault_attacker.
#
# The rank programs write their findings to $FAULT_DIR/verdict.<who> ("PASS",
# "FAIL", "MEASURE item= what= bound= measured=" lines), so a rank that
# weftrun stops still leaves its verdict. This script checks that every
# expected verdict exists without a FAIL line, checks what only it can see
# (exit codes, leftover processes, log lines), and prints every MEASURE line
# as "TABLE <test> ..." for the closing table. Exit 0 = pass, 77 = skipped
# (ctest SKIP_RETURN_CODE; a failure instead with WEFT_TESTS_NO_SKIP=1 or CI
# set), anything else = fail.
#
# The transport is WEFT_TRANSPORT (set per test by CMake; tcp if unset).
set -u
CASE=$1
BIN=$2
WR=$3
export WEFT_TRANSPORT=${WEFT_TRANSPORT:-tcp}
TEST="fault.$CASE"
[ "$WEFT_TRANSPORT" = tcp ] || TEST="$TEST.$WEFT_TRANSPORT"
D=$(mktemp -d "${TMPDIR:-/tmp}/weft_fault.XXXXXX")
export FAULT_DIR=$D
# T = heartbeat timeout + 1 s = 3 s; operations get a long deadline so that
# only the mechanism under test can fire.
export WEFT_HEARTBEAT_TIMEOUT=2 WEFT_HEARTBEAT_INTERVAL=0.5 WEFT_TIMEOUT_SECONDS=30
CLEANUP=()
cleanup() {
  local c
  for c in ${CLEANUP[@]+"${CLEANUP[@]}"}; do eval "$c" >/dev/null 2>&1; done
  rm -rf "$D"
}
trap cleanup EXIT

table() { sed -n "s/^MEASURE \[\([^]]*\)\] /TABLE $TEST who=\1 /p" "$D"/verdict.* 2>/dev/null; }
# fail exits; in a subshell it would end only the subshell, so it also
# leaves a mark that pass() looks for
fail() {
  echo "FAIL [$TEST]: $*" >&2
  echo "$*" >>"$D/FAILED"
  local f
  for f in "$D"/verdict.* "$D"/err "$D"/out "$D"/err.* "$D"/out.*; do
    [ -s "$f" ] && { echo "--- $(basename "$f") (last 30 lines):" >&2; tail -30 "$f" >&2; }
  done
  table
  exit 1
}
# A case that cannot run here exits 77 (ctest: skipped), unless skipping is
# forbidden: WEFT_TESTS_NO_SKIP=1, the default where CI is set (CI must run
# what it claims to test: a missing capability fails there instead).
no_skip() {
  local v=${WEFT_TESTS_NO_SKIP:-}
  [ -n "$v" ] || { [ -n "${CI:-}" ] && [ "${CI:-}" != false ] && v=1; }
  [ -n "$v" ] && [ "$v" != 0 ]
}
skip() {
  no_skip && fail "cannot run here ($*), and WEFT_TESTS_NO_SKIP=1 (or CI) forbids skipping"
  echo "SKIP [$TEST]: $*"
  exit 77
}
pass() {
  [ -e "$D/FAILED" ] && { echo "FAIL [$TEST]: a check failed in a subshell: $(cat "$D/FAILED")" >&2; exit 1; }
  table
  echo "PASS [$TEST]"
  exit 0
}
# job NP PROGRAM ARGS...: the ranks under weftrun, with a safety net; sets rc
job() {
  local np=$1
  shift
  timeout -k 5 90 "$WR" -np "$np" --timeout 80 "$@" >"$D/out" 2>"$D/err"
  rc=$?
}
# every named verdict exists, has no FAIL line and ended (DONE or PASS)
verdicts() {
  local w f
  for w in "$@"; do
    f="$D/verdict.$w"
    [ -s "$f" ] || fail "no verdict from $w"
    grep -q "^FAIL" "$f" && fail "verdict.$w has FAIL lines"
    grep -q '^\(DONE\|PASS\)' "$f" || fail "$w never finished"
  done
}
expect_rc() { [ "$rc" = "$1" ] || fail "expected exit code $1, got $rc"; }
wait_files() { # wait_files SECONDS FILE...
  local n=$(( $1 * 20 )) f ok
  shift
  while [ $n -gt 0 ]; do
    ok=1
    for f in "$@"; do [ -s "$D/$f" ] || ok=0; done
    [ $ok = 1 ] && return 0
    sleep 0.05
    n=$((n - 1))
  done
  fail "timed out waiting for $*"
}
# a process is gone when /proc has no entry for it or it is a zombie
gone() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -z "$st" ] || [ "$st" = Z ]
}
expect_gone() { # pids from the pid.<rank> files; waits up to 2 s
  local f p k
  for f in "$D"/pid.*; do
    p=$(cat "$f")
    for k in $(seq 20); do gone "$p" && break; sleep 0.1; done
    gone "$p" || { kill -KILL "$p" 2>/dev/null; fail "process $p ($(basename "$f")) is still alive"; }
  done
}
now() { "$BIN/fault_peers" --now; }
calc() { awk "BEGIN { print $* }"; }       # calc "1.5 + 2"
less() { awk "BEGIN { exit !($1 < $2) }"; } # less A B: A < B
# /dev/shm entries of the job whose id rank 0 wrote to $D/jobid (the
# shared-memory transport names them weft-<job id>-...)
shm_job() { ls /dev/shm 2>/dev/null | grep -F "weft-$(cat "$D/jobid" 2>/dev/null)-" | sort; }

P="$BIN/fault_peers"
S="$BIN/fault_semantics"

case $CASE in
# ---------------------------------------------------------------- peers die
1.sigkill_allreduce) # the survivors check fds, threads, children, /dev/shm
  job 3 "$P" sigkill
  verdicts 0 1 2
  expect_rc 0
  pass ;;
2.sigstop_peers_stay | 2.sigstop_peers_exit)
  job 3 "$P" sigstop --peers "${CASE##*_}"
  verdicts 0 1 2
  expect_rc 0
  pass ;;
3.coordinator_killed)
  job 3 "$P" coordkill
  verdicts 0 1 2
  expect_rc 0
  pass ;;
# ---------------------------------------------------------------- disagreement
4.shape_mismatch)
  job 3 "$S" shape
  verdicts 0 1 2
  expect_rc 0
  pass ;;
5.mismatch_and_misuse)
  job 3 "$S" mismatch
  verdicts 0 1 2
  expect_rc 0
  pass ;;
6.any_order)
  job 3 "$S" order
  verdicts 0 1 2
  expect_rc 0
  pass ;;
6.never_submitted)
  # a stall report after 1 s, the error after 3 s
  WEFT_TIMEOUT_SECONDS=3 WEFT_STALL_CHECK_SECONDS=1 job 3 "$S" never
  verdicts 0 1 2
  expect_rc 0
  # the stall is reported first, naming the tensor and the missing rank, by
  # the coordinator and by the rank that waits; then the error
  for r in 0 2; do
    first=$(grep "^\[$r\] .*WARN.*'ghost'" "$D/err" | head -1)
    [[ $first == *stalled* && $first =~ rank\(s\)\ 1[^0-9] ]] ||
      fail "rank $r's first warning about 'ghost' is not a stall report naming rank 1: $first"
  done
  grep -q "^\[0\] .*WARN.*'ghost'.*timed out" "$D/err" || fail "rank 0 did not log the timeout"
  pass ;;
# ---------------------------------------------------------------- hostile input
7.*)
  WEFT_HEARTBEAT_TIMEOUT=$([ "${CASE#7.frame_}" = stall ] && echo 2 || echo 10)
  export WEFT_HEARTBEAT_TIMEOUT
  timeout -k 5 60 "$BIN/fault_fake_peer" "${CASE#7.frame_}" >"$D/out" 2>"$D/err"
  rc=$?
  verdicts 0 fake
  expect_rc 0
  grep -q "WARN.*rank 1" "$D/err" || fail "rank 0 logged nothing naming rank 1"
  pass ;;
8.unauthenticated)
  export WEFT_HANDSHAKE_TIMEOUT=1 FAULT_ITEM=8 FAULT_WHAT=rendezvous_after_attacks
  timeout -k 5 90 "$WR" -np 2 --timeout 80 "$S" rendezvous >"$D/out" 2>"$D/err" &
  wr=$!
  CLEANUP+=("kill $wr")
  wait_files 20 addr secret jobid
  addr=$(cat "$D/addr")
  for m in junk nohandshake silent replay replay_other; do
    timeout 30 "$BIN/fault_attacker" $m "$addr" >>"$D/out.attacker" 2>&1 || fail "attacker $m failed"
  done
  touch "$D/go"
  wait $wr
  rc=$?
  verdicts 0 1 attacker.junk attacker.nohandshake attacker.silent attacker.replay attacker.replay_other
  expect_rc 0
  n=$(grep -c "dropped connection" "$D/err")
  [ "$n" -ge 5 ] || fail "rank 0 logged $n dropped connections, expected 5"
  pass ;;
9.slow_attacker)
  export WEFT_HANDSHAKE_TIMEOUT=1 FAULT_ITEM=9
  # rendezvous NAME ATTACKERS: a job whose rank 1 joins after the attackers
  # (0 = none) have trickled for 1.5 s; prints rank 1's weft_init time
  rendezvous() {
    rm -f "$D"/go "$D"/addr
    FAULT_WHAT=$1 timeout -k 5 60 "$WR" -np 2 --timeout 50 "$S" rendezvous >"$D/out" 2>"$D/err" &
    local wr=$! at=""
    wait_files 20 addr
    if [ "$2" -gt 0 ]; then
      "$BIN/fault_attacker" slow "$(cat "$D/addr")" "$2" 6 >>"$D/out.attacker" 2>&1 &
      at=$!
      sleep 1.5
    fi
    touch "$D/go"
    wait $wr || fail "job $1 failed"
    verdicts 0 1
    if [ -n "$at" ]; then
      wait $at || fail "slow attacker x$2 failed"
      verdicts attacker.slow
      mv "$D/verdict.attacker.slow" "$D/verdict.attacker.slow_x$2"
    fi
    sed -n "s/^MEASURE.*what=$1 .*measured=\([0-9.]*\).*/\1/p" "$D/verdict.1"
    mv "$D/verdict.0" "$D/verdict.$1.r0"
    mv "$D/verdict.1" "$D/verdict.$1.r1"
  }
  # in this shell, not $(...): a failure must end the test
  export FAULT_INIT_BOUND=10
  rendezvous rendezvous_baseline 0 >"$D/t.base"
  base=$(cat "$D/t.base")
  bound=$(calc "$base + $WEFT_HANDSHAKE_TIMEOUT")
  export FAULT_INIT_BOUND=$bound
  rendezvous rendezvous_slow_x1 1 >"$D/t.one"
  rendezvous rendezvous_slow_x80 80 >"$D/t.many"
  echo "rendezvous of the late rank: $(cat "$D/t.base")s alone, $(cat "$D/t.one")s with 1 slow client," \
    "$(cat "$D/t.many")s with 80 (bound ${bound}s)"
  pass ;;
10.wrong_secret | 10.wrong_job | 10.wrong_size | 10.duplicate_rank)
  export WEFT_INIT_TIMEOUT_SECONDS=3
  case $CASE in
    *secret) job 2 "$S" wrongsecret; verdicts 0 1 ;;
    *job) job 2 "$S" wrongjob; verdicts 0 1 ;;
    *size) job 2 "$S" wrongsize; verdicts 0 1 ;;
    *) job 3 "$S" duprank; verdicts 0 1 2 ;;
  esac
  expect_rc 0
  pass ;;
# ---------------------------------------------------------------- partition
11.partition_netns)
  command -v ip >/dev/null || skip "no ip(8)"
  A=wfa$$ B=wfb$$ VA=wfva$$ VB=wfvb$$
  ip netns add $A 2>"$D/err.netns" || skip "cannot create network namespaces: $(cat "$D/err.netns")"
  CLEANUP+=("ip netns del $A")
  ip netns add $B || fail "ip netns add $B"
  CLEANUP+=("ip netns del $B")
  ip link add $VA type veth peer name $VB || skip "cannot create a veth pair"
  ip link set $VA netns $A && ip link set $VB netns $B &&
    ip -n $A addr add 10.213.0.1/24 dev $VA && ip -n $B addr add 10.213.0.2/24 dev $VB &&
    ip -n $A link set $VA up && ip -n $B link set $VB up && ip -n $A link set lo up && ip -n $B link set lo up ||
    fail "cannot set up the veth pair"
  secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  # what weftrun would set, by hand: not loopback, so a secret is required
  for r in 0 1; do
    ns=$([ $r = 0 ] && echo $A || echo $B)
    timeout -k 5 60 ip netns exec $ns env WEFT_RANK=$r WEFT_SIZE=2 WEFT_LOCAL_RANK=$r WEFT_LOCAL_SIZE=1 \
      WEFT_CROSS_RANK=$r WEFT_CROSS_SIZE=2 WEFT_ADDR=10.213.0.1:29611 WEFT_SECRET=$secret WEFT_JOB_ID=partition$$ \
      "$P" partition >"$D/out.$r" 2>"$D/err.$r" &
    eval "pid$r=\$!"
    CLEANUP+=("kill -KILL \$pid$r")
  done
  wait_files 20 ready.0 ready.1
  sleep 0.5
  ip -n $A link set $VA down || fail "cannot take the link down"
  now >"$D/t_down.tmp" && mv "$D/t_down.tmp" "$D/t_down"
  wait $pid0; rc0=$?
  wait $pid1; rc1=$?
  verdicts 0 1
  [ $rc0 = 0 ] && [ $rc1 = 0 ] || fail "rank exit codes $rc0 and $rc1"
  pass ;;
# ---------------------------------------------------------------- /dev/shm unusable
12.shm_exhausted | 12.shm_readonly)
  # In a private mount namespace /dev/shm becomes a 64 KiB (or read-only)
  # tmpfs. WEFT_TRANSPORT=auto must fall back to TCP with a warning and
  # work; WEFT_TRANSPORT=shm must fail init on every rank with an actionable
  # message; neither may leave a partial segment behind.
  opts=size=64k
  [ "$CASE" = 12.shm_readonly ] && opts=ro
  if ! command -v unshare >/dev/null || ! unshare -m true 2>"$D/err.ns"; then
    skip "cannot make a private mount namespace: $(cat "$D/err.ns" 2>/dev/null)"
  fi
  unshare -m bash -c '
    mount -t tmpfs -o "$1" tmpfs /dev/shm || exit 77
    WEFT_TRANSPORT=auto timeout -k 5 60 "$2" -np 3 "$3" order >"$4/out.auto" 2>"$4/err.auto"
    echo $? >"$4/rc.auto"
    ls -A /dev/shm >"$4/left.auto"
    for f in "$4"/verdict.*; do mv "$f" "$f.auto"; done
    WEFT_TRANSPORT=shm timeout -k 5 60 "$2" -np 3 "$3" shm_unusable >"$4/out.shm" 2>"$4/err.shm"
    echo $? >"$4/rc.shm"
    ls -A /dev/shm >"$4/left.shm"' _ "$opts" "$WR" "$S" "$D"
  [ $? = 77 ] && skip "cannot mount a tmpfs on /dev/shm"
  [ "$(cat "$D/rc.auto")" = 0 ] || fail "auto: the job failed instead of falling back to TCP"
  verdicts 0.auto 1.auto 2.auto
  grep -q "WARN.*/dev/shm.*TCP" "$D/err.auto" || fail "auto: no warning naming /dev/shm and the TCP fallback"
  rc=$(cat "$D/rc.shm")
  verdicts 0 1 2
  expect_rc 0
  [ -s "$D/left.auto" ] && fail "auto left in /dev/shm: $(cat "$D/left.auto")"
  [ -s "$D/left.shm" ] && fail "shm left in /dev/shm: $(cat "$D/left.shm")"
  pass ;;
# ---------------------------------------------------------------- shutdown and abort
13.finalize_inflight)
  job 3 "$P" inflight
  verdicts 0 1 2
  expect_rc 0
  pass ;;
13.finalize_dead_peer)
  job 3 "$P" finalize_dead
  verdicts 0 1 2
  expect_rc 0
  pass ;;
13.finalize_stopped_peer)
  job 3 "$P" finalize_stopped
  verdicts 0 1 2
  expect_rc 0
  pass ;;
13.abort)
  job 3 "$P" abort
  verdicts 0 1 2
  expect_rc 0
  pass ;;
13.abort_then_exit)
  # the ranks leave as soon as they saw the abort; the race between the
  # abort and the first goodbye is run 8 times
  for i in 1 2 3 4 5 6 7 8; do
    rm -f "$D"/verdict.* "$D"/t_abort "$D"/checked.*
    job 3 "$P" abort --then exit
    verdicts 0 1 2
    expect_rc 0
  done
  pass ;;
# ---------------------------------------------------------------- the launcher
15.launcher_rank_killed | 15.launcher_rank_exit)
  # rank 1 dies (SIGKILL) or exits 3 in the middle of the collectives; the
  # others see it within milliseconds and exit 5. weftrun must report the
  # first failure (137 or 3), stop everything and leave nothing behind. Run
  # 5 times: the others' exits follow the first one closely.
  marker=weft-fault-marker-$$
  die=$([ "$CASE" = 15.launcher_rank_killed ] && echo kill || echo exit)
  for i in 1 2 3 4 5; do
    rm -f "$D"/pid.* "$D"/jobid
    t0=$(now)
    job 3 "$P" loop --die $die "$marker"
    dt=$(calc "$(now) - $t0")
    expect_rc "$([ $die = kill ] && echo 137 || echo 3)"
    grep -q "weftrun: rank 1 " "$D/err" || fail "weftrun did not name rank 1"
    expect_gone
    pgrep -f "$marker" >/dev/null && fail "processes with the marker remain: $(pgrep -af "$marker")"
    [ -s "$D/jobid" ] || fail "rank 0 wrote no job id"
    [ -z "$(shm_job)" ] || fail "the job left /dev/shm entries: $(shm_job)"
    less "$dt" 5 || fail "the job took $dt s to stop"
  done
  echo "MEASURE [launcher] item=15 what=job_stopped_after_rank_$die bound=5.000 measured=$dt" >>"$D/verdict.launcher"
  pass ;;
15.launcher_sigint)
  marker=weft-fault-marker-$$
  # not under timeout(1): SIGINT goes to weftrun itself (--timeout is the net)
  "$WR" -np 3 --timeout 60 "$P" loop --die none "$marker" >"$D/out" 2>"$D/err" &
  wr=$!
  CLEANUP+=("kill -KILL $wr")
  wait_files 20 pid.0 pid.1 pid.2
  sleep 0.5
  t0=$(now)
  kill -INT $wr
  wait $wr
  rc=$?
  dt=$(calc "$(now) - $t0")
  expect_rc 130
  expect_gone
  pgrep -f "$marker" >/dev/null && fail "processes with the marker remain: $(pgrep -af "$marker")"
  [ -s "$D/jobid" ] || fail "rank 0 wrote no job id"
  [ -z "$(shm_job)" ] || fail "the job left /dev/shm entries: $(shm_job)"
  echo "MEASURE [launcher] item=15 what=job_stopped_after_sigint bound=4.000 measured=$dt" >>"$D/verdict.launcher"
  less "$dt" 4 || fail "the job took $dt s to stop after SIGINT"
  pass ;;
*)
  echo "fault_test.sh: unknown case '$CASE'" >&2
  exit 2 ;;
esac
