#!/usr/bin/env python3
"""Issue 28's figures: cohorts over shaped links against one rank alone.

  outer-bench.py RLX_RANK --plan rate|accuracy|all [--reps 3] [--cores 16]
                 [--seconds S] [--warmup W] [--models a,b] [--out DIR]
                 [--torch-ref PATH] [--quick]
  outer-bench.py RLX_RANK --one '{"model": ..., "ranks": N, "shape": SPEC, "sync": MODE}'
                 (and "pin": C: rank i alone on core C + i)
  outer-bench.py RLX_RANK --plan rate --rate-configs JSON | --rate-extra JSON

A configuration may also name "precision" (the wire's, --precision; f32 when
absent), "args" (more rlx-rank arguments), "rank" (another rlx-rank to run,
for an A/B in one call) and "label"; each of these makes a row of its own.
--rate-configs replaces the rate plan's configurations with its list (each
model's one rank alone is added as the reference), --rate-extra adds its
list to them.

Each configuration is a cohort of `rlx-rank join --local` processes (one per
rank, each pinned to a core of its own, OPENBLAS_NUM_THREADS=1, --threads 1,
batch 256 per rank, Fashion-MNIST), every process with RLX_LINK_SHAPE set to
the link's shape (each process shapes what it receives: "delay=25ms" is 25 ms
each way). The founder (the leader) prints its event stream; the rate is the
samples of the `step` events after a warm-up over the time they took (times
as the events arrive here), in a window of at least --seconds and
--min-commits commits (at most --max-window seconds). The `sync` events say
what the cohort ran and why.

Independent configurations run at the same time on disjoint cores (a
scheduler packs them into --cores), interleaved by repetition so that every
configuration sees the same mix of neighbours; each figure is the median of
--reps runs, and each ratio is against the one-rank run of the same
repetition.

Plans:
  rate       mnist-mlp and mnist-mlp-xl at b256: one rank; two ranks over
             200 Mbit/s 50 ms, 50 Mbit/s 30 ms, 1 Gbit/s 0.5 ms, and unshaped;
             four and eight ranks over 200 Mbit/s 50 ms — each in the step
             mode and in `auto`; PyTorch DDP (gloo, unshaped) at 1/2/4/8
  accuracy   wall time to a target accuracy on Fashion-MNIST, mnist-mlp-xl:
             one rank for 2 epochs sets the target (its final accuracy less
             0.5 pt); one, two and four ranks over 200 Mbit/s 50 ms with the
             defaults a user gets (`auto`, batch 256 a rank, lr 0.05), the
             leader evaluating every commit (the one rank every 1/32 of its
             run) on a core of its own (the evaluation thread would otherwise
             take the compute's core); the time of the first commit whose
             evaluation reaches the target, from the first commit. A cohort
             stops once it reached its repetition's target (known when that
             one rank is done) or after --acc-max-seconds. These run first.

Writes DIR/results.jsonl (a line a run) and DIR/table.md, and prints the table.
"""
import argparse, json, os, shutil, statistics as st, subprocess, sys, tempfile, threading, time

SHAPES = {
    "200M50": "delay=25ms,rate=200Mbit/s",
    "50M30": "delay=15ms,rate=50Mbit/s",
    "1G0.5": "delay=250us,rate=1000Mbit/s",
    "none": "",
}
SHAPE_NAMES = {"200M50": "200 Mbit/s, 50 ms", "50M30": "50 Mbit/s, 30 ms",
               "1G0.5": "1 Gbit/s, 0.5 ms", "none": "unshaped local bus"}


