#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds mixtrain with CUDA, runs the whole test suite (the CUDA
# tests included), compute-sanitizer's memcheck over the CUDA backend tests, the GPU benchmarks
# (GEMM, bandwidth, the scaler; fp32 vs AMP training steps with PyTorch beside us when the
# mixtrain command and PyTorch are there), and prints a short table at the end.
# The model benchmarks run with PyTorch's fp32 defaults (cuDNN on TF32), then the UNet in strict
# fp32, then the UNet channels-last, then what scripts/gpu-check-pending.sh measures (changes that
# were made without a GPU and await their first numbers), then the FP8 checks (gpu-check-fp8.sh).
#   scripts/gpu-check.sh [--quick | --bench-only | --fp8-only] [--torch-reference FILE]
#     --quick: skip the model benchmarks
#     --bench-only: skip the tests and memcheck (a second call after --quick, on the warm machine
#       whose build-gpu/ is kept, so that neither call nears the lent machine's 10-minute limit)
#     --fp8-only: build, then only the FP8 checks (about two minutes of GPU time)
#     --torch-reference FILE: show PyTorch's numbers from FILE (an earlier torch_amp_bench.py run on
#       the same kind of GPU) instead of running PyTorch again; saves GPU time
# Dependencies the machine cannot download come from .gpu-deps/ (scripts/gpu-pack.sh). Logs and
# JSON go to ./gpu-out; the main results are also copied to $OUT when set, after every stage, so a
# call cut off by a time limit still brings back what it measured (the rest travel in logs.tar.gz).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=$root/gpu-out
rm -rf "$out"
mkdir -p "$out"
quick=0
bench_only=0
fp8_only=0
torch_ref=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --bench-only) bench_only=1 ;;
    --fp8-only) fp8_only=1 ;;
    --torch-reference) torch_ref=$2; shift ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
log() { echo "== $*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"
# Copies what exists so far to $OUT (a no-op without it).
publish() {
  [ -n "${OUT:-}" ] || return 0
  # Seven files and the tarball: the lent machine brings back eight at most (the logs, ctest's and
  # memcheck's included, travel in the tarball).
  for f in summary.txt bench_cuda.json torch.json mixtrain/bench.json mixtrain/bench.svg \
           mixtrain-strict/bench.json mixtrain-cl/bench.json; do
    [ -f "$out/$f" ] && cp "$out/$f" "$OUT/$(echo "$f" | tr / _)"
  done
  tar -czf "$OUT/logs.tar.gz" -C "$out" --exclude='*.json' --exclude='*.svg' . 2>/dev/null
  return 0
}

source "$root/scripts/gpu-build.sh"
log "build: $build_seconds s"
publish
if [ $fp8_only -eq 1 ]; then
  source "$root/scripts/gpu-check-fp8.sh"
  echo
  echo "==================== summary ===================="
  cat "$out/summary.txt"
  exit 0
fi

# ---- Tests.
if [ $bench_only -eq 0 ]; then
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure --timeout 150 > "$out/ctest.log" 2>&1
grep -E "tests passed|tests failed" "$out/ctest.log" | tee -a "$out/summary.txt"
grep -E "\((Failed|SEGFAULT|Timeout|Subprocess aborted|Exception)\)" "$out/ctest.log" | head -30 | tee -a "$out/summary.txt"
skipped=$(grep -c "(Skipped)" "$out/ctest.log" || true)
log "skipped tests: $skipped"

if command -v compute-sanitizer >/dev/null; then
  timeout 150 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
    "$build/tests/test_backends" --gtest_brief=1 > "$out/memcheck.log" 2>&1
  log "compute-sanitizer memcheck (test_backends): exit $? ($(grep -m1 'ERROR SUMMARY' "$out/memcheck.log"))"
fi
publish
fi

# ---- Benchmarks.
"$build/bench/bench_cuda" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/bench_cuda.json" --benchmark_out_format=json > "$out/bench_cuda.txt" 2>&1
grep -E "_median" "$out/bench_cuda.txt" | tee -a "$out/summary.txt"
"$build/bench/bench_allocator" --benchmark_filter=Cuda --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  > "$out/bench_allocator_cuda.txt" 2>&1
grep -E "_median" "$out/bench_allocator_cuda.txt" | tee -a "$out/summary.txt"
publish
if [ -z "$torch_ref" ] && [ -n "$py" ] && [ -f bench/reference/torch_gemm.py ]; then
  $py bench/reference/torch_gemm.py > "$out/torch_gemm.txt" 2>&1 && cat "$out/torch_gemm.txt" | tee -a "$out/summary.txt"
fi
if [ $quick -eq 0 ] && [ -x "$build/apps/mixtrain/mixtrain" ]; then
  ref=""
  [ -n "$torch_ref" ] && ref="--reference $torch_ref"
  if [ -z "$torch_ref" ] && [ -n "$py" ] && [ -f bench/reference/torch_amp_bench.py ]; then
    PYTHONUNBUFFERED=1 timeout 300 $py bench/reference/torch_amp_bench.py --device cuda --size full \
      --out "$out/torch.json" > "$out/torch_bench.log" 2>&1 && ref="--reference $out/torch.json"
    tail -15 "$out/torch_bench.log"
  fi
  timeout 300 "$build/apps/mixtrain/mixtrain" bench --device cuda --size full --out "$out/mixtrain" $ref \
    > "$out/mixtrain_bench.log" 2>&1
  tail -25 "$out/mixtrain_bench.log" | tee -a "$out/summary.txt"
  publish
  # The same against strict fp32 (no TF32 in cuDNN either): the baseline the issue's AMP targets
  # name when they say fp32. Only the UNet has convolutions; the others' matmuls are strict anyway.
  timeout 300 "$build/apps/mixtrain/mixtrain" bench --device cuda --size full --models unet \
    --fp32-math strict --out "$out/mixtrain-strict" > "$out/mixtrain_bench_strict.log" 2>&1
  tail -6 "$out/mixtrain_bench_strict.log" | tee -a "$out/summary.txt"
  publish
  # The UNet channels-last (NHWC activations: cuDNN's tensor-core layout), PyTorch beside it.
  cl_ref=""
  if [ -z "$torch_ref" ] && [ -n "$py" ]; then
    PYTHONUNBUFFERED=1 timeout 200 $py bench/reference/torch_amp_bench.py --device cuda --size full --models unet \
      --channels-last --out "$out/torch_cl.json" > "$out/torch_bench_cl.log" 2>&1 && cl_ref="--reference $out/torch_cl.json"
  fi
  timeout 200 "$build/apps/mixtrain/mixtrain" bench --device cuda --size full --models unet --channels-last \
    --out "$out/mixtrain-cl" $cl_ref > "$out/mixtrain_bench_cl.log" 2>&1
  tail -6 "$out/mixtrain_bench_cl.log" | tee -a "$out/summary.txt"
  publish
  source "$root/scripts/gpu-check-pending.sh"
  source "$root/scripts/gpu-check-fp8.sh"
fi

publish

echo
echo "==================== summary ===================="
cat "$out/summary.txt"
