"""PyTorch's matmul TFLOP/s on the GPU at the sizes bench_cuda's Gemm benchmark uses, for a
side-by-side in one run. Two methods, since the GPU's clocks depend on how busy it has been:
'single': 30 products, each timed alone after the one before has finished (median);
'sustained': products back to back for 0.5 s, each between CUDA events, as bench_cuda times ours
(median)."""
import statistics
import time

import torch


def product_seconds(a, b):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.matmul(a, b)
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1e3


def tflops(dtype, n, sustained, reps=30):
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    times = []
    if sustained:
        end = time.perf_counter() + 0.5
        while time.perf_counter() < end:
            times.append(product_seconds(a, b))
    else:
        for _ in range(reps):
            torch.cuda.synchronize()
            times.append(product_seconds(a, b))
    return 2 * n**3 / statistics.median(times) / 1e12


def main():
    torch.backends.cuda.matmul.allow_tf32 = False  # strict fp32, as mixtrain's default
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for dtype, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16"), (torch.float32, "float32")):
        for n in (4096, 8192):
            single, sustained = tflops(dtype, n, False), tflops(dtype, n, True)
            print(f"torch matmul {name:8s} n={n}: {single:7.1f} TFLOP/s single, {sustained:7.1f} sustained")


if __name__ == "__main__":
    main()
