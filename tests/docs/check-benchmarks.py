#!/usr/bin/env python3
"""BENCHMARKS.md stays a reference that reproduces (issue 25):

- every script or test program it names exists (tests/x/prog: prog.c or prog);
- it names no machine-local path (/work/, /tmp/, /home/, /root/, /mnt/);
- every area (a "## " section after "How to reproduce") dates its figures.

Usage: check-benchmarks.py SOURCE_ROOT"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
text = (root / "BENCHMARKS.md").read_text()
bad = []

for path in sorted(set(re.findall(r"\b(?:scripts|tests)/[A-Za-z0-9_./-]+", text))):
    path = path.rstrip(".,)")
    p = root / path
    if not (p.exists() or p.with_suffix(".c").exists() or (root / (path + ".c")).exists()):
        bad.append(f"names {path}, which is not in the tree")

for n, line in enumerate(text.splitlines(), 1):
    m = re.search(r"(?<![\w.$}~-])/(work|tmp|home|root|mnt)/\S*", line)
    if m:
        bad.append(f"line {n}: a machine-local path, {m.group(0)}")

sections = re.split(r"^## ", text, flags=re.M)[1:]
names = [s.splitlines()[0] for s in sections]
if "How to reproduce" not in names:
    bad.append('no "## How to reproduce" section')
else:
    for s in sections[names.index("How to reproduce") + 1:]:
        if not re.search(r"\b20\d\d-\d\d-\d\d\b", s):
            bad.append(f'section "{s.splitlines()[0]}" gives no date for its figures')

if bad:
    print("BENCHMARKS.md: " + "\nBENCHMARKS.md: ".join(bad))
    sys.exit(1)
print(f"BENCHMARKS.md: {len(sections)} sections, every named script exists, no local path, dated")
