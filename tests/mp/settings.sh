#!/usr/bin/env bash
# settings.sh - settings that must agree across ranks (src/util/settings.h):
#
#   settings.sh WEFTRUN MP_SETTINGS CASE NP
#
# Runs NP ranks of mp_settings under weftrun, the last rank with a different
# value of one setting (CASE), and checks what every rank printed:
#   mismatch cases (algo, fusion, transport, cma, fast, fast_bytes,
#     hvd_alias): every rank fails weft_init with a message naming the
#     setting, rank 0's value and the last rank's ("WEFT_FUSION_THRESHOLD:
#     rank 0 has 134217728, rank 2 has 0"), well within the init deadline
#     (the job is refused in the rendezvous, not by a timeout);
#   equal: the same values spelled differently (hex, a Horovod alias, upper
#     case) are equal: the job runs and every rank's allreduce is right;
#   per_rank: settings that may differ (cache capacity, log level, timeouts,
#     fast-path wait) do not stop the job;
#   bad_value, bad_algo: a value the setting does not take fails weft_init on
#     the rank that has it, naming the variable, the value and what it takes
#     (an algorithm the collective does not have: WEFT_ERR_NOT_FOUND);
#   unknown: a WEFT_* name that is no setting is warned about, with the
#     setting it probably meant, and the job runs.
set -u
WR=$1
BIN=$2
CASE=$3
NP=$4
LAST=$((NP - 1))
INIT_TIMEOUT=30
T=$(mktemp -d "${TMPDIR:-/tmp}/weft_settings.XXXXXX")
FAILS=0
trap 'rm -rf "$T"' EXIT
fail() {
  echo "FAIL [$CASE np$NP]: $*"
  FAILS=$((FAILS + 1))
}

# run NAME "LAST_ENV" [ALL_ENV...]: the job; LAST_ENV ("VAR=VALUE ...") for
# the last rank only; sets rc and ms (wall time)
run() {
  local name=$1 last=$2
  shift 2
  local t0 t1
  t0=$(date +%s%3N)
  env WEFT_INIT_TIMEOUT_SECONDS=$INIT_TIMEOUT "$@" "$WR" -np "$NP" --timeout 100 --output-filename "$T/$name" \
    sh -c '[ "$WEFT_RANK" = "$0" ] && [ -n "$1" ] && export $1; exec "$2"' "$LAST" "$last" "$BIN"
  rc=$?
  t1=$(date +%s%3N)
  ms=$((t1 - t0))
  for ((r = 0; r < NP; r++)); do
    sed "s/^/[$name $r] /" "$T/$name/rank.$r/stdout" 2>/dev/null
    grep -E 'WARN' "$T/$name/rank.$r/stderr" 2>/dev/null | sed "s/^/[$name $r stderr] /"
  done
}
out() { cat "$T/$1/rank.$2/stdout" 2>/dev/null; }

# refused NAME "LAST_ENV" EXPECTED [ALL_ENV...]: every rank's weft_init fails
# with a message containing EXPECTED (fixed string)
refused() {
  local name=$1 last=$2 want=$3
  shift 3
  run "$name" "$last" "$@"
  [ "$rc" -ne 0 ] || fail "$name: the job succeeded with '$last' on rank $LAST only"
  [ "$ms" -lt $((INIT_TIMEOUT * 1000)) ] || fail "$name: refused after $ms ms, not within the init deadline"
  for ((r = 0; r < NP; r++)); do
    local line
    line=$(out "$name" "$r" | grep '^INITERR' | head -1)
    if [ -z "$line" ]; then
      fail "$name: rank $r printed no INITERR line"
    elif ! printf '%s' "$line" | grep -qF -- "$want"; then
      fail "$name: rank $r's error does not say '$want': $line"
    fi
    case $r:$line in
    0:*WEFT_ERR_MISMATCH*) ;;
    0:*) fail "$name: rank 0's status is not WEFT_ERR_MISMATCH: $line" ;;
    *:*WEFT_ERR_ABORTED*) ;;
    *) fail "$name: rank $r's status is not WEFT_ERR_ABORTED (rank 0 refused the job): $line" ;;
    esac
  done
}

# runs_ok NAME "LAST_ENV" [ALL_ENV...]: the job runs and every rank's sums are right
runs_ok() {
  local name=$1 last=$2
  shift 2
  run "$name" "$last" "$@"
  [ "$rc" -eq 0 ] || fail "$name: the job failed (exit $rc) with '$last' on rank $LAST"
  for ((r = 0; r < NP; r++)); do
    out "$name" "$r" | grep -q "^OK rank $r\$" || fail "$name: rank $r did not finish its allreduces"
  done
}

