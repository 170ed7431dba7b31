#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# funclen.py LIMIT FILE...: prints the C functions longer than LIMIT lines
# (from the line that names them to their closing brace), longest first.
import re
import sys

limit = int(sys.argv[1])
found = []
for path in sys.argv[2:]:
    lines = open(path, encoding="utf-8").read().split("\n")
    start = None
    for i, line in enumerate(lines):
        if start is None and re.match(r"^[A-Za-z_][^;=]*\(", line) and not line.startswith(("typedef", "#")):
            start = i
            if line.count("{") and line.count("{") == line.count("}"):
                start = None  # a function on one line
        if start is not None and re.match(r"^}", line):
            text = "\n".join(lines[start:i])
            if "{" in text and not lines[start].startswith(("struct", "enum", "union", "static const", "const")):
                if i - start + 1 > limit:
                    found.append((i - start + 1, f"{path}:{start + 1}", lines[start].strip()[:70]))
            start = None
        elif start is not None and line.endswith(";") and "{" not in "\n".join(lines[start:i + 1]):
            start = None  # a prototype
for n, where, name in sorted(found, reverse=True):
    print(f"{n:5d} {where} {name}")
sys.exit(1 if found else 0)
