#!/usr/bin/env bash
# elastic_steady.sh BUILD_DIR [RUNS] [STEPS] - the steady-state cost of
# elastic mode (issue 27's 2% target): mp_elastic's training without a
# death (STEPS steps of a 33-element float64 allreduce on 3 ranks, a commit
# every 10), plain `weftrun -np 3` and `weftrun -np 3 --min-np 3` back to
# back, RUNS pairs, the order alternating per pair; prints each pair and the
# median, min and max of the per-pair ratio elastic / plain (training time
# as the program reports it, startup excluded). Best on a quiet machine.
set -uo pipefail
B=${1:?usage: elastic_steady.sh BUILD_DIR [RUNS] [STEPS]}
RUNS=${2:-31}
STEPS=${3:-100000}
W=$B/weftrun P=$B/tests/mp/mp_elastic
ratios=()
for ((r = 1; r <= RUNS; r++)); do
  declare -A v=()
  order=(plain elastic)
  ((r % 2)) || order=(elastic plain)
  for mode in "${order[@]}"; do
    el=()
    [ "$mode" = elastic ] && el=(--min-np 3)
    out=$("$W" -np 3 "${el[@]}" --timeout 120 "$P" --steps "$STEPS" --commit-every 10 --die-worker 99 2>&1)
    v[$mode]=$(sed -n 's/.*elastic-train-seconds \([0-9.]*\).*/\1/p' <<<"$out" | head -1)
  done
  if [ -z "${v[plain]}" ] || [ -z "${v[elastic]}" ]; then
    echo "pair $r: a run FAILED"
    continue
  fi
  echo "pair $r load $(cut -d' ' -f1 /proc/loadavg): plain ${v[plain]} s, elastic ${v[elastic]} s"
  ratios+=("$(awk -v a="${v[elastic]}" -v b="${v[plain]}" 'BEGIN { printf "%.4f", a / b }')")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk -v s="$STEPS" '{ v[NR] = $1 } END {
  if (NR == 0) { print "no pairs"; exit }
  m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
  printf "3 ranks, %d steps: elastic / plain per pair: median %.4f (min %.4f, max %.4f, n=%d)\n", s, m, v[1], v[NR], NR }'
