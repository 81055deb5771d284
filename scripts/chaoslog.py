"""chaoslog.py — read a chaos.py run's event logs (chaos.py --event-logs:
LOGDIR/rank-NNN.jsonl, each line "SECONDS JSON" on the run's clock) and
reconstruct the history a rank's state carried, for chaos.py (throughput
retained on the surviving history) and chaos-recount.py (divergent steps).

A rank's state at time t is: the steps it reported itself after the last
snapshot it loaded before t (or the checkpoint it resumed), on top of the
state the snapshot's sender carried when it was loaded (or the state the
checkpoint's writer — the rank that reported the resumed step with its
hash last before the resume — carried when it reported that step) —
followed back, sender by sender, to the first step. A `merged` report is
judged on the state before the kept group's snapshot, which rlx-rank loads
and reports just before it (merge_carried).
"""
import bisect
import collections
import glob
import json
import os
import re
import sys


class RankLog:
    """What one rank's event stream said."""

    def __init__(self, idx):
        self.idx = idx
        self.node = None
        self.steps = []     # (t read, step, hash, committed by itself as leader, samples,
                            #  t its node made the event, where known, else t read, term, leader)
        self.times = []     # t of each entry of steps
        self.seqs = []      # the line of each entry of steps in the rank's log (its order)
        self.loads = []     # (t, step, hash or None, sender idx or None, line,
                            #  the time whose state of the sender it is)
        self.merges = []    # (t, from_step, to_step, line, the kept group's node)
        self.events = []    # (t, event) of every event but step


def load(logdir):
    """{rank idx: RankLog} from LOGDIR/rank-NNN.jsonl."""
    ranks = {}
    node_rank = {}
    pending = []        # (RankLog, t, step, hash, node or None)
    t0 = None           # the run's clock, when chaos.py wrote it: a step is then
    try:                # timed when its node made the event, not when it was read
        with open(os.path.join(logdir, "t0")) as f:
            t0 = float(f.read())
    except (OSError, ValueError):
        pass
    for f in sorted(glob.glob(os.path.join(logdir, "rank-*.jsonl"))):
        m = re.match(r"rank-(\d+)\.jsonl$", os.path.basename(f))
        if not m:
            continue
        R = ranks[int(m.group(1))] = RankLog(int(m.group(1)))
        for seq, line in enumerate(open(f, errors="replace")):
            try:
                t, js = line.split(" ", 1)
                t = float(t)
                ev = json.loads(js)
            except ValueError:
                continue
            k = ev.get("event")
            if k == "step":
                made = t
                if t0 is not None and "time_us" in ev:
                    made = min(t, ev["time_us"] / 1e6 - t0)
                R.steps.append((t, ev["step"], ev["hash"], ev.get("leader") == R.node,
                                ev.get("samples", 0), made, ev.get("term", 0),
                                sys.intern(ev.get("leader") or "")))
                R.times.append(t)
                R.seqs.append(seq)
                continue
            R.events.append((t, ev))
            if k == "joined" and R.node is None:
                R.node = ev.get("node")
                node_rank[R.node] = R.idx
            elif k == "snapshot" and "from" in ev:
                pending.append((R, t, ev["step"], ev.get("hash"), ev["from"], seq))
            elif k == "resumed":
                pending.append((R, t, ev["step"], ev.get("hash"), None, seq))
            elif k == "merged":
                R.merges.append((t, ev.get("from_step", 0), ev.get("to_step", -1), seq,
                                 ev.get("node")))
    # A resumed checkpoint's writer: the last rank to report its step with
    # its hash before the resume; its state is the one it had then (not at
    # the resume: it may have rolled back and redone steps since).
    want = {(s, h) for R, t, s, h, node, seq in pending if node is None and h}
    reports = collections.defaultdict(list)
    if want:
        for R in ranks.values():
            for t, s, h, c, n, _, _, _ in R.steps:
                if (s, h) in want:
                    reports[(s, h)].append((t, R.idx))
    for R, t, s, h, node, seq in pending:
        if node is not None:
            src, src_t = node_rank.get(node), t
        else:
            before = [x for x in reports.get((s, h), ()) if x[0] <= t]
            src, src_t = (max(before)[1], max(before)[0]) if before else (None, t)
        R.loads.append((t, s, h, src, seq, src_t))
    for R in ranks.values():
        R.loads.sort(key=lambda x: x[4])
    for r, R in ranks.items():
        R.node_rank = node_rank
    return ranks


# A merge's rank loads the kept group's snapshot just before it reports
# `merged` (the same millisecond): the history it discarded is its state
# before that load. A load of the kept node's this long before is that one.
MERGE_LOAD_S = 1.0


