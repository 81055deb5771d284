#!/usr/bin/env python3
"""chaos-failovers.py OUT — every takeover of a chaos.py run (--event-logs
--out OUT), broken down (scripts/chaoslog.py, failovers): the fault on the
old leader, its last commit before it, when the new leader took it for
gone and why, when it took over, and its term's first commit; longest
first. Times in seconds on the run's clock.

Example: scripts/chaos-failovers.py /tmp/chaos/run
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaoslog  # noqa: E402

if len(sys.argv) not in (2, 3):
    sys.exit("usage: chaos-failovers.py OUT [N] (chaos.py --event-logs --out OUT; the N longest)")
root = sys.argv[1]
ranks = chaoslog.load(os.path.join(root, "chaos", "logs"))
rows = chaoslog.failovers(ranks, chaoslog.fault_log(os.path.join(root, "faults.log")))


def d(a, b):
    return "%6.2f" % (b - a) if a is not None and b is not None else "     ?"


def total(x):
    a = x["last_commit"] if x["last_commit"] is not None else x["took_over"]
    return (x["first_commit"] or x["took_over"]) - a


print("%8s %-14s %6s %6s %6s %6s %6s  %s" % ("fault at", "kind", "→gone", "→lead", "→commit",
                                            "total", "term", "taken for gone because"))
for x in sorted(rows, key=total, reverse=True)[:int(sys.argv[2]) if len(sys.argv) == 3 else None]:
    f = x["fault"]
    det = x["detected"]
    start = x["last_commit"]
    print("%8s %-14s %s %s %s %6.2f %6d  %s" % (
        "%.2f" % f[0] if f else "-", f[1] if f else "none",
        d(start, det[0] if det else None), d(det[0] if det else start, x["took_over"]),
        d(x["took_over"], x["first_commit"]), total(x), x["term"],
        det[1] if det else "(no member-left)"))
