#!/usr/bin/env python3
"""Cohort figures of BENCHMARKS.md, measured with real `rlx-rank join` processes.

  bench-cohort.py RLX_RANK fidelity [--epochs 2] [--ranks 4] [--batch 64] [--lr 0.05]
      Fashion-MNIST mnist-mlp test accuracy: one rank at f32 vs RANKS local ranks
      (global batch BATCH split between them) at f32, f16, f8e4m3 with error
      feedback and f8e4m3 without.
  bench-cohort.py RLX_RANK overhead [--ranks 4] [--steps 1500] [--runs 3]
      Per round at the leader, mnist-mlp, f32: round time, the slowest
      contributor's compute time, the leader's time inside socket sends, and
      coordinator time (inside the coordinator's handlers, sends excluded).
  bench-cohort.py RLX_RANK join [--runs 5]
      From spawning `rlx-rank join` beside a running 2-rank cohort to its first
      contributed gradient (the first committed step it contributed to).
  bench-cohort.py RLX_RANK speed [--runs 3] [--configs mnist-mlp:1024,mnist-mlp-xl:256]
                  [--threads N] [--backend B]
      A one-rank cohort against `rlx-rank bench` at the same model, batch,
      backend and threads, interleaved (bench, cohort, bench, cohort, ...):
      samples/s of each (the cohort's from its step events' times, the first
      fifth of the steps left out) and their ratio; medians of --runs.
  bench-cohort.py RLX_RANK precision [--runs 3] [--ranks 2] [--model mnist-mlp-xl]
                  [--batch 256] [--threads N] [--backend B]
      RANKS ranks of one cohort at f32, f16, f8e4m3 (interleaved): total
      samples/s and each precision against f32 in the same run.
  bench-cohort.py RLX_RANK mainloop [--runs 3] [--ranks 4] [--model mnist-mlp-xl]
                  [--batch 64]
      The leader's main-loop time per round (every handler of the coordinator,
      socket sends included) with RANKS ranks, from its "done" event.
  bench-cohort.py RLX_RANK scale [--runs 3] [--model M] [--batch B]
                  [--backends vulkan:0,vulkan:1]
      On a host with several GPUs: `rlx-rank bench` on the first backend, a
      one-rank cohort on it, and a cohort of one rank per backend listed
      (each rank its own GPU); samples/s of each and the ratios.

Every run gets private XDG_RUNTIME_DIR / XDG_DATA_HOME folders; BLAS uses one
thread per rank (OPENBLAS_NUM_THREADS=1) unless --threads says otherwise.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, threading, time


BACKEND = "cpu"


THREADS = 1


class Node:
    def __init__(self, rank, env, args, label):
        self.label = label
        self.events = []
        self.times = []
        self.t0 = time.monotonic()
        if "--backend" not in args:
            args = ["--backend", BACKEND] + args
        self.proc = subprocess.Popen([rank, "join", "--local", "--json", "--threads", str(THREADS)]
                                     + args,
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.cv = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.err = []
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.cv:
                self.events.append(ev)
                self.times.append(time.monotonic())
                self.cv.notify_all()
        with self.cv:
            self.cv.notify_all()

    def _read_err(self):
        for line in self.proc.stderr:
            self.err.append(line)

    def wait_for(self, pred, timeout):
        end = time.monotonic() + timeout
        with self.cv:
            while True:
                for i, ev in enumerate(self.events):
                    if pred(ev):
                        return i
                left = end - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self.reader.is_alive()):
                    return None
                self.cv.wait(min(left, 0.5))

    def find(self, name):
        return [e for e in self.events if e.get("event") == name]


class Env:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="rlx-bench-")
        run = os.path.join(self.dir, "run")
        os.mkdir(run, 0o700)
        os.mkdir(os.path.join(self.dir, "data"), 0o700)
        self.env = dict(os.environ, XDG_RUNTIME_DIR=run, XDG_DATA_HOME=os.path.join(self.dir, "data"),
                        OPENBLAS_NUM_THREADS=str(THREADS))
        self.nodes = []

    def join(self, rank, args, label=""):
        n = Node(rank, self.env, args, label)
        self.nodes.append(n)
        return n

    def close(self):
        for n in self.nodes:
            if n.proc.poll() is None:
                n.proc.terminate()
        for n in self.nodes:
            try:
                n.proc.wait(10)
            except subprocess.TimeoutExpired:
                n.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def run_cohort(rank, ranks, args, timeout):
    env = Env()
    try:
        nodes = [env.join(rank, args + ["--wait-members", str(ranks)], f"r{i}") for i in range(ranks)]
        for n in nodes:
            n.proc.wait(timeout)
        for n in nodes:
            n.reader.join(5)
        for n in nodes:
            if n.proc.returncode != 0:
                sys.exit(f"a rank failed ({n.proc.returncode}): {''.join(n.err)[-2000:]}")
        return nodes
    finally:
        env.close()


def fidelity(a):
    steps_per_epoch = -(-60000 // a.batch)
    steps = str(a.epochs * steps_per_epoch)
    common = ["--model", "mnist-mlp", "--dataset", "fashion-mnist", "--lr", str(a.lr), "--steps", steps,
              "--evaluate", "--checkpoint-every", "0"]
    configs = [("1 rank, f32", 1, ["--precision", "f32"]),
               (f"{a.ranks} ranks, f32", a.ranks, ["--precision", "f32"]),
               (f"{a.ranks} ranks, f16", a.ranks, ["--precision", "f16"]),
               (f"{a.ranks} ranks, f8e4m3 + error feedback", a.ranks, ["--precision", "f8e4m3"]),
               (f"{a.ranks} ranks, f8e4m3, no error feedback", a.ranks, ["--precision", "f8e4m3", "--no-error-feedback"])]
    ref = None
    print(f"# fidelity: fashion-mnist mnist-mlp, global batch {a.batch}, lr {a.lr}, {a.epochs} epochs ({steps} steps)")
    for name, k, extra in configs:
        t0 = time.monotonic()
        nodes = run_cohort(a.rank, k, common + extra + ["--batch", str(a.batch // k)], 3600)
        acc = nodes[0].find("evaluated")[-1]["accuracy"] * 100
        done = [e for n in nodes for e in n.find("done") if "bytes_f32" in e]
        moved = max([d["bytes_tx"] + d["bytes_rx"] for d in done] + [0])
        wire = f"wire bytes {moved / max(d['bytes_f32'] for d in done):.3f} of f32" if moved else "no wire traffic"

        if ref is None:
            ref = acc
        print(f"{name:42s} test accuracy {acc:6.2f} %  (vs 1 rank f32: {acc - ref:+.2f} points)"
              f"  {wire}  [{time.monotonic() - t0:.0f} s]", flush=True)


def overhead(a):
    rows = []
    for r in range(a.runs):
        nodes = run_cohort(a.rank, a.ranks, ["--model", "mnist-mlp", "--dataset", "synthetic", "--batch", "16",
                                             "--precision", "f32", "--steps", str(a.steps),
                                             "--checkpoint-every", "0"], 600)
        lead = [e for n in nodes for e in n.find("done") if "round_ms" in e][0]
        rows.append(lead)
        prof = ", ".join(f"{k} {v:.3f}" for k, v in zip(
            ["decode", "accumulate", "mean", "encode", "apply", "send", "submit", "hash+report"],
            lead.get("profile_ms", [])))
        print(f"run {r + 1}: leader phases per round (ms): {prof}")
        print(f"run {r + 1}: round {lead['round_ms']:.3f} ms, compute {lead['compute_ms']:.3f} ms, "
              f"leader socket sends {lead['send_ms']:.3f} ms, coordinator {lead['coordinator_ms'] - lead['send_ms']:.3f} ms "
              f"(over {lead['rounds_measured']} rounds)", flush=True)
    med = lambda k: statistics.median(r[k] for r in rows)
    coord = statistics.median(r["coordinator_ms"] - r["send_ms"] for r in rows)
    wall = statistics.median(r["round_ms"] - r["compute_ms"] - r["send_ms"] for r in rows)
    print(f"# overhead, {a.ranks} ranks mnist-mlp f32, median of {a.runs}: round {med('round_ms'):.3f} ms, "
          f"compute {med('compute_ms'):.3f} ms; coordinator time per round (handlers, sends excluded) "
          f"{coord:.3f} ms; round - compute - leader sends {wall:.3f} ms")


def join(a):
    spans, joins = [], []
    for r in range(a.runs):
        env = Env()
        try:
            base = ["--model", "mnist-mlp", "--dataset", "synthetic", "--batch", "16", "--steps", "1000000",
                    "--cohort", "bench"]
            first = env.join(a.rank, base + ["--wait-members", "2"])
            env.join(a.rank, base)
            if first.wait_for(lambda e: e.get("event") == "step" and e["step"] >= 20, 60) is None:
                sys.exit("the cohort did not start")
            n = env.join(a.rank, base, "joiner")
            i = n.wait_for(lambda e: e.get("event") == "step" and e.get("contributed"), 60)
            j = n.wait_for(lambda e: e.get("event") == "snapshot", 1)
            if i is None:
                sys.exit("the joiner never contributed: " + "".join(n.err)[-2000:])
            spans.append(n.times[i] - n.t0)
            joins.append(n.times[j] - n.t0)
            print(f"run {r + 1}: snapshot after {joins[-1] * 1000:.0f} ms, first contributed step after "
                  f"{spans[-1] * 1000:.0f} ms", flush=True)
        finally:
            env.close()
    print(f"# join, median of {a.runs}: spawn -> snapshot {statistics.median(joins) * 1000:.0f} ms, "
          f"spawn -> first contributed gradient {statistics.median(spans) * 1000:.0f} ms")


def cohort_rate(nodes, batch_total=None):
    """Samples/s of a finished cohort: committed samples over the time between
    the step events of the leader, the first fifth of the steps left out."""
    lead = [n for n in nodes if any(e.get("event") == "joined" and e.get("role") == "leader"
                                    for e in n.events)][0]
    st = [e for e in lead.find("step")]
    k = max(1, len(st) // 5)
    a, b = st[k], st[-1]
    samples = sum(e["samples"] for e in st[k + 1:])
    return samples / ((b["time_us"] - a["time_us"]) / 1e6), lead


def bench_run(rank, model, batch, seconds, backend):
    out = subprocess.run([rank, "bench", "--model", model, "--batch", str(batch), "--backend", backend,
                          "--seconds", str(seconds), "--threads", str(THREADS), "--json"],
                         capture_output=True, text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS=str(THREADS)))
    if out.returncode != 0:
        sys.exit(f"rlx-rank bench failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_rate(rank, model, batch, seconds, backend):
    return bench_run(rank, model, batch, seconds, backend)["samples_per_second"]


def steps_for(rate_guess, batch, seconds):
    return max(40, int(rate_guess * seconds / batch))


def speed(a):
    print(f"# speed: one-rank cohort vs rlx-rank bench, backend {BACKEND}, {THREADS} thread(s), "
          f"{a.runs} interleaved runs, medians. Wall: samples/s; CPU: samples per CPU-second of the "
          f"whole process (all threads), which other load on the machine disturbs less")
    print("| model | batch | bench samples/s | 1-rank cohort samples/s | cohort / bench (wall) "
          "| cohort / bench (CPU) |")
    print("|---|---|---|---|---|---|")
    for cfg in a.configs.split(","):
        model, batch = cfg.split(":")
        batch = int(batch)
        rows = []
        for r in range(a.runs):
            b = bench_run(a.rank, model, batch, a.seconds, BACKEND)
            nodes = run_cohort(a.rank, 1, ["--model", model, "--batch", str(batch), "--precision", "f32",
                                           "--steps", str(steps_for(b["samples_per_second"], batch,
                                                                    a.seconds * 1.25)),
                                           "--checkpoint-every", "0"], 1200)
            c, lead = cohort_rate(nodes)
            done = lead.find("done")[-1]
            cpu = done.get("samples_per_cpu_second", float("nan")) / b["samples_per_cpu_second"]
            rows.append((b["samples_per_second"], c, c / b["samples_per_second"], cpu))
            print(f"  run {r + 1}: {model} {batch}: bench {rows[-1][0]:,.0f}, cohort {c:,.0f} "
                  f"(wall {rows[-1][2]:.3f}, CPU {cpu:.3f})", flush=True)
        med = lambda i: statistics.median(x[i] for x in rows)
        print(f"| {model} | {batch} | {med(0):,.0f} | {med(1):,.0f} | **{med(2):.2f}** | **{med(3):.2f}** |",
              flush=True)


def precision(a):
    precs = ["f32", "f16", "f8e4m3"]
    rates = {p: [] for p in precs}
    print(f"# precision: {a.ranks} ranks of {a.model}, batch {a.batch} per rank, backend {BACKEND}, "
          f"{THREADS} thread(s) per rank; {a.runs} interleaved runs, medians")
    guess = bench_rate(a.rank, a.model, a.batch, 1, BACKEND)
    for r in range(a.runs):
        for p in precs:
            nodes = run_cohort(a.rank, a.ranks, ["--model", a.model, "--batch", str(a.batch), "--precision", p,
                                                 "--steps", str(steps_for(guess, a.batch, a.seconds)),
                                                 "--checkpoint-every", "0", "--deadline-floor-ms", "60000"], 1800)
            c, _ = cohort_rate(nodes)
            rates[p].append(c)
            print(f"  run {r + 1}: {p}: {c:,.0f} samples/s", flush=True)
    med = statistics.median
    print("| precision | samples/s (all ranks) | vs f32 in the same runs |")
    print("|---|---|---|")
    for p in precs:
        ratio = med([x / y for x, y in zip(rates[p], rates["f32"])])
        print(f"| {p} | {med(rates[p]):,.0f} | {ratio:.2f} |", flush=True)


def mainloop(a):
    rows = []
    print(f"# main loop: {a.ranks} ranks of {a.model}, batch {a.batch} per rank, f32, backend {BACKEND}")
    for r in range(a.runs):
        nodes = run_cohort(a.rank, a.ranks, ["--model", a.model, "--batch", str(a.batch), "--precision", "f32",
                                             "--steps", str(a.steps), "--checkpoint-every", "0",
                                             "--deadline-floor-ms", "60000"], 1800)
        lead = [e for n in nodes for e in n.find("done") if "round_ms" in e][0]
        rows.append(lead)
        print(f"  run {r + 1}: round {lead['round_ms']:.3f} ms, compute {lead['compute_ms']:.3f} ms, "
              f"main loop {lead['coordinator_ms']:.3f} ms (of which socket sends {lead['send_ms']:.3f} ms) "
              f"over {lead['rounds_measured']} rounds", flush=True)
    med = lambda k: statistics.median(x[k] for x in rows)
    print(f"| ranks | model | round | compute | leader's main loop per round | of which sends |")
    print("|---|---|---|---|---|---|")
    print(f"| {a.ranks} | {a.model} | {med('round_ms'):.2f} ms | {med('compute_ms'):.2f} ms | "
          f"**{med('coordinator_ms'):.3f} ms** | {med('send_ms'):.3f} ms |")


def scale(a):
    backends = a.backends.split(",")
    print(f"# scale: {a.model} batch {a.batch} per rank; bench and a 1-rank cohort on {backends[0]}, "
          f"a cohort of {len(backends)} ranks on {', '.join(backends)}; {a.runs} runs, medians")
    res = {"bench": [], "one": [], "all": []}
    for r in range(a.runs):
        b = bench_rate(a.rank, a.model, a.batch, a.seconds, backends[0])
        one = run_cohort(a.rank, 1, ["--model", a.model, "--batch", str(a.batch), "--backend", backends[0],
                                     "--steps", str(steps_for(b, a.batch, a.seconds * 2)),
                                     "--checkpoint-every", "0"], 1200)
        env = Env()
        try:
            nodes = [env.join(a.rank, ["--model", a.model, "--batch", str(a.batch), "--backend", be,
                                       "--precision", a.precision, "--wait-members", str(len(backends)),
                                       "--steps", str(steps_for(b, a.batch, a.seconds * 2)),
                                       "--checkpoint-every", "0", "--deadline-floor-ms", "60000"], f"r{i}")
                     for i, be in enumerate(backends)]
            for n in nodes:
                n.proc.wait(1200)
            for n in nodes:
                n.reader.join(5)
        finally:
            env.close()
        c1, _ = cohort_rate(one)
        cn, _ = cohort_rate(nodes)
        res["bench"].append(b)
        res["one"].append(c1)
        res["all"].append(cn)
        print(f"  run {r + 1}: bench {b:,.0f}, 1 rank {c1:,.0f} ({c1 / b:.2f} of bench), "
              f"{len(backends)} ranks {cn:,.0f} ({cn / c1:.2f} of 1 rank)", flush=True)
    med = statistics.median
    print(f"| setup | samples/s | ratio |")
    print("|---|---|---|")
    print(f"| bench, {backends[0]} | {med(res['bench']):,.0f} | |")
    print(f"| 1-rank cohort | {med(res['one']):,.0f} | {med([o / b for o, b in zip(res['one'], res['bench'])]):.2f} of bench |")
    print(f"| {len(backends)}-rank cohort ({a.precision}) | {med(res['all']):,.0f} | "
          f"{med([x / o for x, o in zip(res['all'], res['one'])]):.2f} of 1 rank |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("rank")
    ap.add_argument("what", choices=["fidelity", "overhead", "join", "speed", "precision", "mainloop", "scale"])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--configs", default="mnist-mlp:1024,mnist-mlp-xl:256")
    ap.add_argument("--model", default="mnist-mlp-xl")
    ap.add_argument("--backends", default="vulkan:0,vulkan:1")
    ap.add_argument("--precision", default="f32")
    a = ap.parse_args()
    BACKEND = a.backend
    THREADS = a.threads
    defaults = {"precision": (256, None), "mainloop": (64, 60), "scale": (1024, None)}
    batch, steps = defaults.get(a.what, (64, 1500))
    a.batch = a.batch if a.batch is not None else batch
    a.steps = a.steps if a.steps is not None else (steps or 1500)
    {"fidelity": fidelity, "overhead": overhead, "join": join, "speed": speed,
     "precision": precision, "mainloop": mainloop, "scale": scale}[a.what](a)
