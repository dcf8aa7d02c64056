#!/usr/bin/env bash
# fast.sh - runs one case of mp_fast (the one-host fast path) and checks what
# only the logs show: which path the operations took.
#
#   fast.sh CASE NP WEFTRUN MP_FAST [ARG]
#
# Every rank logs at finalize (WEFT_LOG_LEVEL=info) "one-host fast path: N
# completed in shared memory, M diverted to the coordinator"; mp_fast prints
# "FASTEXPECT rank R: done=A-B diverted=C-D" (-1: no bound). Cases:
#   bits | colls   three jobs (bits: a fourth with split allreduce rounds
#              for every allreduce, counted; colls: a fourth whose
#              rounds are given up after 20 us, the board staying on, and a
#              fifth with remote rounds for every input over a pooled slot,
#              counted; remote rounds are off by default):
#              WEFT_FAST=1, WEFT_FAST=0, and WEFT_FAST=0 on rank 1
#              only: every check passes in each, the counters are in range
#              with WEFT_FAST=1 and 0 on every rank otherwise, and the DIGEST
#              lines (every result's bits) are equal across ranks and jobs
#   mismatch   WEFT_FAST=1 and 0: the same MSG lines (error messages)
#   skew       the default WEFT_FAST_WAIT_SECONDS (0.2 s)
#   stall | stall-poll   WEFT_STALL_CHECK_SECONDS=1, _SHUTDOWN_SECONDS=2: the
#              coordinator's report names 'stuck' and rank 2
#   deadline   WEFT_TIMEOUT_SECONDS=2 with WEFT_FAST_WAIT_SECONDS=30
#   kill K | stop K | stopsplit K | killdone K   the survivors' own verdicts (mp_fast
#              checks them)
#   scale      (MP_FAST is mp_onehost_scale) one job, WEFT_FAST_WAIT_SECONDS=30:
#              every operation completed on the board (its FASTEXPECT)
#   hosts H,H,...  the ranks on fake hosts (hier_hosts.sh; a rank alone on
#              its host has no board and must log no counters)
#   others     one job with WEFT_FAST_WAIT_SECONDS=30 (no round may miss it)
# Temporary files go to a fresh directory under $TMPDIR, removed on success
# and kept (and named) on failure.
set -u
CASE=$1 NP=$2 WEFTRUN=$3 BIN=$4 ARG=${5:-}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/weft-fast.XXXXXX") || exit 1
# Failures go to a file, not a shell variable: a check that runs in a
# subshell ($(...), a pipeline) still fails the case.
fail() {
  echo "FAIL: $*"
  echo "$*" >>"$TMP/FAILURES"
}
finish() {
  local FAILS=0
  [ -e "$TMP/FAILURES" ] && FAILS=$(wc -l <"$TMP/FAILURES")
  if [ "$FAILS" -eq 0 ]; then
    rm -rf "$TMP"
    echo "PASS: fast $CASE np$NP"
    exit 0
  fi
  echo "FAILED: fast $CASE np$NP ($FAILS failure(s)); files kept in $TMP"
  exit 1
}

# run_job NAME [VAR=VALUE...] -- [program args...]: NP ranks of mp_fast (the
# arguments after -- go to it), per-rank output under $TMP/NAME.
# ONLY1="VAR=VALUE" sets the variable on rank 1 only.
run_job() {
  local name=$1
  shift
  local envs=()
  while [ "$1" != "--" ]; do
    envs+=("$1")
    shift
  done
  shift
  local wrap=()
  [ -n "${ONLY1:-}" ] && wrap=(sh -c "[ \"\$WEFT_RANK\" = 1 ] && export $ONLY1; exec \"\$0\" \"\$@\"")
  [ -n "${HOSTS:-}" ] && wrap=(sh "$(dirname "$0")/hier_hosts.sh" "$HOSTS")
  mkdir -p "$TMP/$name"
  env WEFT_TIMEOUT_SECONDS=60 WEFT_LOG_LEVEL=info WEFT_LOG_SUBSYS=engine "${envs[@]}" \
    "$WEFTRUN" -np "$NP" --timeout 200 --output-filename "$TMP/$name/out" "${wrap[@]}" "$BIN" "$@"
  local rc=$?
  for ((r = 0; r < NP; r++)); do
    out_of "$name" "$r" | grep -v '^PASS' | sed "s/^/[$name $r] /"
    err_of "$name" "$r" | grep -E 'WARN|one-host|FAIL' | sed "s/^/[$name $r stderr] /"
  done
  [ "$rc" -eq 0 ] || fail "$name: the job exited with status $rc"
  return 0
}
# weftrun pads the rank in its per-rank folders to the width of NP - 1
rank_dir() { printf 'rank.%0*d' "${#LAST}" "$1"; }
LAST=$((NP - 1))
out_of() { cat "$TMP/$1/out/$(rank_dir "$2")/stdout" 2>/dev/null; }
err_of() { cat "$TMP/$1/out/$(rank_dir "$2")/stderr" 2>/dev/null; }
has() { err_of "$1" "$2" | grep -Eq -- "$3" || fail "$1: rank $2's stderr has no line matching /$3/ ($4)"; }
lacks() { ! err_of "$1" "$2" | grep -Eq -- "$3" || fail "$1: rank $2's stderr matches /$3/ ($4)"; }

