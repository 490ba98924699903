#!/usr/bin/env python3
"""Checks that the library's include graph points only down the layer diagram.

Each file of src/ and include/mixtrain/ belongs to a layer (the first pattern that matches
its path); a project include ("..." form) of a file in a higher layer is an error. The one
intended inversion, ops calling into amp through the hook pointer of ops/dispatch.h, needs no
include and so is not listed. Usage: check_layers.py [REPO_ROOT]; exit 1 on a violation.
"""
import os
import re
import sys

# Lowest first: one folder per layer (docs/ARCHITECTURE.md), matched against a path relative to
# src/ or include/mixtrain/ (an include's "mixtrain/" prefix dropped); the first match wins.
LAYERS = [
    # config.h is generated into the build tree's include/mixtrain/.
    ("base", [r"^base/", r"^config\.h$"]),
    ("memory", [r"^memory/"]),
    ("tensor", [r"^core/"]),
    ("backends", [r"^backends/"]),
    ("graph", [r"^autograd/"]),
    ("ops", [r"^ops/"]),
    ("engine", [r"^engine/"]),
    ("nn", [r"^nn/"]),
    ("optim", [r"^optim/"]),
    ("amp", [r"^amp/"]),
    ("data", [r"^data/"]),
    ("io", [r"^io/"]),
    ("distributed", [r"^distributed/"]),
    ("train", [r"^train/"]),
    ("umbrella", [r"^mixtrain\.h$"]),
]
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    """The layer of a path relative to src/ or include/mixtrain/, or None (not ours)."""
    for name, patterns in LAYERS:
        if any(re.search(p, path) for p in patterns):
            return name
    return None


def relative(path, root):
    for prefix in ("src/", "include/mixtrain/"):
        full = os.path.join(root, prefix)
        if path.startswith(full):
            return path[len(full):]
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    violations, files = [], 0
    for top in ("src", "include/mixtrain"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                if not n.endswith((".h", ".cpp", ".cuh", ".cu")):
                    continue
                path = os.path.join(dirpath, n)
                rel = relative(path, root)
                own = layer_of(rel)
                if own is None:
                    violations.append(f"{rel}: belongs to no layer (add it to LAYERS in {__file__})")
                    continue
                files += 1
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    target = inc[len("mixtrain/"):] if inc.startswith("mixtrain/") else inc
                    other = layer_of(target)
                    if other is not None and RANK[other] > RANK[own]:
                        violations.append(f"src-or-include/{rel} ({own}) includes \"{inc}\" ({other}), a higher layer")
    for v in violations:
        print(v)
    print(f"check_layers: {files} files, {len(violations)} violations; layers low to high: "
          + " < ".join(name for name, _ in LAYERS))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
