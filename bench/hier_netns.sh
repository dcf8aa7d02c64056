#!/usr/bin/env bash
# hier_netns.sh - flat vs hierarchical collectives across namespace "hosts".
#
# Builds a test cluster of HOSTS network namespaces (tests/cluster/netns.sh),
# RANKS_PER_HOST ranks each, optionally shapes every host's link to RATE
# (tc tbf, e.g. 1gbit: loopback-fast veths hide what a real network costs),
# and runs weft-bench with WEFT_HIERARCHICAL=0 and =1 interleaved, PASSES
# times, printing busbw per size and the ratio hier / flat.
#
# usage: bench/hier_netns.sh            (needs root and a built weft in build/)
# env:   BUILD (build), HOSTS (2), RANKS_PER_HOST (2), RATE (1gbit; "" = none),
#        OPS (allreduce allgather broadcast), SIZES (-b 1M -e 64M -f 4), PASSES (2)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
HOSTS=${HOSTS:-2}
RPH=${RANKS_PER_HOST:-2}
RATE=${RATE-1gbit}
OPS=${OPS:-allreduce allgather broadcast}
SIZES=${SIZES:--b 1M -e 64M -f 4}
PASSES=${PASSES:-2}
NETNS=$REPO/tests/cluster/netns.sh

inner() {
  local hl="" h
  for h in $WEFT_CLUSTER_HOSTS; do
    hl="$hl${hl:+,}$h:$RPH"
    if [ -n "$RATE" ]; then
      ip netns exec "$h" tc qdisc replace dev eth0 root tbf rate "$RATE" burst 512kb latency 100ms ||
        echo "hier_netns: tc shaping failed on $h; running unshaped" >&2
    fi
  done
  local np=$((HOSTS * RPH)) op pass mode
  echo "# $HOSTS hosts x $RPH ranks, link rate ${RATE:-unshaped}; busbw GB/s (weft-bench)"
  for op in $OPS; do
    for pass in $(seq "$PASSES"); do
      for mode in 0 1; do
        "$BUILD/weftrun" -np "$np" -H "$hl" --rsh 'ip netns exec {host}' -x WEFT_HIERARCHICAL=$mode \
          "$BUILD/weft-bench" --op "$op" $SIZES -n 5 -w 1 2>&1 |
          awk -v op="$op" -v mode="$mode" -v pass="$pass" \
            '$1 == "[0]" && $2 ~ /^[0-9]+$/ { print op, (mode ? "hier" : "flat"), pass, $2, $6 }'
      done
    done
  done
}

if [ "${1:-}" = --inner ]; then
  inner
  exit
fi
export BUILD HOSTS RPH RATE OPS SIZES PASSES
out=$("$NETNS" run "$HOSTS" "$0" --inner) || { echo "$out"; exit 1; }
echo "$out" | grep '^#'
echo
echo "| op | bytes | flat busbw (GB/s) | hier busbw (GB/s) | hier / flat |"
echo "|---|---|---|---|---|"
echo "$out" | grep -v '^#' | awk '
  { k = $1 " " $4; if ($2 == "flat") { f[k] += $5; nf[k]++ } else { h[k] += $5; nh[k]++ }; if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
  END { for (i = 1; i <= n; i++) { k = order[i]; split(k, a, " "); fb = f[k] / nf[k]; hb = h[k] / nh[k];
        printf "| %s | %s | %.3f | %.3f | %.2fx |\n", a[1], a[2], fb, hb, (fb > 0 ? hb / fb : 0) } }'
