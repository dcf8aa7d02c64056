#!/usr/bin/env bash
# compare.sh - weft against its peers on this machine, in one session.
#
# Runs weft-bench and the peer harnesses of ../shared/bench/peers (Open MPI,
# MPICH, Gloo, torch.distributed/gloo: whichever are installed) interleaved,
# op by op, for n = 2 and n = 4 ranks, with a memcpy sentinel (the peers'
# `membw sentinel`) right before every launch, because this VM's memory
# bandwidth drifts by up to ~2x within minutes: only numbers taken close
# together compare. Writes a markdown report: busbw and time per op for
# every library, weft / best peer, and the memcpy ceiling.
#
# usage:  bench/compare.sh            full: n=2,4; 8 B..256 MiB; all ops (long:
#                                     tens of minutes with every peer installed)
#         QUICK=1 bench/compare.sh    n=2 only, 8 B..1 MiB (under 2 minutes)
# env:    BUILD        weft build dir (default: build; relative to the repo root)
#         PEERS        peer harness dir (default: ../shared/bench/peers beside the repo)
#         OUT          report (default: bench/RESULTS.md)
#         RES_DIR      raw results (default: a new directory under $TMPDIR, kept)
#         NS, OPS      override the world sizes / the ops (space-separated)
#         RUN_TIMEOUT  seconds per launch (default 300)
#         REPORT_ONLY  1: measure nothing, write the report from RES_DIR's raw results
#         PASSES       run the whole interleaved sequence this many times (default 1);
#                      every cell is then each library's best pass (highest busbw),
#                      so a disturbed stretch of the shared machine hits no one library
# Peer binaries are built into a temporary directory (shared/ is read-only).
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
PEERS=${PEERS:-$HERE/../../shared/bench/peers}
OUT=${OUT:-$HERE/RESULTS.md}
T=${RUN_TIMEOUT:-300}
PY=/usr/bin/python3 # Debian's python3: the one with python3-torch, if installed
[ -x "$PY" ] || PY=$(command -v python3)

if [ "${QUICK:-0}" = 1 ]; then
  NS=${NS:-2}
  WEFT_SMALL=8,1K,64K,1M WEFT_LARGE='' PEER_MAX=1048576 TARGET=0.1
else
  NS=${NS:-2 4}
  WEFT_SMALL=8,1K,64K,1M WEFT_LARGE=16M,128M,256M PEER_MAX=134217728 TARGET=0.3
fi
OPS=${OPS:-allreduce allgather broadcast alltoall reducescatter}

