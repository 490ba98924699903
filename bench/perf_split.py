#!/usr/bin/env python3
# Where a CPU step goes, by kind of work: the self time of `perf record` samples of one
# `mixtrain bench` run, grouped by symbol (GEMM and convolution kernels, fused attention's inner
# products included; elementwise ops and copies; casts; norms; the optimizer; threads; the
# framework). Usage: perf record -o run.data mixtrain bench ...; bench/perf_split.py run.data
import subprocess, sys, re, collections
data = sys.argv[1]
out = subprocess.run(["perf","report","-i",data,"--no-children","--sort","dso,sym","-g","none","--stdio"],capture_output=True,text=True).stdout
cats = collections.Counter()
def cat(dso, sym):
    s = sym
    if "[JIT]" in dso or "libdnnl" in dso or re.search(r"gebp|gemm_pack|gemm_product|gemm_avx512bf16|gemm_bf16|im2col|col2im|conv2d|onednn::|matmul", s): return "GEMM/conv"
    if re.search(r"attention|exp_shifted", s): return "attention"
    if re.search(r"bf16_to_float|float_to_bf16|half_to_float|float_to_half|cast_|amp::|autocast", s): return "casts"
    if re.search(r"adam|sgd|grad_norm|norm_part|optim|clip", s): return "optimizer"
    if re.search(r"row_norm|layer_norm|group_norm|batch_norm", s): return "norms"
    if re.search(r"softmax|cross_entropy|nll|loss", s): return "softmax/loss"
    if re.search(r"reduce|sum", s): return "reductions"
    if re.search(r"map_|unary|binary|gelu|relu|elementwise|fill|copy|strided_loop|random|dropout|erff|expf|memset|memmove|memcpy", s): return "elementwise/copies"
    if re.search(r"Pool|run_region|thread|futex|spin|sched|switch", s) or "kernel" in dso: return "threads/kernel"
    if re.search(r"malloc|free|Allocator|Tensor|shared_ptr|Sp_counted|autograd|Node|_Rb_tree|new|delete", s): return "framework (alloc, graph)"
    return "other"
for line in out.splitlines():
    m = re.match(r"\s+([\d.]+)%\s+(\S+(?: tid \d+)?)\s+\[.\]\s+(.*)", line)
    if not m: continue
    cats[cat(m.group(2), m.group(3))] += float(m.group(1))
tot=sum(cats.values())
for k, v in cats.most_common(): print(f"{k:28s} {100*v/tot:5.1f} %")
