#!/usr/bin/env python3
"""docs/PROTOCOL.md names the protocol version the code speaks.

The version is RLX_MSG_PROTOCOL_VERSION in core/cohort/rlx-msg.h (hello's
"v"; core/rlx-coordinator.h's RLX_PROTOCOL_VERSION is held equal to it by a
static assertion). PROTOCOL.md must say it in its title, "(version N)", and
in the hello row of its message table, "`v` (N)".

The signalling protocol's version is RLX_SIGNAL_VERSION in
core/p2p/rlx-signal-msg.h (the join's "v"); its RLX_SIGNAL_LABEL, the salt
and labels of every key it derives, must be "rlx-signal/N" of the same N.
PROTOCOL.md's "## Signalling" heading must say "signalling protocol version
N", every `rlx-signal/M` it names must have M = N, and scripts/signal-attack.py
(whose clients join real servers) must send VERSION = N. Fails (exit 1)
naming each place that says another number or none.
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

checked = f"protocol version {code}"
sig_h = read("core/p2p/rlx-signal-msg.h")
m = re.search(r"^#define\s+RLX_SIGNAL_VERSION\s+(\d+)\s*$", sig_h, re.M)
if m is None:
    problems.append("core/p2p/rlx-signal-msg.h does not define RLX_SIGNAL_VERSION as a number")
else:
    sig = int(m.group(1))
    checked = f"protocol version {code}, signalling version {sig}"
    lab = re.search(r'^#define\s+RLX_SIGNAL_LABEL\s+"rlx-signal/(\d+)"\s*$', sig_h, re.M)
    if lab is None or int(lab.group(1)) != sig:
        problems.append(f"core/p2p/rlx-signal-msg.h's RLX_SIGNAL_LABEL is not \"rlx-signal/{sig}\"")
    heads = [line for line in doc.splitlines() if line.startswith("## Signalling")]
    if len(heads) != 1:
        problems.append("docs/PROTOCOL.md has no single \"## Signalling\" section")
    else:
        h = re.search(r"signalling protocol version (\d+)", heads[0])
        if h is None or int(h.group(1)) != sig:
            problems.append(f"docs/PROTOCOL.md's signalling heading ({heads[0]!r}) does not say "
                            f"\"signalling protocol version {sig}\"")
    for other in sorted({int(x) for x in re.findall(r"rlx-signal/(\d+)", doc)} - {sig}):
        problems.append(f"docs/PROTOCOL.md names rlx-signal/{other}; the code derives its keys "
                        f"under rlx-signal/{sig}")
    v = re.search(r"^VERSION\s*=\s*(\d+)", read("scripts/signal-attack.py"), re.M)
    if v is None or int(v.group(1)) != sig:
        problems.append(f"scripts/signal-attack.py does not join with VERSION = {sig}")

for p in problems:
    print(p)
print(f"{checked} in the code: " + ("PROTOCOL.md agrees" if not problems else f"{len(problems)} problem(s)"))
sys.exit(1 if problems else 0)