log() { echo "[compare $(date +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }

for b in weftrun weft-bench; do
  [ -x "$BUILD/$b" ] || die "$BUILD/$b not found: build weft first (cmake -S . -B build && cmake --build build)"
done
[ -f "$PEERS/membw.c" ] || die "peer harnesses not found in $PEERS (set PEERS)"
PEERS=$(cd "$PEERS" && pwd)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/weft-compare.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
BIN=$TMP/bin
mkdir -p "$BIN"
RES=${RES_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/weft-compare-results.XXXXXX")}
mkdir -p "$RES"

FAILED=()
if [ "${REPORT_ONLY:-0}" = 1 ]; then # the report again, from the raw results of an earlier run
  [ -n "${RES_DIR:-}" ] && [ -f "$RES/env.txt" ] || die "REPORT_ONLY=1 needs RES_DIR, the raw results of a run"
else
# ---------------------------------------------------------------- build the peers
# A peer whose toolchain or library is missing is skipped, and the report says so.
log "building peer harnesses in $BIN"
gcc -O3 -march=native -Wall -pthread -o "$BIN/membw" "$PEERS/membw.c" || die "cannot build membw"
gcc -O2 -Wall -o "$BIN/switch_cost" "$HERE/switch_cost.c" || die "cannot build switch_cost"
gcc -O2 -Wall -o "$BIN/barrier_floor" "$HERE/barrier_floor.c" || die "cannot build barrier_floor"
PEER_LIBS=()
note() { echo "$*" >>"$RES/peers.txt"; }
: >"$RES/peers.txt"
if command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null &&
  mpicc.openmpi -O2 -Wall -o "$BIN/mpi_bench_openmpi" "$PEERS/mpi_bench.c" 2>>"$RES/build.err"; then
  PEER_LIBS+=(openmpi)
else
  note "Open MPI: not available (mpicc.openmpi / mpirun.openmpi missing or build failed)"
fi
if command -v mpicc.mpich >/dev/null && command -v mpiexec.mpich >/dev/null &&
  mpicc.mpich -O2 -Wall -o "$BIN/mpi_bench_mpich" "$PEERS/mpi_bench.c" 2>>"$RES/build.err"; then
  PEER_LIBS+=(mpich)
else
  note "MPICH: not available (mpicc.mpich / mpiexec.mpich missing or build failed)"
fi
if command -v g++ >/dev/null &&
  g++ -O2 -std=c++17 -Wall -o "$BIN/gloo_bench" "$PEERS/gloo_bench.cc" -lgloo -pthread 2>>"$RES/build.err"; then
  PEER_LIBS+=(gloo)
else
  note "Gloo: not available (libgloo-dev missing or build failed)"
fi
if "$PY" -c 'import torch, torch.distributed' 2>/dev/null; then
  PEER_LIBS+=(torch)
else
  note "torch.distributed: not available ($PY cannot import torch)"
fi
log "peers available: ${PEER_LIBS[*]:-none}"

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "mode: $([ "${QUICK:-0}" = 1 ] && echo QUICK || echo full)"
  echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p') x $(nproc)"
  echo "kernel: $(uname -r)"
  echo "weft build type: $(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)"
  echo "weft sanitizer: $(sed -n 's/^WEFT_SANITIZE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)"
} >"$RES/env.txt"

# ---------------------------------------------------------------- launchers
launch_gloo() { # N ARGS...: N gloo_bench ranks with a FileStore rendezvous
  local n=$1 d r rc=0 pids=()
  shift
  d=$(mktemp -d "$TMP/gloo.XXXXXX")
  for ((r = 0; r < n; r++)); do
    timeout "$T" "$BIN/gloo_bench" "$r" "$n" "$d" "$@" >"$d/out.$r" 2>"$d/err.$r" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  cat "$d/out.0"
  cat "$d"/err.* >&2
  rm -rf "$d"
  return $rc
}

launch_torch() { # N ARGS...: N torch_bench.py ranks, file:// rendezvous
  local n=$1 d r rc=0 pids=()
  shift
  d=$(mktemp -d "$TMP/torch.XXXXXX")
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n INIT="file://$d/store" \
      timeout "$T" "$PY" "$PEERS/torch_bench.py" "$@" >"$d/out.$r" 2>"$d/err.$r" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  cat "$d/out.0"
  cat "$d"/err.* >&2
  rm -rf "$d"
  return $rc
}

launch_weft() { # N OP: the small sizes (more warm-up), then the large ones
  local n=$1 op=$2 rc=0
  timeout "$T" "$BUILD/weftrun" -np "$n" --no-tag-output "$BUILD/weft-bench" --op "$op" --sizes "$WEFT_SMALL" \
    -T "$TARGET" -w 20 --csv || rc=$?
  if [ -n "$WEFT_LARGE" ]; then
    timeout "$T" "$BUILD/weftrun" -np "$n" --no-tag-output "$BUILD/weft-bench" --op "$op" --sizes "$WEFT_LARGE" \
      -T "$TARGET" -w 2 --csv || rc=$?
  fi
  return $rc
}

# run_peer LIB N OP: one launch of LIB's harness for OP at N ranks
run_peer() {
  local lib=$1 n=$2 op=$3 over=()
  case $lib in
  openmpi)
    [ "$n" -gt "$(nproc)" ] && over=(--oversubscribe)
    timeout "$T" mpirun.openmpi --allow-run-as-root "${over[@]}" -np "$n" "$BIN/mpi_bench_openmpi" openmpi "$op" "$PEER_MAX"
    ;;
  mpich) timeout "$T" mpiexec.mpich -n "$n" "$BIN/mpi_bench_mpich" mpich "$op" "$PEER_MAX" ;;
  gloo)
    # ring is Gloo's default allreduce (and torch's); halving-doubling is its
    # best at small sizes: both, the report takes the better
    local g=$op
    [ "$op" = allreduce ] && g=allreduce_ring,allreduce_hd
    launch_gloo "$n" "$g" "$PEER_MAX"
    ;;
  torch) launch_torch "$n" "$op" "$PEER_MAX" ;;
  esac
}

