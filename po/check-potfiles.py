#!/usr/bin/env python3
"""POTFILES.in lists every source file with translatable strings, sorted.

Scanned: app/, core/, data/, tools/ and the files at the top level (the
desktop entry's source, rlx-cluster.desktop).

Fails (exit 1) naming each file with strings that is missing, each listed
file that does not exist or has no strings, and the first line out of order.
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
SCAN = ["app", "core", "data", "tools"]
C_MARK = re.compile(r"\b(?:_|N_|C_|NC_|ngettext|g_dngettext|g_dpgettext2?)\s*\(\s*\"")
UI_MARK = re.compile(r'translatable="yes"')


def has_strings(path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        text = f.read()
    if path.endswith((".c", ".h")):
        return bool(C_MARK.search(text))
    if path.endswith(".ui"):
        return bool(UI_MARK.search(text))
    if path.endswith((".desktop", ".desktop.in", ".metainfo.xml.in")):
        return True
    if path.endswith(".gschema.xml"):
        return "gettext-domain" in text
    return False


wanted = set()
# the top level's own sources (the desktop entry, rlx-cluster.desktop)
for name in os.listdir(root):
    if os.path.isfile(os.path.join(root, name)) and has_strings(name):
        wanted.add(name)
for top in SCAN:
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
        dirnames[:] = [d for d in dirnames if not d.startswith(("build", "."))]
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if has_strings(rel):
                wanted.add(rel)

listed = []
with open(os.path.join(root, "po", "POTFILES.in"), encoding="utf-8") as f:
    for line in f:
        line = line.strip()
        if line and not line.startswith("#"):
            listed.append(line)

problems = []
for path in sorted(wanted - set(listed)):
    problems.append(f"{path} has translatable strings but is not in po/POTFILES.in: add it")
for path in listed:
    if not os.path.exists(os.path.join(root, path)):
        problems.append(f"po/POTFILES.in lists {path}, which does not exist: remove it")
    elif path not in wanted:
        problems.append(f"po/POTFILES.in lists {path}, which has no translatable strings: remove it")
if listed != sorted(listed):
    for a, b in zip(listed, sorted(listed)):
        if a != b:
            problems.append(f"po/POTFILES.in is not sorted: {b} should come before {a}")
            break
if len(set(listed)) != len(listed):
    problems.append("po/POTFILES.in lists a file twice")

for p in problems:
    print(p)
print(f"{len(wanted)} files with translatable strings, {len(listed)} listed: "
      + ("ok" if not problems else f"{len(problems)} problem(s)"))
sys.exit(1 if problems else 0)
