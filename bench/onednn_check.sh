#!/usr/bin/env bash
# oneDNN on the CPU, measured (issue 28; docs/CPU.md, "oneDNN: which op runs where and how to turn
# it off"). Run it on a quiet machine: nothing else compiling or training.
#   1. the kernels: bench_cpu_onednn, oneDNN against the backend's own kernels, fp32 and bf16, on
#      a sweep of square GEMMs (where the size thresholds come from), the MLP's and the small
#      transformer's GEMMs and the UNet's convolutions, interleaved repetitions, medians;
#   2. the training steps: `mixtrain bench --device cpu --size small` with oneDNN (MIXTRAIN_ONEDNN=1)
#      and without (0), and bench/reference/torch_amp_bench.py at the same size, fp32 and bf16,
#      the three alternated round by round (the order rotating), then the median of each over the
#      rounds, with its range, bf16 / fp32 and mixtrain / PyTorch;
#   3. where a step's time goes: one more run per model and precision with MIXTRAIN_CPU_VERBOSE=1,
#      oneDNN on and off: the traced GEMM and convolution time per timed step by kernel
#      (onednn:..., own:..., eigen:...) beside the step's time; the rest is elementwise ops, norms,
#      casts, the loss and the optimizer.
# Usage: bench/onednn_check.sh [BUILD_DIR]   (default build-onednn-check, configured here; an
# existing build directory keeps its settings and gets the benchmarks added)
# Environment: ROUNDS (5), STEPS (20), WARMUP (3), REPS (9, kernel repetitions), OUT
# (BUILD_DIR/onednn-check), TORCH_PY (a python with torch; default /work/venv-ref/bin/python or python3),
# MODELS (mlp,unet,transformer), SKIP_KERNELS=1 / SKIP_STEPS=1 / SKIP_SPLIT=1 to leave a part out.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-onednn-check}
rounds=${ROUNDS:-5}
steps=${STEPS:-20}
warmup=${WARMUP:-3}
reps=${REPS:-9}
out=${OUT:-$build/onednn-check}
models=${MODELS:-mlp,unet,transformer}
torch_py=${TORCH_PY:-}
if [ -z "$torch_py" ]; then
  if [ -x /work/venv-ref/bin/python ]; then torch_py=/work/venv-ref/bin/python; else torch_py=python3; fi
fi
mkdir -p "$out"

echo "== machine"
lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core)" || true
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
for f in avx512f avx512_bf16 amx_bf16 amx_tile avx512_fp16; do
  case " $flags " in *" $f "*) echo "  $f: yes" ;; *) echo "  $f: no" ;; esac
done
uptime

if [ -f "$build/CMakeCache.txt" ]; then  # an existing build keeps its settings; the benchmarks join
  cmake -S "$root" -B "$build" -DMIXTRAIN_BUILD_BENCH=ON >/dev/null
else
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMIXTRAIN_CUDA=OFF -DMIXTRAIN_BUILD_BENCH=ON \
    -DMIXTRAIN_BUILD_TESTS=OFF -DMIXTRAIN_BUILD_EXAMPLES=ON >/dev/null
fi
cmake --build "$build" -j "$(nproc)" --target mixtrain_cli bench_cpu_onednn >/dev/null
mixtrain=$build/apps/mixtrain/mixtrain

if [ "${SKIP_KERNELS:-0}" != 1 ]; then
  echo "== kernels: oneDNN against the own kernels ($reps interleaved repetitions, medians)"
  "$build/bench/bench_cpu_onednn" --benchmark_repetitions="$reps" --benchmark_enable_random_interleaving=true \
    --benchmark_report_aggregates_only=true --benchmark_out="$out/kernels.json" --benchmark_out_format=json >/dev/null
  python3 - "$out/kernels.json" <<'EOF'
import json, re, sys
rows = {}
benchmarks = json.load(open(sys.argv[1]))["benchmarks"]
repeated = any(b.get("aggregate_name") == "median" for b in benchmarks)
for b in benchmarks:
    if (b.get("aggregate_name") != "median") if repeated else (b.get("run_type") != "iteration"):
        continue
    # gemm/square_OneDnn_bf16/512/512/512/2/... or conv/Forward_Own_fp32/8/16/64/...
    m = re.match(r"(\w+)/(\w+?)_(OneDnn|Own)_(\w+?)/([\d/]+)", b["run_name"])
    if not m:
        continue
    kind, group, engine, dtype, args = m.groups()
    rows.setdefault((kind, group, dtype, args), {})[engine] = (b["real_time"], b.get("GFLOP/s", 0) / 1e9)
print(f"{'kernel':44s} {'dtype':5s} {'oneDNN us':>10s} {'own us':>10s} {'own/oneDNN':>10s} {'oneDNN GFLOP/s':>15s}")
for (kind, group, dtype, args), e in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], [int(a) for a in kv[0][3].split('/') if a])):
    if "OneDnn" not in e or "Own" not in e:
        continue
    (t1, g1), (t0, _) = e["OneDnn"], e["Own"]
    print(f"{kind + '/' + group + ' ' + args:44s} {dtype:5s} {t1:10.1f} {t0:10.1f} {t0 / t1:10.2f} {g1:15.1f}")
EOF
fi

