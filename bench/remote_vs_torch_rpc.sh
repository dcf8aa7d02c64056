#!/usr/bin/env bash
# remote_vs_torch_rpc.sh BUILD_DIR [PASSES] [ITERS] [BASE_BUILD_DIR] - weft's remote calls
# (bench/remote_bench.c: weft_remote_execute + weft_remote_wait) next to
# torch.distributed.rpc's rpc_sync on the TensorPipe agent
# (bench/torch_rpc.py), 2 ranks, rank 0 calling rank 1 one call at a time:
# an empty call, and calls with a 1 MiB and a 64 MiB uint8 argument.
#   host:  both ranks on this host (weft: control frames over loopback TCP,
#          large tensors through shared memory / CMA; torch: TensorPipe's
#          defaults, shared memory and CMA)
#   netns: one rank in each of 2 network-namespace hosts
#          (tests/cluster/netns.sh; root): TCP over a veth pair for both
#          (torch --tcp-only: its uv transport and basic channel, as between
#          two machines; weft sees two hosts, so it never uses shm there)
# PASSES interleaved passes (default 3), each running weft and torch back to
# back in both settings, the order alternating per pass; the load average is
# printed with each pass. Prints every line, then a markdown summary:
# medians over the passes of each run's median call time, and ratios.
# With BASE_BUILD_DIR (another build of weft, say the one before a change),
# its runs ("weftbase") go first in each pass's weft turn, and the summary
# adds base / weft per pass. SETTINGS=host skips the namespace hosts.
# Needs Debian's /usr/bin/python3 with torch (or PYTHON=...).
set -euo pipefail
B=$(cd "${1:?usage: remote_vs_torch_rpc.sh BUILD_DIR [PASSES] [ITERS] [BASE_BUILD_DIR]}" && pwd)
PASSES=${2:-3}
ITERS=${3:-200}
BASE=${4:+$(cd "$4" && pwd)}
SETTINGS=${SETTINGS:-host netns}
SIZES=0,1048576,67108864
PY=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/.." && pwd)
OUT=$(mktemp -d)
SUB=""
cleanup() {
  [ -n "$SUB" ] && bash "$SRC/tests/cluster/netns.sh" down "$SUB"
  rm -rf "$OUT"
}
trap cleanup EXIT
cc -O2 -Wall -I"$SRC/include" -o "$OUT/remote_bench" "$HERE/remote_bench.c" -L"$B" -lweft -Wl,-rpath,"$B"
[ -n "$BASE" ] && cc -O2 -Wall -I"$SRC/include" -o "$OUT/remote_bench_base" "$HERE/remote_bench.c" -L"$BASE" -lweft \
  -Wl,-rpath,"$BASE"
H1="" H2=""
if [[ " $SETTINGS " == *" netns "* ]]; then
  net=$(bash "$SRC/tests/cluster/netns.sh" up 2)
  SUB=${net%% *}
  HOSTS=${net#* }
  H1=${HOSTS%% *}
  H2=${HOSTS#* }
fi
PORT=$((29500 + RANDOM % 400))
load() { cut -d' ' -f1 /proc/loadavg; }

# run LIB SETTING: one run's lines, "SETTING,LIB,SIZE,ITERS,MEDIAN_US,MIN_US,MBPS"
run() {
  PORT=$((PORT + 1))
  case $1/$2 in
  weft/host) "$B/weftrun" -np 2 --timeout 600 "$OUT/remote_bench" "$ITERS" $SIZES ;;
  weft/netns)
    "$B/weftrun" -np 2 -H "$H1:1,$H2:1" --rsh 'ip netns exec {host}' --timeout 600 "$OUT/remote_bench" "$ITERS" $SIZES ;;
  weftbase/host)
    "$BASE/weftrun" -np 2 --timeout 600 "$OUT/remote_bench_base" "$ITERS" $SIZES | sed 's/weft,/weftbase,/' ;;
  weftbase/netns)
    "$BASE/weftrun" -np 2 -H "$H1:1,$H2:1" --rsh 'ip netns exec {host}' --timeout 600 "$OUT/remote_bench_base" \
      "$ITERS" $SIZES | sed 's/weft,/weftbase,/' ;;
  torch/host) "$PY" "$HERE/torch_rpc.py" --port $PORT "$ITERS" $SIZES 2>/dev/null ;;
  torch/netns)
    local e="TP_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0"
    ip netns exec "$H2" env $e "$PY" "$HERE/torch_rpc.py" --rank 1 --addr "$H1" --port $PORT --tcp-only "$ITERS" \
      $SIZES 2>/dev/null &
    ip netns exec "$H1" env $e "$PY" "$HERE/torch_rpc.py" --rank 0 --addr "$H1" --port $PORT --tcp-only "$ITERS" \
      $SIZES 2>/dev/null
    wait
    ;;
  esac | sed -n 's/^\(\[0\] \)\{0,1\}\(weftbase\|weft\|torch\),/\2,/p' | sed "s/^/$2,/"
}

for pass in $(seq "$PASSES"); do
  w="weft"
  [ -n "$BASE" ] && w="weftbase weft"
  if [ $((pass % 2)) = 1 ]; then order="$w torch"; else order="torch $w"; fi
  for setting in $SETTINGS; do
    echo "## pass $pass, $setting, load $(load)"
    for lib in $order; do run $lib $setting | tee -a "$OUT/all.csv"; done
  done
done
echo "## end, load $(load)"

python3 - "$OUT/all.csv" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)  # (setting, size, lib) -> [median_us per pass]
for line in open(sys.argv[1]):
    setting, lib, size, iters, med, mn, mbps = line.strip().split(",")
    runs[(setting, int(size), lib)].append(float(med))
print("\n| setting | call | weft (us) | torch rpc_sync (us) | torch / weft | weft MB/s | torch MB/s | per-pass torch/weft |")
print("|---|---|---|---|---|---|---|---|")
for setting in ("host", "netns"):
    for size in sorted({k[1] for k in runs if k[0] == setting}):
        w, t = runs.get((setting, size, "weft"), []), runs.get((setting, size, "torch"), [])
        if not w or not t:
            continue
        mw, mt = statistics.median(w), statistics.median(t)
        name = "empty" if size == 0 else "%d MiB argument" % (size >> 20)
        bw = lambda us: "%.0f" % (size / us) if size else "-"
        per = ", ".join("%.2f" % (b / a) for a, b in zip(w, t))
        print("| %s | %s | %.1f | %.1f | %.2fx | %s | %s | %s |" % (setting, name, mw, mt, mt / mw, bw(mw), bw(mt), per))
base = [k for k in runs if k[2] == "weftbase"]
if base:
    print("\n| setting | call | weft base (us) | weft (us) | base / weft | per-pass base/weft | torch / base |")
    print("|---|---|---|---|---|---|---|")
    for setting, size, _ in sorted(base):
        b = runs[(setting, size, "weftbase")]
        w, t = runs.get((setting, size, "weft"), []), runs.get((setting, size, "torch"), [])
        if not w:
            continue
        mb, mw = statistics.median(b), statistics.median(w)
        name = "empty" if size == 0 else "%d MiB argument" % (size >> 20)
        per = ", ".join("%.2f" % (x / y) for x, y in zip(b, w))
        tb = "%.2fx" % (statistics.median(t) / mb) if t else "-"
        print("| %s | %s | %.1f | %.1f | %.2fx | %s | %s |" % (setting, name, mb, mw, mb / mw, per, tb))
EOF
