#!/usr/bin/env python3
"""Checks that the library's include graph points only down the layer diagram.

Each file of src/ and include/mixtrain/ belongs to a layer (the first pattern that matches
its path); a project include ("..." form) of a file in a higher layer is an error. The one
intended inversion, ops calling into amp through the hook pointer of ops/dispatch.h, needs no
include and so is not listed.

Public headers that moved keep a forwarding header at their old path, for users' code only
(FORWARDS): each holds nothing but the include of its new path, and no file of the project
(src/, include/, tests/, examples/, apps/, bench/; tests/install/, which checks the old paths
still compile, aside) includes one. Usage: check_layers.py [REPO_ROOT]; exit 1 on a violation.
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
    # kernels/ (at the repository's top) is the backends' device code: the CUDA kernels and the
    # CPU kernels compiled once per instruction set, with their launcher headers.
    ("backends", [r"^backends/", r"^kernels/"]),
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
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s+["<]([^">]+)[">]', re.M)

# Old path -> new path, relative to include/mixtrain/ (docs/ARCHITECTURE.md, "Public API").
BASE_MOVED = "arg checked_int device dtype dtype_traits elementwise_ops error float8 half host_device rng scalar shape"
FORWARDS = {f"core/{h}.h": f"base/{h}.h" for h in BASE_MOVED.split()}
FORWARDS["autograd/grad_mode.h"] = "base/grad_mode.h"


def layer_of(path):
    """The layer of a path relative to src/ or include/mixtrain/, or None (not ours)."""
    for name, patterns in LAYERS:
        if any(re.search(p, path) for p in patterns):
            return name
    return None


def relative(path, root):
    """A path as the project includes it: relative to src/ or include/mixtrain/, kernels/ kept."""
    for prefix in ("src/", "include/mixtrain/", ""):
        full = os.path.join(root, prefix)
        if path.startswith(full):
            return path[len(full):]
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    violations, files = [], 0
    for top in ("src", "include/mixtrain", "kernels"):
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
    violations += check_forwards(root)
    for v in violations:
        print(v)
    print(f"check_layers: {files} files, {len(violations)} violations; layers low to high: "
          + " < ".join(name for name, _ in LAYERS))
    return 1 if violations else 0


def check_forwards(root):
    """Forwarding headers hold only their include, and the project never includes one."""
    problems = []
    for old, new in FORWARDS.items():
        path = os.path.join(root, "include/mixtrain", old)
        if not os.path.exists(path):
            problems.append(f"include/mixtrain/{old}: the forwarding header to {new} is missing")
            continue
        with open(path, encoding="utf-8") as f:
            code = [l for l in f.read().splitlines() if l.strip() and not l.lstrip().startswith("//")]
        if code != ["#pragma once", f'#include "mixtrain/{new}"']:
            problems.append(f"include/mixtrain/{old}: a forwarding header holds only '#include \"mixtrain/{new}\"'")
    old_paths = {f"mixtrain/{old}" for old in FORWARDS}
    for top in ("src", "include", "kernels", "tests", "examples", "apps", "bench"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            if os.path.relpath(dirpath, root).startswith(os.path.join("tests", "install")):
                continue
            for n in names:
                if not n.endswith((".h", ".hpp", ".cpp", ".cuh", ".cu")):
                    continue
                path = os.path.join(dirpath, n)
                with open(path, encoding="utf-8") as f:
                    for inc in ANY_INCLUDE.findall(f.read()):
                        if inc in old_paths:
                            problems.append(f"{os.path.relpath(path, root)} includes the old path {inc}; "
                                            f"use mixtrain/{FORWARDS[inc[len('mixtrain/'):]]}")
    return problems


if __name__ == "__main__":
    sys.exit(main())
