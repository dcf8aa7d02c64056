#!/usr/bin/env bash
# run_fuzzers.sh - builds the libFuzzer targets (tests/fuzz) with clang in a
# build directory of their own and runs each for a bounded time:
#
#   tests/fuzz/run_fuzzers.sh [SECONDS-PER-TARGET [TARGET...]]
#
# SECONDS defaults to 60 (two targets: about 2 minutes, plus the build).
# TARGETs default to every target (fuzz_wire fuzz_handshake). Environment:
#   WEFT_FUZZ_BUILD_DIR  build directory (default: build-fuzz in the source tree)
#   CC                   the clang to use (default: clang)
# Each target first writes its seed corpus (valid encodings, made by the
# target itself with WEFT_FUZZ_SEEDS) to BUILD/fuzz/<target>/seeds; what it
# finds is kept in BUILD/fuzz/<target>/corpus, so a later run resumes. Exit
# status: 0 when every target ran its time without a finding; 1 otherwise,
# after printing each crashing input's path and how to reproduce it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
secs=${1:-60}
shift $(($# > 0 ? 1 : 0))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_wire fuzz_handshake)
case $secs in '' | *[!0-9]*) echo "run_fuzzers.sh: seconds must be a whole number, got '$secs'" >&2; exit 2 ;; esac
B=${WEFT_FUZZ_BUILD_DIR:-$src/build-fuzz}
cc=${CC:-clang}
if ! command -v "$cc" >/dev/null; then
  echo "run_fuzzers.sh: $cc not found (libFuzzer needs clang: apt-get install clang)" >&2
  exit 2
fi

mkdir -p "$B"
echo "=== building ${targets[*]} in $B with $cc"
if ! CC=$cc cmake -S "$src" -B "$B" -DWEFT_BUILD_FUZZERS=ON -DWEFT_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  >"$B/configure.log" 2>&1; then
  cat "$B/configure.log" >&2
  echo "run_fuzzers.sh: cmake configure failed" >&2
  exit 1
fi
cmake --build "$B" -j2 --target "${targets[@]}" || { echo "run_fuzzers.sh: build failed" >&2; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for t in "${targets[@]}"; do
  bin=$B/tests/fuzz/$t
  out=$B/fuzz/$t
  [ -x "$bin" ] || { echo "run_fuzzers.sh: no $bin" >&2; failed+=("$t"); continue; }
  rm -rf "$out/seeds" "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-*
  mkdir -p "$out/seeds" "$out/corpus"
  if ! WEFT_FUZZ_SEEDS=$out/seeds "$bin" >"$out/seeds.log" 2>&1; then
    cat "$out/seeds.log" >&2
    echo "FAIL $t: cannot write its seeds" >&2
    failed+=("$t")
    continue
  fi
  echo "=== $t: ${secs} s, $(ls "$out/seeds" | wc -l) seeds, $(ls "$out/corpus" | wc -l) inputs kept from earlier runs"
  t0=$SECONDS
  "$bin" -max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$out/" \
    "$out/corpus" "$out/seeds" >"$out/log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$out/log" | tail -1)
  echo "$t: ${execs:-?} executions in $((SECONDS - t0)) s, ${cov:-cov: ?}, corpus $(ls "$out/corpus" | wc -l) inputs"
  finds=$(ls "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* 2>/dev/null)
  if [ $rc -ne 0 ] || [ -n "$finds" ]; then
    echo "FAIL $t (exit $rc):" >&2
    grep -v '^#[0-9]' "$out/log" | tail -40 >&2
    for f in $finds; do
      echo "  crashing input: $f" >&2
      echo "  reproduce:      $bin $f" >&2
    done
    [ -n "$finds" ] || echo "  (no input saved; full log: $out/log)" >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "run_fuzzers.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "run_fuzzers.sh: all ${#targets[@]} target(s) ran ${secs} s each without a finding"
