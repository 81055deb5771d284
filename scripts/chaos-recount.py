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
senders loaded.

Example: scripts/chaos-recount.py /tmp/chaos60/run/chaos/logs
"""
import json, sys, os, glob, bisect, collections
if len(sys.argv) != 2:
    sys.exit("usage: chaos-recount.py LOGDIR (chaos.py --event-logs: OUT/chaos/logs)")
d = sys.argv[1]
ranks = {}
node_rank = {}
for f in sorted(glob.glob(os.path.join(d, "rank-*.jsonl"))):
    r = int(os.path.basename(f)[5:8])
    steps = []; snaps = []; merges = []; node = None
    for line in open(f, errors="replace"):
        try:
            t, js = line.split(" ", 1); t = float(t); ev = json.loads(js)
        except Exception:
            continue
        k = ev.get("event")
        if k == "joined" and node is None:
            node = ev.get("node"); node_rank[node] = r
        if k == "step":
            steps.append((t, ev["step"], ev["hash"], ev.get("leader") == node))
        elif k == "snapshot" and "from" in ev:
            snaps.append((t, ev["step"], ev["from"]))
        elif k == "merged":
            merges.append((t, ev.get("from_step", 0), ev.get("to_step", -1)))
    ranks[r] = dict(steps=steps, times=[x[0] for x in steps], snaps=snaps, merges=merges, node=node)

# step → hash → the ranks that reported it
hist = collections.defaultdict(lambda: collections.defaultdict(set))
for r, R in ranks.items():
    for t, s, h, c in R["steps"]:
        hist[s][h].add(r)
own = set(); inherited = set()   # (step, hash) that a merged report covers

def credit(r, t, lo, hi, depth=0):
    """Steps lo..hi of the history rank r's state carried at time t."""
    R = ranks.get(r)
    if R is None or lo > hi or depth > 200:
        return
    prev = [x for x in R["snaps"] if x[0] <= t]
    tS, S = (prev[-1][0], prev[-1][1]) if prev else (-1.0, -1)
    # own reports after the last load, of steps past it
    i0 = bisect.bisect_right(R["times"], tS); i1 = bisect.bisect_right(R["times"], t)
    for tt, s, h, c in R["steps"][i0:i1]:
        if lo <= s <= hi and s > S:
            (own if depth == 0 else inherited).add((s, h))
    if prev:
        x = node_rank.get(prev[-1][2])
        if x is not None:
            credit(x, tS, lo, min(S, hi), depth + 1)

for r, R in ranks.items():
    for t, lo, hi in R["merges"]:
        # as chaos.py: every hash this rank reported in the range before the report
        i1 = bisect.bisect_right(R["times"], t)
        for tt, s, h, c in R["steps"][:i1]:
            if lo <= s <= hi:
                own.add((s, h))
        credit(r, t, lo, hi)

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
