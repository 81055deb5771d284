#!/usr/bin/env python3
"""The local bus of two builds side by side, alternating in one session.

  bench-link-ab.py A=BUILD_DIR B=BUILD_DIR [C=BUILD_DIR:ENV=VALUE ...]
                   [--rounds 3] [--runs 3] [--what bus,mainloop]
                   [--ranks 4] [--model mnist-mlp-xl] [--batch 64] [--steps 60]

Each variant is a label, a build directory and optionally one environment
setting (e.g. `per-link=build-release:RLX_LINK_IO=link`). Every round runs
each variant once, in turn, so all of them see the same machine:

  bus       `p2p-helper bus-bench RUNS --json`: frames of 64 KiB .. 8 MiB to
            a process that reads every byte — MB/s, one frame's round trip,
            CPU µs per frame of each process and of its main thread.
  mainloop  `bench-cohort.py RLX_RANK mainloop`: RANKS ranks of MODEL; the
            leader's main-thread CPU per round (from /proc schedstat), its link
            I/O threads and the whole process.

Prints one table per measurement: the median over the rounds for each
variant, and each variant's ratio to the first in the same rounds.
"""
import argparse, json, os, re, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_variant(s):
    label, _, rest = s.partition("=")
    build, _, env = rest.partition(":")
    if not label or not build:
        sys.exit(f"variant '{s}': want LABEL=BUILD_DIR[:ENV=VALUE]")
    extra = {}
    if env:
        k, _, v = env.partition("=")
        extra[k] = v
    return label, build, extra


def run_bus(build, extra, runs):
    env = dict(os.environ, **extra)
    out = subprocess.run([os.path.join(build, "tests/p2p/p2p-helper"), "bus-bench", str(runs), "--json"],
                         env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"bus-bench in {build} failed: {out.stderr[-2000:]}")
    return {r["size"]: r for r in (json.loads(l) for l in out.stdout.splitlines() if l.startswith("{"))}


def run_mainloop(build, extra, a):
    env = dict(os.environ, **extra)
    out = subprocess.run([sys.executable, os.path.join(HERE, "bench-cohort.py"),
                          os.path.join(build, "tools/rlx-rank"), "mainloop", "--runs", "1",
                          "--ranks", str(a.ranks), "--model", a.model, "--batch", str(a.batch),
                          "--steps", str(a.steps)],
                         env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        sys.exit(f"mainloop with {build} failed: {out.stdout[-1000:]} {out.stderr[-2000:]}")
    # the table's last row: | ranks | model | round | compute | main | link-io | process | handlers | sends |
    row = [l for l in out.stdout.splitlines() if l.startswith(f"| {a.ranks} |")][-1]
    cells = [c.strip().strip("*") for c in row.strip("|").split("|")]
    num = lambda c: float(re.sub(r"[^0-9.]", "", c))
    return {"round_ms": num(cells[2]), "compute_ms": num(cells[3]), "main_ms": num(cells[4]),
            "io_ms": num(cells[5]), "process_ms": num(cells[6]), "handlers_ms": num(cells[7]),
            "sends_ms": num(cells[8])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--what", default="bus,mainloop")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--model", default="mnist-mlp-xl")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=60)
    a = ap.parse_args()
    variants = [parse_variant(v) for v in a.variants]
    what = a.what.split(",")
    med = statistics.median
    labels = [v[0] for v in variants]
    print(f"# {', '.join(f'{l} = {b}' + (f' ({e})' if e else '') for l, b, e in variants)}; "
          f"{a.rounds} rounds, variants alternating; {os.cpu_count()} CPUs", flush=True)

    if "bus" in what:
        res = {l: [] for l in labels}
        for r in range(a.rounds):
            for label, build, extra in variants:
                res[label].append(run_bus(build, extra, a.runs))
                print(f"  round {r + 1} {label}: " + ", ".join(
                    f"{s >> 10} KiB {x['mbs']:.0f} MB/s" for s, x in sorted(res[label][-1].items())), flush=True)
        sizes = sorted(res[labels[0]][0])
        cols = [("mbs", "MB/s"), ("rtt_us", "round trip µs"), ("tx_main_us", "sender main thread µs/frame"),
                ("tx_cpu_us", "sender CPU µs/frame"), ("rx_main_us", "receiver main thread µs/frame"),
                ("rx_cpu_us", "receiver CPU µs/frame")]
        print("\n| frame | " + " | ".join(f"{name}: {l}" for _, name in cols for l in labels) +
              " | MB/s vs " + labels[0] + " |")
        print("|---" * (1 + len(cols) * len(labels) + 1) + "|")
        for s in sizes:
            cells = []
            for key, _ in cols:
                for l in labels:
                    cells.append(f"{med(x[s][key] for x in res[l]):.1f}" if key != "mbs"
                                 else f"{med(x[s][key] for x in res[l]):.0f}")
            ratio = " / ".join(f"{med(x[s]['mbs'] / y[s]['mbs'] for x, y in zip(res[l], res[labels[0]])):.2f}"
                               for l in labels[1:])
            print(f"| {s >> 10} KiB | " + " | ".join(cells) + f" | {ratio} |", flush=True)

    if "mainloop" in what:
        res = {l: [] for l in labels}
        for r in range(a.rounds):
            for label, build, extra in variants:
                res[label].append(run_mainloop(build, extra, a))
                x = res[label][-1]
                print(f"  round {r + 1} {label}: main thread {x['main_ms']:.3f} ms/round, link I/O "
                      f"{x['io_ms']:.3f}, process {x['process_ms']:.2f}, round {x['round_ms']:.1f} ms", flush=True)
        print(f"\n{a.ranks} ranks of {a.model}, batch {a.batch} per rank, f32; the leader, per round "
              f"(steps 5-{a.steps - 3}), median of {a.rounds}:\n")
        print("| variant | main thread CPU | link I/O threads CPU | process CPU | coordinator handlers "
              "| of which sends | round (wall) | compute | main thread vs " + labels[0] + " |")
        print("|---|---|---|---|---|---|---|---|---|")
        for l in labels:
            m = lambda k: med(x[k] for x in res[l])
            ratio = med(x["main_ms"] / y["main_ms"] for x, y in zip(res[l], res[labels[0]]))
            print(f"| {l} | **{m('main_ms'):.3f} ms** | {m('io_ms'):.3f} ms | {m('process_ms'):.2f} ms | "
                  f"{m('handlers_ms'):.3f} ms | {m('sends_ms'):.3f} ms | {m('round_ms'):.1f} ms | "
                  f"{m('compute_ms'):.1f} ms | {ratio:.2f} |", flush=True)


if __name__ == "__main__":
    main()
