#!/usr/bin/env bash
# bench/onehost_scale.sh - issue 28's table: one host, n = 2, 4, 8, 16 ranks
# (one per core), weft-bench -T 0.25 per op, in a few minutes on 16 cores.
#   1. builds weft-bench and weftrun (-DWEFT_WITH_MPI=OFF, Release) in a
#      fresh build folder (NO_BUILD=1: use BUILD as it is);
#   2. per n and op: one weft-bench run (rank 0's csv rows kept), with the
#      engine's info log on, so that each run's "one-host fast path: N
#      completed in shared memory, M diverted" line (rank 0's) says which
#      path the operations took;
#   3. prints the compact table (latency in us for the small sizes, busbw in
#      GB/s from 1 MiB up) and writes it to $OUT/table.md.
# An oversubscribed run (more ranks than cores) works but says nothing about
# speed. Environment: BUILD (default build-scale), NS (default "2 4 8 16"),
# T (weft-bench's time target, default 0.25), OUT (default ./onehost-scale-out),
# JOBS (default: nproc), TIMEOUT (seconds per run, default 120).
set -u
cd "$(dirname "$0")/.."
B=${BUILD:-build-scale}
NS=${NS:-"2 4 8 16"}
T=${T:-0.25}
OUT=${OUT:-$PWD/onehost-scale-out}
J=${JOBS:-$(nproc)}
TO=${TIMEOUT:-120}
mkdir -p "$OUT"
t0=$SECONDS
if [ -z "${NO_BUILD:-}" ]; then
  rm -rf "$B"
  if ! { cmake -S . -B "$B" -DWEFT_WITH_MPI=OFF -DCMAKE_BUILD_TYPE=Release &&
         cmake --build "$B" -j"$J" --target weft-bench weftrun; } >"$OUT/build.log" 2>&1; then
    echo "BUILD FAILED ($OUT/build.log)"; tail -30 "$OUT/build.log"; exit 1
  fi
fi
echo "[onehost_scale $((SECONDS - t0))s] built; $(nproc) cores; n = $NS"

# op, sizes, what the table shows (us: time, bw: busbw)
ROWS="allreduce 8 us
allreduce 1048576 bw
allreduce 134217728 bw
broadcast 8 us
broadcast 1048576 bw
allgather 1024 us
reducescatter 1024 us
alltoall 1024 us"

: >"$OUT/paths.txt"
for n in $NS; do
  for op in allreduce broadcast allgather reducescatter alltoall; do
    sizes=$(echo "$ROWS" | awk -v o="$op" '$1 == o {printf "%s%s", s, $2; s = ","}')
    log="$OUT/n$n.$op"
    WEFT_LOG_LEVEL=info WEFT_LOG_SUBSYS=engine timeout "$TO" "$B/weftrun" -np "$n" --output-filename "$log.out" \
      "$B/weft-bench" --op "$op" --sizes "$sizes" -T "$T" --csv >/dev/null 2>&1
    rc=$?
    r0=$(ls -d "$log.out"/rank.* 2>/dev/null | head -1)
    grep -E "^$op," "$r0/stdout" >"$log.csv" 2>/dev/null
    path=$(grep -o 'one-host fast path: [0-9]* completed in shared memory, [0-9]* diverted' "$r0/stderr" 2>/dev/null | tail -1)
    echo "n=$n $op (exit $rc): ${path:-no board line}" | tee -a "$OUT/paths.txt"
  done
done

# the table: one row per (op, size), one column per n
{
  printf '| op | size |'
  for n in $NS; do printf ' n=%s |' "$n"; done
  printf '\n|---|---|'
  for n in $NS; do printf -- '---|'; done
  printf '\n'
  echo "$ROWS" | while read -r op size what; do
    human=$(awk -v b="$size" 'BEGIN {if (b >= 1048576) printf "%d MiB", b / 1048576; else if (b >= 1024) printf "%d KiB", b / 1024; else printf "%d B", b}')
    printf '| %s | %s |' "$op" "$human"
    for n in $NS; do
      v=$(awk -F, -v s="$size" -v w="$what" '$6 == s {if (w == "us") printf "%.2f us", $9; else printf "%.2f", $11}' \
        "$OUT/n$n.$op.csv" 2>/dev/null)
      printf ' %s |' "${v:-n/a}"
    done
    printf '\n'
  done
} >"$OUT/table.md"
echo "[onehost_scale $((SECONDS - t0))s] busbw in GB/s, latency in us; which path: $OUT/paths.txt"
cat "$OUT/table.md"