def _load_rank_class():
    """cohort-rate.py's Rank (its name has a dash, so no plain import)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "cohort_rate", os.path.join(os.path.dirname(os.path.abspath(__file__)), "cohort-rate.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Rank


_Rank = _load_rank_class()


class Rank(_Rank):
    def of(self, name):
        """(event, time) pairs of @name, a copy (the reader thread keeps appending)."""
        n = min(len(self.events), len(self.times))
        return [(e, t) for e, t in zip(self.events[:n], self.times[:n]) if e.get("event") == name]


def run_cohort(rank_bin, cfg, cores):
    """One configuration on @cores (a list of sets, one a rank). Returns a result dict."""
    n = cfg["ranks"]
    tmp = tempfile.mkdtemp(prefix="rlx-ob-")
    run = os.path.join(tmp, "run")
    os.mkdir(run, 0o700)
    env = dict(os.environ, XDG_RUNTIME_DIR=run, XDG_DATA_HOME=os.path.join(tmp, "data"),
               OPENBLAS_NUM_THREADS="1", RLX_KERNEL_THREADS="1")
    if SHAPES[cfg["shape"]]:
        env["RLX_LINK_SHAPE"] = SHAPES[cfg["shape"]]
    else:
        env.pop("RLX_LINK_SHAPE", None)
    common = ["join", "--local", "--json", "--cohort", "ob", "--model", cfg["model"],
              "--batch", str(cfg.get("batch", 256)), "--backend", "cpu", "--threads", "1",
              "--checkpoint-every", "0", "--dataset", cfg.get("dataset", "fashion-mnist"),
              "--steps", str(cfg.get("steps", 10 ** 7))]
    if cfg.get("sync") and (cfg["sync"] != "step" or has_sync(rank_bin)):
        common += ["--sync", cfg["sync"]]
    if cfg.get("precision"):
        common += ["--precision", cfg["precision"]]
    common += cfg.get("args", [])
    lead_extra = []          # the leader alone evaluates (on its extra core)
    if cfg.get("evaluate_at_end"):
        lead_extra += ["--evaluate"]
    if cfg.get("evaluate_every"):
        lead_extra += ["--evaluate-every", str(cfg["evaluate_every"])]
        if cfg.get("eval_threads", 1) > 1 and has_flag(rank_bin, "--evaluate-threads"):
            lead_extra += ["--evaluate-threads", str(cfg["eval_threads"])]
    res = dict(cfg, cores=[sorted(c) if c else None for c in cores])
    ranks = []
    t_start = time.monotonic()
    seconds = cfg["seconds"]
    try:
        for i in range(n):
            extra = ["--wait-members", str(n)] + lead_extra if i == 0 else []
            ranks.append(Rank([rank_bin] + common + extra, env, cores[i]))
            if i == 0:
                end = time.monotonic() + 30
                while not ranks[0].of("joined") and ranks[0].proc.poll() is None \
                        and time.monotonic() < end:
                    time.sleep(0.05)
        # run until the window is over (or a target is reached, or a rank died)
        first = None
        end = time.monotonic() + cfg.get("max_seconds", seconds + cfg["warmup"] + 60)
        while time.monotonic() < end:
            steps = ranks[0].of("step")
            if steps and first is None:
                first = steps[0][1]
            start = window_start(ranks[0], first, cfg)
            if start is not None:
                held = time.monotonic() - start
                in_window = sum(1 for _, t in steps if t >= start)
                if held >= seconds and in_window > cfg.get("min_commits", 0) or \
                        held >= cfg.get("max_window", seconds):
                    break
            target = cfg.get("target") or TARGETS.get(cfg.get("target_rep"))
            if target and reached(ranks[0], target) is not None:
                # the commit's own "step" event may come after the
                # evaluation that reached it: read it before stopping
                time.sleep(0.5)
                break
            if any(r.proc.poll() is not None for r in ranks):
                break
            time.sleep(0.1)
        res["exit_early"] = [r.proc.poll() for r in ranks]
    finally:
        for r in ranks:
            if r.proc.poll() is None:
                r.proc.terminate()
        for r in ranks:
            try:
                r.proc.wait(5)
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait()
            r.out_thread.join(2)
            r.err_thread.join(2)
        shutil.rmtree(tmp, ignore_errors=True)
    res["wall_s"] = time.monotonic() - t_start
    lead = ranks[0]
    steps = lead.of("step")
    res["commits"] = len(steps)
    if steps:
        t0 = window_start(lead, steps[0][1], cfg)
        window = [(e, t) for e, t in steps if t0 is not None and t >= t0]
        res["window_from_s"] = t0 - steps[0][1] if t0 is not None else None
        if len(window) >= 2:
            samples = sum(e.get("samples", 0) for e, _ in window[1:])
            dt = window[-1][1] - window[0][1]
            res["samples_per_s"] = samples / dt if dt > 0 else None
            res["window_s"] = dt
            res["window_commits"] = len(window) - 1
            b0 = window[0][0].get("bytes_tx", 0) + window[0][0].get("bytes_rx", 0)
            b1 = window[-1][0].get("bytes_tx", 0) + window[-1][0].get("bytes_rx", 0)
            if samples:
                res["leader_bytes_per_sample"] = (b1 - b0) / samples
        res["members_last"] = steps[-1][0].get("members")
    syncs = [e for e, _ in lead.of("sync")]
    if syncs:
        res["sync_events"] = [{k: e.get(k) for k in ("mode", "h", "fragments", "reason")} for e in syncs]
        res["sync_last"] = res["sync_events"][-1]
    ev = [(e.get("step"), e.get("accuracy")) for e, _ in lead.of("evaluated")]
    if ev:
        res["evaluations"] = ev
        if steps:
            at = {e.get("step"): t - steps[0][1] for e, t in steps}
            # in the order of the commits (evaluations run beside each other
            # and may come back out of order)
            res["curve"] = sorted({(at.get(s), a) for s, a in ev if at.get(s) is not None})
    # where a round's time goes: each rank's compute against the round (the
    # leader's "timing" events, the last of each node's), and the leader's
    # round statistics as it leaves ("done")
    timing = {}
    for e, _ in lead.of("timing"):
        timing[e.get("node")] = [e.get("compute_us"), e.get("round_us")]
    if timing:
        res["timing"] = timing
    done = [e for e, _ in lead.of("done")]
    if done:
        res["done"] = {k: v for k, v in done[-1].items() if k not in ("event", "node", "hash")}
    errors = [e.get("reason") or e.get("message") for e, _ in lead.of("error")]
    if errors:
        res["errors"] = errors[:3]
    timeouts = [e for r in ranks for e, _ in r.of("member-left")]
    res["members_left"] = [{k: e.get(k) for k in ("node", "reason")} for e in timeouts][:5]
    if "samples_per_s" not in res:
        res["stderr"] = "".join("".join(r.err[-5:]) for r in ranks)[-1500:]
    return res


# The time-to-accuracy target of each repetition, once its one rank is done
# (its final accuracy less 0.5 pt): the cohorts beside it stop on reaching it.
TARGETS = {}


def window_start(rank, first, cfg):
    """When the measured window begins: the warm-up after the first commit;
    with auto, not before 2 s after the leader first chose the outer mode
    (its step rounds before that are the measuring), if it did."""
    if first is None:
        return None
    start = first + cfg["warmup"]
    if cfg.get("sync") == "auto":
        outer = [t for e, t in rank.of("sync") if e.get("mode") == "outer"]
        if outer:
            start = max(start, outer[0] + 2.0)
    return start


_HAS_SYNC = {}
_HAS_FLAG = {}


def has_flag(rank_bin, flag):
    """Whether this rlx-rank's join knows @flag (for A/B runs against older builds)."""
    if (rank_bin, flag) not in _HAS_FLAG:
        p = subprocess.run([rank_bin, "join", "--help"], capture_output=True, text=True)
        _HAS_FLAG[rank_bin, flag] = flag in p.stdout
    return _HAS_FLAG[rank_bin, flag]


