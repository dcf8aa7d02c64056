#!/usr/bin/env bash
# run_fuzzers.sh - builds the libFuzzer targets (tests/fuzz) with clang in a
# build directory of their own, replays each target's committed corpus and
# then fuzzes each for a bounded time:
#
#   tests/fuzz/run_fuzzers.sh [SECONDS-PER-TARGET [TARGET...]]   replay, then fuzz (what CI runs)
#   tests/fuzz/run_fuzzers.sh --replay [TARGET...]                replay only (seconds: no fuzzing)
#   tests/fuzz/run_fuzzers.sh --merge [TARGET...]                 refresh the committed corpus
#
# SECONDS defaults to 60 (four targets: about 4 minutes, plus the build and
# the replay); 0 replays only. TARGETs default to every target (fuzz_wire
# fuzz_handshake fuzz_coord fuzz_relay). Environment:
#   WEFT_FUZZ_BUILD_DIR  build directory (default: build-fuzz in the source tree)
#   WEFT_WERROR          ON: warnings are errors (CI)
#   CC                   the clang to use (default: clang)
#   WEFT_FUZZ_MERGE_FROM --merge: directories of inputs to merge in (default:
#                        BUILD/fuzz/<target>/corpus, what earlier runs found)
#   WEFT_FUZZ_MERGE_MAX  --merge: at most this many inputs per target (400);
#                        a larger set covering every feature is redone by edges
# Each target first writes its seed corpus (valid encodings and scenarios,
# made by the target itself with WEFT_FUZZ_SEEDS) to BUILD/fuzz/<target>/seeds.
# Replay runs every input of tests/fuzz/corpus/<target> (the committed
# corpus: minimized inputs from campaigns, and every input that once found a
# bug, named regress-*) and the seeds once; it writes nothing into the
# source tree. Fuzzing starts from the same inputs plus what earlier runs
# kept in BUILD/fuzz/<target>/corpus (so a later run resumes). --merge
# rewrites tests/fuzz/corpus/<target> as the smallest set of inputs that
# covers what the committed corpus and the merged directories cover beyond
# the seeds (libFuzzer -set_cover_merge=1, clang 15 on; else -merge=1),
# keeping every regress-* input; review and commit the result. Exit status: 0 when every target ran without a
# finding; 1 otherwise, after printing each crashing input's path and how to
# reproduce it; 2 on a usage error.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
mode=fuzz
case ${1:-} in
  --replay) mode=replay; shift ;;
  --merge) mode=merge; shift ;;
  --*) echo "run_fuzzers.sh: unknown option $1" >&2; exit 2 ;;
esac
secs=0
if [ $mode = fuzz ]; then
  secs=${1:-60}
  shift $(($# > 0 ? 1 : 0))
  case $secs in '' | *[!0-9]*) echo "run_fuzzers.sh: seconds must be a whole number, got '$secs'" >&2; exit 2 ;; esac
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_wire fuzz_handshake fuzz_coord fuzz_relay)
B=${WEFT_FUZZ_BUILD_DIR:-$src/build-fuzz}
cc=${CC:-clang}
if ! command -v "$cc" >/dev/null; then
  echo "run_fuzzers.sh: $cc not found (libFuzzer needs clang: apt-get install clang)" >&2
  exit 2
fi

mkdir -p "$B"
t_all=$SECONDS
echo "=== building ${targets[*]} in $B with $cc"
if ! CC=$cc cmake -S "$src" -B "$B" -DWEFT_BUILD_FUZZERS=ON -DWEFT_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DWEFT_WERROR="${WEFT_WERROR:-OFF}" \
  >"$B/configure.log" 2>&1; then
  cat "$B/configure.log" >&2
  echo "run_fuzzers.sh: cmake configure failed" >&2
  exit 1