# bench NAME CMD...: a memcpy sentinel, then CMD; both into NAME.txt
# (and, before every n=4 launch, the cost of a context switch: switch_cost.c;
# before weft's, a bare n-rank loop: a practical floor per op, barrier_floor.c)
FAILED=()
bench() {
  local name=$1 t0=$SECONDS rc
  shift
  log "$name"
  "$BIN/membw" sentinel >"$RES/$name.txt" 2>/dev/null
  case $name in n[3-9]*) "$BIN/switch_cost" >>"$RES/$name.txt" 2>/dev/null ;; esac
  case $name in n[2-9]_*_weft*) timeout 60 "$BIN/barrier_floor" "${name:1:1}" >>"$RES/$name.txt" 2>/dev/null ;; esac
  "$@" >>"$RES/$name.txt" 2>"$RES/$name.err"
  rc=$?
  if [ $rc -ne 0 ]; then
    log "  FAILED rc=$rc after $((SECONDS - t0)) s (see $RES/$name.err)"
    FAILED+=("$name (rc=$rc)")
  else
    log "  ok, $((SECONDS - t0)) s"
  fi
  [ -s "$RES/$name.err" ] || rm -f "$RES/$name.err"
}

# ---------------------------------------------------------------- run, interleaved
T0=$SECONDS
PASSES=${PASSES:-1}
for pass in $(seq "$PASSES"); do
  for n in $NS; do
    for op in $OPS; do
      bench "n${n}_${op}_weft.p$pass" launch_weft "$n" "$op"
      [ "$op" = reducescatter ] && continue # no peer harness measures it
      for lib in "${PEER_LIBS[@]}"; do
        bench "n${n}_${op}_${lib}.p$pass" run_peer "$lib" "$n" "$op"
      done
    done
  done
done
printf '%s\n' "${FAILED[@]}" >"$RES/failed.txt"
log "measured in $((SECONDS - T0)) s; raw results in $RES"
fi # REPORT_ONLY

# ---------------------------------------------------------------- report
"$PY" - "$RES" >"$OUT" <<'PYEOF' || die "report generation failed"
import glob, os, re, statistics, sys

res = sys.argv[1]
NAMES = {"weft": "weft", "openmpi": "Open MPI", "mpich": "MPICH", "gloo_ring": "Gloo ring",
         "gloo_hd": "Gloo halving-doubling", "gloo": "Gloo", "torch_gloo": "torch.dist gloo"}
ORDER = list(NAMES)

def kv(line):
    return dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)