def has_sync(rank_bin):
    """Whether this rlx-rank knows --sync (a build before issue 28 runs the step mode only)."""
    if rank_bin not in _HAS_SYNC:
        p = subprocess.run([rank_bin, "join", "--help"], capture_output=True, text=True)
        _HAS_SYNC[rank_bin] = "--sync" in p.stdout
    return _HAS_SYNC[rank_bin]


def reached(rank, target):
    for e, _ in rank.of("evaluated"):
        if e.get("accuracy", 0) >= target:
            return e.get("step")
    return None


def run_ddp(torch_ref, model, ranks, cores):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    argv = [sys.executable, torch_ref, "ddp", "--device", "cpu", "--threads", "1", "--models",
            model, "--batch", "256", "--ranks", ",".join(map(str, ranks)), "--seconds", "3"]
    allowed = set().union(*cores)

    def pin():
        os.sched_setaffinity(0, allowed)
    t0 = time.monotonic()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, preexec_fn=pin)
    out = {"kind": "ddp", "model": model, "wall_s": time.monotonic() - t0, "rates": {}}
    for line in p.stdout.splitlines():
        # "mnist-mlp ddp cpu ranks 2 batch/rank 256: 12,345 samples/s (...)"
        try:
            n = int(line.split(" ranks ")[1].split()[0])
            out["rates"][n] = float(line.split(": ")[1].split(" samples/s")[0].replace(",", ""))
        except (IndexError, ValueError):
            pass
    if p.returncode != 0:
        out["error"] = p.stderr[-800:]
    return out