def merge_carried(ranks, r, merge):
    """carried() for a `merged` report (@merge, an entry of RankLog.merges)
    of rank @r: the history its state carried before it loaded the kept
    group's snapshot."""
    t, lo, hi, seq, node = merge
    R = ranks[r]
    kept = R.node_rank.get(node) if node else None
    i = bisect.bisect_left([x[4] for x in R.loads], seq)
    if i and R.loads[i - 1][3] == kept and kept is not None and t - R.loads[i - 1][0] <= MERGE_LOAD_S:
        seq = R.loads[i - 1][4]
    return carried(ranks, r, t, lo, hi, seq=seq)


def carried(ranks, r, t, lo, hi, seq=None):
    """The history of steps @lo..@hi that rank @r's state carried at time
    @t (or, given @seq, just before line @seq of its log): yields (step,
    hash, report time, samples, rank, depth) — each step once, from the
    rank whose own report it was (@depth hops back through loaded
    snapshots and checkpoints; 0 is @r's own). A snapshot's sender is
    followed at the time of the load, a checkpoint's writer at the time it
    reported the checkpoint's step."""
    depth = 0
    seen = set()
    want = (None, None)     # (step, hash) of the load that led to this sender
    while r is not None and lo <= hi and (r, t, seq) not in seen:
        seen.add((r, t, seq))
        R = ranks.get(r)
        if R is None:
            return
        if seq is not None:
            i = bisect.bisect_left([x[4] for x in R.loads], seq)
        else:
            i = bisect.bisect_right([x[0] for x in R.loads], t)
        tS, S, h_load, src, lseq, src_t = R.loads[i - 1] if i else (-1.0, 0, None, None, -1, -1.0)
        # its own reports after the load, of steps past it; a step reported
        # twice (rolled back and redone) counts as its later report
        if seq is not None:
            i0 = bisect.bisect_right(R.seqs, lseq)
            i1 = bisect.bisect_left(R.seqs, seq)
        else:
            i0 = bisect.bisect_right(R.seqs, lseq) if i else 0
            i1 = bisect.bisect_right(R.times, t)
        mine = {}
        for tt, s, h, c, n, _, _, _ in R.steps[i0:i1]:
            if lo <= s <= hi and s > S:
                mine[s] = (s, h, tt, n, r, depth)
        if seq is None and depth:
            # Followed as a sender: a leader reports a step once its members
            # acknowledged it, so its reports of steps up to the snapshot's
            # may come after it was sent (seed 5, 60 s, --netns 2: 63 steps
            # up to 0.3 s late). The first of each such report before its
            # next load counts, when its report of the load's step has the
            # load's hash.
            j = bisect.bisect_right([x[0] for x in R.loads], t)
            i2 = bisect.bisect_left(R.seqs, R.loads[j][4]) if j < len(R.loads) else len(R.seqs)
            late = {}
            for tt, s, h, c, n, _, _, _ in R.steps[i1:i2]:
                if lo <= s <= hi and s > S and s not in mine and s not in late:
                    late[s] = (s, h, tt, n, r, depth)
            if not (want[0] in late and late[want[0]][1] != want[1]):
                mine.update(late)
        for s in sorted(mine):
            yield mine[s]
        hi = min(hi, S)
        want = (S, h_load)
        r, t, seq = src, src_t, None
        depth += 1


