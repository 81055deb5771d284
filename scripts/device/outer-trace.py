#!/usr/bin/env python3
"""Where an N-rank outer round's time goes, from RLX_TRACE files.

    outer-trace.py DIR [--rounds K] [--members] [--json]

DIR holds trace-PID.tsv (or .tsv.gz) of one leader and its members in the
overlapped outer mode (scripts/device/outer-trace.sh makes them; one host,
so CLOCK_MONOTONIC lines them up). docs/PROTOCOL.md, "Overlap": round k's
exchange runs while the ranks compute round k + 1; a rank starts round
k + 2 only after it applied commit k.

For each commit k (times in ms from t0 = the first rank's end of round k's
compute):

  end k       each rank's end of its round-k compute (first / last rank)
  tx          each member's bucket leaving it (its I/O thread's write:
              on the local bus the moment it enters the leader's shaped pipe)
  at L        the leader's main loop has it (out of the shaped pipe: L.rx,
              matched to the member by L.rx.node = M.node)
  add         the leader's first add of round k starts / last add ends
              (on its worker, between its own inner steps)
  fin         the leader's finish of round k starts / ends, the commit sent
  at M        each member's main loop has commit k (first / last)
  end k+1     each rank's end of its round-(k+1) compute (first / last)
  wait        each rank's idle worker before round k + 2 (the largest; and
              how many ranks waited over 1 ms): the commit k came later
              than the end of its round k + 1
  period      the leader's finish k → finish k + 1

then the medians, each rank's compute per round, and the critical path:
the slowest bucket's pipe (tx → at L), the leader's wait for its worker
(at L → add), the finish, the commit's pipe (sent → at M).
--members prints every member's row of each round.
"""
import argparse
import glob
import gzip
import json
import os
import statistics
import sys
from collections import defaultdict


def load(path):
    """(events: what -> [(ns, arg)] in order, io: name -> [(ns, len)])."""
    ev = defaultdict(list)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 4:
                continue
            ev[parts[2]].append((int(parts[0]), int(parts[3])))
    for v in ev.values():
        v.sort()
    return ev


def first_after(lst, t, min_len=1024):
    for ns, n in lst:
        if ns >= t and n >= min_len:
            return ns
    return None


def last_before(lst, t, min_len=1024):
    best = None
    for ns, n in lst:
        if ns > t:
            break
        if n >= min_len:
            best = ns
    return best


class Member:
    def __init__(self, pid, ev):
        self.pid = pid
        self.ev = ev
        nodes = {a for _, a in ev.get("M.node", [])}
        self.node = nodes.pop() if len(nodes) == 1 else None
        # M.run a: round a's compute first, then (later) the apply of commit a
        runs = defaultdict(list)
        ends = defaultdict(list)
        for ns, a in ev.get("M.run", []):
            runs[a].append(ns)
        for ns, a in ev.get("M.run.end", []):
            ends[a].append(ns)
        self.compute = {a: (runs[a][0], ends[a][0]) for a in runs if ends.get(a)}
        self.apply = {a: (runs[a][1], ends[a][1]) for a in runs
                      if len(runs[a]) > 1 and len(ends.get(a, [])) > 1}
        self.send = {a: ns for ns, a in ev.get("M.send", [])}
        self.commit_rx = {}
        for ns, a in ev.get("M.rx.commit", []):
            self.commit_rx.setdefault(a, ns)
        self.tx = ev.get("IO.tx", [])
        self.rx = ev.get("IO.rx", [])


