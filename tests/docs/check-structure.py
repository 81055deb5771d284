#!/usr/bin/env python3
"""The code's shape rules that a reader can check by eye, checked here:

- a file under core/, gpu/, app/ or tools/ over 1,000 lines says why in its
  first comment (the words "1,000 lines" there);
- no module includes another module's private header: a `*-private.h` is
  included only from its own folder (tests/ may include any, to test it);
- each object's header says which thread owns it: a header that declares a
  GObject type (G_DECLARE_*) has a "Threads:" line.

Usage: check-structure.py SOURCE_ROOT"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
LIMIT = 1000
bad = []
sources = [p for d in ("core", "gpu", "app", "tools")
           for p in sorted((root / d).rglob("*")) if p.suffix in (".c", ".h")]
if len(sources) < 50:
    sys.exit(f"found only {len(sources)} sources under core/ gpu/ app/ tools/ in {root}")

include = re.compile(r'^\s*#\s*include\s+"([^"]*-private\.h)"', re.M)
for p in sources:
    text = p.read_text(errors="replace")
    rel = p.relative_to(root)
    lines = text.count("\n")
    if lines > LIMIT:
        m = re.match(r"\s*/\*.*?\*/", text, re.S)
        if not m or "1,000 lines" not in re.sub(r"\s*\n\s*\*?\s*", " ", m.group(0)):
            bad.append(f"{rel}: {lines} lines, and its first comment does not say why "
                       f"(write \"Over 1,000 lines: …\" there, or split the file)")
    if p.suffix == ".h" and "G_DECLARE_" in text and not re.search(r"Threads?:", text):
        bad.append(f"{rel}: declares an object but does not say which thread owns it "
                   f"(a \"Threads: …\" line in its comment)")
    for inc in include.findall(text):
        # "core/wire/rlx-wire-private.h" is relative to the root, a bare
        # name to the including file's folder
        target = (root / inc) if "/" in inc else (p.parent / inc)
        if target.parent.resolve() != p.parent.resolve():
            bad.append(f"{rel}: includes {inc}, another module's private header "
                       f"(move what it needs into a public or a *-faults.h header)")

if bad:
    print("\n".join(bad))
    sys.exit(1)
print(f"{len(sources)} sources: long files say why, private headers stay in their folder, "
      f"objects say their thread")
