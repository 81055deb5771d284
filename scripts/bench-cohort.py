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
                  [--batch 256] [--threads N] [--backend B] [--precisions f32,f16,f8e4m3]
      RANKS ranks of one cohort at each of --precisions (interleaved; P+noef:
      P with --no-error-feedback): total samples/s and each against the
      first in the same run.
  bench-cohort.py RLX_RANK mainloop [--runs 3] [--ranks 4] [--model mnist-mlp-xl]
                  [--batch 64]
      The leader's main-thread CPU time per round with RANKS ranks, read from
      /proc/PID/task/*/schedstat at the step events of steps 5 and STEPS-3 (so it
      holds everything the main loop does: the coordinator's handlers, and
      the link I/O where that runs on the main loop), beside its link I/O
      threads and the whole process; and the coordinator's own counters
      from its "done" event (its handlers, socket sends included).
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


def proc_cpu_seconds(pid):
    """utime + stime of a live process (all its threads), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def thread_cpu(pid):
    """CPU time (ns, from schedstat: exact, unlike the tick counts of stat) of
    every thread of @pid, as {(tid, name): ns}; {} once the process is gone."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except (OSError, ValueError, IndexError):
            continue
        out[(int(tid), name)] = ns
    return out


class Node:
    # the CPU time of every rank of a run is read when the leader reports
    # these steps (set per run): the cohort's CPU time over a window of steps
    cpu_marks = ()
    peers = []

    def __init__(self, rank, env, args, label, sample_steps=()):
        self.label = label
        self.events = []
        self.times = []
        self.cohort_cpu_at = {}   # step -> [CPU seconds of every rank of the run]
        # thread CPU snapshots of this rank taken as these steps' events arrive
        self.sample_steps = set(sample_steps)
        self.cpu_at = {}
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
            if ev.get("event") == "step" and ev.get("step") in Node.cpu_marks:
                self.cohort_cpu_at[ev["step"]] = [proc_cpu_seconds(n.proc.pid) for n in Node.peers]
            if ev.get("event") == "step" and ev.get("step") in self.sample_steps:
                self.cpu_at[ev["step"]] = thread_cpu(self.proc.pid)
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

    def join(self, rank, args, label="", sample_steps=()):
        n = Node(rank, self.env, args, label, sample_steps)
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


def step_count(args):
    return int(args[args.index("--steps") + 1]) if "--steps" in args else 0


def run_cohort(rank, ranks, args, timeout, sample_steps=()):
    env = Env()
    steps = step_count(args)
    # the window of cohort_rate: from a fifth of the steps to two before the
    # end (every rank is still running then)
    Node.cpu_marks = (max(1, steps // 5), max(2, steps - 2)) if steps else ()
    Node.peers = env.nodes
    try:
        nodes = [env.join(rank, args + ["--wait-members", str(ranks)], f"r{i}", sample_steps)
                 for i in range(ranks)]
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


def leader_of(nodes):
    return [n for n in nodes if any(e.get("event") == "joined" and e.get("role") == "leader"
                                    for e in n.events)][0]


def cohort_rate(nodes, batch_total=None):
    """Samples/s of a finished cohort: committed samples over the time between
    the step events of the leader, the first fifth of the steps left out."""
    lead = leader_of(nodes)
    st = [e for e in lead.find("step")]
    k = max(1, len(st) // 5)
    a, b = st[k], st[-1]
    samples = sum(e["samples"] for e in st[k + 1:])
    return samples / ((b["time_us"] - a["time_us"]) / 1e6), lead


def cohort_cpu_rate(nodes):
    """Samples per CPU-second of the whole cohort (every rank's every thread),
    over the leader's steps between the two CPU marks of the run; None when
    a mark was missed."""
    lead = leader_of(nodes)
    if len(Node.cpu_marks) != 2 or any(m not in lead.cohort_cpu_at for m in Node.cpu_marks):
        return None
    m0, m1 = Node.cpu_marks
    c0, c1 = lead.cohort_cpu_at[m0], lead.cohort_cpu_at[m1]
    if None in c0 or None in c1:
        return None
    samples = sum(e["samples"] for e in lead.find("step") if m0 < e["step"] <= m1)
    cpu = sum(c1) - sum(c0)
    return samples / cpu if cpu > 0 else None


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
            cc = cohort_cpu_rate(nodes) or lead.find("done")[-1].get("samples_per_cpu_second",
                                                                      float("nan"))
            cpu = cc / b["samples_per_cpu_second"]
            rows.append((b["samples_per_second"], c, c / b["samples_per_second"], cpu))
            print(f"  run {r + 1}: {model} {batch}: bench {rows[-1][0]:,.0f}, cohort {c:,.0f} "
                  f"(wall {rows[-1][2]:.3f}, CPU {cpu:.3f})", flush=True)
        med = lambda i: statistics.median(x[i] for x in rows)
        print(f"| {model} | {batch} | {med(0):,.0f} | {med(1):,.0f} | **{med(2):.2f}** | **{med(3):.2f}** |",
              flush=True)


def precision(a):
    # "P" or "P+noef" (--no-error-feedback); the first is the reference
    precs = a.precisions.split(",")
    rates = {p: [] for p in precs}
    cpus = {p: [] for p in precs}
    print(f"# precision: {a.ranks} ranks of {a.model}, batch {a.batch} per rank, backend {BACKEND}, "
          f"{THREADS} thread(s) per rank; {a.runs} interleaved runs, medians. Wall: samples/s of "
          f"the cohort; CPU: its samples per CPU-second of all ranks together (every thread), "
          f"which other load on the machine disturbs less")
    guess = bench_rate(a.rank, a.model, a.batch, 1, BACKEND)
    for r in range(a.runs):
        for p in precs:
            prec, _, opt = p.partition("+")
            extra = ["--no-error-feedback"] if opt == "noef" else []
            nodes = run_cohort(a.rank, a.ranks, extra + ["--model", a.model, "--batch", str(a.batch), "--precision", prec,
                                                 "--steps", str(steps_for(guess, a.batch, a.seconds)),
                                                 "--checkpoint-every", "0", "--deadline-floor-ms", "60000"], 1800)
            c, _ = cohort_rate(nodes)
            cc = cohort_cpu_rate(nodes)
            rates[p].append(c)
            cpus[p].append(cc if cc else float("nan"))
            print(f"  run {r + 1}: {p}: {c:,.0f} samples/s, {cpus[p][-1]:,.0f} samples per CPU-second",
                  flush=True)
    med = statistics.median
    print(f"| precision | samples/s (all ranks) | vs {precs[0]} (wall) | samples per CPU-second "
          f"| vs {precs[0]} (CPU) |")
    print("|---|---|---|---|---|")
    for p in precs:
        ratio = med([x / y for x, y in zip(rates[p], rates[precs[0]])])
        cratio = med([x / y for x, y in zip(cpus[p], cpus[precs[0]])])
        print(f"| {p} | {med(rates[p]):,.0f} | **{ratio:.2f}** | {med(cpus[p]):,.0f} | **{cratio:.2f}** |",
              flush=True)


def thread_groups(before, after, rounds, pid):
    """CPU ms per round between two thread_cpu snapshots: the main thread, the
    link I/O threads, everything else, and the whole process."""
    g = {"main": 0.0, "link-io": 0.0, "other": 0.0}
    for key, ns in after.items():
        d = (ns - before.get(key, 0)) / 1e6 / rounds
        tid, name = key
        if tid == pid:
            g["main"] += d
        elif name.startswith("rlx-link-io"):
            g["link-io"] += d
        else:
            g["other"] += d
    g["process"] = g["main"] + g["link-io"] + g["other"]
    return g


def mainloop(a):
    rows = []
    # the last sample a few steps before the end: at the very last step the
    # process may already be ending its threads (their CPU would be lost)
    first, last = 5, max(6, a.steps - 3)
    print(f"# main loop: {a.ranks} ranks of {a.model}, batch {a.batch} per rank, f32, backend {BACKEND}")
    for r in range(a.runs):
        nodes = run_cohort(a.rank, a.ranks, ["--model", a.model, "--batch", str(a.batch), "--precision", "f32",
                                             "--steps", str(a.steps), "--checkpoint-every", "0",
                                             "--deadline-floor-ms", "60000"], 1800,
                           sample_steps=(first, last))
        lead_node = [n for n in nodes if any(e.get("event") == "done" and "round_ms" in e for e in n.events)][0]
        lead = lead_node.find("done")[-1]
        if first not in lead_node.cpu_at or last not in lead_node.cpu_at:
            sys.exit("the leader's step events for the CPU samples did not arrive")
        g = thread_groups(lead_node.cpu_at[first], lead_node.cpu_at[last], last - first,
                          lead_node.proc.pid)
        lead = dict(lead, **{"thread_" + k: v for k, v in g.items()})
        rows.append(lead)
        print(f"  run {r + 1}: round {lead['round_ms']:.3f} ms, compute {lead['compute_ms']:.3f} ms, "
              f"coordinator handlers {lead['coordinator_ms']:.3f} ms (of which socket sends {lead['send_ms']:.3f} ms) "
              f"over {lead['rounds_measured']} rounds; leader's threads, CPU ms per round (steps {first}-{last}): "
              f"main {g['main']:.3f}, link I/O {g['link-io']:.3f}, other {g['other']:.3f}, "
              f"process {g['process']:.3f}", flush=True)
    med = lambda k: statistics.median(x[k] for x in rows)
    print(f"| ranks | model | round | compute | leader's main thread, CPU per round | link I/O threads | "
          f"whole process | coordinator handlers | of which sends |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {a.ranks} | {a.model} | {med('round_ms'):.2f} ms | {med('compute_ms'):.2f} ms | "
          f"**{med('thread_main'):.3f} ms** | {med('thread_link-io'):.3f} ms | {med('thread_process'):.2f} ms | "
          f"{med('coordinator_ms'):.3f} ms | {med('send_ms'):.3f} ms |")


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
    ap.add_argument("--precisions", default="f32,f16,f8e4m3",
                    help="precision: the ones to compare, the first the reference; P+noef runs P "
                         "with --no-error-feedback")
    a = ap.parse_args()
    BACKEND = a.backend
    THREADS = a.threads
    defaults = {"precision": (256, None), "mainloop": (64, 60), "scale": (1024, None)}
    batch, steps = defaults.get(a.what, (64, 1500))
    a.batch = a.batch if a.batch is not None else batch
    a.steps = a.steps if a.steps is not None else (steps or 1500)
    {"fidelity": fidelity, "overhead": overhead, "join": join, "speed": speed,
     "precision": precision, "mainloop": mainloop, "scale": scale}[a.what](a)