class Scheduler:
    """Runs jobs (cores needed, fn(cores) -> result) on disjoint cores, in order of
    submission as cores free up."""

    def __init__(self, n_cores):
        self.n_cores = n_cores
        self.free = list(range(n_cores))
        self.lock = threading.Condition()
        self.threads = []

    def submit(self, need, fn, sink, lead_extra=0):
        """@need cores, one a rank; @lead_extra more for the first rank (its evaluation)."""
        # (on fewer cores than that, the leader's evaluations get those left)
        need_all = min(need + lead_extra, max(need, self.n_cores))
        with self.lock:
            while len(self.free) < need_all:
                self.lock.wait()
            mine, self.free = self.free[:need_all], self.free[need_all:]

        def go():
            try:
                # (--cores above this machine's count share its CPUs: dry runs)
                ncpu = os.cpu_count() or 1
                cores = [{c % ncpu} for c in mine[:need]]
                cores[0] |= {c % ncpu for c in mine[need:]}
                sink(fn(cores))
            except Exception as e:  # noqa: BLE001 — a result line, whatever broke
                sink({"error": f"{type(e).__name__}: {e}"})
            finally:
                with self.lock:
                    self.free = sorted(self.free + mine)
                    self.lock.notify_all()
        t = threading.Thread(target=go)
        t.start()
        self.threads.append(t)

    def join(self):
        for t in self.threads:
            t.join()


def rate_configs(models, seconds, warmup, min_commits, max_window):
    cfgs = []
    for m in models:
        cfgs.append(dict(model=m, ranks=1, shape="none", sync="step"))
        for shape in ("200M50", "50M30", "1G0.5"):
            for sync in ("step", "auto"):
                cfgs.append(dict(model=m, ranks=2, shape=shape, sync=sync))
        cfgs.append(dict(model=m, ranks=2, shape="none", sync="auto"))
        for n in (4, 8):
            for sync in ("step", "auto"):
                cfgs.append(dict(model=m, ranks=n, shape="200M50", sync=sync))
    for c in cfgs:
        c.update(seconds=seconds, warmup=warmup, min_commits=min_commits,
                 max_window=max(seconds, max_window))
    return cfgs


def row_key(r):
    """What makes a rate row of its own (the reference is the model's one rank)."""
    return (r["model"], r["ranks"], r["shape"], r["sync"], r.get("precision") or "f32",
            r.get("label") or "")


