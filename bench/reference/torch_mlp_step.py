#!/usr/bin/python3
"""PyTorch reference for bench/bench_mlp_step.cpp: one fp32 training step (forward, MSE loss,
backward, Adam) of the dense MLP 215-1000-500-1 with ReLU, on the CPU. Prints the median step
time over repeated runs. Thread settings are taken from the environment (OPENBLAS_NUM_THREADS)
and --threads (torch.set_num_threads), so both arrangements can be compared."""
import argparse, statistics, time
import torch

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, nargs="+", default=[512, 32])
p.add_argument("--threads", type=int, default=2)
p.add_argument("--steps", type=int, default=200)
p.add_argument("--repeats", type=int, default=5)
args = p.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
for batch in args.batch:
    model = torch.nn.Sequential(torch.nn.Linear(215, 1000), torch.nn.ReLU(), torch.nn.Linear(1000, 500),
                                torch.nn.ReLU(), torch.nn.Linear(500, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(batch, 215), torch.randn(batch, 1)
    def step():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    for _ in range(20):
        step()
    medians = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        medians.append((time.perf_counter() - t0) / args.steps * 1e6)
    print(f"torch {torch.__version__} batch {batch} threads {args.threads}: median step {statistics.median(medians):.1f} us "
          f"(runs: {', '.join(f'{m:.1f}' for m in medians)})")
