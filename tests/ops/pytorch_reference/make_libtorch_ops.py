#!/usr/bin/env python3
"""Writes libtorch_ops.json: PyTorch's results for the ops a libtorch user reaches for next
(tensor, arange, all/any, equal/allclose, clamp, masked_fill, topk, norm, type_as, squeeze, item).

Each case holds its inputs (so mixtrain runs on exactly the same values), the op and its
arguments, PyTorch's outputs, and for differentiable ops the gradients of sum(out * w) for a
stored weight w. tests/ops/test_libtorch_ops.cpp and the install consumer read it.

    /work/venv-ref/bin/python tests/ops/pytorch_reference/make_libtorch_ops.py

Rerun after changing a case; the file is small and committed.
"""
import json
import math
import os

import torch

torch.manual_seed(20240632)
DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.int32: "int32",
          torch.bool: "bool", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def number(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def enc(t):
    t = t.detach().cpu()
    vals = t.reshape(-1).tolist()
    return {"shape": list(t.shape), "dtype": DTYPES[t.dtype], "values": [number(v) for v in vals]}


def rand(*shape, lo=-2.0, hi=2.0, dtype=torch.float32):
    return (torch.rand(tuple(shape), dtype=torch.float64) * (hi - lo) + lo).to(dtype)


cases = []


def case(name, op, inputs, args, fn, grad=()):
    """fn(**inputs) -> tensor or tuple of tensors. grad: input names to differentiate (w.r.t.
    sum(out[0] * w), w stored as input "w")."""
    ins = {k: v.clone() for k, v in inputs.items()}
    for k in grad:
        ins[k].requires_grad_(True)
    out = fn(**ins, **args)
    outs = list(out) if isinstance(out, tuple) else [out]
    c = {"name": name, "op": op, "args": {k: number(v) for k, v in args.items()},
         "inputs": {k: enc(v) for k, v in inputs.items()}, "outputs": [enc(o) for o in outs]}
    if grad:
        w = rand(*outs[0].shape, lo=0.5, hi=1.5, dtype=outs[0].dtype)
        (outs[0] * w).sum().backward()
        c["inputs"]["w"] = enc(w)
        # No gradient (norm with p = 0) is a zero gradient.
        c["grads"] = {k: enc(ins[k].grad if ins[k].grad is not None else torch.zeros_like(ins[k])) for k in grad}
    cases.append(c)


# ---- factories: torch.tensor's dtype inference (Python literals as libtorch's C++ ones) and arange.
def literal(name, value):
    t = torch.tensor(value)
    cases.append({"name": name, "op": "tensor", "args": {}, "inputs": {}, "outputs": [enc(t)]})


literal("tensor_ints", [[1, 2, 3], [4, 5, 6]])
literal("tensor_floats", [1.5, -2.25, 3.0])
literal("tensor_bools", [True, False, True])
literal("tensor_mixed", [1, 2.5])
literal("tensor_scalar", 7)
for name, a in [("arange_int", (5,)), ("arange_int_step", (1, 10, 3)), ("arange_float", (0.0, 5.0)),
                ("arange_float_step", (0, 1, 0.25)), ("arange_down", (5, 0, -2))]:
    cases.append({"name": name, "op": "arange", "args": {"bounds": list(a)}, "inputs": {},
                  "outputs": [enc(torch.arange(*a))]})

# ---- truth tests
x = torch.tensor([[1.0, 0.0, 2.0], [3.0, float("nan"), -1.0], [0.0, 0.0, 0.0]])
case("all", "all", {"x": x}, {}, lambda x: x.all())
case("all_dim1", "all", {"x": x}, {"dim": 1}, lambda x, dim: x.all(dim))
case("any_dim0_keepdim", "any", {"x": x}, {"dim": 0, "keepdim": True}, lambda x, dim, keepdim: x.any(dim, keepdim))
case("any", "any", {"x": x}, {}, lambda x: x.any())
xi = torch.tensor([[2, 0], [5, 7]])
case("all_int_dim0", "all", {"x": xi}, {"dim": 0}, lambda x, dim: x.all(dim))
a = rand(3, 4)
b = a * (1 + 1e-6 * rand(3, 4))  # within rtol = 1e-5 everywhere
for name, (p, q), args in [
    ("allclose_near", (a, b), {}),
    ("allclose_far", (a, a + 1e-3), {}),
    ("allclose_rtol", (a, a * 1.001), {"rtol": 1e-2}),
    ("allclose_atol", (a, a + 0.05), {"atol": 0.1}),
    ("allclose_inf", (torch.tensor([1.0, float("inf")]), torch.tensor([1.0, float("inf")])), {}),
    ("allclose_inf_sign", (torch.tensor([1.0, float("inf")]), torch.tensor([1.0, float("-inf")])), {}),
    ("allclose_inf_finite", (torch.tensor([float("inf")]), torch.tensor([1e30])), {"rtol": 10.0}),
    ("allclose_nan", (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")])), {}),
    ("allclose_nan_equal", (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")])), {"equal_nan": True}),
]:
    r = torch.allclose(p, q, **args)
    cases.append({"name": name, "op": "allclose", "args": args, "inputs": {"a": enc(p), "b": enc(q)},
                  "outputs": [enc(torch.tensor(r))]})
for name, (p, q) in [("equal_same", (a, a.clone())), ("equal_differs", (a, b)),
                     ("equal_shape", (a, a.reshape(4, 3))), ("equal_promoted", (torch.tensor([1, 2]), torch.tensor([1.0, 2.0]))),
                     ("equal_nan", (torch.tensor([float("nan")]), torch.tensor([float("nan")])))]:
    cases.append({"name": name, "op": "equal", "args": {}, "inputs": {"a": enc(p), "b": enc(q)},
                  "outputs": [enc(torch.tensor(torch.equal(p, q)))]})

# ---- clamp
x = rand(4, 5)
x[0, 0] = float("nan")
x[1, 1] = -0.5  # on the bound: no gradient there (PyTorch 2.x)
case("clamp", "clamp", {"x": x}, {"min": -0.5, "max": 0.75}, lambda x, min, max: x.clamp(min, max), grad=("x",))
case("clamp_min", "clamp_min", {"x": x}, {"min": 0.25}, lambda x, min: x.clamp_min(min), grad=("x",))
case("clamp_max", "clamp_max", {"x": x}, {"max": -0.25}, lambda x, max: x.clamp_max(max), grad=("x",))
case("clamp_crossed", "clamp", {"x": x}, {"min": 1.0, "max": -1.0}, lambda x, min, max: x.clamp(min, max), grad=("x",))
xi = torch.tensor([[-5, 0, 3], [8, 2, -1]])
case("clamp_int", "clamp", {"x": xi}, {"min": -1, "max": 4}, lambda x, min, max: x.clamp(min, max))
case("clamp_int_float_bound", "clamp", {"x": xi}, {"min": 0.5}, lambda x, min: x.clamp(min=min))
lo, hi = rand(5, lo=-1.0, hi=0.0), rand(4, 1, lo=0.0, hi=1.0)
xt = rand(4, 5)
xt[0, 0], xt[2, 3] = lo[0], hi[2, 0]  # ties with a bound: the gradient is shared evenly
case("clamp_tensor", "clamp_tensor", {"x": xt, "lo": lo, "hi": hi}, {},
     lambda x, lo, hi: x.clamp(lo, hi), grad=("x", "lo", "hi"))

# ---- masked_fill
x = rand(3, 4)
mask = torch.tensor([True, False, False, True])
case("masked_fill", "masked_fill", {"x": x, "mask": mask}, {"value": -7.5},
     lambda x, mask, value: x.masked_fill(mask, value), grad=("x",))
mask2 = rand(3, 1) > 0
case("masked_fill_tensor", "masked_fill_tensor", {"x": x, "mask": mask2, "value": torch.tensor(2.5)}, {},
     lambda x, mask, value: x.masked_fill(mask, value), grad=("x", "value"))
case("masked_fill_int", "masked_fill", {"x": torch.tensor([[1, 2], [3, 4]]), "mask": torch.tensor([[True, False], [False, True]])},
     {"value": 9}, lambda x, mask, value: x.masked_fill(mask, value))

# ---- topk (distinct values: PyTorch does not fix the order of ties)
x = torch.randperm(24, dtype=torch.float64).to(torch.float32).reshape(2, 3, 4) * 0.25 - 3.0
case("topk_last", "topk", {"x": x}, {"k": 3}, lambda x, k: x.topk(k), grad=("x",))
case("topk_dim1_smallest", "topk", {"x": x}, {"k": 2, "dim": 1, "largest": False},
     lambda x, k, dim, largest: x.topk(k, dim, largest), grad=("x",))
case("topk_dim0", "topk", {"x": x}, {"k": 2, "dim": 0}, lambda x, k, dim: x.topk(k, dim), grad=("x",))
xn = torch.tensor([[1.0, float("nan"), 3.0, -2.0]])
case("topk_nan", "topk", {"x": xn}, {"k": 2}, lambda x, k: x.topk(k))
case("topk_nan_smallest", "topk", {"x": xn}, {"k": 4, "largest": False}, lambda x, k, largest: x.topk(k, largest=largest))
case("topk_int", "topk", {"x": torch.tensor([[4, -1, 9, 2], [0, 7, 3, 5]])}, {"k": 2}, lambda x, k: x.topk(k))

# ---- norm
x = rand(3, 4)
x[2] = 0.0  # a zero row: the p = 2 gradient there is 0, not nan
for p in [2, 1, 3, 0.5, 0, float("inf"), float("-inf")]:
    tag = {float("inf"): "inf", float("-inf"): "neg_inf"}.get(p, str(p).replace(".", "_"))
    case(f"norm_p{tag}_dim1", "norm", {"x": x}, {"p": p, "dim": [1]}, lambda x, p, dim: x.norm(p, dim), grad=("x",))
case("norm_default", "norm", {"x": x}, {}, lambda x: x.norm(), grad=("x",))
case("norm_p2_dims_keepdim", "norm", {"x": rand(2, 3, 4)}, {"p": 2, "dim": [0, 2], "keepdim": True},
     lambda x, p, dim, keepdim: x.norm(p, dim, keepdim), grad=("x",))
xt = torch.tensor([[3.0, -3.0, 1.0], [2.0, 0.5, -2.0]])  # ties at the max: the inf gradient is split
case("norm_pinf_ties", "norm", {"x": xt}, {"p": float("inf"), "dim": [1]}, lambda x, p, dim: x.norm(p, dim), grad=("x",))
case("norm_float64", "norm", {"x": rand(5, dtype=torch.float64)}, {"p": 2}, lambda x, p: x.norm(p), grad=("x",))

# ---- conversions and shapes
case("type_as", "type_as", {"x": torch.tensor([1.7, -2.2]), "other": torch.tensor([1, 2])}, {}, lambda x, other: x.type_as(other))
case("squeeze", "squeeze", {"x": rand(1, 3, 1, 2)}, {}, lambda x: x.squeeze(), grad=("x",))
for name, t in [("item_float", torch.tensor(2.5)), ("item_int", torch.tensor(-7)), ("item_bool", torch.tensor(True))]:
    cases.append({"name": name, "op": "item", "args": {}, "inputs": {"x": enc(t)},
                  "outputs": [{"kind": type(t.item()).__name__, "value": number(t.item())}]})

out = {"generator": "tests/ops/pytorch_reference/make_libtorch_ops.py", "torch": torch.__version__, "cases": cases}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtorch_ops.json")
with open(path, "w") as f:
    json.dump(out, f, indent=None, separators=(",", ":"))
    f.write("\n")
print(f"wrote {len(cases)} cases to {path}")