def custom_configs(text, models, seconds, warmup, min_commits, max_window):
    """--rate-configs / --rate-extra: a JSON list of configurations."""
    cfgs = json.loads(text) if text else []
    for c in cfgs:
        if c.get("model") not in models:
            c["model"] = c.get("model") or models[0]
        c.setdefault("shape", "none")
        c.setdefault("sync", "step")
        if c["shape"] not in SHAPES:
            raise SystemExit(f"outer-bench: unknown shape {c['shape']!r}: {', '.join(SHAPES)}")
        c.update(seconds=seconds, warmup=warmup, min_commits=min_commits,
                 max_window=max(seconds, max_window))
    return cfgs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rank")
    ap.add_argument("--plan", default="rate", choices=["rate", "accuracy", "all", "none"])
    ap.add_argument("--one")
    ap.add_argument("--table", metavar="RESULTS", help="only print the table of a results.jsonl")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--min-commits", type=int, default=6,
                    help="a rate window holds at least this many commits ...")
    ap.add_argument("--max-window", type=float, default=15, help="... unless it reached this many seconds")
    ap.add_argument("--models", default="mnist-mlp,mnist-mlp-xl")
    ap.add_argument("--ranks-max", type=int, default=8)
    ap.add_argument("--acc-epochs", type=float, default=2)
    ap.add_argument("--acc-ranks", default="2,4")
    ap.add_argument("--acc-max-seconds", type=float, default=150)
    ap.add_argument("--eval-threads", type=int, default=3,
                    help="the accuracy plan's leaders evaluate up to N commits at once, each "
                         "on a core of its own (an rlx-rank without --evaluate-threads: one)")
    ap.add_argument("--acc-variants", default="",
                    help='more time-to-accuracy cohorts, JSON: [{"ranks": 2, "sync": "outer:20", '
                         '"args": ["--outer-lr", "1.0"], "label": "lr 1.0", "reps": 1}] '
                         '("reps": in the first so many repetitions only)')
    ap.add_argument("--rate-configs", default="", help="JSON list: the rate plan's configurations instead of its own")
    ap.add_argument("--rate-extra", default="", help="JSON list: more configurations for the rate plan")
    ap.add_argument("--torch-ref")
    ap.add_argument("--ddp-reps", type=int, default=1, help="repetitions with PyTorch DDP beside")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/outer-bench"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    results_path = os.path.join(a.out, "results.jsonl")
    lock = threading.Lock()
    results = []

    def sink(r):
        with lock:
            results.append(r)
            with open(results_path, "a") as f:
                f.write(json.dumps(r) + "\n")
            brief = {k: r.get(k) for k in ("rep", "model", "ranks", "shape", "sync", "precision", "label", "samples_per_s",
                                           "window_commits", "error") if k in r}
            if r.get("sync_last"):
                brief["chose"] = r["sync_last"].get("reason")
            print("  done:", json.dumps(brief), flush=True)

    if a.table:
        print(make_table([json.loads(l) for l in open(a.table) if l.strip()]))
        return 0
    if a.one:
        cfg = json.loads(a.one)
        cfg.setdefault("seconds", a.seconds)
        cfg.setdefault("warmup", a.warmup)
        # "pin": C puts rank i on core C + i alone (as the rate plan's
        # scheduler does); without it the ranks run on any core
        pin = cfg.get("pin")
        cores = [{pin + i} for i in range(cfg["ranks"])] if pin is not None else [None] * cfg["ranks"]
        print(json.dumps(run_cohort(a.rank, cfg, cores)))
        return 0

    models = a.models.split(",")
    sched = Scheduler(a.cores)
    t0 = time.monotonic()
    if a.plan in ("accuracy", "all"):
        # one rank for acc-epochs sets the target; the cohorts run beside it
        # (each evaluating on its leader's extra core), stop once they reach
        # it (or after acc-max-seconds) and are judged after
        steps_2ep = int(60000 * a.acc_epochs / 256)
        variants = [dict(ranks=n, sync="auto") for n in map(int, a.acc_ranks.split(",")) if n]
        variants += json.loads(a.acc_variants) if a.acc_variants else []

        def one_rank(cores, job):
            r = dict(run_cohort(a.rank, job, cores), rep=job["rep"], kind="accuracy")
            if r.get("curve"):
                TARGETS[job["rep"]] = r["curve"][-1][1] - 0.005
            else:
                TARGETS[job["rep"]] = 2.0          # nothing to reach: the cohorts stop at their cap
            return r
        for rep in range(a.reps):
            base = dict(model="mnist-mlp-xl", dataset="fashion-mnist", shape="none", sync="step",
                        ranks=1, steps=steps_2ep, evaluate_every=max(1, steps_2ep // 32),
                        evaluate_at_end=True, eval_threads=a.eval_threads,
                        seconds=10 ** 6, warmup=0, max_seconds=a.acc_max_seconds * 2, rep=rep,
                        kind="accuracy")
            sched.submit(1, lambda cores, job=base: one_rank(cores, job), sink,
                         lead_extra=a.eval_threads)
            for v in variants:
                if v["ranks"] + 1 > a.cores or rep >= v.get("reps", a.reps):
                    continue
                job = dict(base, shape="200M50", steps=10 ** 7, evaluate_every=1,
                           max_seconds=a.acc_max_seconds, target_rep=rep,
                           **{k: x for k, x in v.items() if k != "reps"})
                sched.submit(job["ranks"], lambda cores, job=job: dict(
                    run_cohort(a.rank, job, cores), rep=job["rep"], kind="accuracy"), sink,
                    lead_extra=a.eval_threads)
    if a.plan in ("rate", "all"):
        if a.rate_configs:
            cfgs = custom_configs(a.rate_configs, models, a.seconds, a.warmup, a.min_commits,
                                  a.max_window)
            for m in dict.fromkeys(c["model"] for c in cfgs):
                if not any(c["model"] == m and c["ranks"] == 1 and c["sync"] == "step"
                           and not c.get("rank") for c in cfgs):
                    cfgs.insert(0, custom_configs(json.dumps([dict(model=m, ranks=1)]), models,
                                                  a.seconds, a.warmup, a.min_commits,
                                                  a.max_window)[0])
        else:
            cfgs = rate_configs(models, a.seconds, a.warmup, a.min_commits, a.max_window)
        cfgs += custom_configs(a.rate_extra, models, a.seconds, a.warmup, a.min_commits,
                               a.max_window)
        cfgs = [c for c in cfgs if c["ranks"] <= a.ranks_max]
        # the largest first in each repetition, so that the small ones fill the gaps
        for rep in range(a.reps):
            for c in sorted(cfgs, key=lambda c: -c["ranks"]):
                job = dict(c, rep=rep, kind="rate")
                if job["ranks"] > a.cores:
                    continue
                sched.submit(job["ranks"], lambda cores, job=job: dict(
                    run_cohort(job.get("rank") or a.rank, job, cores), rep=job["rep"],
                    kind="rate"), sink)
            if a.torch_ref and rep < a.ddp_reps:
                for m in models:
                    ranks = [n for n in (1, 2, 4, 8) if n <= min(a.ranks_max, a.cores)]
                    sched.submit(max(ranks), lambda cores, m=m, rep=rep, ranks=ranks: dict(
                        run_ddp(a.torch_ref, m, ranks, cores), rep=rep), sink)
    sched.join()
    table = make_table(results)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table)
    print(table)
    print(f"outer-bench: {time.monotonic() - t0:.0f} s", flush=True)
    return 0


