# Sourced by gpu-check.sh after the model benchmarks: measures the changes made without a GPU that
# docs/BENCHMARKS.md lists as awaiting one, each against its own baseline in the same call:
#   - GEMM algorithm choice: bench_cuda's GEMMs with MIXTRAIN_GEMM_TUNING=0 (the tuned run is
#     gpu-check's own), and the transformer's AMP steps untuned;
#   - fused attention: bench_cuda's BM_Attention (in the tuned run) beside PyTorch's SDPA;
#   - the memory plan: the bf16 transformer trained with and without --memory-plan, alternated;
#   - the NCCL path at world size 1: bench_dist_ddp_step with the BERT-base-sized GPT in bf16 on
#     the GPU (the plain step against DDP's).
# Expects $build, $out, $py and log() from gpu-check.sh. Everything lands in summary.txt.
mt=$build/apps/mixtrain/mixtrain
MIXTRAIN_GEMM_TUNING=0 "$build/bench/bench_cuda" --benchmark_filter='BM_Gemm' --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true > "$out/bench_cuda_untuned.txt" 2>&1
grep -E "_median" "$out/bench_cuda_untuned.txt" | sed 's/^/untuned /' | tee -a "$out/summary.txt"
if [ -n "$py" ] && [ -f bench/reference/torch_attention.py ]; then
  timeout 120 $py bench/reference/torch_attention.py > "$out/torch_attention.txt" 2>&1
  tee -a "$out/summary.txt" < "$out/torch_attention.txt"
fi
MIXTRAIN_GEMM_TUNING=0 timeout 150 "$mt" bench --device cuda --size full --models transformer --precisions fp16,bf16 \
  --out "$out/untuned" > "$out/untuned.log" 2>&1
tail -4 "$out/untuned.log" | sed 's/^/untuned /' | tee -a "$out/summary.txt"
publish
# Step times from the JSONL log (its "seconds" per step), median after 10 warm-up steps.
median_step() {
  $py - "$1" <<'PY' 2>/dev/null || echo "n/a (no log)"
import json, statistics, sys
s = [json.loads(l)["seconds"] for l in open(sys.argv[1])][10:]
print("%.3f ms" % (1e3 * statistics.median(s)))
PY
}
for round in 1 2; do
  for plan in "" --memory-plan; do
    timeout 90 "$mt" train transformer --device cuda --precision bf16 --synthetic --steps 60 $plan \
      --log "$out/train$plan-$round.jsonl" > "$out/train$plan-$round.log" 2>&1
    log "train transformer bf16 ${plan:-unplanned} round $round: median step $(median_step "$out/train$plan-$round.jsonl")"
  done
done
if [ -x "$build/bench/bench_dist_ddp_step" ]; then
  # The issue's bar: NCCL at world size 1 costs < 2 % of the transformer's AMP step.
  timeout 150 "$mt" launch --nproc 1 -- "$build/bench/bench_dist_ddp_step" 64 10 cuda gpt bf16 > "$out/ddp_nccl.log" 2>&1
  log "NCCL world size 1: $(tail -1 "$out/ddp_nccl.log")"
fi
publish