def fault_log(path):
    """[(t, kind, rank label, detail)] from a chaos.py run's faults.log."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                m = re.match(r"\s*([\d.]+)\s+(\S+)\s+(.*?\))\s*(.*)$", line)
                if m:
                    out.append((float(m.group(1)), m.group(2), m.group(3), m.group(4)))
    except OSError:
        pass
    return out


def useful_work(ranks, final_rank, final_step, t_from, t_to):
    """The surviving history: the steps 1..@final_step that the final
    checkpoint (rank @final_rank's state at its end) descends from, each
    with its first report by anyone (when its node made the event). Returns {step: (hash, first report
    time, samples)} of those whose first report lies in [@t_from, @t_to]."""
    line = {}
    for s, h, tt, n, r, d in carried(ranks, final_rank, float("inf"), 1, final_step):
        line[s] = [h, tt, n]
    for R in ranks.values():
        for tt, s, h, c, n, made, _, _ in R.steps:
            e = line.get(s)
            if e is not None and e[0] == h and made < e[1]:
                e[1] = made
                e[2] = e[2] or n
    return {s: tuple(e) for s, e in line.items() if t_from <= e[1] <= t_to}


# What a stretch without a surviving step is put down to, the worst first,
# and how long after it is injected a fault is taken to act (a freeze or a
# cut for its length and then a timeout's; --heartbeat-timeout-ms + 2 s).
CAUSES = ("freeze-leader", "cut-leader", "kill-leader", "freeze", "cut", "kill", "spawn",
          "precision")


def fault_acts(fault, timeout_s):
    """Until when @fault (t, kind, label, detail) may hold the cohort up."""
    t, kind, label, detail = fault
    m = re.match(r"([\d.]+) s", detail)
    if kind.startswith(("freeze", "cut")) and m:
        return t + float(m.group(1)) + timeout_s + 2
    if kind.startswith("kill"):
        return t + timeout_s + 2
    return t + 2


def stall_costs(ranks, useful, faults, t_from, t_to, timeout_s=3.0, gap_s=0.25):
    """Stretches of [@t_from, @t_to] longer than @gap_s without a new step
    of the surviving history (@useful, from useful_work). Each is put down
    to the worst fault (CAUSES) acting as it began (fault_acts; injected
    before it began + 0.25 s: the harness reads events late), else "none".
    Returns ({kind: [stretches, seconds, seconds of it a discarded branch
    was committing]}, the longest (length, from, to, kind))."""
    times = sorted(e[1] for e in useful.values())
    # the committed steps of other branches (a leader's own report)
    other = sorted(made for R in ranks.values() for tt, s, h, c, n, made, _, _ in R.steps
                   if c and t_from <= made <= t_to and useful.get(s, (None,))[0] != h)
    faults = sorted(faults)
    ft = [f[0] for f in faults]
    costs = collections.defaultdict(lambda: [0, 0.0, 0.0])
    longest = (0.0, 0.0, 0.0, "none")
    prev = t_from
    for t in times + [t_to]:
        if t - prev > gap_s:
            i = bisect.bisect_right(ft, prev + 0.25)
            acting = [f[1] for f in faults[max(0, i - 100):i]
                      if f[1] in CAUSES and fault_acts(f, timeout_s) >= prev]
            kind = min(acting, key=CAUSES.index) if acting else "none"
            c = costs[kind]
            c[0] += 1
            c[1] += t - prev
            last = prev
            for x in other[bisect.bisect_left(other, prev):bisect.bisect_right(other, t)]:
                if x - last <= gap_s:
                    c[2] += x - last
                last = x
            if t - prev > longest[0]:
                longest = (t - prev, prev, t, kind)
        prev = max(prev, t)
    return dict(costs), longest


def surviving_stall(useful, ineligible, resets, t_from, t_to):
    """chaos.py's stall measured on the surviving history (@useful, from
    useful_work): the longest stretch without a new step of it, from its
    last step, the end of a time nobody could go on (@ineligible: [from,
    to] as the harness saw it, in order) or a fault on the leader or the
    next in line (@resets), whichever came last, to the next step or the
    start of a time nobody could go on. Returns (length, from, to)."""
    marks = sorted([(e[1], "step") for e in useful.values() if t_from <= e[1] <= t_to] +
                   [(a, "off") for a, b in ineligible] + [(b, "on") for a, b in ineligible] +
                   [(r, "reset") for r in resets if t_from <= r <= t_to] + [(t_to, "end")])
    best = (0.0, 0.0, 0.0)
    start, off = t_from, False
    for t, kind in marks:
        if not off and t - start > best[0]:
            best = (t - start, start, t)
        if kind == "off":
            off = True
        elif kind == "on":
            off = False
            start = t
        elif not off or kind == "step":
            start = max(start, t)
    return best


def failovers(ranks, faults):
    """Each takeover — a rank's "leader" event naming itself at a newer
    term than the leader it followed — broken down: the fault on the old
    leader before it (within 20 s), the old leader's last commit before
    that fault, when the new leader took the old one for gone
    ("member-left") and why, when it took over, and the first step of its
    term anyone reported. Times on the run's clock (steps when their node
    made them); None where the logs do not say."""
    by_node = {R.node: R for R in ranks.values() if R.node}
    out = []
    for R in ranks.values():
        followed = None
        for t, ev in R.events:
            if ev.get("event") != "leader":
                continue
            node, term = ev.get("node"), ev.get("term", 0)
            if node == R.node and followed and followed[0] != R.node and term > followed[1]:
                old = followed[0]
                f = [x for x in faults if x[0] <= t and old in x[2] and t - x[0] <= 20
                     and x[1].split("-")[0] in ("kill", "freeze", "cut")]
                fault = f[-1] if f else None
                start = fault[0] if fault else t
                O = by_node.get(old)
                last = max((made for tt, s, h, c, n, made, _, _ in O.steps if made <= start + 0.05),
                           default=None) if O else None
                left = [(tt, e.get("reason")) for tt, e in R.events
                        if tt <= t and e.get("event") == "member-left" and e.get("node") == old
                        and tt >= start - 0.05]
                first = min((made for X in ranks.values()
                             for tt, s, h, c, n, made, tm, ld in X.steps if tm == term and ld == R.node and
                             made >= t - 1), default=None)
                out.append(dict(rank=R.idx, old=old, term=term, fault=fault, last_commit=last,
                                detected=left[0] if left else None, took_over=t,
                                first_commit=first))
            followed = (node, term)
    out.sort(key=lambda x: x["took_over"])
    return out
