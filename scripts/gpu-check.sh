#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds mixtrain with CUDA, runs the test suite (the CUDA tests
# included) and compute-sanitizer's memcheck over the CUDA tests, then measures beside PyTorch in
# the same call: GEMMs tuned and untuned, fused attention against SDPA, scaled_mm (FP8), the
# transformer's AMP steps (fp16, bf16, fp8), the UNet NCHW and channels-last, the dry run's
# predicted peaks, planned against unplanned steps, NCCL at world size 1.
#   scripts/gpu-check.sh [--part tests|bench|all] [--budget SECONDS] [--torch-reference FILE]
#     --part tests: build, tests, memcheck, the FP8 tests (the first call of a lease)
#     --part bench: the measurements (a second call on the warm machine, whose build-gpu/ is kept;
#       built anew when missing)
#     --budget S: stop starting stages once a stage's estimate would end past S seconds from the
#       start (each skipped stage is logged), so that a call ends inside the lent machine's limits
#     --torch-reference FILE: PyTorch's model numbers from FILE (an earlier torch_amp_bench.py run
#       on the same kind of GPU) instead of running PyTorch again
#     --prebuilt ARCHIVE: no build here; ARCHIVE (scripts/gpu-pack-build.sh) holds a CUDA build made
#       on the development machine and the libraries it needs; its tests run as programs (not ctest)
#   (--quick and --bench-only are the old names of --part tests and --part bench; --fp8-only runs
#   the build and the FP8 checks alone.)
# Dependencies the machine cannot download come from .gpu-deps/ (scripts/gpu-pack.sh). Logs and
# JSON go to ./gpu-out; the main results are also copied to $OUT when set, after every stage, so a
# call cut off by a time limit still brings back what it measured (the rest travel in logs.tar.gz).
#
# What awaits a GPU (compiled and reviewed here, not yet run on one; the GPU issue lists the rest):
# - The attention path table (src/ops/attention_fused.cpp): fp16/bf16 with L, S <= 1024 take the
#   composite since 2026-12-02. Measure the transformer's AMP step with it (BENCHMARKS.md's bar:
#   <= 0.85x PyTorch) and BM_Attention both ways; `DryRunModels.*` on CUDA checks the plan.
# - The kernels' move to kernels/cuda (2026-12-02): paths only, the same code.
# - Each CUDA family's launchers in kernels/cuda/<family>.h, the reductions' rules in
#   reduce_math.h (reduce.cu, topk.cu; max/min of all-infinite rows:
#   `CudaReduce.MaxAndMinOfInfiniteRowsMatchTheCpu`), the CUDA workspace sizes the dry run asks
#   (cuda/workspace.h), silu's CUDA kernel: `ctest -R 'backends.Cuda|DryRun'`.
# - `CudaReduce.TopkMatchesTheCpu`: passed in the first call of 2026-11-28, exited 1 silently in the
#   last (after the fp16 conversion change in common.cuh): run under cuda-gdb.
# - The UNet's 32 MiB: the real UNet step allocates one 32 MiB buffer (cuBLAS's workspace size) the
#   dry run does not plan (`DryRunModels.TinyUnetStepPeakIsPredictedOnCuda`, fp32).
# - FP8 speed: the fp8 transformer step is 1.32x bf16's; profile casts and amax updates
#   (scripts/gpu-profile.sh).
# - compute-sanitizer over all CUDA tests (the last clean pass: 2026-11-26).
# - Two or more GPUs: a rank per GPU, NCCL reduce-scatter / all-gather under ZeRO-1,
#   `--rank-batches auto` on CUDA (cudaMemGetInfo per rank), `--rank-weights adaptive` on CUDA.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=$root/gpu-out
part=all
budget=100000
torch_ref=""
fp8_only=0
prebuilt=""
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift ;;
    --quick) part=tests ;;
    --bench-only) part=bench ;;
    --fp8-only) fp8_only=1 ;;
    --budget) budget=$2; shift ;;
    --prebuilt) prebuilt=$2; shift ;;
    --torch-reference) torch_ref=$2; shift ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case "$part" in tests|bench|all) ;; *) echo "gpu-check: --part is tests, bench or all" >&2; exit 2 ;; esac
