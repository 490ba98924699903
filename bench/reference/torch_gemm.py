"""PyTorch's matmul TFLOP/s on the GPU at the sizes bench_cuda's Gemm benchmark uses, timed the
same way (CUDA events around each product, median of many), for a side-by-side in one run."""
import statistics

import torch


def tflops(dtype, n, reps=30):
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    for _ in range(3):
        torch.matmul(a, b)
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        torch.matmul(a, b)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return 2 * n**3 / statistics.median(times) / 1e12


def main():
    torch.backends.cuda.matmul.allow_tf32 = False  # strict fp32, as mixtrain's default
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for dtype, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16"), (torch.float32, "float32")):
        for n in (4096, 8192):
            print(f"torch matmul {name:8s} n={n}: {tflops(dtype, n):7.1f} TFLOP/s")


if __name__ == "__main__":
    main()
