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

Every run gets private XDG_RUNTIME_DIR / XDG_DATA_HOME folders; BLAS uses one
thread per rank (OPENBLAS_NUM_THREADS=1).
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, threading, time


BACKEND = "cpu"


class Node:
    def __init__(self, rank, env, args, label):
        self.label = label
        self.events = []
        self.times = []
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([rank, "join", "--local", "--json", "--threads", "1",
                                      "--backend", BACKEND] + args,
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
                        OPENBLAS_NUM_THREADS="1")
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


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("rank")
    ap.add_argument("what", choices=["fidelity", "overhead", "join"])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--backend", default="cpu")
    a = ap.parse_args()
    BACKEND = a.backend
    {"fidelity": fidelity, "overhead": overhead, "join": join}[a.what](a)