start_s=$(date +%s)
# A bench call keeps the tests call's logs (both come back in logs.tar.gz).
[ "$part" = bench ] || rm -rf "$out"
mkdir -p "$out"
log() { echo "== $*" | tee -a "$out/summary.txt"; }
[ "$part" = bench ] || : > "$out/summary.txt"
log "gpu-check --part $part, budget $budget s, $(date -u +%FT%TZ)"
# fits NAME SECONDS: whether a stage estimated at SECONDS ends inside the budget (else logged as skipped).
fits() {
  local used=$(( $(date +%s) - start_s ))
  if [ $(( used + $2 )) -gt "$budget" ]; then
    log "skipped: $1 (needs about $2 s, $(( budget - used )) s of the budget left)"
    return 1
  fi
  return 0
}
# Copies what exists so far to $OUT (a no-op without it): seven files and the tarball, since the
# lent machine brings back eight at most (the logs, ctest's and memcheck's included, travel in the
# tarball).
publish() {
  [ -n "${OUT:-}" ] || return 0
  for f in summary.txt bench_cuda.json torch.json mixtrain/bench.json mixtrain/bench.svg mixtrain-cl/bench.json; do
    [ -f "$out/$f" ] && cp "$out/$f" "$OUT/$(echo "$f" | tr / _)"
  done
  tar -czf "$OUT/logs.tar.gz" -C "$out" --exclude='*.svg' . 2>/dev/null
  return 0
}

prebuilt_dir=""
if [ -n "$prebuilt" ]; then
  # The build's run paths and compiled-in source directory name the development machine's tree.
  src_dir=$(tar -xJOf "$prebuilt" source_dir.txt)
  mkdir -p "$(dirname "$src_dir")" && { [ -e "$src_dir" ] || ln -sfn "$root" "$src_dir"; }
  tar -xJf "$prebuilt" -C "$src_dir" --exclude=source_dir.txt
  prebuilt_dir=$src_dir/build-cuda
fi
source "$root/scripts/gpu-build.sh"
mt=$build/apps/mixtrain/mixtrain
log "build: $build_seconds s"
publish
if [ $fp8_only -eq 1 ]; then
  source "$root/scripts/gpu-check-fp8.sh"
  cat "$out/summary.txt"
  exit 0
fi

# ---- Tests.
if [ "$part" != bench ]; then
  if [ -n "$prebuilt" ] && fits "test programs" 150; then
    # All at once (16 cores; the GPU tests are small): the slowest program sets the time.
    for t in "$build"/tests/test_*; do
      (timeout 120 stdbuf -oL -eL "$t" --gtest_brief=1 > "$out/$(basename "$t").log" 2>&1; echo "exit $?" >> "$out/$(basename "$t").log") &
    done
    wait
    for t in "$build"/tests/test_*; do
      log "$(basename "$t"): $(tail -1 "$out/$(basename "$t").log") ($(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$(basename "$t").log" | tr '\n' ' '))"
      grep -E "^\[  FAILED  \] [A-Za-z]" "$out/$(basename "$t").log" | head -20 | tee -a "$out/summary.txt"
    done
    publish
  elif [ -z "$prebuilt" ] && fits "ctest" 150; then
    timeout 170 ctest --test-dir "$build" -j "$(nproc)" --output-on-failure --timeout 120 > "$out/ctest.log" 2>&1
    grep -E "tests passed|tests failed" "$out/ctest.log" | tee -a "$out/summary.txt"
    grep -E "\((Failed|SEGFAULT|Timeout|Subprocess aborted|Exception)\)" "$out/ctest.log" | head -30 | tee -a "$out/summary.txt"
    log "skipped tests: $(grep -c "(Skipped)" "$out/ctest.log")"
    publish
  fi
  if command -v compute-sanitizer >/dev/null && fits "memcheck" 120; then
    timeout 120 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
      "$build/tests/test_backends" --gtest_filter='Cuda*-CudaGemm.TimedChoices*' --gtest_brief=1 > "$out/memcheck.log" 2>&1
    log "compute-sanitizer memcheck (test_backends Cuda*): exit $? ($(grep -m1 'ERROR SUMMARY' "$out/memcheck.log"))"
    publish
  fi
fi
[ "$part" = tests ] && { cat "$out/summary.txt"; exit 0; }

# ---- Measurements, most wanted first (issue 35's bars).
if fits "GEMMs tuned and untuned" 70; then
  "$build/bench/bench_cuda" --benchmark_filter='BM_Gemm|BM_ScaledMm|BM_Attention' --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_out="$out/bench_cuda.json" --benchmark_out_format=json \
    > "$out/bench_cuda.txt" 2>&1
  grep -E "_median" "$out/bench_cuda.txt" | tee -a "$out/summary.txt"
  MIXTRAIN_GEMM_TUNING=0 "$build/bench/bench_cuda" --benchmark_filter='BM_Gemm' --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true > "$out/bench_cuda_untuned.txt" 2>&1
  grep -E "_median" "$out/bench_cuda_untuned.txt" | sed 's/^/untuned /' | tee -a "$out/summary.txt"
  publish
