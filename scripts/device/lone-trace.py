#!/usr/bin/env python3
"""Where a one-rank leader's steps go on the host, from one RLX_TRACE file.

    lone-trace.py DIR/trace-PID.tsv

scripts/device/trace-lone.sh writes it on the device machine. For each step
k (the first fifth and the last two left out), µs: the own gradient's op on
the worker (L.own → L.own.end), the wait for the finish op
(L.own.end → L.finish), the finish (L.finish → L.finish.end), the wait for
the next own op (L.finish.end → L.own of k+1) and how late the main loop
queued it (L.q.own of k+1 − L.finish.end), the step's period
(L.own → L.own of k+1), and how long the main loop took to see the
finish (L.finish.end → L.fin); median, 90th and 99th percentile, mean;
then the same parts for the steps over 1 ms, and those steps' numbers
(a period of them says what they are: 59 steps of 1024 samples are an
epoch of Fashion-MNIST).
"""
import collections
import sys


def main():
    ev = collections.defaultdict(dict)   # step -> name -> t (ns)
    for line in open(sys.argv[1]):
        t, _tid, what, arg = line.rstrip('\n').split('\t')
        ev[int(arg)].setdefault(what, int(t))
    steps = sorted(s for s in ev if s > 0)
    rows = []
    for k in steps[len(steps) // 5:-2]:
        e, n = ev[k], ev.get(k + 1, {})
        need = ('L.own', 'L.own.end', 'L.finish', 'L.finish.end', 'L.fin')
        if not all(x in e for x in need) or 'L.own' not in n or 'L.q.own' not in n:
            continue
        rows.append(dict(
            step=k,
            own=(e['L.own.end'] - e['L.own']) / 1e3,
            own_to_finish=(e['L.finish'] - e['L.own.end']) / 1e3,
            finish=(e['L.finish.end'] - e['L.finish']) / 1e3,
            finish_to_next_own=(n['L.own'] - e['L.finish.end']) / 1e3,
            next_own_queued_late=(n['L.q.own'] - e['L.finish.end']) / 1e3,
            period=(n['L.own'] - e['L.own']) / 1e3,
            main_loop_sees_finish=(e['L.fin'] - e['L.finish.end']) / 1e3,
        ))
    if not rows:
        sys.exit("no complete steps in the trace")
    keys = [k for k in rows[0] if k != 'step']
    print(len(rows), "steps")
    for key in keys:
        v = sorted(r[key] for r in rows)
        m = len(v)
        print(f"{key:22s} median {v[m // 2]:9.1f}  p90 {v[m * 9 // 10]:9.1f}  "
              f"p99 {v[m * 99 // 100]:9.1f}  mean {sum(v) / m:9.1f}")
    slow = [r for r in rows if r['period'] > 1000]
    print(len(slow), "steps with a period over 1 ms; their parts (mean):")
    for key in keys:
        print(f"  {key:22s} {sum(r[key] for r in slow) / max(1, len(slow)):9.1f}")
    print("  steps:", ' '.join(str(r['step']) for r in slow[:30]))


if __name__ == '__main__':
    try:
        main()
    except BrokenPipeError:   # (piped into head)
        pass
