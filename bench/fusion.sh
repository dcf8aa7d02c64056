#!/usr/bin/env bash
# fusion.sh - tensor fusion's effect: K tensors submitted at once per step,
# fused (default WEFT_FUSION_THRESHOLD) vs unfused (WEFT_FUSION_THRESHOLD=0),
# on each path a step can take, interleaved PASSES times in one run; prints
# the median time per step and the ratio unfused / fused.
#
# Paths (2 ranks):
#   board        one host, the default: every tensor that fits is agreed and
#                reduced on the shared-memory board, without the coordinator
#   coord-shm    one host, WEFT_FAST=0: coordinator negotiation over TCP
#                loopback, data through the shared-memory staging
#   coord-tcp    one host, WEFT_TRANSPORT=tcp: negotiation and data over TCP
#   netns-tcp    two namespace "hosts" (tests/cluster/netns.sh, root only),
#                one rank each, TCP over a veth pair (NETNS=1)
#
# usage: bench/fusion.sh          (a built weft in build/)
# env:   BUILD (build), PASSES (3), NETNS (0: 1 adds netns-tcp; needs root),
#        WORKLOADS ("200x4K 16x4M"), PATHS ("board coord-shm coord-tcp"; "" none)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
PASSES=${PASSES:-3}
WORKLOADS=${WORKLOADS:-200x4K 16x4M}
PATHS=${PATHS-board coord-shm coord-tcp}

# one step time (µs) of weft-bench: $1 path, $2 K, $3 size, $4 threshold
step_us() {
  local path=$1 k=$2 size=$3 thr=$4 n=200 env=()
  case $size in *M) n=10 ;; esac
  case $path in
    coord-shm) env=(WEFT_FAST=0) ;;
    coord-tcp) env=(WEFT_TRANSPORT=tcp) ;;
  esac
  if [ "$path" = netns-tcp ]; then
    "$BUILD/weftrun" -np 2 -H "$NETNS_HOSTS" --rsh 'ip netns exec {host}' -x WEFT_FUSION_THRESHOLD="$thr" \
      "$BUILD/weft-bench" -k "$k" -b "$size" -e "$size" -n "$n" -w 3 2>&1
  else
    env "${env[@]}" WEFT_FUSION_THRESHOLD="$thr" timeout 300 "$BUILD/weftrun" -np 2 \
      "$BUILD/weft-bench" -k "$k" -b "$size" -e "$size" -n "$n" -w 3 2>&1
  fi | awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ { print $4 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

inner() {
  local path wl k size pass fused unfused
  for path in $PATHS; do
    [ "$path" = netns-tcp ] && [ -z "${NETNS_HOSTS:-}" ] && continue
    for wl in $WORKLOADS; do
      k=${wl%x*}
      size=${wl#*x}
      : >/tmp/fusion.$$.f
      : >/tmp/fusion.$$.u
      for pass in $(seq "$PASSES"); do
        step_us "$path" "$k" "$size" 134217728 >>/tmp/fusion.$$.f
        step_us "$path" "$k" "$size" 0 >>/tmp/fusion.$$.u
      done
      fused=$(median </tmp/fusion.$$.f)
      unfused=$(median </tmp/fusion.$$.u)
      echo "$path $k $size ${fused:-nan} ${unfused:-nan}"
    done
  done
  rm -f /tmp/fusion.$$.f /tmp/fusion.$$.u
}

if [ "${1:-}" = --inner ]; then
  NETNS_HOSTS=""
  for h in ${WEFT_CLUSTER_HOSTS:-}; do NETNS_HOSTS="$NETNS_HOSTS${NETNS_HOSTS:+,}$h:1"; done
  export NETNS_HOSTS
  inner
  exit
fi
[ "${NETNS:-0}" = 1 ] && PATHS="$PATHS netns-tcp"
export BUILD PASSES WORKLOADS PATHS
if [ "${NETNS:-0}" = 1 ]; then
  out=$("$REPO/tests/cluster/netns.sh" run 2 "$0" --inner) || { echo "$out"; exit 1; }
else
  out=$("$0" --inner)
fi
echo "# 2 ranks; median of $PASSES interleaved passes; time per step (K tensors submitted at once, all waited for)"
echo
echo "| path | tensors | fused (µs) | unfused (µs) | unfused / fused |"
echo "|---|---|---|---|---|"
echo "$out" | awk '{ r = ($4 > 0 && $5 > 0) ? sprintf("%.2f", $5 / $4) : "-"; printf "| %s | %s x %s | %.0f | %.0f | %s |\n", $1, $2, $3, $4, $5, r }'
