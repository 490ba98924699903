#!/usr/bin/env python3
"""PyTorch reference for `mixtrain bench`: the same three models at the same sizes, trained the
same way (AdamW, clip_grad_norm_(1.0) after GradScaler.unscale_, fp32 / fp16 autocast with
GradScaler / bf16 autocast), on synthetic data pre-generated on the device, timed per step with a
loss.item() sync, median after warm-up. Writes JSON in the schema of mixtrain's bench.json, so

    python3 torch_amp_bench.py --size full --device cuda --out torch.json
    mixtrain bench --size full --device cuda --reference torch.json

shows both side by side. The models match mixtrain's examples layer for layer (same parameter
names and counts, printed below): examples/mlp, examples/unet/unet_model.*, and
examples/transformer/gpt_model.*. Peak memory is torch.cuda.max_memory_allocated / _reserved
(reset before each run, cache emptied between runs); on the CPU PyTorch keeps no such
statistics and null is written (mixtrain bench shows it as n/a)."""
import argparse, json, math, platform, statistics, time
import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {  # model -> size -> settings; keep in step with apps/mixtrain/tasks.cpp
    "mlp": {"tiny": dict(hidden=[256, 128], batch=64), "small": dict(hidden=[1000, 500], batch=512),
            "full": dict(hidden=[1000, 500], batch=512)},
    "unet": {"tiny": dict(width=8, image=32, batch=4), "small": dict(width=16, image=64, batch=8),
             "full": dict(width=64, image=256, batch=8)},
    "transformer": {"tiny": dict(context=32, width=64, layers=2, heads=4, batch=8),
                    "small": dict(context=128, width=256, layers=4, heads=4, batch=16),
                    "full": dict(context=128, width=768, layers=12, heads=12, batch=64)},
}
BATCHES = 4  # distinct pre-generated batches, reused in turn


def mlp(hidden):
    layers, width = [], 215
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, 1))


def double_conv(cin, cout):  # conv 3x3 -> ReLU -> BatchNorm2d, twice (the Spell UNet's order)
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.BatchNorm2d(cout),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU(), nn.BatchNorm2d(cout))


class UNet(nn.Module):
    def __init__(self, in_channels, classes, width, levels=4):
        super().__init__()
        self.encoders = nn.ModuleList(double_conv(in_channels if i == 0 else width << (i - 1), width << i)
                                      for i in range(levels))
        self.upsamplers, self.decoders = nn.ModuleList(), nn.ModuleList()
        for i in range(levels - 2, -1, -1):
            self.upsamplers.append(nn.ConvTranspose2d(width << (i + 1), width << i, 2, stride=2))
            self.decoders.append(double_conv(width << (i + 1), width << i))
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Conv2d(width, classes, 1)

    def forward(self, x):
        skips = []
        x = self.encoders[0](x)
        for enc in self.encoders[1:]:
            skips.append(x)
            x = enc(self.pool(x))
        for up, dec in zip(self.upsamplers, self.decoders):
            x = dec(torch.cat([skips.pop(), up(x)], 1))
        return self.head(x)


def causal_attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):  # PyTorch >= 2.0: fused kernels
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(mask, float("-inf")).softmax(-1) @ v


class CausalSelfAttention(nn.Module):
    """nn.MultiheadAttention's parameters (in_proj_weight, in_proj_bias, out_proj) on
    scaled_dot_product_attention(is_causal=True), as mixtrain's MultiheadAttention."""
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * width, width))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * width))
        self.out_proj = nn.Linear(width, width)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x):
        n, t, e = x.shape
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, -1)
        heads = lambda y: y.reshape(n, t, self.heads, e // self.heads).transpose(1, 2)
        y = causal_attention(heads(q), heads(k), heads(v))
        return self.out_proj(y.transpose(1, 2).reshape(n, t, e))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(width), CausalSelfAttention(width, heads), nn.LayerNorm(width)
        self.fc1, self.fc2, self.drop = nn.Linear(width, 4 * width), nn.Linear(4 * width, width), nn.Dropout(0.0)

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class Gpt(nn.Module):
    def __init__(self, context, width, layers, heads, vocab=256):
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(width), nn.Linear(width, vocab)

    def forward(self, tokens):
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def make_task(name, size, dev, gen, channels_last=False):
    """(model, batches [(x, y)], loss_fn, batch_size): synthetic data as mixtrain's --synthetic."""
    s = SIZES[name][size]
    b = s["batch"]
    if name == "mlp":
        model = mlp(s["hidden"])
        w1 = torch.randn(215, 32, generator=gen, device=dev) / math.sqrt(215)
        w2 = torch.randn(32, 1, generator=gen, device=dev)
        xs = [torch.randn(b, 215, generator=gen, device=dev) for _ in range(BATCHES)]
        ys = [torch.tanh(x @ w1) @ w2 for x in xs]
        allys = torch.cat(ys)
        ys = [(y - allys.mean()) / allys.std(unbiased=False) for y in ys]
        return model, list(zip(xs, ys)), F.mse_loss, b
    if name == "unet":
        model = UNet(3, 9, s["width"])
        cmap = torch.randn(3, 9, generator=gen, device=dev)
        xs = [torch.randn(b, 3, s["image"], s["image"], generator=gen, device=dev) for _ in range(BATCHES)]
        ys = [(x.permute(0, 2, 3, 1) @ cmap).argmax(-1) for x in xs]
        if channels_last:  # the whole network NHWC, as PyTorch's tuning guide recommends
            model = model.to(memory_format=torch.channels_last)
            xs = [x.contiguous(memory_format=torch.channels_last) for x in xs]
        return model, list(zip(xs, ys)), F.cross_entropy, b
    model = Gpt(s["context"], s["width"], s["layers"], s["heads"])
    t = s["context"]
    steps = torch.arange(t + 1, device=dev, dtype=torch.float32).reshape(1, t + 1)
    batches = []
    for _ in range(BATCHES):  # t_i = (s + k i) mod 256, s in [0, 256), k in [1, 4]
        start = (torch.rand(b, 1, generator=gen, device=dev) * 256).long().float()
        stride = (torch.rand(b, 1, generator=gen, device=dev) * 4).long().float() + 1
        seq = (start + stride * steps).long() % 256
        batches.append((seq[:, :t].contiguous(), seq[:, 1:].contiguous()))
    loss = lambda logits, y: F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))
    return model, batches, loss, b


