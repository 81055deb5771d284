#!/usr/bin/env python3
"""Where a two-rank round's time goes, from RLX_TRACE files (core/p2p/rlx-trace.h).

    round-trace.py DIR [--label L] [--json]

DIR holds trace-PID.tsv of one leader and one member of the same cohort
(run both with RLX_TRACE=DIR). CLOCK_MONOTONIC is one clock for the host,
so the two files line up. For each round k+1 (the first fifth left out) the
path from the leader's finish of round k to its finish of round k+1, as
consecutive segments (medians, µs):

  finish k on the leader's worker   L.finish → L.finish.end (k)
  → leader main loop                L.finish.end → L.fin
  leader sends the step frame       L.fin → L.sent
  leader I/O writes it              L.sent → IO.tx (leader, first frame ≥ 1 KiB after)
  socket + member I/O reads it      → IO.rx (member, last frame ≥ 1 KiB before M.rx)
  → member main loop                → M.rx (k+1)
  → member worker                   M.rx → M.run
  member apply + gradient           M.run → M.run.end
  → member main loop, send          M.run.end → M.sent
  member I/O writes the bucket      M.sent → IO.tx (member)
  socket + leader I/O reads it      → IO.rx (leader)
  → leader main loop                → L.rx (k+1)
  → leader worker (add)             L.rx → L.add
  add                               L.add → L.add.end
  → finish k+1 starts               L.add.end → L.finish (k+1)

and, beside them, the leader's own gradient (L.own → L.own.end) and the
round (L.finish k → L.finish k+1).
"""
import argparse
import bisect
import glob
import json
import os
import statistics
import sys
from collections import defaultdict


def load(path):
    ev = defaultdict(dict)      # what -> step -> ns (first occurrence)
    io = defaultdict(list)      # IO.rx / IO.tx -> [(ns, len)]
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 4:
                continue
            ns, _tid, what, arg = int(parts[0]), parts[1], parts[2], int(parts[3])
            if what.startswith("IO."):
                io[what].append((ns, arg))
            else:
                ev[what].setdefault(arg, ns)
    for v in io.values():
        v.sort()
    return ev, io


def first_after(lst, t, min_len=1024):
    i = bisect.bisect_left(lst, (t, -1))
    while i < len(lst):
        if lst[i][1] >= min_len:
            return lst[i][0]
        i += 1
    return None


def last_before(lst, t, min_len=1024):
    i = bisect.bisect_right(lst, (t, 1 << 62)) - 1
    while i >= 0:
        if lst[i][1] >= min_len:
            return lst[i][0]
        i -= 1
    return None


SEGMENTS = [
    "finish k (leader worker)", "-> leader main loop (result)", "leader sends step frame",
    "leader I/O writes it", "socket + member I/O reads it", "-> member main loop",
    "-> member worker", "member apply + gradient", "-> member main loop + send",
    "member I/O writes bucket", "socket + leader I/O reads it", "-> leader main loop (bucket)",
    "-> leader worker (add)", "add", "-> finish k+1 starts",
]


def analyse(d):
    files = sorted(glob.glob(os.path.join(d, "trace-*.tsv")))
    traces = [load(f) for f in files]
    leaders = [t for t in traces if t[0].get("L.finish")]
    members = [t for t in traces if t[0].get("M.run")]
    if not leaders or not members:
        return {"error": "need one leader's and one member's trace in %s (found %d files)"
                % (d, len(files))}
    (lev, lio), (mev, mio) = leaders[0], members[0]
    steps = sorted(k for k in lev["L.finish"] if k + 1 in lev["L.finish"])
    steps = steps[len(steps) // 5:]
    seg = defaultdict(list)
    rounds, own = [], []
    for k in steps:
        try:
            t = [lev["L.finish"][k], lev["L.finish.end"][k], lev["L.fin"][k], lev["L.sent"][k]]
            ltx = first_after(lio.get("IO.tx", []), t[3])
            mrx_main = mev["M.rx"][k + 1]
            mrx = last_before(mio.get("IO.rx", []), mrx_main)
            t += [ltx, mrx, mrx_main, mev["M.run"][k + 1], mev["M.run.end"][k + 1],
                  mev["M.sent"][k + 1]]
            mtx = first_after(mio.get("IO.tx", []), t[-1])
            lrx_main = lev["L.rx"][k + 1]
            lrx = last_before(lio.get("IO.rx", []), lrx_main)
            t += [mtx, lrx, lrx_main, lev["L.add"][k + 1], lev["L.add.end"][k + 1],
                  lev["L.finish"][k + 1]]
        except KeyError:
            continue
        if any(x is None for x in t):
            continue
        for i, name in enumerate(SEGMENTS):
            seg[name].append((t[i + 1] - t[i]) / 1000.0)
        rounds.append((t[-1] - t[0]) / 1000.0)
        if k + 1 in lev.get("L.own", {}) and k + 1 in lev.get("L.own.end", {}):
            own.append((lev["L.own.end"][k + 1] - lev["L.own"][k + 1]) / 1000.0)
    if not rounds:
        return {"error": "no complete round in %s" % d}
    out = {"rounds": len(rounds), "round_us": statistics.median(rounds),
           "segments_us": {n: statistics.median(seg[n]) for n in SEGMENTS}}
    if own:
        out["leader_own_us"] = statistics.median(own)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--label", default="")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    r = analyse(a.dir)
    r["label"] = a.label
    if a.json:
        print(json.dumps(r))
        return
    if "error" in r:
        print(r["error"], file=sys.stderr)
        sys.exit(1)
    print("%s: %d rounds, median round %.1f µs" % (a.label or a.dir, r["rounds"], r["round_us"]))
    for n in SEGMENTS:
        print("  %-32s %9.1f µs" % (n, r["segments_us"][n]))
    if "leader_own_us" in r:
        print("  (leader's own gradient          %9.1f µs)" % r["leader_own_us"])


if __name__ == "__main__":
    main()
