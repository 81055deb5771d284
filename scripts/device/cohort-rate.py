#!/usr/bin/env python3
"""Samples/s of a local cohort of `rlx-rank join` processes, from the event stream.

  cohort-rate.py RLX_RANK --model M --batch B [--precision P] [--steps N]
                 [--backend SPEC]... [--compute C] [--timeout S] [--skip F] [--label L]

One rank per --backend (in that order; the first founds the cohort and waits
for all of them), each with --batch B as its share of the global batch, on a
private XDG_RUNTIME_DIR / XDG_DATA_HOME, checkpointing only at the end. The
founder's `step` events are timestamped as they arrive; the rate is the
samples of the steps after the first F of them (warm-up) over the time they
took. Prints one JSON object: the rate, the steps measured, every rank's
backend and fallback text, whether all ranks printed the same hash at every
step they both saw, and the error if a rank failed. Exit status 0 when every
rank finished and the hashes agreed, 1 otherwise (the JSON line is printed
either way).
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, threading, time


class Rank:
    """One `rlx-rank join` process, its events timestamped as they arrive (also
    used by outer-bench.py); @cores: the CPUs it may run on (None: any)."""

    def __init__(self, argv, env, cores=None):
        self.events, self.times, self.err = [], [], []
        pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1, preexec_fn=pin)
        self.out_thread = threading.Thread(target=self._read, daemon=True)
        self.err_thread = threading.Thread(target=self._read_err, daemon=True)
        self.out_thread.start()
        self.err_thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            self.events.append(ev)
            self.times.append(time.monotonic())

    def _read_err(self):
        for line in self.proc.stderr:
            self.err.append(line)

    def of(self, name):
        return [e for e in self.events if e.get("event") == name]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rank")
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True, help="per rank")
    ap.add_argument("--precision", default="f32")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--backend", action="append", default=[])
    ap.add_argument("--compute", default="f32", help="every rank's --compute")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--skip", type=float, default=0.2)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    backends = a.backend or ["vulkan"]

    tmp = tempfile.mkdtemp(prefix="rlx-rate-")
    run = os.path.join(tmp, "run")
    os.mkdir(run, 0o700)
    env = dict(os.environ, XDG_RUNTIME_DIR=run, XDG_DATA_HOME=os.path.join(tmp, "data"))
    common = ["join", "--local", "--json", "--cohort", "rate", "--model", a.model,
              "--batch", str(a.batch), "--precision", a.precision, "--steps", str(a.steps),
              "--checkpoint-every", "0", "--dataset", "synthetic"]
    if a.compute != "f32":
        common += ["--compute", a.compute]
    result = {"label": a.label, "model": a.model, "batch_per_rank": a.batch, "ranks": len(backends),
              "precision": a.precision, "compute": a.compute, "backends": backends,
              "steps": a.steps}
    ranks = []
    ok = False
    try:
        for i, spec in enumerate(backends):
            extra = ["--wait-members", str(len(backends))] if i == 0 else []
            ranks.append(Rank([a.rank] + common + ["--backend", spec] + extra, env))
            if i == 0:
                # the founder first, so the others join rather than race to found
                end = time.monotonic() + a.timeout
                while not ranks[0].of("joined") and ranks[0].proc.poll() is None \
                        and time.monotonic() < end:
                    time.sleep(0.05)
        end = time.monotonic() + a.timeout
        for r in ranks:
            try:
                r.proc.wait(max(1.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                result["error"] = f"timed out after {a.timeout:.0f} s"
        for r in ranks:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()
            r.out_thread.join(5)
            r.err_thread.join(5)
        result["exit"] = [r.proc.returncode for r in ranks]
        result["joined"] = [{k: e.get(k) for k in ("backend", "fallback", "role")}
                            for r in ranks for e in r.of("joined")[:1]]
        steps = [(e, t) for e, t in zip(ranks[0].events, ranks[0].times) if e.get("event") == "step"]
        first = int(len(steps) * a.skip)
        window = steps[first:]
        if len(window) >= 2:
            samples = sum(e.get("samples", 0) for e, _ in window[1:])
            dt = window[-1][1] - window[0][1]
            result["samples_per_s"] = samples / dt if dt > 0 else None
            result["step_us"] = dt / (len(window) - 1) * 1e6
            result["steps_measured"] = len(window) - 1
        hashes = [{e["step"]: e.get("hash") for e in r.of("step")} for r in ranks]
        agree = all(h.get(s) == hashes[0][s] for h in hashes[1:] for s in h if s in hashes[0])
        result["hashes_agree"] = agree
        result["last_hash"] = [r.of("done")[-1].get("hash") if r.of("done") else None for r in ranks]
        # the founder's own account of its steps: how many of its own
        # gradients the GPU computed behind the previous finish (1.0: it
        # never waited for the host between rounds), the parameter-sized
        # bytes its backend moved through the host per step, its main-loop
        # CPU time per round; where a step's time went on its path (the
        # worker's wait for work, its own gradient and finish, the hop of a
        # finish to the main loop, the device's own times)
        done = ranks[0].of("done")[-1] if ranks[0].of("done") else {}
        for k in ("own_ahead", "update_ahead", "busy_poll", "host_bytes_per_step", "coordinator_ms", "round_ms", "compute_ms",
                  "worker_wait_ms", "own_run_ms", "finish_run_ms", "finish_hop_ms",
                  "device_finish_ms", "device_grad_ms"):
            if k in done:
                result[k] = done[k]
        ok = all(c == 0 for c in result["exit"]) and agree and "samples_per_s" in result
        if not ok and "error" not in result:
            result["error"] = " | ".join("".join(r.err)[-600:] for r in ranks if r.err) or "see exit"
    except Exception as e:  # noqa: BLE001 — a report line, whatever broke
        result["error"] = f"{type(e).__name__}: {e}"
        for r in ranks:
            if r.proc.poll() is None:
                r.proc.kill()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["ok"] = ok
    print(json.dumps(result), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