class Leader:
    def __init__(self, pid, ev):
        self.pid = pid
        self.ev = ev

        def first(what):
            d = {}
            for ns, a in ev.get(what, []):
                d.setdefault(a, ns)
            return d

        def last(what):
            return {a: ns for ns, a in ev.get(what, [])}

        own_s, own_e = first("L.own"), first("L.own.end")
        self.compute = {a: (own_s[a], own_e[a]) for a in own_s if a in own_e}
        self.add_first, self.add_last_end = first("L.add"), last("L.add.end")
        self.adds = defaultdict(list)
        for (s, a), (e, _) in zip(ev.get("L.add", []), ev.get("L.add.end", [])):
            self.adds[a].append((s, e))
        self.finish, self.finish_end = first("L.finish"), first("L.finish.end")
        self.fin, self.sent = first("L.fin"), first("L.sent")
        # L.rx step, then L.rx.node hash, one after the other on the main thread
        self.rx = defaultdict(dict)     # step -> node hash -> ns
        rx, nodes = ev.get("L.rx", []), ev.get("L.rx.node", [])
        j = 0
        for ns, step in rx:
            while j < len(nodes) and nodes[j][0] < ns:
                j += 1
            if j < len(nodes):
                self.rx[step].setdefault(nodes[j][1], ns)
                j += 1


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def analyse(d, skip_first=2):
    files = sorted(glob.glob(os.path.join(d, "trace-*.tsv")) + glob.glob(os.path.join(d, "trace-*.tsv.gz")))
    leader, members = None, []
    for f in files:
        pid = os.path.basename(f).split("-")[1].split(".")[0]
        ev = load(f)
        if ev.get("L.finish"):
            leader = Leader(pid, ev)
        elif ev.get("M.run"):
            members.append(Member(pid, ev))
    if leader is None or not members:
        return {"error": "need a leader's and members' traces in %s (%d files)" % (d, len(files))}
    ranks = [("L", leader)] + [("m" + m.pid, m) for m in members]
    commits = sorted(k for k in leader.sent if k + 1 in leader.sent)
    commits = [k for k in commits if k > skip_first + min(commits)] if commits else []
    rounds = []
    for k in commits:
        r = {"commit": k}
        ends = {n: o.compute[k][1] for n, o in ranks if k in o.compute}
        ends1 = {n: o.compute[k + 1][1] for n, o in ranks if k + 1 in o.compute}
        if len(ends) < len(ranks) or len(ends1) < len(ranks):
            continue
        t0 = min(ends.values())
        ms = lambda t: None if t is None else (t - t0) / 1e6
        r["t0_ns"] = t0
        r["end"] = {n: ms(t) for n, t in ends.items()}
        r["end1"] = {n: ms(t) for n, t in ends1.items()}
        r["compute"] = {n: (o.compute[k][1] - o.compute[k][0]) / 1e6 for n, o in ranks}
        per = {}
        for m in members:
            name = "m" + m.pid
            send = m.send.get(k)
            tx = first_after(m.tx, send) if send is not None else None
            at_l = leader.rx.get(k, {}).get(m.node)
            crx = m.commit_rx.get(k)
            pipe_in = last_before(m.rx, crx) if crx is not None else None
            # idle before round k + 2: the gap after round k + 1, less the apply of k
            idle = None
            if k + 2 in m.compute and k in m.apply:
                idle = (m.compute[k + 2][0] - m.compute[k + 1][1]
                        - (m.apply[k][1] - m.apply[k][0])) / 1e6
            per[name] = {"tx": ms(tx), "at_leader": ms(at_l), "commit_in_pipe": ms(pipe_in),
                         "commit_at": ms(crx),
                         "apply_ms": (m.apply[k][1] - m.apply[k][0]) / 1e6 if k in m.apply else None,
                         "idle_ms": idle}
        r["members"] = per
        adds = leader.adds.get(k, [])
        r["add_first"] = ms(leader.add_first.get(k))
        r["add_last_end"] = ms(leader.add_last_end.get(k))
        r["add_ms_each"] = med([(e - s) / 1e6 for s, e in adds])
        r["adds"] = len(adds)
        r["finish"] = ms(leader.finish.get(k))
        r["finish_end"] = ms(leader.finish_end.get(k))
        r["sent"] = ms(leader.sent.get(k))
        if k + 2 in leader.compute:
            r["leader_idle_ms"] = (leader.compute[k + 2][0] - leader.compute[k + 1][1]) / 1e6
        if k + 1 in leader.finish:
            r["period_ms"] = (leader.finish[k + 1] - leader.finish[k]) / 1e6
        rounds.append(r)
    if not rounds:
        return {"error": "no complete round in %s" % d}
    summary = {}
    g = lambda f: med([f(r) for r in rounds])
    vals = lambda r, key: [v[key] for v in r["members"].values() if v[key] is not None]
    summary["period_ms"] = g(lambda r: r.get("period_ms"))
    summary["compute_ms"] = {n: g(lambda r, n=n: r["compute"].get(n)) for n, _ in ranks}
    summary["end_spread_ms"] = g(lambda r: max(r["end"].values()))
    summary["last_tx_ms"] = g(lambda r: max(vals(r, "tx"), default=None))
    summary["bucket_pipe_ms"] = med([v["at_leader"] - v["tx"] for r in rounds for v in r["members"].values()
                                     if v["at_leader"] is not None and v["tx"] is not None])
    summary["last_at_leader_ms"] = g(lambda r: max(vals(r, "at_leader"), default=None))
    summary["add_first_ms"] = g(lambda r: r["add_first"])
    summary["add_last_end_ms"] = g(lambda r: r["add_last_end"])
    summary["add_ms_each"] = g(lambda r: r["add_ms_each"])
    summary["finish_ms"] = g(lambda r: r["finish"])
    summary["finish_end_ms"] = g(lambda r: r["finish_end"])
    summary["sent_ms"] = g(lambda r: r["sent"])
    summary["last_commit_at_ms"] = g(lambda r: max(vals(r, "commit_at"), default=None))
    summary["commit_pipe_ms"] = med([v["commit_at"] - r["sent"] for r in rounds for v in r["members"].values()
                                     if v["commit_at"] is not None and r["sent"] is not None])
    summary["end1_first_ms"] = g(lambda r: min(r["end1"].values()))
    summary["end1_last_ms"] = g(lambda r: max(r["end1"].values()))
    summary["member_idle_ms"] = g(lambda r: med(vals(r, "idle_ms")))
    summary["member_idle_max_ms"] = g(lambda r: max(vals(r, "idle_ms"), default=None))
    summary["leader_idle_ms"] = g(lambda r: r.get("leader_idle_ms"))
    summary["apply_ms"] = g(lambda r: med(vals(r, "apply_ms")))
    return {"rounds": rounds, "summary": summary, "leader": leader.pid,
            "members": [m.pid for m in members]}


