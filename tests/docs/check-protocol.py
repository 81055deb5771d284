#!/usr/bin/env python3
"""docs/PROTOCOL.md names the protocol version the code speaks.

The version is RLX_MSG_PROTOCOL_VERSION in core/cohort/rlx-msg.h (hello's
"v"; core/rlx-coordinator.h's RLX_PROTOCOL_VERSION is held equal to it by a
static assertion). PROTOCOL.md must say it in its title, "(version N)", and
in the hello row of its message table, "`v` (N)". Fails (exit 1) naming
each place that says another number or none.
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")


def read(rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


m = re.search(r"^#define\s+RLX_MSG_PROTOCOL_VERSION\s+(\d+)\s*$", read("core/cohort/rlx-msg.h"), re.M)
if m is None:
    print("core/cohort/rlx-msg.h does not define RLX_MSG_PROTOCOL_VERSION as a number")
    sys.exit(1)
code = int(m.group(1))

doc = read("docs/PROTOCOL.md")
problems = []
title = doc.splitlines()[0] if doc else ""
t = re.search(r"\(version (\d+)\)", title)
if t is None:
    problems.append(f"docs/PROTOCOL.md's title ({title!r}) does not say \"(version {code})\"")
elif int(t.group(1)) != code:
    problems.append(f"docs/PROTOCOL.md's title says version {t.group(1)}; the code speaks {code}")
hello = [line for line in doc.splitlines() if line.startswith("| `hello` |")]
if len(hello) != 1:
    problems.append("docs/PROTOCOL.md has no single `hello` row in its message table")
else:
    v = re.search(r"`v` \((\d+)\)", hello[0])
    if v is None:
        problems.append(f"docs/PROTOCOL.md's hello row does not give `v` ({code})")
    elif int(v.group(1)) != code:
        problems.append(f"docs/PROTOCOL.md's hello row says `v` ({v.group(1)}); the code sends {code}")

for p in problems:
    print(p)
print(f"protocol version {code} in the code: " + ("PROTOCOL.md agrees" if not problems else f"{len(problems)} problem(s)"))
sys.exit(1 if problems else 0)