if [ "${SKIP_STEPS:-0}" != 1 ]; then
  echo "== training steps: mixtrain bench --size small (oneDNN on / off) and PyTorch, $rounds alternated rounds"
  "$torch_py" -c "import torch; print('torch', torch.__version__, 'threads', torch.get_num_threads())"
  run_one() {  # $1 = variant, $2 = round
    case $1 in
      onednn) MIXTRAIN_ONEDNN=1 "$mixtrain" bench --device cpu --size small --models "$models" --precisions fp32,bf16 \
                --steps "$steps" --warmup "$warmup" --out "$out/r$2-onednn" >/dev/null ;;
      own) MIXTRAIN_ONEDNN=0 "$mixtrain" bench --device cpu --size small --models "$models" --precisions fp32,bf16 \
                --steps "$steps" --warmup "$warmup" --out "$out/r$2-own" >/dev/null ;;
      torch) "$torch_py" "$root/bench/reference/torch_amp_bench.py" --device cpu --size small --models "$models" \
                --precisions fp32,bf16 --steps "$steps" --warmup "$warmup" --out "$out/r$2-torch.json" >/dev/null ;;
    esac
  }
  variants=(onednn own torch)
  for ((r = 1; r <= rounds; ++r)); do
    for ((i = 0; i < 3; ++i)); do
      v=${variants[$(((r + i) % 3))]}
      echo "  round $r: $v"
      run_one "$v" "$r"
    done
  done
  python3 - "$out" "$rounds" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
paths = {"onednn": "r{}-onednn/bench.json", "own": "r{}-own/bench.json", "torch": "r{}-torch.json"}
times = {}
for v, pattern in paths.items():
    for r in range(1, rounds + 1):
        for row in json.load(open(f"{out}/{pattern.format(r)}"))["results"]:
            times.setdefault((row["model"], row["precision"], v), []).append(row["median_step_ms"])
med = {k: statistics.median(t) for k, t in times.items()}
print(f"{'model':12s} {'prec':5s} {'mixtrain oneDNN ms':>22s} {'mixtrain own ms':>22s} {'PyTorch ms':>22s} {'ours/PyTorch':>12s}")
for (model, prec) in sorted({(m, p) for m, p, _ in times}):
    cells = []
    for v in ("onednn", "own", "torch"):
        t = times.get((model, prec, v), [])
        cells.append(f"{med[(model, prec, v)]:8.2f} ({min(t):.1f}-{max(t):.1f})" if t else "n/a")
    ratio = med[(model, prec, "onednn")] / med[(model, prec, "torch")] if (model, prec, "torch") in med else float("nan")
    print(f"{model:12s} {prec:5s} {cells[0]:>22s} {cells[1]:>22s} {cells[2]:>22s} {ratio:12.2f}")
print("bf16 / fp32 step (medians):")
for v in ("onednn", "own", "torch"):
    for model in sorted({m for m, _, _ in times}):
        if (model, "bf16", v) in med and (model, "fp32", v) in med:
            print(f"  {v:7s} {model:12s} {med[(model, 'bf16', v)] / med[(model, 'fp32', v)]:.2f}")
# PyTorch's medians in its own schema, for `mixtrain bench --reference`.
doc = json.load(open(f"{out}/r1-torch.json"))
for row in doc["results"]:
    row["median_step_ms"] = med[(row["model"], row["precision"], "torch")]
    row["samples_per_s"] = row["batch_size"] / (row["median_step_ms"] / 1e3)
    fp32 = med.get((row["model"], "fp32", "torch"))
    row["speedup_vs_fp32"] = fp32 / row["median_step_ms"] if fp32 else 0.0
json.dump(doc, open(f"{out}/torch-median.json", "w"), indent=2)
EOF
  echo "== the last round beside PyTorch's medians:"
  MIXTRAIN_ONEDNN=1 "$mixtrain" bench --device cpu --size small --models "$models" --precisions fp32,bf16 \
    --steps "$steps" --warmup "$warmup" --out "$out/final" --reference "$out/torch-median.json" | sed -n '/^$/,$p'
fi

if [ "${SKIP_SPLIT:-0}" != 1 ]; then
  echo "== where the step goes (MIXTRAIN_CPU_VERBOSE=1; per timed step, warm-up steps left out)"
  for onednn in 1 0; do
    for model in ${models//,/ }; do
      for precision in fp32 bf16; do
        run=$out/split-$onednn-$model-$precision
        MIXTRAIN_ONEDNN=$onednn MIXTRAIN_CPU_VERBOSE=1 "$mixtrain" bench --device cpu --size small --models "$model" \
          --precisions "$precision" --steps "$steps" --warmup "$warmup" --out "$run" 2>"$run.trace" >/dev/null
        python3 - "$run" "$steps" "$warmup" "$onednn" <<'EOF'
import collections, json, re, sys
base, steps, warmup, onednn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
row = json.load(open(base + "/bench.json"))["results"][0]
lines = [l.strip() for l in open(base + ".trace") if l.startswith("mixtrain cpu: ")]
per_step = len(lines) // (warmup + steps)  # every step makes the same calls
by = collections.Counter()
for l in lines[per_step * warmup:]:
    m = re.match(r"mixtrain cpu: (\S+) .* -> (.*) ([0-9.]+) ms$", l)
    if m:
        by[(m.group(1), m.group(2))] += float(m.group(3)) / steps
total = sum(by.values())
print(f"MIXTRAIN_ONEDNN={onednn} {row['model']:12s} {row['precision']}: step {row['median_step_ms']:.1f} ms, "
      f"GEMMs and convolutions {total:.1f} ms ({100 * total / row['median_step_ms']:.0f} %), {per_step} calls a step")
for (kernel, impl), ms in by.most_common():
    print(f"    {ms:8.2f} ms  {kernel} -> {impl}")
EOF
      done
    done
  done
fi