def f(x, w=7):
    return ("%*.0f" % (w, x)) if x is not None else " " * (w - 1) + "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--members", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--skip", type=int, default=2, help="first commits left out (2)")
    a = ap.parse_args()
    r = analyse(a.dir, a.skip)
    if a.json:
        print(json.dumps(r))
        return
    if "error" in r:
        print(r["error"], file=sys.stderr)
        sys.exit(1)
    print("%s: leader %s, %d members, %d rounds (ms from the first rank's end of round k)"
          % (a.dir, r["leader"], len(r["members"]), len(r["rounds"])))
    print("commit | end k first/last L | tx last | at L first/last | add first/last-end (n, each) |"
          " fin start/end sent | at M first/last | end k+1 first/last L | idle M med/max (>1ms) L | period")
    for x in r["rounds"]:
        m = x["members"].values()
        tx = [v["tx"] for v in m if v["tx"] is not None]
        atl = [v["at_leader"] for v in m if v["at_leader"] is not None]
        atm = [v["commit_at"] for v in m if v["commit_at"] is not None]
        idle = [v["idle_ms"] for v in m if v["idle_ms"] is not None]
        print("%6d | %s %s %s | %s | %s %s | %s %s (%d, %.1f) | %s %s %s | %s %s | %s %s %s | %s %s (%d) %s | %s"
              % (x["commit"], f(min(x["end"].values())), f(max(x["end"].values())), f(x["end"]["L"]),
                 f(max(tx, default=None)), f(min(atl, default=None)), f(max(atl, default=None)),
                 f(x["add_first"]), f(x["add_last_end"]), x["adds"], x["add_ms_each"] or 0,
                 f(x["finish"]), f(x["finish_end"]), f(x["sent"]),
                 f(min(atm, default=None)), f(max(atm, default=None)),
                 f(min(x["end1"].values())), f(max(x["end1"].values())), f(x["end1"]["L"]),
                 f(med(idle), 5), f(max(idle, default=None), 5), sum(1 for i in idle if i > 1),
                 f(x.get("leader_idle_ms"), 5), f(x.get("period_ms"))))
        if a.members:
            for n, v in sorted(x["members"].items()):
                print("       %-8s end %s tx %s at L %s | commit in pipe %s at %s apply %s | end k+1 %s idle %s"
                      % (n, f(x["end"][n]), f(v["tx"]), f(v["at_leader"]), f(v["commit_in_pipe"]),
                         f(v["commit_at"]), f(v["apply_ms"], 5), f(x["end1"][n]), f(v["idle_ms"], 5)))
    s = r["summary"]
    print("medians:")
    for k, v in s.items():
        if isinstance(v, dict):
            print("  %-20s %s" % (k, " ".join("%s %.0f" % (n, x) for n, x in v.items() if x is not None)))
        else:
            print("  %-20s %s" % (k, "-" if v is None else "%.1f" % v))


if __name__ == "__main__":
    main()