def med(xs):
    xs = [x for x in xs if x is not None]
    return st.median(xs) if xs else None


def fmt(x, spec="{:,.0f}"):
    return "—" if x is None else spec.format(x)


def make_table(results):
    out = []
    rate = [r for r in results if r.get("kind") == "rate" and "model" in r and "ranks" in r]
    models = list(dict.fromkeys(r["model"] for r in rate))
    reps = sorted({r["rep"] for r in rate})

    def one_rate(model, rep):
        for r in rate:
            if r["model"] == model and r["rep"] == rep and r["ranks"] == 1 and \
                    r.get("sync") == "step" and not r.get("rank") and not r.get("label"):
                return r.get("samples_per_s")
        return None
    if rate:
        out.append("| model | ranks | link | sync | wire | label | samples/s (median) | × one rank (median of per-rep ratios) | per rep | chosen (last rep) | leader bytes/sample |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        keys = list(dict.fromkeys(row_key(r) for r in rate))
        for key in keys:
            (m, n, shape, sync, wire, label) = key
            runs = [r for r in rate if row_key(r) == key]
            ratios = []
            for r in runs:
                base = one_rate(m, r["rep"])
                if base and r.get("samples_per_s"):
                    ratios.append(r["samples_per_s"] / base)
            chosen = ""
            last = sorted(runs, key=lambda r: r["rep"])[-1]
            if last.get("sync_last"):
                s = last["sync_last"]
                chosen = s.get("reason") or f"{s.get('mode')} {s.get('h')}"
            if last.get("members_left"):
                chosen += f" (members left: {last['members_left']})"
            out.append(f"| {m} | {n} | {SHAPE_NAMES[shape]} | {sync} | {wire} | {label} | {fmt(med(r.get('samples_per_s') for r in runs))} | "
                       f"**{fmt(med(ratios), '{:.2f}×')}** | {[round(x, 2) for x in ratios]} | {chosen} | "
                       f"{fmt(med(r.get('leader_bytes_per_sample') for r in runs), '{:,.0f}')} |")
    ddp = [r for r in results if r.get("kind") == "ddp"]
    if ddp:
        out.append("")
        out.append("| PyTorch DDP (gloo, unshaped, 1 thread a rank) | ranks | samples/s (median) | × one rank |")
        out.append("|---|---|---|---|")
        for m in dict.fromkeys(r["model"] for r in ddp):
            runs = [r for r in ddp if r["model"] == m]
            ns = sorted({int(n) for r in runs for n in r["rates"]})
            for n in ns:
                vals = [r["rates"].get(n, r["rates"].get(str(n))) for r in runs]
                ratios = [r["rates"].get(n, r["rates"].get(str(n))) / r["rates"].get(1, r["rates"].get("1"))
                          for r in runs if r["rates"].get(1, r["rates"].get("1"))
                          and r["rates"].get(n, r["rates"].get(str(n)))]
                out.append(f"| {m} | {n} | {fmt(med(vals))} | {fmt(med(ratios), '{:.2f}×')} |")
    acc = [r for r in results if r.get("kind") == "accuracy" and "ranks" in r]
    if acc:
        out.append("")
        out.append("| wall time to target (Fashion-MNIST, mnist-mlp-xl, b256 a rank) | ranks | link | sync | target | time (median) | × one rank | per rep | final accuracy seen | chosen (last rep) |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        by_rep = {}
        for r in acc:
            by_rep.setdefault(r["rep"], []).append(r)
        rows = {}
        for rep, rs in sorted(by_rep.items()):
            one = [r for r in rs if r["ranks"] == 1]
            if not one or not one[0].get("curve"):
                continue
            final = one[0]["curve"][-1][1]
            target = final - 0.005
            t_one = first_at(one[0]["curve"], target)
            for r in rs:
                t = first_at(r.get("curve") or [], target)
                syncs = r.get("sync_events") or []
                chosen = "; ".join(dict.fromkeys(f"{s.get('mode')} {s.get('h')}" for s in syncs))
                key = (r["ranks"], r["shape"], r.get("sync"), r.get("label", ""))
                rows.setdefault(key, []).append(
                    (target, t, t / t_one if t is not None and t_one else None,
                     (r.get("curve") or [[None, None]])[-1][1], chosen))
        for (n, shape, sync, label), vals in sorted(rows.items(), key=lambda kv: (kv[0][0], str(kv[0][1:]))):
            out.append(f"| {label} | {n} | {SHAPE_NAMES[shape]} | {sync} | {fmt(med(v[0] for v in vals), '{:.2%}')} | "
                       f"{fmt(med(v[1] for v in vals), '{:.1f} s')} | **{fmt(med(v[2] for v in vals), '{:.2f}×')}** | "
                       f"{[None if v[2] is None else round(v[2], 2) for v in vals]} | "
                       f"{fmt(med(v[3] for v in vals), '{:.2%}')} | {vals[-1][4]} |")
    return "\n".join(out) + "\n"


def first_at(curve, target):
    for t, acc in curve:
        if acc is not None and acc >= target:
            return t
    return None


if __name__ == "__main__":
    sys.exit(main())
