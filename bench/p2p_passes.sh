#!/usr/bin/env bash
# p2p_passes.sh OP PASSES ITERS BASE_BUILD NEW_BUILD - weft-bench --op OP
# (sendrecv: ring shift, pingpong: one-way) of two weft builds next to Open
# MPI's bench/p2p_mpi.c, 2 ranks on this host, interleaved per pass (base,
# new, mpi), every job at real-time priority (chrt -f 10, as root: on a
# machine other work keeps busy the ranks then run as on idle cores; see
# p2p_compare.sh), sizes 8 B to 16 MiB. Prints each pass's times (us), then
# a markdown table: medians over the passes and the per-pass new / Open MPI
# ratios with their median.
set -euo pipefail
OP=${1:?usage: p2p_passes.sh OP PASSES ITERS BASE_BUILD NEW_BUILD}
PASSES=$2
ITERS=$3
BASE=$(cd "$4" && pwd)
NEW=$(cd "$5" && pwd)
SIZES=8,1024,65536,262144,1048576,4194304,16777216
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
mpicc -O2 -Wall -o "$OUT/p2p_mpi" "$HERE/p2p_mpi.c"
weft() { chrt -f 10 "$1/weftrun" -np 2 "$1/weft-bench" --op "$OP" --sizes $SIZES -n "$ITERS" -w 50 2>&1 |
  awk '/^\[0\] +[0-9]/ {printf " %s", $4}'; }
{
  echo "## $OP"
  for ((p = 1; p <= PASSES; p++)); do
    echo "base $(weft "$BASE")"
    echo "new $(weft "$NEW")"
    echo "mpi $(chrt -f 10 mpirun --allow-run-as-root --oversubscribe -np 2 "$OUT/p2p_mpi" "$OP" $SIZES "$ITERS" 2>&1 |
      awk '/^ +[0-9]/ {printf " %s", $3}')"
  done
} | tee "$OUT/runs"
/usr/bin/python3 - "$OUT/runs" <<'PY'
import statistics as st, sys
sizes = ["8 B", "1 KiB", "64 KiB", "256 KiB", "1 MiB", "4 MiB", "16 MiB"]
d = {}
for line in open(sys.argv[1]):
    p = line.split()
    if p and p[0] in ("base", "new", "mpi"):
        d.setdefault(p[0], []).append([float(x) for x in p[1:]])
n = len(d["mpi"])
print("\n| size | base us | new us | Open MPI us | new / Open MPI per pass | median |")
print("|---|---|---|---|---|---|")
for i, s in enumerate(sizes):
    r = [d["new"][k][i] / d["mpi"][k][i] for k in range(n)]
    med = lambda who: st.median(x[i] for x in d[who])
    print(f"| {s} | {med('base'):.2f} | {med('new'):.2f} | {med('mpi'):.2f} | "
          f"{', '.join(f'{x:.2f}' for x in r)} | {st.median(r):.2f}x |")
PY
