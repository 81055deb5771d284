#!/usr/bin/env python3
"""chaos.py's judge of divergent steps (--judge: the code a live run uses,
replayed) and chaos-recount.py's (scripts/chaoslog.py) on small event logs
written here in the order rlx-rank --json writes them. A `merged` report
covers the history its rank's state carried before it loaded the kept
group's snapshot — through the snapshots and checkpoints it and their
senders loaded — and nothing more: not the kept group's history (rlx-rank
reports that snapshot just before `merged`), not what a checkpoint's
writer redid after writing it. Each case gives both judges' counts the
expected number; both must agree.

The base case: #0 leads group X, commits c1..c10 then x11..x20; #2 leads
group Y from the same c1..c10 with y11..y30. #1 joins X through a
snapshot of #0 at step 20, #0 is killed, and #1 yields to Y: it loads
#2's snapshot at step 30 and reports `merged` of steps 11..20.
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")


class Logs:
    def __init__(self):
        self.ev = {}
        self.kills = []

    def add(self, r, t, js):
        self.ev.setdefault(r, []).append((t, js))

    def joined(self, *ranks):
        for r in ranks:
            self.add(r, 0.1, '{"event":"joined","node":"n%d"}' % r)

    def steps(self, r, t, lo, hi, prefix, leader):
        for s in range(lo, hi + 1):
            self.add(r, t + (s - lo) * 0.001,
                     '{"event":"step","step":%d,"hash":"%s%d","leader":"n%d","term":1,"samples":1}'
                     % (s, prefix if s > 10 else "c", s, leader))

    def snapshot(self, r, t, sender, step, h):
        self.add(r, t, '{"event":"snapshot","from":"n%d","step":%d,"hash":"%s"}' % (sender, step, h))

    def merged(self, r, t, kept, lo, hi):
        self.add(r, t, '{"event":"merged","node":"n%d","from_step":%d,"to_step":%d,"discarded":%d,'
                       '"exact":true,"rule":"the larger group is kept"}' % (kept, lo, hi, hi - lo + 1))

    def resumed(self, r, t, step, h):
        self.add(r, t, '{"event":"resumed","step":%d,"hash":"%s"}' % (step, h))

    def kill(self, r, t):
        self.kills.append("%8.2f  kill           #%d n%d (pid 1, f32) \n" % (t, r, r))

    def judge(self):
        with tempfile.TemporaryDirectory() as root:
            logs = os.path.join(root, "run", "chaos", "logs")
            os.makedirs(logs)
            for r in range(max(self.ev) + 1):
                with open(os.path.join(logs, "rank-%03d.jsonl" % r), "w") as f:
                    for t, js in self.ev.get(r, []):       # in the order written
                        f.write("%.3f %s\n" % (t, js))
            with open(os.path.join(root, "run", "faults.log"), "w") as f:
                f.writelines(self.kills)
            a = subprocess.run([sys.executable, os.path.join(SCRIPTS, "chaos.py"), "--judge", logs],
                               capture_output=True, text=True, timeout=30)
            b = subprocess.run([sys.executable, os.path.join(SCRIPTS, "chaos-recount.py"), logs],
                               capture_output=True, text=True, timeout=30)
        m = re.search(r" (\d+) divergent steps,", a.stdout)
        n = re.search(r"crediting only the history its rank's state carried: (\d+)", b.stdout)
        return (int(m.group(1)) if m else None, int(n.group(1)) if n else None,
                a.stdout + a.stderr + b.stdout + b.stderr)


def two_groups(*ranks):
    """Logs of @ranks, joined, with #0 leading X (c1..c10, x11..x20) and #2
    leading Y (c1..c10, y11..y30)."""
    L = Logs()
    L.joined(*ranks)
    L.steps(0, 1.0, 1, 20, "x", 0)
    L.steps(2, 1.0, 1, 30, "y", 2)
    return L


def base(carry=True, merge_to=20, merge_lo=11):
    L = two_groups(0, 1, 2)
    if carry:
        L.snapshot(1, 1.5, 0, 20, "x20")
    L.kill(0, 2.0)
    L.snapshot(1, 3.0, 2, 30, "y30")          # the kept group's, then merged
    L.merged(1, 3.0, 2, merge_lo, merge_to)
    L.steps(1, 3.1, 31, 40, "y", 2)
    L.steps(2, 3.1, 31, 40, "y", 2)
    return L


def two_hops():
    L = two_groups(0, 1, 2, 3)
    L.snapshot(1, 1.5, 0, 20, "x20")
    L.snapshot(3, 1.8, 1, 20, "x20")
    L.kill(0, 2.0)
    L.kill(1, 2.2)
    L.snapshot(3, 3.0, 2, 30, "y30")
    L.merged(3, 3.0, 2, 11, 20)
    return L


def rolled_back_writer():
    # #0 commits x11..x20, writes its checkpoint at 20, rolls back and redoes
    # z11..z20 (a silent fork of Y's y11..y20). #1 resumes the checkpoint
    # (x20) and yields to Y: its merge covers x11..x20, not z11..z20.
    L = two_groups(0, 1, 2)
    L.steps(0, 1.5, 11, 20, "z", 0)
    L.resumed(1, 2.0, 20, "x20")
    L.kill(0, 2.5)
    L.snapshot(1, 3.0, 2, 30, "y30")
    L.merged(1, 3.0, 2, 11, 20)
    return L


def sender_rolled_back(resume=False):
    # #1 takes #0's state at step 20 (x20: a snapshot, or its checkpoint);
    # #0 then rolls back and redoes z11..z20, which #3 takes as a snapshot;
    # #0 dies and both yield to Y. Each merge covers the history it took:
    # #1's x, #3's z — not #0's latest reports at the time of #1's load.
    L = two_groups(0, 1, 2, 3)
    if resume:
        L.resumed(1, 1.7, 20, "x20")
    else:
        L.snapshot(1, 1.5, 0, 20, "x20")
    L.steps(0, 1.6, 11, 20, "z", 0)
    L.snapshot(3, 1.8, 0, 20, "z20")
    L.kill(0, 2.0)
    L.snapshot(1, 3.0, 2, 30, "y30")
    L.merged(1, 3.0, 2, 11, 20)
    L.snapshot(3, 3.2, 2, 30, "y30")
    L.merged(3, 3.2, 2, 11, 20)
    return L


def early_snapshot():
    # #1 takes #0's snapshot at step 15 though #0 had reported up to 20:
    # its merge covers x11..x15, and x16..x20 stay divergent
    L = base(carry=False)
    L.ev[1].insert(1, (1.5, '{"event":"snapshot","from":"n0","step":15,"hash":"x15"}'))
    return L


def dropped_silently():
    # #1 followed #0 (x11..x20), then rejoined through #2's snapshot at 10
    # with no `merged` report (dropping x11..x20 silently), and later
    # yields in a merge of 11..20 from a state that never held them
    L = two_groups(0, 1, 2)
    L.steps(1, 1.0, 1, 20, "x", 0)
    L.snapshot(1, 1.5, 2, 10, "c10")
    L.kill(0, 2.0)
    L.snapshot(1, 3.0, 2, 30, "y30")
    L.merged(1, 3.0, 2, 11, 20)
    return L


def lagging_sender(redo=False):
    # #1 takes #0's snapshot at 20 before #0 reported x11..x20: a leader
    # reports a step once its members acknowledged it (seed 5, 60 s,
    # --netns 2: 63 steps reported up to 0.3 s after the snapshot that
    # carried them). #1's merge covers them — unless what #0 reported late
    # was another history (its step 20 is not the snapshot's hash).
    L = Logs()
    L.joined(0, 1, 2)
    L.steps(0, 1.0, 1, 10, "x", 0)
    L.steps(2, 1.0, 1, 30, "y", 2)
    L.snapshot(1, 1.5, 0, 20, "x20")
    L.steps(0, 1.6, 11, 20, "z" if redo else "x", 0)
    L.kill(0, 2.0)
    L.snapshot(1, 3.0, 2, 30, "y30")
    L.merged(1, 3.0, 2, 11, 20)
    return L


def self_resume():
    # a rank resumes a checkpoint it wrote itself, then yields
    L = two_groups(0, 2)
    L.resumed(0, 2.0, 20, "x20")
    L.snapshot(0, 3.0, 2, 30, "y30")
    L.merged(0, 3.0, 2, 11, 20)
    return L


cases = [
    ("a merge covers the steps its snapshot carried", base(), 0),
    ("without the snapshot, #0's committed x11..x20 stay divergent (not y's, the kept ones)",
     base(carry=False), 10),
    ("a merge of 11..15 leaves x16..x20 divergent", base(merge_to=15), 5),
    ("a merge covers what its sender's sender carried", two_hops(), 0),
    ("a merge of 15..20 leaves x11..x14 divergent", base(merge_lo=15), 4),
    ("a snapshot carries its sender's steps up to its own step, no further", early_snapshot(), 5),
    ("a snapshot carries what its sender had at the load, not what it redid after",
     sender_rolled_back(), 0),
    ("a checkpoint carries what its writer had when it reported it, not what it redid after",
     sender_rolled_back(resume=True), 0),
    ("a resumed checkpoint carries what its writer had then, not its redone steps",
     rolled_back_writer(), 10),
    ("a merge does not cover hashes its rank dropped before without a report",
     dropped_silently(), 10),
    ("a rank that resumes its own checkpoint is judged, and the judges end", self_resume(), 0),
    ("a snapshot carries its sender's steps that it reported after sending it", lagging_sender(), 0),
    ("… not another history it reported after (its step at the snapshot has another hash)",
     lagging_sender(redo=True), 10),
]
fails = 0
for name, logs, want in cases:
    try:
        live, recount, out = logs.judge()
    except subprocess.TimeoutExpired as e:
        live, recount, out = None, None, "timed out: %s" % e
    ok = live == want and recount == want
    print("%s %s (chaos.py %s, chaos-recount.py's state-only count %s, want %d)" % ("ok" if ok else "FAIL", name,
                                                                 live, recount, want))
    if not ok:
        fails += 1
        print(out)
sys.exit(1 if fails else 0)
