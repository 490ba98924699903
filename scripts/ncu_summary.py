"""Sums Nsight Compute's per-kernel summary (--print-summary per-kernel --csv, metric
gpu__time_duration.sum) into GPU milliseconds per kernel and per step.
usage: ncu_summary.py FILE.csv STEPS_PROFILED"""
import csv
import sys


def main(path, steps):
    rows = list(csv.reader(open(path, errors="replace")))
    head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    cols = rows[head]
    name_c, inv_c, metric_c = cols.index("Kernel Name"), cols.index("Invocations"), cols.index("Metric Name")
    avg_c, unit_c = cols.index("Average"), cols.index("Metric Unit")
    totals = {}
    for r in rows[head + 1:]:
        if len(r) <= max(name_c, inv_c, avg_c) or "gpu__time_duration" not in r[metric_c]:
            continue
        scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(r[unit_c], 1e-6)
        avg = float(r[avg_c].replace(",", "")) * scale
        inv = int(float(r[inv_c].replace(",", "")))
        name = r[name_c][:110]
        t, n = totals.get(name, (0.0, 0))
        totals[name] = (t + avg * inv, n + inv)
    total = sum(t for t, _ in totals.values())
    print(f"GPU time per step: {total / steps:.2f} ms over {sum(n for _, n in totals.values()) // steps} kernels")
    for name, (t, n) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:30]:
        print(f"{t / steps:8.3f} ms {n // steps:5d}x  {name}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
