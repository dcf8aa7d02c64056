#!/usr/bin/env bash
# paired.sh - two weft variants side by side, in paired, interleaved passes:
# two builds (before and after a change) or one build under two settings
# (WEFT_ALGO_ALLREDUCE=cma against =shm). This machine's speed drifts up to
# 2x within minutes, so every (ranks, op) cell runs both variants back to
# back, alternating which goes first, PASSES times; the report gives each
# variant's median time per size and the median of the per-pass ratios B/A,
# with the spread of those ratios (min..max) as the noise to judge it by.
#
# usage: bench/paired.sh 'A=BUILD_A[ VAR=VALUE ...]' 'B=BUILD_B[ VAR=VALUE ...]'
#   e.g. bench/paired.sh 'before=/tmp/weft-before' 'after=build'
#        bench/paired.sh 'cma=build WEFT_ALGO_ALLREDUCE=cma' 'shm=build WEFT_ALGO_ALLREDUCE=shm'
# env:   PASSES (5), NS ("2 4"), OPS (all five), SIZES (8,1K,64K,1M,16M),
#        TARGET seconds per size and run (0.2), OUT (report; default stdout),
#        RUN_TIMEOUT seconds per launch (120)
set -uo pipefail
[ $# -eq 2 ] || { sed -n 2,16p "$0" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
PASSES=${PASSES:-5}
NS=${NS:-2 4}
OPS=${OPS:-allreduce allgather broadcast alltoall reducescatter}
SIZES=${SIZES:-8,1K,64K,1M,16M}
TARGET=${TARGET:-0.2}
T=${RUN_TIMEOUT:-120}
RAW=$(mktemp -d "${TMPDIR:-/tmp}/weft-paired.XXXXXX")
trap 'rm -rf "$RAW"' EXIT

declare -a LABEL BUILD ENVS
i=0
for spec in "$1" "$2"; do
  LABEL[$i]=${spec%%=*}
  rest=${spec#*=}
  b=${rest%% *}
  case $b in /*) ;; *) b=$REPO/$b ;; esac
  [ -x "$b/weftrun" ] && [ -x "$b/weft-bench" ] || { echo "paired.sh: no weftrun/weft-bench in $b" >&2; exit 2; }
  BUILD[$i]=$b
  [ "$rest" = "${rest#* }" ] && ENVS[$i]="" || ENVS[$i]=${rest#* }
  i=$((i + 1))
done

run() { # variant pass np op
  local v=$1 p=$2 n=$3 op=$4
  # shellcheck disable=SC2086
  env ${ENVS[$v]} timeout "$T" "${BUILD[$v]}/weftrun" -np "$n" "${BUILD[$v]}/weft-bench" --op "$op" \
    --sizes "$SIZES" -T "$TARGET" --csv 2>/dev/null |
    sed -n 's/^\[0\] //p' | grep -v '^#' | grep -v '^op,' |
    awk -F, -v v="${LABEL[$v]}" -v p="$p" -v n="$n" '{print v "," p "," n "," $1 "," $6 "," $9}' >>"$RAW/rows.csv"
}

for p in $(seq 1 "$PASSES"); do
  for n in $NS; do
    for op in $OPS; do
      if [ $((p % 2)) -eq 1 ]; then run 0 "$p" "$n" "$op"; run 1 "$p" "$n" "$op"
      else run 1 "$p" "$n" "$op"; run 0 "$p" "$n" "$op"; fi
    done
  done
  echo "[paired] pass $p of $PASSES done" >&2
done

python3 - "$RAW/rows.csv" "${LABEL[0]}" "${LABEL[1]}" "$PASSES" "${ENVS[0]}" "${ENVS[1]}" >"${OUT:-/dev/stdout}" <<'EOF'
import collections, statistics, sys
rows, a, b, passes, ea, eb = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
t = collections.defaultdict(dict)  # (n, op, bytes) -> {(label, pass): us}
for line in open(rows):
    v, p, n, op, size, us = line.strip().split(",")
    t[(int(n), op, int(size))][(v, int(p))] = float(us)
def fmt(b):
    for s, u in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if b >= s and b % s == 0: return "%d %s" % (b // s, u)
    return "%d B" % b
print("# %s vs %s: %d paired, interleaved passes" % (a, b, passes))
print()
print("A = %s%s; B = %s%s. Times are medians over the passes (us); B/A is the median of the" % (a, " (" + ea + ")" if ea else "", b, " (" + eb + ")" if eb else ""))
print("per-pass ratios of times (below 1: B is faster), with their range across passes as the noise.")
print()
print("| ranks | op | size | %s us | %s us | B/A | range |" % (a, b))
print("|---|---|---|---|---|---|---|")
allr = []
for (n, op, size) in sorted(t, key=lambda k: (k[0], k[1], k[2])):
    d = t[(n, op, size)]
    ta = [d[(a, p)] for p in range(1, passes + 1) if (a, p) in d]
    tb = [d[(b, p)] for p in range(1, passes + 1) if (b, p) in d]
    r = [d[(b, p)] / d[(a, p)] for p in range(1, passes + 1) if (a, p) in d and (b, p) in d and d[(a, p)] > 0]
    if not ta or not tb or not r: continue
    allr.append(statistics.median(r))
    print("| %d | %s | %s | %.1f | %.1f | %.2f | %.2f..%.2f |" % (n, op, fmt(size), statistics.median(ta),
          statistics.median(tb), statistics.median(r), min(r), max(r)))
if allr:
    print()
    print("Median of the cells' ratios: %.3f over %d cells; %d cells faster by > 10%%, %d slower by > 10%%." % (
        statistics.median(allr), len(allr), sum(x < 0.9 for x in allr), sum(x > 1.1 for x in allr)))
EOF
