#!/usr/bin/env bash
# p2p_compare.sh BUILD_DIR [ITERS] [BASE_BUILD_DIR] - weft-bench --op
# pingpong/sendrecv next to Open MPI's MPI_Send/MPI_Recv ping-pong and
# MPI_Sendrecv ring shift, 2 ranks on this host, interleaved (weft, mpi, weft,
# mpi) so that the machine's drift hits both alike. Prints both tables per
# pass. With BASE_BUILD_DIR (another build of weft, say the one before a
# change), its weft-bench runs first in each pass too (base, weft, mpi).
# RT=1 runs every job at real-time priority (chrt -f 10, as root): on a
# machine other work keeps busy, the ranks then run as on idle cores (both
# weft's and Open MPI's); the runs are short, and the kernel keeps 5% of
# each second for the rest (sched_rt_runtime_us).
set -euo pipefail
B=${1:?usage: p2p_compare.sh BUILD_DIR [ITERS] [BASE_BUILD_DIR]}
ITERS=${2:-200}
BASE=${3:-}
SIZES=8,1024,65536,1048576,4194304,16777216
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
mpicc -O2 -Wall -o "$OUT/p2p_mpi" "$HERE/p2p_mpi.c"
PRIO=()
[ "${RT:-0}" = 1 ] && PRIO=(chrt -f 10)
MPIRUN="${PRIO[*]} mpirun --allow-run-as-root --oversubscribe -np 2"
for pass in 1 2; do
  for op in pingpong sendrecv; do
    if [ -n "$BASE" ]; then
      echo "## pass $pass, $op: weft (base: $BASE)"
      "${PRIO[@]}" "$BASE/weftrun" -np 2 "$BASE/weft-bench" --op $op --sizes $SIZES -n "$ITERS" | sed 's/^\[0\] //'
    fi
    echo "## pass $pass, $op: weft"
    "${PRIO[@]}" "$B/weftrun" -np 2 "$B/weft-bench" --op $op --sizes $SIZES -n "$ITERS" | sed 's/^\[0\] //'
    echo "## pass $pass, $op: Open MPI"
    $MPIRUN "$OUT/p2p_mpi" $op $SIZES "$ITERS"
  done
done
