#!/usr/bin/env bash
# bench/gpu_check.sh - issue 23's check on a GPU machine, in one run
# (expected well under 8 minutes on 16 cores; 8.5 minutes on a loaded 2-core
# VM without a GPU). No CUDA toolkit, MPI or network needed: the CUDA
# runtime is the one torch ships, found at run time.
#   1. builds weft (-DWEFT_WITH_MPI=OFF, Release) in a fresh build folder;
#   2. weft-info: whether weft's CUDA backend loads, its version, devices;
#   3. tests/gpu: ctest -R '^gpu\.' (the collective suite on CUDA tensors on
#      1-3 ranks sharing the GPU, weft.torch on CUDA, train_digits --cuda,
#      the bad-input cases, weft-bench on the sim);
#   4. the Python suite (ctest -R '^py\.') with this machine's torch;
#   5. benchmarks, 2 ranks sharing the GPU: a 128 MiB float32 allreduce's busbw
#      with CUDA tensors vs host tensors; an 8-byte allreduce's latency, CUDA
#      vs host; weft vs torch.distributed's gloo on the same CUDA tensors at
#      1 MiB and 128 MiB (bench/torch_gloo.py);
# then prints a compact table with issue 23's targets. Logs go to $OUT
# (default ./gpu-check-out). Where there is no GPU the GPU parts skip (their
# tests report Skipped, the benchmarks n/a) and the rest still runs.
# Environment: PYTHON (default python3), BUILD (default build-gpucheck),
# JOBS (default: nproc). Exit 0 when every ctest test passed or skipped.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
PY=${PYTHON:-python3}
B=${BUILD:-build-gpucheck}
J=${JOBS:-$(nproc)}
mkdir -p "$OUT"
t0=$SECONDS
status=0
say() { echo "[gpu_check $((SECONDS - t0))s] $*" | tee -a "$OUT/summary.txt"; }
: >"$OUT/summary.txt"

say "machine: $(uname -r), $(nproc) cores; python: $($PY -c 'import sys; print(sys.version.split()[0])' 2>&1)"
say "torch: $($PY -c 'import torch; c = torch.cuda.is_available()
print(torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count() if c else 0)' 2>&1 | tail -1)"
say "python modules: $($PY -c '
import importlib
for m in ("numpy", "pytest", "cloudpickle", "sklearn"):
    try:
        importlib.import_module(m); print(m, "yes", end="; ")
    except ImportError:
        print(m, "NO", end="; ")' 2>&1) (py.* needs pytest and numpy; gpu.torch neither)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/nvidia-smi.txt" 2>&1 &&
  say "gpu: $(head -1 "$OUT/nvidia-smi.txt")"

# -- 1. build
rm -rf "$B"
if ! { cmake -S . -B "$B" -DWEFT_WITH_MPI=OFF -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v "$PY")" &&
       cmake --build "$B" -j"$J"; } >"$OUT/build.log" 2>&1; then
  say "BUILD FAILED (build.log)"; tail -30 "$OUT/build.log"; exit 1
fi
say "build: ok"

# The C tests and weft-bench do not load torch: point weft at the libcudart
# torch loads (pip's nvidia-* wheels keep it off the library path).
cudart=$($PY - 2>/dev/null <<'PYEOF'
import torch
if torch.cuda.is_available():
    torch.zeros(1, device="cuda")
    for line in open("/proc/self/maps"):
        if "libcudart" in line:
            print(line.split()[-1]); break
PYEOF
)
if [ -n "$cudart" ] && [ -z "${WEFT_CUDA_LIBRARY:-}" ]; then export WEFT_CUDA_LIBRARY=$cudart; fi
say "libcudart for the C tests: ${WEFT_CUDA_LIBRARY:-(search path)}"

# -- 2. weft-info
"$B/weft-info" >"$OUT/weft-info.txt" 2>&1
say "weft-info: $(grep -i 'cuda' "$OUT/weft-info.txt" | head -3 | tr '\n' ' ')"

