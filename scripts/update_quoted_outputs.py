#!/usr/bin/env python3
"""Rewrites the `mixtrain` outputs that README.md and docs/*.md quote after a
"<!-- output of `mixtrain ARGS` -->" marker with what the command prints today, keeping each
block's length (and its closing "..." line where it has one). The test that checks them:
tests/examples/test_memory_docs.cpp. Usage: scripts/update_quoted_outputs.py [path/to/mixtrain]"""
import re
import shlex
import subprocess
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
exe = sys.argv[1] if len(sys.argv) > 1 else str(root / "build/apps/mixtrain/mixtrain")
marker = re.compile(r"<!-- output of `mixtrain (.*?)` -->\n```\n(.*?)```\n", re.S)

for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
    text = doc.read_text()

    def rewrite(m):
        args, block = m.group(1), m.group(2).splitlines()
        printed = subprocess.run([exe, *shlex.split(args)], check=True, capture_output=True, text=True).stdout.splitlines()
        body = block[1:]  # after "$ mixtrain ARGS"
        cut = bool(body) and body[-1].strip() == "..."
        keep = len(body) - 1 if cut else len(body)
        new = [block[0]] + printed[:keep] + (body[-1:] if cut else [])
        return m.group(0).replace(m.group(2), "\n".join(new) + "\n")

    updated = marker.sub(rewrite, text)
    if updated != text:
        doc.write_text(updated)
        print(f"updated {doc.relative_to(root)}")
