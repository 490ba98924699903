"""Writes fp8_torch_reference.json: what PyTorch's CPU casts to float8_e4m3fn / float8_e5m2 give on
every fp16 and bf16 bit pattern and on millions of generated fp32 (and some fp64) values, and the
256 values of each format decoded to fp32, fp16 and bf16. tests/core/test_float8.cpp regenerates
the same inputs, checks its own independent reference against these results and then mixtrain's
casts against that reference, element by element.

The fixture stays small: per case the CRC-32 of the output bytes (in input order), the
amax and the saturation count, and spot values; only the 256-entry decode tables are stored whole.

    /work/venv-ref/bin/python tests/core/data/make_fp8_reference.py   # (PyTorch 2.15, CPU)
"""
import json
import os
import sys
import zlib

import numpy as np
import torch

MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(seed, count):
    """Element i is splitmix64's output for state seed + (i + 1) * golden, as the C++ test computes."""
    i = np.arange(1, count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + i * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z


def stream_bits(kind, seed, count):
    """Input bit patterns of a stream (uint32 for fp32 streams, uint64 for fp64)."""
    r = splitmix64(seed, count)
    sign = r >> np.uint64(63)
    if kind == "bits":  # any fp32: mostly far out of range, NaN and inf included
        return (r >> np.uint64(32)).astype(np.uint32)
    if kind == "range":  # 2^-30 .. 2^21, random mantissa: fp8 rounding, subnormals, overflow
        e = np.uint64(97) + (r >> np.uint64(40)) % np.uint64(51)
        return ((sign << np.uint64(31)) | (e << np.uint64(23)) | (r & np.uint64(0x7FFFFF))).astype(np.uint32)
    if kind == "ties":  # 2^-20 .. 2^18, 6 mantissa bits: many exact halfway cases
        e = np.uint64(107) + (r >> np.uint64(40)) % np.uint64(38)
        return ((sign << np.uint64(31)) | (e << np.uint64(23)) | ((r & np.uint64(0x3F)) << np.uint64(17))).astype(np.uint32)
    if kind == "f64":  # doubles 2^-30 .. 2^21: rounded to fp32 first, as PyTorch does
        e = np.uint64(993) + (r >> np.uint64(40)) % np.uint64(51)
        return (sign << np.uint64(63)) | (e << np.uint64(52)) | (r & np.uint64(0xFFFFFFFFFFFFF))
    raise ValueError(kind)


FORMATS = {"float8_e4m3fn": (torch.float8_e4m3fn, 448.0), "float8_e5m2": (torch.float8_e5m2, 57344.0)}


def as_tensor(source, bits):
    if source == "float16":
        return torch.from_numpy(bits.astype(np.uint16).view(np.float16).copy())
    if source == "bfloat16":
        return torch.from_numpy(bits.astype(np.uint16).view(np.int16).copy()).view(torch.bfloat16)
    if source == "float32":
        return torch.from_numpy(bits.view(np.float32).copy())
    return torch.from_numpy(bits.view(np.float64).copy())


def run_case(name, source, inputs, bits, target, saturate, scale):
    dtype, fmax = FORMATS[target]
    x = as_tensor(source, bits)
    v = x.float() * scale if scale is not None else x
    if saturate:
        # torchao's to_fp8_saturated, with the clamp in fp32 (exact for every source): PyTorch
        # 2.15's bf16 clamp on the CPU turns positive NaNs negative (measured), a quirk of clamp.
        v = v.float().clamp(-fmax, fmax)
    out = v.to(dtype).view(torch.uint8).numpy()
    xf = x.float()
    finite = xf[~xf.isnan()]
    amax = float(finite.abs().max()) if finite.numel() else 0.0
    scaled = xf * scale if scale is not None else xf
    saturated = int((scaled.abs() > fmax).sum())  # NaN compares false
    n = len(bits)
    spots = sorted(set(np.linspace(0, n - 1, 48).astype(np.int64).tolist()))
    wide = 16 if source == "float64" else 8
    return {
        "name": name,
        "source": source,
        "inputs": inputs,
        "target": target,
        "saturate": saturate,
        "scale": scale,
        "count": n,
        "crc32": "%08x" % zlib.crc32(out.tobytes()),
        "amax_bits": "%08x" % np.array([amax], dtype=np.float32).view(np.uint32)[0],
        "saturated": saturated,
        "spots": [["%0*x" % (wide, int(bits[i])), int(out[i])] for i in spots],
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    every16 = np.arange(65536, dtype=np.uint32)
    streams = [("bits", 1, 1 << 22), ("range", 2, 1 << 21), ("ties", 3, 1 << 20)]
    scale = float(np.float32(448.0 / 3.7))  # a scale that is not a power of two: the product rounds
    cases = []
    for target in FORMATS:
        for source in ("float16", "bfloat16"):
            cases.append(run_case(f"{source}_all_{target}", source, {"kind": "all"}, every16, target, False, None))
        for kind, seed, count in streams:
            bits = stream_bits(kind, seed, count)
            ins = {"kind": kind, "seed": seed, "count": count}
            cases.append(run_case(f"float32_{kind}_{target}", "float32", ins, bits, target, False, None))
        bits = stream_bits("range", 2, 1 << 21)
        cases.append(run_case(f"float32_range_scaled_{target}", "float32", {"kind": "range", "seed": 2, "count": 1 << 21},
                              bits, target, False, scale))
        bits = stream_bits("f64", 4, 1 << 18)
        cases.append(run_case(f"float64_{target}", "float64", {"kind": "f64", "seed": 4, "count": 1 << 18}, bits,
                              target, False, None))
    # The saturating e5m2 cast (e4m3fn always saturates) on every bf16 and the fp32 streams.
    cases.append(run_case("bfloat16_all_float8_e5m2_saturated", "bfloat16", {"kind": "all"}, every16, "float8_e5m2",
                          True, None))
    cases.append(run_case("float16_all_float8_e5m2_saturated", "float16", {"kind": "all"}, every16, "float8_e5m2",
                          True, None))
    for kind, seed, count in streams:
        cases.append(run_case(f"float32_{kind}_float8_e5m2_saturated", "float32", {"kind": kind, "seed": seed, "count": count},
                              stream_bits(kind, seed, count), "float8_e5m2", True, None))
    decode = {}
    every8 = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for target, (dtype, _) in FORMATS.items():
        v = every8.view(dtype)
        decode[target] = {
            "float32": ["%08x" % (b & 0xFFFFFFFF) for b in v.float().view(torch.int32).tolist()],
            "float16": ["%04x" % (b & 0xFFFF) for b in v.half().view(torch.int16).tolist()],
            "bfloat16": ["%04x" % (b & 0xFFFF) for b in v.bfloat16().view(torch.int16).tolist()],
        }
    doc = {
        "generator": "tests/core/data/make_fp8_reference.py",
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "hash": "CRC-32 (zlib's) of the output bytes in input order",
        "splitmix64": "element i (from 0) is splitmix64 of state seed + (i + 1) * 0x9e3779b97f4a7c15",
        "cases": cases,
        "decode": decode,
    }
    # One line per case and per decode table: small, and a diff shows which case changed.
    lines = []
    for key, value in doc.items():
        if key == "cases":
            body = ",\n".join("  " + json.dumps(c, separators=(",", ":")) for c in value)
            lines.append(f'"cases": [\n{body}\n ]')
        elif key == "decode":
            body = ",\n".join(f"  {json.dumps(k)}: " + json.dumps(v, separators=(",", ":")) for k, v in value.items())
            lines.append(f'"decode": {{\n{body}\n }}')
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value)}")
    with open(os.path.join(here, "fp8_torch_reference.json"), "w") as f:
        f.write("{\n " + ",\n ".join(lines) + "\n}\n")
    print(f"{len(cases)} cases written", file=sys.stderr)


if __name__ == "__main__":
    main()