# counts NAME [off]: every rank's counters against its FASTEXPECT (off: none
# completed in shared memory on any rank)
counts() {
  local name=$1 off=${2:-} r line done div exp dmin dmax vmin vmax
  for ((r = 0; r < NP; r++)); do
    line=$(err_of "$name" "$r" | grep -o 'one-host fast path: [0-9]* completed in shared memory, [0-9]* diverted' | tail -1)
    exp=$(out_of "$name" "$r" | sed -n 's/^FASTEXPECT rank [0-9]*: //p' | tail -1)
    if [ -z "$off" ] && [ "${exp%% *}" = none ]; then
      [ -z "$line" ] || fail "$name: rank $r has no board ($exp) but logged: $line"
      continue
    fi
    if [ -z "$line" ]; then
      fail "$name: rank $r logged no one-host fast path line"
      continue
    fi
    done=$(echo "$line" | sed 's/.*path: \([0-9]*\) completed.*/\1/')
    div=$(echo "$line" | sed 's/.*memory, \([0-9]*\) diverted.*/\1/')
    if [ -n "$off" ]; then
      [ "$done" -eq 0 ] || fail "$name: rank $r completed $done operations in shared memory with the board off on $off"
      continue
    fi
    [ -n "$exp" ] || { fail "$name: rank $r printed no FASTEXPECT line"; continue; }
    read -r dmin dmax vmin vmax <<<"$(echo "$exp" | sed 's/done=\(-*[0-9]*\)-\(-*[0-9]*\) diverted=\(-*[0-9]*\)-\(-*[0-9]*\)/\1 \2 \3 \4/')"
    echo "[$name $r] fast path: $done completed (expected $dmin..$dmax), $div diverted (expected $vmin..$vmax)"
    [ "$done" -ge "$dmin" ] || fail "$name: rank $r completed $done in shared memory, expected at least $dmin"
    [ "$dmax" -lt 0 ] || [ "$done" -le "$dmax" ] || fail "$name: rank $r completed $done in shared memory, expected at most $dmax"
    [ "$div" -ge "$vmin" ] || fail "$name: rank $r diverted $div, expected at least $vmin"
    [ "$vmax" -lt 0 ] || [ "$div" -le "$vmax" ] || fail "$name: rank $r diverted $div, expected at most $vmax"
  done
}

# remote NAME R MIN: rank R's remote rounds (read across processes): none if
# MIN is 0, else at least MIN
remote() {
  local n
  n=$(err_of "$1" "$2" | sed -n 's/.*one-host fast path: .*, \([0-9]*\) read across processes.*/\1/p' | tail -1)
  [ -n "$n" ] || { fail "$1: rank $2 logged no remote round count"; return; }
  echo "[$1 $2] remote rounds: $n"
  if [ "$3" -eq 0 ]; then
    [ "$n" -eq 0 ] || fail "$1: rank $2 read $n rounds across processes, expected none"
  else
    [ "$n" -ge "$3" ] || fail "$1: rank $2 read $n rounds across processes, expected at least $3"
  fi
}

# same_lines PATTERN NAME...: the lines matching PATTERN are equal on every rank of every job
same_lines() {
  local pat=$1 first="" r name
  shift
  for name in "$@"; do
    for ((r = 0; r < NP; r++)); do
      local got
      got=$(out_of "$name" "$r" | grep -E "$pat" | sed 's/^\(MSG\|DIGEST\) //')
      [ -n "$got" ] || { fail "$name: rank $r printed no /$pat/ lines"; continue; }
      if [ -z "$first" ]; then
        first=$got
      elif [ "$got" != "$first" ]; then
        fail "$name: rank $r's /$pat/ lines differ from the first job's rank 0:"$'\n'"$got"$'\n'"vs"$'\n'"$first"
      fi
    done
  done
}

