"""PyTorch's fp8 GEMM on the GPU beside its bf16 matmul, at the sizes bench_cuda's ScaledMm uses:
torch._scaled_mm e4m3 x e4m3 -> bf16 (b column-major, unit scales, no fast accumulation, as
mixtrain's scaled_mm calls cuBLASLt) in TFLOP/s, products back to back for 0.5 s, each timed
between CUDA events (median), as bench_cuda times ours."""
import statistics
import time

import torch


def tflops(fn, n):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    end = time.perf_counter() + 0.5
    while time.perf_counter() < end:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return 2 * n**3 / statistics.median(times) / 1e12


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for n in (4096, 8192):
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major
        one = torch.ones((), device="cuda")
        fp8 = tflops(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), n)
        x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        bf16 = tflops(lambda: torch.matmul(x, y), n)
        print(f"torch _scaled_mm e4m3 n={n}: {fp8:7.1f} TFLOP/s; matmul bf16 {bf16:7.1f} TFLOP/s ({fp8 / bf16:.2f}x)")


if __name__ == "__main__":
    main()