case $CASE in
algo) refused algo WEFT_ALGO_ALLREDUCE=ring "WEFT_ALGO_ALLREDUCE: rank 0 has \"\", rank $LAST has ring" ;;
fusion) refused fusion WEFT_FUSION_THRESHOLD=0 "WEFT_FUSION_THRESHOLD: rank 0 has 134217728, rank $LAST has 0" ;;
hvd_alias)
  # the Horovod name on every rank, the weft name on the last: one setting
  # (and the weft name wins where both are set)
  refused hvd_alias WEFT_FUSION_THRESHOLD=1048576 \
    "WEFT_FUSION_THRESHOLD: rank 0 has 2097152, rank $LAST has 1048576" HOROVOD_FUSION_THRESHOLD=2097152
  ;;
transport) refused transport WEFT_TRANSPORT=tcp "WEFT_TRANSPORT: rank 0 has auto, rank $LAST has tcp" ;;
cma) refused cma WEFT_CMA=0 "WEFT_CMA: rank 0 has 1, rank $LAST has 0" ;;
fast) refused fast WEFT_FAST=0 "WEFT_FAST: rank 0 has 1, rank $LAST has 0" ;;
fast_bytes)
  # two settings differ: both are named
  refused fast_bytes "WEFT_FAST_BYTES=4096 WEFT_HIERARCHICAL=1" "WEFT_HIERARCHICAL: rank 0 has -1, rank $LAST has 1"
  for ((r = 0; r < NP; r++)); do
    out fast_bytes "$r" | grep -qF "WEFT_FAST_BYTES: rank 0 has 8192, rank $LAST has 4096" ||
      fail "fast_bytes: rank $r's error does not name WEFT_FAST_BYTES too"
  done
  ;;
equal)
  runs_ok equal "HOROVOD_FUSION_THRESHOLD=0x8000000 WEFT_TRANSPORT=SHM WEFT_CYCLE_TIME_MS=0.0" \
    WEFT_FUSION_THRESHOLD=134217728 WEFT_TRANSPORT=shm
  ;;
per_rank)
  runs_ok per_rank \
    "WEFT_CACHE_CAPACITY=1 WEFT_LOG_LEVEL=error WEFT_TIMEOUT_SECONDS=45 WEFT_FAST_WAIT_SECONDS=0.5 WEFT_SHM_COPY=memcpy"
  ;;
bad_value)
  run bad_value WEFT_TRANSPORT=carrier-pigeon
  [ "$rc" -ne 0 ] || fail "bad_value: the job succeeded"
  out bad_value "$LAST" | grep -qF "WEFT_TRANSPORT=carrier-pigeon is not a value it takes: auto, shm, tcp or mpi" ||
    fail "bad_value: rank $LAST's error does not name the value and what is taken"
  out bad_value "$LAST" | grep -q "INITERR WEFT_ERR_INVALID_ARGUMENT" || fail "bad_value: not INVALID_ARGUMENT"
  run bad_number "" WEFT_FUSION_THRESHOLD=64MB
  for ((r = 0; r < NP; r++)); do
    out bad_number "$r" | grep -qF "WEFT_FUSION_THRESHOLD=64MB is not an integer" ||
      fail "bad_number: rank $r's error does not name the value"
  done
  ;;
bad_algo)
  run bad_algo "" WEFT_ALGO_BROADCAST=binomial
  [ "$rc" -ne 0 ] || fail "bad_algo: the job succeeded"
  for ((r = 0; r < NP; r++)); do
    out bad_algo "$r" | grep -qF "WEFT_ALGO_BROADCAST=binomial: broadcast has no algorithm of that name (it has: tree, chain, hier, cma, shm, numa)" ||
      fail "bad_algo: rank $r's error does not name the algorithm and the ones there are"
    out bad_algo "$r" | grep -q "INITERR WEFT_ERR_NOT_FOUND " || fail "bad_algo: rank $r's weft_init did not fail NOT_FOUND"
  done
  ;;
unknown)
  runs_ok unknown "" WEFT_FUSION_TRESHOLD=0
  grep -qF "WEFT_FUSION_TRESHOLD is set but is no weft setting (did you mean WEFT_FUSION_THRESHOLD?)" \
    "$T/unknown/rank.0/stderr" || fail "unknown: rank 0 did not warn about WEFT_FUSION_TRESHOLD"
  ;;
*)
  echo "settings.sh: unknown case '$CASE'" >&2
  exit 2
  ;;
esac
if [ "$FAILS" -ne 0 ]; then
  echo "FAILED: settings $CASE np$NP ($FAILS failure(s))"
  exit 1
fi
echo "PASS: settings $CASE np$NP"