def bench_one(name, size, precision, dev, steps, warmup, seed, channels_last=False):
    torch.manual_seed(seed)
    gen = torch.Generator(device=dev).manual_seed(seed)
    model, batches, loss_fn, batch = make_task(name, size, dev, gen, channels_last)
    model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    if hasattr(torch.amp, "GradScaler"):  # PyTorch >= 2.3
        scaler = torch.amp.GradScaler(dev.type, init_scale=65536.0, enabled=precision == "fp16")
    else:  # older releases: CUDA's scaler (fp16 autocast, hence the scaler, is CUDA-only there)
        scaler = torch.cuda.amp.GradScaler(init_scale=65536.0, enabled=precision == "fp16")
    amp_dtype = torch.float16 if precision == "fp16" else torch.bfloat16  # fp32: unused (old CPU autocast rejects fp16)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times, skipped, loss_value = [], 0, float("nan")
    for i in range(warmup + steps):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=amp_dtype, enabled=precision != "fp32"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scale_before = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        loss_value = loss.item()  # waits for the device: the step's wall time is its device time
        if i >= warmup:
            times.append(time.perf_counter() - t0)
            skipped += int(precision == "fp16" and scaler.get_scale() < scale_before)
    peak_alloc = torch.cuda.max_memory_allocated() if dev.type == "cuda" else None
    peak_resv = torch.cuda.max_memory_reserved() if dev.type == "cuda" else None
    step = statistics.median(times)
    return {"model": name, "precision": precision, "parameters": sum(p.numel() for p in model.parameters()),
            "batch_size": batch, "median_step_ms": step * 1e3, "samples_per_s": batch / step,
            "speedup_vs_fp32": 1.0, "peak_allocated_bytes": peak_alloc, "peak_reserved_bytes": peak_resv,
            "final_loss": loss_value, "skipped_steps": skipped}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,unet,transformer")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--size", choices=["tiny", "small", "full"], default="tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="torch.json", help="the JSON file to write")
    p.add_argument("--fp32-math", choices=["default", "strict"], default="default",
                   help="default: cuDNN convolutions on TF32, matmuls strict (PyTorch's defaults); strict: no TF32")
    p.add_argument("--channels-last", action="store_true", help="the UNet in NHWC (model and images)")
    p.add_argument("--precisions", default="fp32,fp16,bf16",
                   help="comma-separated; the first is the speedups' baseline (PyTorch < 2 has no fp16 autocast on the CPU)")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = a.fp32_math == "default"
    models = [m for m in a.models.split(",") if m]
    for q in a.precisions.split(","):
        if q and q not in ("fp32", "fp16", "bf16"):
            p.error(f"unknown precision '{q}' (expected fp32, fp16, bf16)")
    for m in models:
        if m not in SIZES:
            p.error(f"unknown model '{m}' (expected mlp, unet, transformer)")
    dev = torch.device(a.device)
    if dev.type == "cuda":
        dev = torch.device("cuda", torch.cuda.current_device())
    doc = {"framework": "pytorch", "framework_version": torch.__version__,
           "device": "cpu" if dev.type == "cpu" else f"cuda:{dev.index}",
           "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
           "size": a.size, "fp32_math": a.fp32_math, "channels_last": a.channels_last, "steps": a.steps, "warmup": a.warmup, "results": []}
    for m in models:
        fp32_ms = None
        for prec in [q for q in a.precisions.split(",") if q]:
            if dev.type == "cuda":
                torch.cuda.empty_cache()  # reserved memory is then this run's own
            row = bench_one(m, a.size, prec, dev, a.steps, a.warmup, a.seed, a.channels_last)
            fp32_ms = fp32_ms or row["median_step_ms"]
            row["speedup_vs_fp32"] = fp32_ms / row["median_step_ms"]
            doc["results"].append(row)
            mib = lambda b: "     n/a" if b is None else f"{b / 2**20:8.1f}"
            print(f"{m:12s} {prec}: {row['parameters']:>11,d} parameters, batch {row['batch_size']}, "
                  f"{row['median_step_ms']:9.2f} ms/step, {row['speedup_vs_fp32']:.2f}x, "
                  f"peak {mib(row['peak_allocated_bytes'])} / {mib(row['peak_reserved_bytes'])} MiB, "
                  f"loss {row['final_loss']:.4f}", flush=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
