#!/usr/bin/env python3
"""chaos-recount.py LOGDIR — recount a chaos.py run's divergent steps from
its event logs (chaos.py --event-logs: LOGDIR/rank-NNN.jsonl), three ways:

  1. a "merged" report credited to every hash its rank reported in the
     range before it (chaos.py's rule until 2026-12-07, without its
     allowance for uncommitted hashes that died with their killed holders);
  2. that, and the history the rank's state carried (3);
  3. the history the rank's state carried alone — chaos.py's rule since
     2026-12-07 (scripts/chaoslog.py's merge_carried): its own reports
     since its last load before the kept group's snapshot (which rlx-rank
     reports just before "merged"), then what that load carried, followed
     back through the snapshots it and its senders loaded (each sender as
     it was at the load) and the checkpoints they resumed (each writer as
     it was when it reported the checkpoint's step).

A rank that joined through a snapshot holds the history before the
snapshot's step too, and when its group later yields its "merged" covers
those steps, though it never reported their hashes (issue 29, item 13: a
group whose first leader was killed, its members all joined from
snapshots, yields in a merge and reports the discard): (1) counts those
divergent, (3) does not. (1) also covers a hash the rank had dropped
earlier without a report, which (3) does not. `chaos.py --judge LOGDIR`
replays the logs through chaos.py's own judge, which must agree with (3).

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
state = set()                    # ... by the history its rank's state carried alone

for r, R in ranks.items():
    for merge in R.merges:
        t, lo, hi = merge[:3]
        # as chaos.py: every hash this rank reported in the range before the report
        for tt, s, h, c, n, _, _, _ in R.steps:
            if tt > t:
                break
            if lo <= s <= hi:
                own.add((s, h))
        for s, h, tt, n, x, depth in chaoslog.merge_carried(ranks, r, merge):
            (own if depth == 0 else inherited).add((s, h))
            state.add((s, h))

def count(cred):
    n = 0; ex = []
    for s, hs in hist.items():
        live = [h for h in hs if (s, h) not in cred]
        if len(live) >= 2:
            n += 1
            if len(ex) < 3: ex.append(s)
    return n, ex
n, ex = count(own)
print("1. divergent steps, a merged report crediting its rank's own hashes: %d%s"
      % (n, " (e.g. %s)" % ", ".join(map(str, ex)) if ex else ""))
n, ex = count(own | inherited)
print("2. divergent steps, crediting the history its rank's state carried too: %d%s"
      % (n, " (e.g. %s)" % ", ".join(map(str, ex)) if ex else ""))
n, ex = count(state)
print("3. divergent steps, crediting only the history its rank's state carried: %d%s"
      % (n, " (e.g. %s)" % ", ".join(map(str, ex)) if ex else ""))
