#!/usr/bin/env bash
# bf16 against fp32 with every vector path capped at AVX2 (the CPUs without bf16 arithmetic, AMD
# Zen 3), mixtrain and PyTorch alternated round by round in the same minutes: mixtrain under
# MIXTRAIN_CPU_ISA=avx2 (its own kernels and oneDNN), PyTorch under ATEN_CPU_CAPABILITY=avx2,
# ONEDNN_MAX_CPU_ISA=AVX2 and MKL_ENABLE_INSTRUCTIONS=AVX2. Prints each model and precision's
# median step over the rounds, bf16 / fp32 and mixtrain / PyTorch (docs/BENCHMARKS.md).
# Usage: bench/avx2_bf16.sh [BUILD_DIR]; environment: ROUNDS (3), STEPS (10), WARMUP (2),
# SIZE (small), MODELS (mlp,unet,transformer), TORCH_PY (default /work/venv-ref/bin/python).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
rounds=${ROUNDS:-3} steps=${STEPS:-10} warmup=${WARMUP:-2} size=${SIZE:-small}
models=${MODELS:-mlp,unet,transformer}
torch_py=${TORCH_PY:-/work/venv-ref/bin/python}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
lscpu | grep -E "^Model name" || true
for r in $(seq "$rounds"); do
  MIXTRAIN_CPU_ISA=avx2 "$build/apps/mixtrain/mixtrain" bench --device cpu --size "$size" --models "$models" \
    --precisions fp32,bf16 --steps "$steps" --warmup "$warmup" --out "$out/mt$r" >/dev/null
  ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 "$torch_py" \
    "$root/bench/reference/torch_amp_bench.py" --device cpu --size "$size" --models "$models" \
    --precisions fp32,bf16 --steps "$steps" --warmup "$warmup" --out "$out/pt$r.json" >/dev/null
  echo "round $r done"
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ms = {}
for r in range(1, rounds + 1):
    for who, path in (("mixtrain", f"{out}/mt{r}/bench.json"), ("pytorch", f"{out}/pt{r}.json")):
        for res in json.load(open(path))["results"]:
            ms.setdefault((who, res["model"], res["precision"]), []).append(res["median_step_ms"])
print("| model | precision | mixtrain ms | PyTorch ms | mixtrain / PyTorch |")
print("| --- | --- | ---: | ---: | ---: |")
med = {k: statistics.median(v) for k, v in ms.items()}
for model in sorted({k[1] for k in med}):
    for prec in ("fp32", "bf16"):
        m, p = med[("mixtrain", model, prec)], med[("pytorch", model, prec)]
        print(f"| {model} | {prec} | {m:.2f} | {p:.2f} | {m / p:.2f} |")
    print(f"| {model} | bf16 / fp32 | {med[('mixtrain', model, 'bf16')] / med[('mixtrain', model, 'fp32')]:.2f} | "
          f"{med[('pytorch', model, 'bf16')] / med[('pytorch', model, 'fp32')]:.2f} | |")
PY
