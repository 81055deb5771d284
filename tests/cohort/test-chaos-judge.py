#!/usr/bin/env python3
"""chaos.py's judge of divergent steps (--judge, the same code a live run
uses), on small event logs written here in the shape rlx-rank --json
writes them: a `merged` report covers the history its rank's state
carried through a snapshot, not only the hashes it reported itself
(issue 29: the 60-minute run at edffd47 counted 2,442 steps divergent that
chaos-recount.py credits to such a merge), and nothing more.

Ranks: #0 leads group X and commits steps 1..20 (hashes x1..x20); #1 joins
X through a snapshot of #0 at step 20 and is then its only survivor (#0 is
killed); #2 leads group Y, which forked at step 10 and committed 11..30
(y11..y30). #1 then yields to Y in a merge reporting steps 11..20 discarded.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHAOS = os.path.join(HERE, "..", "..", "scripts", "chaos.py")


def write(root, snapshot, merged_to=20):
    logs = os.path.join(root, "run", "chaos", "logs")
    os.makedirs(logs, exist_ok=True)
    ev = {0: [], 1: [], 2: []}
    def step(r, t, s, h, leader):
        ev[r].append((t, '{"event":"step","step":%d,"hash":"%s","leader":"%s","term":1,"samples":256}'
                      % (s, h, leader)))
    for r in range(3):
        ev[r].append((0.1, '{"event":"joined","node":"n%d"}' % r))
    for s in range(1, 21):
        step(0, 1 + s * 0.01, s, "x%d" % s if s > 10 else "c%d" % s, "n0")
    for s in range(1, 31):
        step(2, 1 + s * 0.01, s, "y%d" % s if s > 10 else "c%d" % s, "n2")
    if snapshot:
        ev[1].append((1.5, '{"event":"snapshot","from":"n0","step":20,"hash":"x20"}'))
    ev[1].append((3.0, '{"event":"merged","from_step":11,"to_step":%d,"discarded":%d,'
                       '"exact":true,"rule":"larger group"}' % (merged_to, merged_to - 10)))
    ev[1].append((3.1, '{"event":"snapshot","from":"n2","step":30,"hash":"y30"}'))
    for s in range(31, 41):
        step(1, 3.2 + s * 0.01, s, "y%d" % s, "n2")
        step(2, 3.2 + s * 0.01, s, "y%d" % s, "n2")
    for r, lines in ev.items():
        with open(os.path.join(logs, "rank-%03d.jsonl" % r), "w") as f:
            for t, js in sorted(lines):
                f.write("%.3f %s\n" % (t, js))
    with open(os.path.join(root, "run", "faults.log"), "w") as f:
        f.write("    2.00  kill-leader    #0 n0 (pid 1, f32) \n")
    return logs


def judge(snapshot, merged_to=20):
    with tempfile.TemporaryDirectory() as root:
        logs = write(root, snapshot, merged_to)
        p = subprocess.run([sys.executable, CHAOS, "--judge", logs], capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr


fails = 0
def check(name, ok, out):
    global fails
    print("%s %s" % ("ok" if ok else "FAIL", name))
    if not ok:
        fails += 1
        print(out)

rc, out = judge(snapshot=True)
check("a merge covers the steps its snapshot carried", rc == 0 and " 0 divergent steps" in out, out)
rc, out = judge(snapshot=False)
check("without the snapshot, #0's committed x11..x20 stay divergent",
      rc == 1 and " 10 divergent steps" in out, out)
rc, out = judge(snapshot=True, merged_to=15)
check("a merge of 11..15 leaves x16..x20 divergent", rc == 1 and " 5 divergent steps" in out, out)
sys.exit(1 if fails else 0)