fi
cmake --build "$B" -j2 --target "${targets[@]}" || { echo "run_fuzzers.sh: build failed" >&2; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
lim=(-timeout=30 -rss_limit_mb=2048)
failed=()

# report T LOG RC: prints a failed run's end and its saved inputs; 1 if it failed
report() {
  local t=$1 log=$2 rc=$3 out=$B/fuzz/$1 finds
  finds=$(ls "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* 2>/dev/null)
  [ "$rc" -eq 0 ] && [ -z "$finds" ] && return 0
  echo "FAIL $t (exit $rc):" >&2
  grep -v '^#[0-9]' "$log" | tail -40 >&2
  for f in $finds; do
    echo "  crashing input: $f" >&2
    echo "  reproduce:      $B/tests/fuzz/$t $f" >&2
  done
  [ -n "$finds" ] || echo "  (no input saved; full log: $log)" >&2
  return 1
}

for t in "${targets[@]}"; do
  bin=$B/tests/fuzz/$t
  out=$B/fuzz/$t
  committed=$here/corpus/$t
  [ -x "$bin" ] || { echo "run_fuzzers.sh: no $bin" >&2; failed+=("$t"); continue; }
  rm -rf "$out/seeds" "$out/empty" "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-*
  mkdir -p "$out/seeds" "$out/corpus" "$out/empty"
  if ! WEFT_FUZZ_SEEDS=$out/seeds "$bin" >"$out/seeds.log" 2>&1; then
    cat "$out/seeds.log" >&2
    echo "FAIL $t: cannot write its seeds, or one of them fails (targets that build scenarios run each as they write it)" >&2
    failed+=("$t")
    continue
  fi
  dirs=("$out/seeds")
  [ -d "$committed" ] && dirs+=("$committed")
  ncommitted=$(ls "$committed" 2>/dev/null | wc -l)

  if [ $mode = merge ]; then
    # what the seeds cover is the baseline: keep only inputs that add to it;
    # the smallest set libFuzzer finds (-set_cover_merge where it has it),
    # by every feature, or by edges alone when that exceeds the cap
    from=(${WEFT_FUZZ_MERGE_FROM:-$out/corpus})
    work=$out/merge
    how=-merge=1
    "$bin" -help=1 2>&1 | grep -q set_cover_merge && how=-set_cover_merge=1
    for counters in 1 0; do
      rm -rf "$work" && mkdir -p "$work"
      cp "$out"/seeds/* "$work"/
      if ! "$bin" $how -use_counters=$counters "${lim[@]}" -artifact_prefix="$out/" "$work" "${dirs[@]:1}" "${from[@]}" \
        >"$out/merge.log" 2>&1; then
        report "$t" "$out/merge.log" 1
        failed+=("$t")
        continue 2
      fi
      for s in "$out"/seeds/*; do rm -f "$work/$(basename "$s")"; done
      [ "$(ls "$work" | wc -l)" -le "${WEFT_FUZZ_MERGE_MAX:-400}" ] && break
      echo "$t: $(ls "$work" | wc -l) inputs cover every feature, over ${WEFT_FUZZ_MERGE_MAX:-400}: merging by edges alone"
    done
    mkdir -p "$committed"
    for r in "$committed"/regress-*; do # kept under their own names
      [ -f "$r" ] || continue
      for w in "$work"/*; do cmp -s "$r" "$w" && rm -f "$w"; done
    done
    find "$committed" -maxdepth 1 -type f ! -name 'regress-*' -delete
    cp "$work"/* "$committed"/ 2>/dev/null
    echo "$t: committed corpus $ncommitted -> $(ls "$committed" | wc -l) inputs," \
      "$(cat "$committed"/* 2>/dev/null | wc -c) bytes (regress-* kept)"
    continue
  fi

  # replay: every committed input and seed once (the first directory, empty,
  # takes anything libFuzzer would write: never the source tree)
  t0=$SECONDS
  "$bin" -runs=0 "${lim[@]}" -artifact_prefix="$out/" "$out/empty" "${dirs[@]}" >"$out/replay.log" 2>&1
  rc=$?
  echo "$t: replayed $ncommitted committed inputs and $(ls "$out/seeds" | wc -l) seeds in $((SECONDS - t0)) s"
  if ! report "$t" "$out/replay.log" $rc; then
    failed+=("$t")
    continue
  fi
  [ "$secs" -gt 0 ] || continue

  echo "=== $t: ${secs} s, from those and $(ls "$out/corpus" | wc -l) inputs kept from earlier runs"
  t0=$SECONDS
  "$bin" -max_total_time="$secs" "${lim[@]}" -print_final_stats=1 -artifact_prefix="$out/" \
    "$out/corpus" "${dirs[@]}" >"$out/log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$out/log" | tail -1)
  echo "$t: ${execs:-?} executions in $((SECONDS - t0)) s, ${cov:-cov: ?}, corpus $(ls "$out/corpus" | wc -l) inputs"
  report "$t" "$out/log" $rc || failed+=("$t")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "run_fuzzers.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
case $mode in
  merge) echo "run_fuzzers.sh: merged ${#targets[@]} target(s); review tests/fuzz/corpus and commit it" ;;
  *) [ "$secs" -gt 0 ] && what="replayed and ran ${secs} s each" || what="replayed"
     echo "run_fuzzers.sh: all ${#targets[@]} target(s) $what without a finding ($((SECONDS - t_all)) s in all)" ;;
esac
