#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds mixtrain with CUDA, runs the whole test suite (the CUDA
# tests included), compute-sanitizer's memcheck over the CUDA backend tests, the GPU benchmarks
# (GEMM, bandwidth, the scaler; fp32 vs AMP training steps with PyTorch beside us when the
# mixtrain command and PyTorch are there), and prints a short table at the end.
#   scripts/gpu-check.sh [--quick]      --quick: skip the model benchmarks
# Dependencies the machine cannot download come from .gpu-deps/ (scripts/gpu-pack.sh). Logs and
# JSON go to ./gpu-out; the main results are also copied to $OUT when set (the lent-GPU tool
# brings back at most 8 files: the rest travel in logs.tar.gz).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=$root/gpu-out
rm -rf "$out"
mkdir -p "$out"
quick=0
[ "${1:-}" = "--quick" ] && quick=1
log() { echo "== $*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"

# ---- Where CUDA and cuDNN live here.
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
nvcc --version | tail -1
py=$(command -v python3 || true)
cudnn_inc="" cudnn_lib=""
for d in /usr/local/cuda/include /usr/include /usr/include/x86_64-linux-gnu; do
  [ -f "$d/cudnn.h" ] && cudnn_inc=$d && break
done
for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
  f=$(ls "$d"/libcudnn.so* 2>/dev/null | head -1) && [ -n "$f" ] && cudnn_lib=$f && break
done
if [ -z "$cudnn_inc" ] && [ -n "$py" ]; then  # PyTorch's pip wheel of cuDNN
  base=$($py -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null || \
         $py -c 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null)
  [ -n "$base" ] && cudnn_inc=$base/include && cudnn_lib=$(ls "$base"/lib/libcudnn.so* | head -1)
fi
echo "cudnn: include $cudnn_inc, library $cudnn_lib"
export LD_LIBRARY_PATH="$(dirname "${cudnn_lib:-/x}"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"

# ---- Data the tests and examples may read, when packed with --data.
if [ -d .gpu-deps/usr/share/datasets ]; then mkdir -p /usr/share/datasets && cp -rn .gpu-deps/usr/share/datasets/* /usr/share/datasets/; fi
if [ -d .gpu-deps/usr/share/games ]; then mkdir -p /usr/share/games && cp -rn .gpu-deps/usr/share/games/* /usr/share/games/; fi

# ---- Build.
build=$root/build-gpu
gen=""
command -v ninja >/dev/null && gen="-G Ninja"
t0=$(date +%s)
cmake -S . -B "$build" $gen -DCMAKE_BUILD_TYPE=Release -DMIXTRAIN_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$root/.gpu-deps/usr" ${cudnn_inc:+-DMT_CUDNN_INCLUDE=$cudnn_inc} \
  ${cudnn_lib:+-DMT_CUDNN_LIBRARY=$cudnn_lib} > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" > "$out/build.log" 2>&1 || { grep -E "error" -A5 "$out/build.log" | head -60; exit 1; }
log "build: $(( $(date +%s) - t0 )) s"

# ---- Tests.
ctest --test-dir "$build" -j 8 --output-on-failure --timeout 600 > "$out/ctest.log" 2>&1
grep -E "tests passed|tests failed" "$out/ctest.log" | tee -a "$out/summary.txt"
grep -E "\((Failed|SEGFAULT|Timeout|Subprocess aborted|Exception)\)" "$out/ctest.log" | head -30 | tee -a "$out/summary.txt"
skipped=$(grep -c "(Skipped)" "$out/ctest.log" || true)
log "skipped tests: $skipped"

if command -v compute-sanitizer >/dev/null; then
  timeout 240 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
    "$build/tests/test_backends" --gtest_brief=1 > "$out/memcheck.log" 2>&1
  log "compute-sanitizer memcheck (test_backends): exit $? ($(grep -m1 'ERROR SUMMARY' "$out/memcheck.log"))"
fi

# ---- Benchmarks.
"$build/bench/bench_cuda" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/bench_cuda.json" --benchmark_out_format=json > "$out/bench_cuda.txt" 2>&1
grep -E "_median" "$out/bench_cuda.txt" | tee -a "$out/summary.txt"
if [ -n "$py" ] && [ -f bench/reference/torch_gemm.py ]; then
  $py bench/reference/torch_gemm.py > "$out/torch_gemm.txt" 2>&1 && cat "$out/torch_gemm.txt" | tee -a "$out/summary.txt"
fi
if [ $quick -eq 0 ] && [ -x "$build/apps/mixtrain/mixtrain" ]; then
  ref=""
  if [ -n "$py" ] && [ -f bench/reference/torch_amp_bench.py ]; then
    PYTHONUNBUFFERED=1 timeout 300 $py bench/reference/torch_amp_bench.py --device cuda --size full \
      --out "$out/torch.json" > "$out/torch_bench.log" 2>&1 && ref="--reference $out/torch.json"
    tail -15 "$out/torch_bench.log"
  fi
  timeout 300 "$build/apps/mixtrain/mixtrain" bench --device cuda --size full --out "$out/mixtrain" $ref \
    > "$out/mixtrain_bench.log" 2>&1
  tail -25 "$out/mixtrain_bench.log" | tee -a "$out/summary.txt"
fi

if [ -n "${OUT:-}" ]; then
  for f in summary.txt ctest.log memcheck.log bench_cuda.json torch.json mixtrain/bench.json mixtrain/bench.svg; do
    [ -f "$out/$f" ] && cp "$out/$f" "$OUT/$(echo "$f" | tr / _)"
  done
  tar -czf "$OUT/logs.tar.gz" -C "$out" --exclude='*.json' --exclude='*.svg' .
fi

echo
echo "==================== summary ===================="
cat "$out/summary.txt"
