#!/bin/bash
# elastic.sh BUILD_DIR [RUNS] - time from a rank's death to the first
# successful allreduce of the re-formed world (issue 27), on this host.
# Runs tests/mp/mp_elastic under `weftrun -np 3 --min-np 2`: worker 2
# SIGKILLs itself at step 23 and prints "elastic-die-at T" (CLOCK_MONOTONIC);
# the new world's rank 0 prints "elastic-reformed-at T" after its first
# allreduce (which follows the state broadcast). Default heartbeat
# settings; each transport (auto: shared memory on one host; tcp) RUNS times
# (default 9), interleaved. Prints every run, then min / median / max in ms,
# and the load average before and after. Then the steady-state cost of
# elastic mode: training time per step without a death, plain weftrun vs
# --min-np, interleaved. NETNS=1 (root): also across 2 network-namespace
# hosts (tests/cluster/netns.sh).
set -u
B=${1:?usage: elastic.sh BUILD_DIR [RUNS]}
RUNS=${2:-9}
W=$B/weftrun P=$B/tests/mp/mp_elastic
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A ms
for ((r = 1; r <= RUNS; r++)); do
  for tr in auto tcp; do
    out=$(WEFT_TRANSPORT=$tr "$W" -np 3 --min-np 2 --elastic-timeout 30 --timeout 60 "$P" --steps 60 \
      --commit-every 10 --die-worker 2 --die-step 23 2>&1)
    d=$(sed -n 's/.*elastic-die-at \([0-9.]*\).*/\1/p' <<<"$out")
    f=$(sed -n 's/.*elastic-reformed-at \([0-9.]*\).*/\1/p' <<<"$out")
    if [ -z "$d" ] || [ -z "$f" ] || ! grep -q "PASS: worker 0" <<<"$out"; then
      echo "run $r $tr: FAILED"; echo "$out" | tail -5; continue
    fi
    v=$(awk -v a="$d" -v b="$f" 'BEGIN { printf "%.1f", (b - a) * 1000 }')
    x=$(sed -n 's/.*elastic-failed-at \([0-9.]*\).*/\1/p' <<<"$out")
    y=$(sed -n 's/.*elastic-finalized-at \([0-9.]*\).*/\1/p' <<<"$out")
    z=$(sed -n 's/.*elastic-init-at \([0-9.]*\).*/\1/p' <<<"$out")
    parts=$(awk -v d="$d" -v x="$x" -v y="$y" -v z="$z" -v f="$f" 'BEGIN {
      printf "detect %.1f, finalize %.1f, init %.1f, sync+allreduce %.1f", (x-d)*1000, (y-x)*1000, (z-y)*1000, (f-z)*1000 }')
    echo "run $r $tr: ${v} ms (worker 0: $parts)"
    ms[$tr]+="$v "
  done
done
for tr in auto tcp; do
  printf '%s: ' "$tr"
  tr ' ' '\n' <<<"${ms[$tr]:-}" | grep . | sort -n | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "no runs"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "n=%d min %.1f ms, median %.1f ms, max %.1f ms\n", NR, v[1], m, v[NR] }'
done
# Steady state: the same training, no death, 2000 steps of a 33-element
# float64 allreduce on 3 ranks, plain weftrun vs elastic mode (whose driver
# is not involved between re-formations), interleaved.
declare -A tt
for ((r = 1; r <= RUNS; r++)); do
  for mode in plain elastic; do
    el=(); [ $mode = elastic ] && el=(--min-np 3)
    out=$("$W" -np 3 "${el[@]}" --timeout 120 "$P" --steps 2000 --commit-every 10 --die-worker 99 2>&1)
    v=$(sed -n 's/.*elastic-train-seconds \([0-9.]*\).*/\1/p' <<<"$out")
    [ -n "$v" ] || { echo "steady $mode run $r: FAILED"; continue; }
    echo "steady run $r $mode: $v s"
    tt[$mode]+="$v "
  done
done
for mode in plain elastic; do
  printf 'steady %s: ' "$mode"
  tr ' ' '\n' <<<"${tt[$mode]:-}" | grep . | sort -n | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "no runs"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "n=%d median %.1f us/step (min %.1f, max %.1f)\n", NR, m / 2000 * 1e6, v[1] / 2000 * 1e6, v[NR] / 2000 * 1e6 }'
done
# Across hosts (NETNS=1; root): 2 network-namespace hosts x 2 workers
# (tests/cluster/netns.sh), weftrun in host 1; worker 3 on host 2 dies.
if [ "${NETNS:-0}" = 1 ]; then
  NS=$(dirname "$0")/../tests/cluster/netns.sh
  read -r SUB H1 H2 < <(bash "$NS" up 2) || { echo "netns: cannot build the cluster"; exit 1; }
  trap 'bash "$NS" down "$SUB"' EXIT
  vals=""
  for ((r = 1; r <= RUNS; r++)); do
    out=$(ip netns exec "$H1" "$W" -np 4 -H "$H1:2,$H2:2" --rsh 'ip netns exec {host}' --network-interfaces eth0 \
      --min-np 3 --elastic-timeout 30 --timeout 60 "$P" --workers 4 --die-worker 3 --die-step 23 --steps 60 \
      --commit-every 10 2>&1)
    d=$(sed -n 's/.*elastic-die-at \([0-9.]*\).*/\1/p' <<<"$out")
    f=$(sed -n 's/.*elastic-reformed-at \([0-9.]*\).*/\1/p' <<<"$out")
    [ -n "$d" ] && [ -n "$f" ] || { echo "netns run $r: FAILED"; continue; }
    v=$(awk -v a="$d" -v b="$f" 'BEGIN { printf "%.1f", (b - a) * 1000 }')
    echo "netns run $r: ${v} ms"
    vals+="$v "
  done
  printf 'netns 2 hosts: '
  tr ' ' '\n' <<<"$vals" | grep . | sort -n | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "no runs"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "n=%d min %.1f ms, median %.1f ms, max %.1f ms\n", NR, v[1], m, v[NR] }'
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
