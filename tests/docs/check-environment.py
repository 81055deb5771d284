#!/usr/bin/env python3
"""docs/ENVIRONMENT.md lists every RLX_* environment switch the code reads.

Scans app/, core/, gpu/ and tools/ for string literals "RLX_..." (getenv,
g_getenv and the helpers that take a switch's name) and for the names in
g_getenv/getenv calls of tests/; fails (exit 1) naming each one the table
does not have, each name in the table that no code reads any more, and
each name it lists twice.
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
LITERAL = re.compile(r'"(RLX_[A-Z0-9_]+)"')
GETENV = re.compile(r'(?:getenv|environ\.get|environ\[)\s*\(?\s*"(RLXN?E?T?_[A-Z0-9_]+)"')
# compile-time names from rlx-config.h, not environment variables
NOT_SWITCHES = {"RLX_FASHION_MNIST_DIR", "RLX_APP_ID", "RLX_GETTEXT_PACKAGE", "RLX_VERSION",
                "RLX_BINDIR", "RLX_SCREENSHOT_DEFAULT"}


def scan(top, pattern, exts):
    found = {}
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
        dirnames[:] = [d for d in dirnames if not d.startswith(("build", "."))]
        for name in filenames:
            if not name.endswith(exts):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                for m in pattern.finditer(f.read()):
                    found.setdefault(m.group(1), os.path.relpath(path, root))
    return found


read = {}
for top in ("app", "core", "gpu", "tools"):
    read.update(scan(top, LITERAL, (".c", ".h")))
read.update(scan("tests", GETENV, (".c", ".h", ".py")))
for name in NOT_SWITCHES:
    read.pop(name, None)

with open(os.path.join(root, "docs", "ENVIRONMENT.md"), encoding="utf-8") as f:
    table = [line for line in f if line.startswith("| `")]
listed = set()
problems = []
for line in table:
    first = line.split("|")[1]
    for name in re.findall(r"`(RLXN?E?T?_[A-Z0-9_]+)`", first):
        if name in listed:
            problems.append(f"docs/ENVIRONMENT.md lists {name} twice: keep one row")
        listed.add(name)

for name in sorted(set(read) - listed):
    problems.append(f"{read[name]} reads {name}, which docs/ENVIRONMENT.md does not list: add a row")
for name in sorted(listed - set(read)):
    problems.append(f"docs/ENVIRONMENT.md lists {name}, which no code reads: remove its row")
for p in problems:
    print(p)
print(f"{len(read)} switches read, {len(listed)} listed: "
      + ("ok" if not problems else f"{len(problems)} problem(s)"))
sys.exit(1 if problems else 0)
