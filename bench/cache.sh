#!/usr/bin/env bash
# cache.sh - the response cache's effect on negotiation: 8-byte allreduces
# (so the data costs next to nothing and a step is almost all negotiation),
# K named tensors submitted at once per step, WEFT_CACHE_CAPACITY=1024 (the
# default: a tensor negotiated before is requested by a compact id and, when
# every rank's request is the stored one, validation is skipped) vs 0 (every
# request in full, validated every time), interleaved PASSES times; prints
# the median time per step, and over TCP the loopback bytes per step (the
# control traffic: requests, responses, and 8 bytes of data per tensor).
#
# Paths: coord-tcp (WEFT_TRANSPORT=tcp: negotiation and data over TCP),
# coord-shm (WEFT_FAST=0: the coordinator, with shm data). The one-host
# board (the default for small tensors) does not negotiate through the
# coordinator, so the cache plays no part there.
#
# usage: bench/cache.sh          (a built weft in build/)
# env:   BUILD (build), PASSES (3), NPS ("2 4"), KS ("1 64"), PATHS ("coord-tcp coord-shm")
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
PASSES=${PASSES:-3}
NPS=${NPS:-2 4}
KS=${KS:-1 64}
PATHS=${PATHS:-coord-tcp coord-shm}
TMPF=$(mktemp -d "${TMPDIR:-/tmp}/weft-cache.XXXXXX") || exit 1
trap 'rm -rf "$TMPF"' EXIT

lo_bytes() { cat /sys/class/net/lo/statistics/tx_bytes 2>/dev/null || echo 0; }

# one run: prints "µs_per_step loopback_bytes_per_step"; $1 path, $2 np, $3 K, $4 capacity
run() {
  local path=$1 np=$2 k=$3 cap=$4 n env=() b0 b1 us
  n=$((20000 / k))
  case $path in
    coord-shm) env=(WEFT_FAST=0) ;;
    coord-tcp) env=(WEFT_TRANSPORT=tcp) ;;
  esac
  b0=$(lo_bytes)
  us=$(env "${env[@]}" WEFT_CACHE_CAPACITY="$cap" timeout 300 "$BUILD/weftrun" -np "$np" \
    "$BUILD/weft-bench" -k "$k" -b 8 -e 8 -n "$n" -w 5 2>&1 | awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ { print $4 }')
  b1=$(lo_bytes)
  echo "${us:-nan} $(((b1 - b0) / (n + 5)))"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

echo "# 8-byte allreduces, K tensors per step; median of $PASSES interleaved passes (time per step, µs)"
echo
echo "| path | ranks | K | cache on (µs) | cache off (µs) | off / on | loopback bytes per step on / off |"
echo "|---|---|---|---|---|---|---|"
for path in $PATHS; do
  for np in $NPS; do
    for k in $KS; do
      : >"$TMPF/on"
      : >"$TMPF/off"
      for _ in $(seq "$PASSES"); do
        run "$path" "$np" "$k" 1024 >>"$TMPF/on"
        run "$path" "$np" "$k" 0 >>"$TMPF/off"
      done
      on=$(cut -d' ' -f1 "$TMPF/on" | median)
      off=$(cut -d' ' -f1 "$TMPF/off" | median)
      bon=$(cut -d' ' -f2 "$TMPF/on" | median)
      boff=$(cut -d' ' -f2 "$TMPF/off" | median)
      bytes="-"
      [ "$path" = coord-tcp ] && bytes="$bon / $boff"
      awk -v p="$path" -v np="$np" -v k="$k" -v a="$on" -v b="$off" -v by="$bytes" 'BEGIN {
        r = (a > 0 && b > 0) ? sprintf("%.2f", b / a) : "-"
        printf "| %s | %s | %s | %.1f | %.1f | %s | %s |\n", p, np, k, a, b, r, by }'
    done
  done
done
