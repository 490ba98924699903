#!/usr/bin/env bash
# On a GPU machine: where the GPU time of one AMP training step goes. For each model, the step's
# wall time (mixtrain bench, no profiler) and the GPU time per kernel from Nsight Compute, summed
# over the kernels of two profiled steps and halved. Wall time far above the summed GPU time
# means the host (dispatch, launches, synchronisation) is the limit, not the kernels.
#   scripts/gpu-profile.sh [models, default transformer,unet] [precision, default fp16]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=$root/gpu-out-profile
rm -rf "$out" && mkdir -p "$out"
models=${1:-transformer,unet}
precision=${2:-fp16}
build_target=mixtrain_cli
source "$root/scripts/gpu-build.sh"
echo "build: $build_seconds s"
bin=$build/apps/mixtrain/mixtrain
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for model in ${models//,/ }; do
  echo "==== $model $precision"
  "$bin" bench --models "$model" --precisions "$precision" --size full --steps 10 --warmup 3 --out "$out/wall_$model" \
    | grep -E "ms/step"
  timeout 240 "$ncu" --metrics gpu__time_duration.sum --print-summary per-kernel --csv --log-file "$out/ncu_$model.csv" \
    "$bin" bench --models "$model" --precisions "$precision" --size full --steps 1 --warmup 1 --out "$out/prof_$model" \
    > "$out/ncu_$model.log" 2>&1
  echo "ncu exit $?"
  python3 "$root/scripts/ncu_summary.py" "$out/ncu_$model.csv" 2 || head -40 "$out/ncu_$model.csv"
done
[ -n "${OUT:-}" ] && cp "$out"/ncu_*.csv "$OUT/" 2>/dev/null
exit 0