fi
if [ -n "$py" ] && fits "PyTorch GEMM, SDPA and scaled_mm" 60; then
  timeout 60 $py bench/reference/torch_gemm.py > "$out/torch_gemm.txt" 2>&1
  timeout 60 $py bench/reference/torch_attention.py > "$out/torch_attention.txt" 2>&1
  timeout 40 $py bench/reference/torch_scaled_mm.py > "$out/torch_scaled_mm.txt" 2>&1
  cat "$out/torch_gemm.txt" "$out/torch_attention.txt" "$out/torch_scaled_mm.txt" | tee -a "$out/summary.txt"
  publish
fi
# The transformer's AMP steps, ours (fp16, bf16, fp8) beside PyTorch's (fp16, bf16).
ref=""
[ -n "$torch_ref" ] && ref="--reference $torch_ref"
if [ -z "$torch_ref" ] && [ -n "$py" ] && fits "PyTorch transformer" 90; then
  PYTHONUNBUFFERED=1 timeout 90 $py bench/reference/torch_amp_bench.py --device cuda --size full --models transformer \
    --precisions fp16,bf16 --out "$out/torch.json" > "$out/torch_bench.log" 2>&1 && ref="--reference $out/torch.json"
fi
if fits "mixtrain transformer" 90; then
  timeout 90 "$mt" bench --device cuda --size full --models transformer --precisions fp16,bf16,fp8 --out "$out/mixtrain" \
    $ref > "$out/mixtrain_bench.log" 2>&1
  log "mixtrain bench transformer: exit $?"
  tail -8 "$out/mixtrain_bench.log" | tee -a "$out/summary.txt"
  publish
fi
if fits "planned against unplanned" 60; then
  median_step() {
    $py - "$1" <<'PY' 2>/dev/null || echo "n/a (no log)"
import json, statistics, sys
s = [json.loads(l)["seconds"] for l in open(sys.argv[1])][10:]
print("%.3f ms" % (1e3 * statistics.median(s)))
PY
  }
  for plan in "" --memory-plan "" --memory-plan; do
    timeout 30 "$mt" train transformer --device cuda --precision bf16 --synthetic --steps 40 $plan \
      --log "$out/train$plan.jsonl" > "$out/train$plan.log" 2>&1
    log "train transformer bf16 ${plan:-unplanned}: median step $(median_step "$out/train$plan.jsonl")"
  done
  publish
fi
if [ -x "$build/bench/bench_dist_ddp_step" ] && fits "NCCL at world size 1" 60; then
  timeout 60 "$mt" launch --nproc 1 -- "$build/bench/bench_dist_ddp_step" 64 10 cuda gpt bf16 > "$out/ddp_nccl.log" 2>&1
  log "NCCL world size 1: $(tail -1 "$out/ddp_nccl.log")"
  publish
fi
# The UNet NCHW and channels-last, with PyTorch beside it, and the dry run's prediction (pred MiB).
for layout in "" --channels-last; do
  name=unet${layout:+-cl}
  if fits "UNet ${layout:-NCHW}" 120; then
    uref=""
    if [ -n "$py" ]; then
      PYTHONUNBUFFERED=1 timeout 60 $py bench/reference/torch_amp_bench.py --device cuda --size full --models unet \
        $layout --out "$out/torch_$name.json" > "$out/torch_$name.log" 2>&1 && uref="--reference $out/torch_$name.json"
    fi
    timeout 60 "$mt" bench --device cuda --size full --models unet $layout --out "$out/mixtrain-${name#unet-}" $uref \
      > "$out/mixtrain_$name.log" 2>&1
    tail -5 "$out/mixtrain_$name.log" | tee -a "$out/summary.txt"
    publish
  fi
done
if fits "MLP" 40; then
  timeout 40 "$mt" bench --device cuda --size full --models mlp --out "$out/mixtrain-mlp" > "$out/mixtrain_mlp.log" 2>&1
  tail -4 "$out/mixtrain_mlp.log" | tee -a "$out/summary.txt"
fi
log "done in $(( $(date +%s) - start_s )) s"
publish
echo
echo "==================== summary ===================="
cat "$out/summary.txt"