def size_name(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"

def factor(op, n):
    return 2.0 * (n - 1) / n if op == "allreduce" else 1.0 if op == "broadcast" else (n - 1) / n

def busbw(op, n, size, t_us):  # from the time, as make_report.py does: printed busbw is rounded
    return size / (t_us * 1e-6) / 1e9 * factor(op, n) if t_us > 0 else 0.0

def fmt_t(t):
    return f"{t:,.0f}" if t >= 1000 else f"{t:.1f}" if t >= 10 else f"{t:.2f}"

def fmt_bw(b):
    return f"{b:.2f}" if b >= 0.1 else f"{b:.3f}" if b >= 0.001 else f"{b:.1e}"

data = {}      # (n, op) -> {bytes -> {lib -> (busbw, time_us)}}: the best pass
sentinels = {} # (n, op, lib-file) -> [GB/s, one per pass]
switches = []  # us per context switch (switch_cost.c), before the n=4 launches
floors = {}    # n -> [us per op of a bare n-rank sum (barrier_floor.c)], before weft's launches
banners = []
passes = set()

def put(cell, lib, v):
    if lib not in cell or v[0] > cell[lib][0]:
        cell[lib] = v

for f in sorted(glob.glob(os.path.join(res, "n*_*_*.txt"))):
    m = re.match(r"n(\d+)_([a-z]+)_([a-z]+)(?:\.p(\d+))?\.txt$", os.path.basename(f))
    if not m:
        continue
    n, op, who = int(m.group(1)), m.group(2), m.group(3)
    passes.add(m.group(4) or "1")
    cols = None
    for line in open(f, errors="replace"):
        line = line.strip()
        if line.startswith("SENTINEL "):
            sentinels.setdefault((n, op, who), []).append(float(kv(line)["value"]))
        elif line.startswith("SWITCH "):
            switches.append(float(kv(line)["us"]))
        elif line.startswith("FLOOR "):
            floors.setdefault(int(kv(line)["n"]), []).append(float(kv(line)["us"]))
        elif line.startswith("RES "):
            r = kv(line)
            cell = data.setdefault((n, op), {}).setdefault(int(r["bytes"]), {})
            t = float(r["time_us"])
            put(cell, r["lib"], (busbw(op, n, int(r["bytes"]), t), t))
        elif line.startswith("# "):
            if line[2:] not in banners and ("nprocs" in line or "weft-bench" in line):
                banners.append(line[2:])
        elif line.startswith("op,dtype,"):
            cols = line.split(",")
        elif cols and line.count(",") == len(cols) - 1:
            r = dict(zip(cols, line.split(",")))
            cell = data.setdefault((n, op), {}).setdefault(int(r["bytes"]), {})
            t, k = float(r["time_us"]), int(r["tensors"])
            put(cell, "weft", (busbw(op, n, int(r["bytes"]) * k, t), t))
sentinel = {k: statistics.median(v) for k, v in sentinels.items()}

def read(name):
    p = os.path.join(res, name)
    return open(p).read().strip() if os.path.exists(p) else ""

o = ["# weft vs. peers on this machine\n",
     "Generated by `bench/compare.sh` (tables are rewritten on every run). weft and the peer harnesses of "
     "`../shared/bench/peers` ran in one session, interleaved op by op, each launch right after a 1-thread "
     "128 MiB memcpy sentinel.\n",
     "```\n" + read("env.txt") + "\n```\n"]
if banners:
    o.append("Banners:\n\n" + "\n".join(f"- `{b}`" for b in banners) + "\n")
missing = read("peers.txt")
if missing:
    o.append("Peers not measured:\n\n" + "\n".join(f"- {l}" for l in missing.splitlines()) + "\n")
failed = read("failed.txt")
if failed:
    o.append("**Failed launches** (their rows are missing; stderr in the raw results):\n\n"
             + "\n".join(f"- {l}" for l in failed.splitlines()) + "\n")
o.append("## Method\n")
o.append("- Sizes follow nccl-tests: allreduce and broadcast = buffer size; allgather = gathered output per rank; "
         "reducescatter = input per rank; alltoall = send buffer per rank. float32, sum.\n"
         "- busbw = size / time × 2(n−1)/n (allreduce), (n−1)/n (allgather, reducescatter, alltoall), 1 (broadcast).\n"
         "- Peers: median over 7 repetitions of a loop timed to ≥ 45 ms each (`common.h`). weft: `weft-bench -T` "
         "(iterations chosen to fill the same time per size; mean over them, max over ranks; one named "
         "collective submitted and waited per iteration).\n"
         "- Cells: **busbw GB/s / time µs**. *weft ÷ best* is weft's busbw over the best peer's at that size "
         "(> 1: weft is faster). *memcpy* is the sentinel taken right before weft's launch, and *weft ÷ memcpy* "
         "weft's busbw over it (the copy bound; meaningful from 1 MiB up).\n")
if len(passes) > 1:
    o[-1] = o[-1].rstrip("\n")
    o.append(f"- {len(passes)} passes of the whole interleaved sequence: every cell is that library's best pass "
             "(highest busbw), the same rule for every library; *memcpy* is the median of the sentinels before "
             "weft's launches.\n")

def cell(n, op, b, lib):
    return data.get((n, op), {}).get(b, {}).get(lib)

def best_peer(n, op, b):
    c = data.get((n, op), {}).get(b, {})
    return max(((v[0], l) for l, v in c.items() if l != "weft"), default=None)

OPS = ["allreduce", "allgather", "broadcast", "alltoall", "reducescatter"]
for (n, op) in sorted(data, key=lambda k: (k[0], OPS.index(k[1]) if k[1] in OPS else len(OPS), k[1])):
    rows = data[(n, op)]
    libs = [l for l in ORDER if any(l in c for c in rows.values())]
    libs += sorted({l for c in rows.values() for l in c} - set(libs))
    o.append(f"## {op}, n = {n}\n")
    head = ["size"] + [NAMES.get(l, l) for l in libs] + ["weft ÷ best peer", "memcpy GB/s", "weft ÷ memcpy"]
    o.append("| " + " | ".join(head) + " |")
    o.append("|---:|" + "---:|" * (len(head) - 1))
    sent = sentinel.get((n, op, "weft"))
    for b in sorted(rows):
        c = rows[b]
        cells = [size_name(b)]
        for l in libs:
            cells.append(f"{fmt_bw(c[l][0])} / {fmt_t(c[l][1])}" if l in c else "—")
        best = best_peer(n, op, b)
        if "weft" in c and best and best[0] > 0:
            cells.append(f"{c['weft'][0] / best[0]:.2f} ({NAMES.get(best[1], best[1])})")
        else:
            cells.append("—")
        cells.append(f"{sent:.2f}" if sent else "—")
        cells.append(f"{c['weft'][0] / sent:.0%}" if sent and "weft" in c and b >= 1 << 20 else "—")
        o.append("| " + " | ".join(cells) + " |")
    o.append("")

# ---------------------------------------------------------------- issue 3's targets
t_rows = []
def target(what, value, goal, ok, why=""):
    t_rows.append(f"| {what} | {value} | {goal} | {'met' if ok else '**missed**'}{' — ' + why if why else ''} |")

for b, goal in ((128 << 20, 3.0), (16 << 20, 1.5), (1 << 20, 1.2)):
    w, m = cell(2, "allreduce", b, "weft"), cell(2, "allreduce", b, "openmpi")
    if w and m:
        target(f"n=2 allreduce busbw, weft ÷ Open MPI, {size_name(b)}", f"{w[0] / m[0]:.2f}", f"≥ {goal}",
               w[0] / m[0] >= goal)
w, sent = cell(2, "allreduce", 128 << 20, "weft"), sentinel.get((2, "allreduce", "weft"))
if w and sent:
    target("n=2 allreduce busbw ÷ memcpy, 128 MiB", f"{w[0] / sent:.0%}", "≥ 70%", w[0] / sent >= 0.7)
w, m = cell(2, "allreduce", 8, "weft"), cell(2, "allreduce", 8, "openmpi")
if w and m:
    target("8 B allreduce time, weft ÷ MPI_Allreduce (Open MPI)", f"{w[1] / m[1]:.2f} ({w[1]:.2f} vs {m[1]:.2f} µs)",
           "≤ 2", w[1] / m[1] <= 2.0)
sw = statistics.median(switches) if switches else None
fl = statistics.median(floors[4]) if floors.get(4) else None
for op in OPS:
    for b in sorted(data.get((4, op), {})):
        w4, w2 = cell(4, op, b, "weft"), cell(2, op, b, "weft")
        if not (w4 and w2 and w2[0] > 0):
            continue
        r = w4[0] / w2[0]
        def ratio_at(t4):  # the ratio were weft's n=4 op to take t4 us, against its own n=2
            return factor(op, 4) / factor(op, 2) * w2[1] / t4
        why = []
        if r < 0.5 and sw and w4[1] < 40 * sw:  # small ops: context switches dominate
            why.append(f"n=4 took {w4[1]:.1f} µs, {w4[1] / sw:.1f} context switches of {sw:.2f} µs")
            # every one of 4 ranks on 2 cores must run between an op's first
            # submission and its last completion: at least one switch per core
            cap = ratio_at(sw)
            if cap < 0.5:  # the bound alone explains the miss
                why.append(f"even at one switch per core per op the ratio could reach {cap:.2f} at most")
            if fl:  # an n=4 op as fast as the bare loop
                cap = ratio_at(fl)
                if cap < 0.5:
                    why.append(f"an n=4 op as fast as the bare loop ({fl:.2f} µs) would still give {cap:.2f}")
        if r < 0.5 and op == "broadcast" and b >= 64 << 10:
            why.append("copies: n=4 copies the data 4 times on 2 cores (root in, 3 out), n=2 twice, one per core "
                       "at once, so about 0.5 where copying bounds both, less where n=2 runs from a cache n=4 "
                       "overflows (2 x 16 MiB fit the 32 MiB L3, 4 x 16 MiB do not)")
        if r < 0.5 and op == "alltoall" and b >= 64 << 10:
            why.append("copies: a rank copies (n-1)/n of its data in and out, so each core copies 3 times n=2's "
                       "bytes (two ranks of 3/4 against one of 1/2), against busbw's factor of 1.5: about 0.5 where "
                       "copying bounds both, less the switches")
        why = "; ".join(why)
        target(f"n=4 ÷ n=2 busbw, {op} {size_name(b)}", f"{r:.3f}" if abs(r - 0.5) < 0.005 else f"{r:.2f}", "≥ 0.5",
               r >= 0.5, why)
for n in (2, 4):
    for op in OPS[1:4]:
        for b in sorted(data.get((n, op), {})):
            w, bp = cell(n, op, b, "weft"), best_peer(n, op, b)
            if b >= 1 << 20 and w and bp:
                target(f"n={n} {op} {size_name(b)}, weft ÷ best peer ({NAMES.get(bp[1], bp[1])})",
                       f"{w[0] / bp[0]:.2f}", "> 1", w[0] > bp[0])
if t_rows:
    o.append("## Targets (issue 3)\n")
    intro = ["Every target of the issue this run can check, from the tables above."]
    if sw:
        intro.append(f"A context switch (two processes taking turns on one CPU, `bench/switch_cost.c`) cost {sw:.2f} µs "
                     f"(median of {len(switches)}, taken before the n=4 launches).")
    fl2 = statistics.median(floors[2]) if floors.get(2) else None
    if fl or fl2:
        intro.append("The bare loop (`bench/barrier_floor.c`: n processes and no library, each adds one 8-byte value "
                     "through shared memory and waits for the others, the whole of a collective that waits for every "
                     "rank and moves nothing else) took "
                     + "; ".join(f"{v:.2f} µs per op with {k} processes (median of {len(floors[k])})"
                                 for k, v in ((4, fl), (2, fl2)) if v)
                     + ", measured before weft's launches.")
    o.append(" ".join(intro) + "\n")
    o.append("| target | value | goal | verdict |")
    o.append("|---|---:|---:|---|")
    o.extend(t_rows)
    o.append("")

if sentinel:
    v = [x for l in sentinels.values() for x in l]
    o.append("## Machine drift\n")
    o.append(f"{len(v)} memcpy sentinels (GB/s): min {min(v):.2f}, median {statistics.median(v):.2f}, "
             f"max {max(v):.2f}. Compare libraries only within one op and n (launches minutes apart can differ "
             "by up to 2× on this VM).\n")
print("\n".join(o))
PYEOF
log "report: $OUT"
[ ${#FAILED[@]} -eq 0 ]
