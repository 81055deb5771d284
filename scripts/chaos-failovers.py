#!/usr/bin/env python3
"""chaos-failovers.py OUT — every takeover of a chaos.py run (--event-logs
--out OUT), broken down (scripts/chaoslog.py, failovers): the old
leader's last commit before the fault on it (commit→), the fault to when
the new leader took it for gone (→gone) and why, to its takeover (→lead)
and to its term's first commit (→commit); the total from the last commit;
and by how much the detection came later after the fault than the silence
it reports (late: the detecting node's own loop stood still, or read the
peer's last bytes late). Longest first; seconds on the run's clock.

Example: scripts/chaos-failovers.py /tmp/chaos/run
"""
import os
import re
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


print("%8s %-14s %7s %6s %6s %6s %7s %6s %5s  %s" % (
    "fault at", "kind", "commit→", "→gone", "→lead", "→commit", "total", "late", "term",
    "taken for gone because"))
for x in sorted(rows, key=total, reverse=True)[:int(sys.argv[2]) if len(sys.argv) == 3 else None]:
    f = x["fault"]
    det = x["detected"]
    start = f[0] if f else x["last_commit"]
    # detected later after the fault than the silence it reports: the
    # detecting node's own loop stood still, or it read the peer late
    m = re.search(r"silent for ([\d.]+) s", det[1] or "") if det else None
    late = "%6.2f" % (det[0] - start - float(m.group(1))) if m and start is not None else "     -"
    print("%8s %-14s %s %s %s %s %7.2f %s %5d  %s" % (
        "%.2f" % f[0] if f else "-", f[1] if f else "none",
        d(x["last_commit"], f[0] if f else None), d(start, det[0] if det else None),
        d(det[0] if det else start, x["took_over"]), d(x["took_over"], x["first_commit"]),
        total(x), late, x["term"], det[1] if det else "(no member-left)"))