LONG=WEFT_FAST_WAIT_SECONDS=30
case "$CASE" in
bits | colls)
  run_job on $LONG -- "$CASE"
  run_job off WEFT_FAST=0 -- "$CASE"
  # rank 1 alone keeps off the board (a timeline: per-rank, WEFT_FAST must
  # agree): the others divert every round to the coordinator, same bits
  ONLY1="WEFT_TIMELINE=$TMP/one_off.%r.json" run_job one_off $LONG -- "$CASE"
  counts on
  counts off "every rank"
  counts one_off "rank 1"
  jobs=(on off one_off)
  if [ "$CASE" = bits ] && [ "$NP" -ge 3 ]; then # on 2 ranks the default splits what it can
    # split allreduce rounds (board.h) for every allreduce the board takes
    # on 3+ ranks (empty slices, pooled slots; whole folds are the default
    # below 16 KiB); the same bits
    run_job allsplit $LONG WEFT_FAST_SPLIT_BYTES=1 -- bits
    counts allsplit
    jobs+=(allsplit)
  fi
  if [ "$CASE" = colls ]; then
    # rounds given up after 20 us: diverted at every point, large copies
    # still running included; every result right, the board stays on
    run_job racy WEFT_FAST_WAIT_SECONDS=0.00002 -- colls
    for ((r = 0; r < NP; r++)); do lacks racy "$r" "board is off" "the board must stay on"; done
    # remote rounds (allgather/alltoall inputs read across processes, from
    # WEFT_FAST_CMA_BYTES on, unless the ranks outnumber the cores): never
    # by default (the job "on"), and for every input over a pooled slot; the
    # same bits every time
    run_job allcma $LONG WEFT_FAST_CMA_BYTES=1 -- colls
    counts allcma
    for ((r = 0; r < NP; r++)); do
      remote on "$r" 0
      if [ "$NP" -le "$(getconf _NPROCESSORS_ONLN)" ]; then # as the board counts cores (sysconf)
        remote allcma "$r" 1
      else
        remote allcma "$r" 0
      fi
    done
    jobs+=(racy allcma)
  fi
  same_lines '^DIGEST' "${jobs[@]}"
  ;;
mismatch)
  run_job on $LONG -- mismatch
  run_job off WEFT_FAST=0 -- mismatch
  counts on
  counts off "every rank"
  same_lines '^MSG' on off
  ;;
skew)
  run_job skew -- skew
  counts skew
  ;;
stall | stall-poll)
  mkdir -p "$TMP/flag"
  run_job st WEFT_STALL_CHECK_SECONDS=1 WEFT_STALL_SHUTDOWN_SECONDS=2 -- "$CASE" "$TMP/flag"
  has st 0 "WARN.*stalled: tensor 'stuck'.*waiting for rank\(s\) 2( |;|$)" "the coordinator's report"
  has st 1 "this rank waits: .*'stuck'.*waiting for rank\(s\) 2( |;|$)" "a waiting rank"
  lacks st 2 "this rank waits" "rank 2 is the one not waiting"
  counts st
  ;;
deadline)
  mkdir -p "$TMP/flag"
  run_job dl WEFT_TIMEOUT_SECONDS=2 WEFT_FAST_WAIT_SECONDS=30 -- deadline "$TMP/flag"
  counts dl
  ;;
kill | stop) # the large allgather a remote round where the cores suffice
  run_job "$CASE" WEFT_HEARTBEAT_TIMEOUT=5 WEFT_FAST_CMA_BYTES=65536 -- "$CASE" "$ARG"
  ;;
killdone) # the others must not divert while they wait for K. Four jobs: an
  # engine's scan (every 5 ms) may complete the request before the death is
  # seen, and then the job passes whatever fail_all does (without the fix
  # about 2 jobs in 5 failed)
  for k in 1 2 3 4; do
    run_job "$CASE$k" WEFT_HEARTBEAT_TIMEOUT=5 WEFT_FAST_WAIT_SECONDS=5 -- "$CASE" "$ARG"
  done
  ;;
stopsplit) # the survivors may arrive far apart on a loaded machine: no diverting
  # (any rank folds any slice: with cores to spare each would fold its own)
  run_job "$CASE" WEFT_HEARTBEAT_TIMEOUT=5 WEFT_FAST_WAIT_SECONDS=5 WEFT_FAST_SPLIT_OWN=0 -- "$CASE" "$ARG"
  ;;
hosts) # ARG: one fake host per rank (hier_hosts.sh)
  HOSTS=$ARG run_job hosts $LONG -- hosts
  counts hosts
  ;;
scale) # mp_onehost_scale: every op on the board, whatever the number of ranks
  run_job scale $LONG --
  counts scale
  ;;
order | join | detached | threads | groups | names | many | finalize)
  run_job "$CASE" $LONG -- "$CASE" $ARG
  counts "$CASE"
  ;;
*)
  echo "fast.sh: unknown case '$CASE'"
  exit 2
  ;;
esac
finish
