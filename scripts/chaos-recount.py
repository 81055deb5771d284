#!/usr/bin/env python3
"""chaos-recount.py LOGDIR — recount a chaos.py run's divergent steps from
its event logs (chaos.py --event-logs: LOGDIR/rank-NNN.jsonl).

chaos.py counts a step divergent when it has two hashes and no holder of
the other hash reported it in a "merged" event; a holder is a rank that
reported that hash itself. A rank that joined through a snapshot holds the
history before the snapshot's step too (its state is the sender's), and
when its group later yields, its "merged" covers those steps — but it never
reported their hashes, so chaos.py does not count its report for them
(issue 29, item 13: a group whose first leader was killed, its members all
joined from snapshots, yields in a merge and reports the discard). This
counts both ways: crediting a "merged" to the hashes its rank reported (as
chaos.py does, without its allowance for uncommitted hashes that died with
their killed holders), and to the history the rank's state carried at the
time of the report, followed back through the snapshots it and its
senders loaded and the checkpoints they resumed (scripts/chaoslog.py).

Example: scripts/chaos-recount.py /tmp/chaos60/run/chaos/logs
"""
import collections, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaoslog

if len(sys.argv) != 2:
    sys.exit("usage: chaos-recount.py LOGDIR (chaos.py --event-logs: OUT/chaos/logs)")
ranks = chaoslog.load(sys.argv[1])

# step → hash → the ranks that reported it
hist = collections.defaultdict(lambda: collections.defaultdict(set))
for r, R in ranks.items():
    for t, s, h, c, n, _, _, _ in R.steps:
        hist[s][h].add(r)
own = set(); inherited = set()   # (step, hash) that a merged report covers

for r, R in ranks.items():
    for t, lo, hi in R.merges:
        # as chaos.py: every hash this rank reported in the range before the report
        for tt, s, h, c, n, _, _, _ in R.steps:
            if tt > t:
                break
            if lo <= s <= hi:
                own.add((s, h))
        for s, h, tt, n, x, depth in chaoslog.carried(ranks, r, t, lo, hi):
            (own if depth == 0 else inherited).add((s, h))

def count(cred):
    n = 0; ex = []
    for s, hs in hist.items():
        live = [h for h in hs if (s, h) not in cred]
        if len(live) >= 2:
            n += 1
            if len(ex) < 3: ex.append(s)
    return n, ex
n, ex = count(own)
print("divergent steps, a merged report crediting its rank's own hashes: %d%s"
      % (n, " (e.g. %s)" % ", ".join(map(str, ex)) if ex else ""))
n, ex = count(own | inherited)
print("divergent steps, crediting the history its rank's state carried too: %d%s"
      % (n, " (e.g. %s)" % ", ".join(map(str, ex)) if ex else ""))
