# Sourced by gpu-check.sh: the FP8 checks (issue 34), about two minutes of GPU time:
#   - the fp8 casts on CUDA bit for bit against the CPU (every fp16/bf16 pattern and the fp32
#     streams PyTorch's casts were recorded on), the scale update, scaled_mm against an fp64
#     reference, fp8_linear forward and backward against the CPU: test_backends' CudaFp8 tests;
#   - scaled_mm e4m3 at 4096 and 8192 in TFLOP/s beside our bf16 GEMM (bench_cuda), and
#     torch._scaled_mm beside torch's bf16 matmul when PyTorch is there;
#   - the full transformer's step in fp8 (delayed scaling, HYBRID) beside bf16 (mixtrain bench).
# Expects $build, $out, $py, log() and publish() from gpu-check.sh. Everything lands in summary.txt.
fp8_out=$out/fp8
mkdir -p "$fp8_out"
timeout 90 "$build/tests/test_backends" --gtest_filter='CudaFp8.*:CpuFp8.*' --gtest_brief=1 > "$fp8_out/tests.log" 2>&1
log "fp8 tests (CudaFp8, CpuFp8): exit $? ($(grep -E 'PASSED|FAILED' "$fp8_out/tests.log" | head -3 | tr '\n' ' '))"
grep -E "Failure|SKIPPED" -A3 "$fp8_out/tests.log" | head -20 | tee -a "$out/summary.txt"
timeout 60 "$build/bench/bench_cuda" --benchmark_filter='BM_ScaledMm|BM_Gemm/1/' --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true > "$fp8_out/bench_cuda.txt" 2>&1
grep -E "_median" "$fp8_out/bench_cuda.txt" | sed 's/^/fp8 /' | tee -a "$out/summary.txt"
if [ -n "$py" ] && [ -f bench/reference/torch_scaled_mm.py ]; then
  timeout 60 $py bench/reference/torch_scaled_mm.py > "$fp8_out/torch_scaled_mm.txt" 2>&1
  tee -a "$out/summary.txt" < "$fp8_out/torch_scaled_mm.txt"
fi
publish
timeout 180 "$build/apps/mixtrain/mixtrain" bench --device cuda --size full --models transformer --precisions bf16,fp8 \
  --steps 20 --warmup 5 --out "$fp8_out/bench" > "$fp8_out/bench_transformer.log" 2>&1
log "fp8 transformer step (full size) beside bf16: exit $?"
tail -4 "$fp8_out/bench_transformer.log" | tee -a "$out/summary.txt"
publish
