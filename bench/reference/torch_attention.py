"""PyTorch's scaled_dot_product_attention forward + backward on the GPU at the cases bench_cuda's
Attention benchmark uses (causal, head dim 64; B = 64 x 12 heads at L = S = 128 and 8 x 12 at
1024; fp16 and bf16), timed the same way: CUDA events around each step, fresh gradients each
time, median of many. One line per case."""
import statistics

import torch
import torch.nn.functional as F


def step_ms(dtype, batch, seq, reps=30):
    shape = (batch, 12, seq, 64)
    q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    go = torch.randn(shape, device="cuda", dtype=dtype)

    def step():
        for t in (q, k, v):
            t.grad = None
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(go)

    for _ in range(3):
        step()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        step()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for dtype, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16")):
        for batch, seq in ((64, 128), (8, 1024)):
            print(f"torch sdpa fwd+bwd {name:8s} B={batch}x12 L=S={seq} E=64 causal: {step_ms(dtype, batch, seq):8.3f} ms")


if __name__ == "__main__":
    main()