# ctest's summary: "passed/total, skipped N, failed: names"
counts() {
  local log=$1 line skipped failed
  line=$(grep -E '^[0-9]+% tests passed' "$log" | tail -1)
  skipped=$(grep -c '(Skipped)' "$log")
  failed=$(awk '/The following tests FAILED:/ {on = 1; next} on && /^[[:space:]]+[0-9]+ - / {printf "%s ", $3}' "$log")
  echo "${line:-no summary}; skipped $skipped${failed:+; FAILED: $failed}"
}

# -- 3. tests/gpu
ctest --test-dir "$B" -R '^gpu\.' -j4 --output-on-failure --timeout 200 >"$OUT/gpu-tests.log" 2>&1 || status=1
say "tests/gpu: $(counts "$OUT/gpu-tests.log")"

# -- 4. the Python suite on this torch
ctest --test-dir "$B" -R '^py\.' -j"$((J > 8 ? 8 : J))" --output-on-failure --timeout 200 \
  >"$OUT/python-tests.log" 2>&1 || status=1
say "python suite: $(counts "$OUT/python-tests.log")"

# -- 5. benchmarks (2 ranks; CUDA ones only where weft's CUDA backend loads)
run() { timeout 120 "$B/weftrun" -np 2 --no-tag-output "$@"; }
col() { awk -F, -v c="$1" 'NR > 0 && $1 == "allreduce" {print $c; exit}'; } # weft-bench --csv: 9 time_us, 11 busbw
have_cuda=0
"$B/tests/mp/mp_device" --device cuda --probe >/dev/null 2>&1 && have_cuda=1
bench() { # device size iters warmup -> csv row
  local dev=$1
  shift
  run "$B/weft-bench" --csv --device "$dev" --sizes "$1" -n "$2" -w "$3" 2>>"$OUT/bench.log" | tee -a "$OUT/bench.log"
}
host_bw=$(bench cpu 128M 10 3 | col 11)
host_lat=$(bench cpu 8 3000 300 | col 9)
cuda_bw=n/a cuda_lat=n/a
if [ $have_cuda = 1 ]; then
  cuda_bw=$(bench cuda 128M 10 3 | col 11)
  cuda_lat=$(bench cuda 8 3000 300 | col 9)
fi
gloo_dev=cpu
[ $have_cuda = 1 ] && $PY -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && gloo_dev=cuda
PYTHONPATH="$PWD/$B/python" run "$PY" bench/torch_gloo.py --device $gloo_dev --sizes 1M,128M >"$OUT/gloo.csv" \
  2>"$OUT/gloo.log" || say "torch_gloo.py failed (gloo.log)"
gl() { awk -F, -v l="$1" -v b="$2" '$1 == l && $4 == b {print $6}' "$OUT/gloo.csv"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "n/a" }'; }
diff_us() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%+.1f", a - b; else print "n/a" }'; }

{
  echo
  echo "| measurement (2 ranks, one host) | weft CUDA tensors | weft host tensors | ratio | target |"
  echo "|---|---|---|---|---|"
  echo "| allreduce 128 MiB float32 busbw (GB/s) | $cuda_bw | $host_bw | $(ratio "$cuda_bw" "$host_bw") | >= 0.7 |"
  echo "| allreduce 8 B latency (us) | $cuda_lat | $host_lat | $(diff_us "$cuda_lat" "$host_lat") us | <= +25 us |"
  echo
  echo "| allreduce on $gloo_dev tensors, from Python (us) | weft | torch.distributed gloo | gloo / weft | target |"
  echo "|---|---|---|---|---|"
  for b in 1048576 134217728; do
    w=$(gl weft $b) g=$(gl gloo $b)
    echo "| $((b >> 20)) MiB | ${w:-n/a} | ${g:-n/a} | $(ratio "${g:-0}" "${w:-0}") | >= 3 |"
  done
  echo
} | tee -a "$OUT/summary.txt"
say "done in $((SECONDS - t0)) s; logs in $OUT; exit $status"
exit $status
