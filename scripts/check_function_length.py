#!/usr/bin/env python3
"""Checks that no function of the library is longer than a screen (80 lines).

A long function is read back and forth; the library's are kept short (docs/ARCHITECTURE.md,
"Style"). Scans src/ and kernels/ (C++ sources), where the house layout puts a definition's first
line at column 0 and its closing brace at column 0 (namespace bodies are not indented); a function
is counted from its first line to that brace, lambdas inside it included. Member functions
defined inside a class body are indented and are not seen (a class in a .cpp is short anyway).
Usage: check_function_length.py [REPO_ROOT] [LIMIT]; exit 1 naming each function over LIMIT.
"""
import glob
import os
import sys

NOT_A_FUNCTION = ("namespace", "}", "#", "//", "struct", "class", "enum", "using", "template", "static_assert",
                  "extern", "union", "typedef")


def long_functions(path, limit):
    lines = open(path, encoding="utf-8").read().split("\n")
    found, i = [], 0
    while i < len(lines):
        line = lines[i]
        if line and not line[0].isspace() and not line.startswith(NOT_A_FUNCTION) and "(" in line:
            j = i
            while j < len(lines) and not lines[j].rstrip().endswith(("{", ";")):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{"):
                k = j + 1
                while k < len(lines) and not lines[k].startswith("}"):
                    k += 1
                if k - i + 1 > limit:
                    found.append((k - i + 1, i + 1, line.strip()[:100]))
                i = k
        i += 1
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 80
    sources = glob.glob(os.path.join(root, "src", "**", "*.cpp"), recursive=True)
    sources += glob.glob(os.path.join(root, "kernels", "**", "*.cpp"), recursive=True)
    bad = 0
    for path in sorted(sources):
        for n, line_no, text in long_functions(path, limit):
            print(f"{os.path.relpath(path, root)}:{line_no}: {n} lines (limit {limit}): {text}")
            bad += 1
    print(f"check_function_length: {len(sources)} files, {bad} functions over {limit} lines")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
