#!/usr/bin/env python3
"""Issue 28 between two network namespaces over the real remote link (root).

  netns-outer-bench.py BUILD|NAME=BUILD... [--runs 3] [--seconds 30] [--models mnist-mlp,mnist-mlp-xl]
                       [--syncs step,auto,outer:50] [--rate 200mbit] [--delay-ms 25]
                       [--cpus 0,1] [--rt PRIO] [--json FILE]

Two hosts as namespaces, h1 (10.80.0.1) and h2 (10.81.0.1), joined through
a router namespace: each host's egress is capped by tc tbf (--rate, on both
hosts: a cohort's traffic goes both ways) and the router delays every packet
it forwards by --delay-ms each way (tests/remote/tun-delay-router: this
kernel has no netem; udp-delay-relay, the remote-peers benchmark's delay,
needs its address given to both ends, which ICE between `rlx-rank join`
processes does not allow). The ranks reach each other through ICE + QUIC
(RlxRemoteLink), the founder by `--host 10.80.0.1:7400` and its invite.

For each model (batch 256, one BLAS thread per rank, `--backend cpu`):
  - one rank alone (h1, on the first of --cpus): the reference;
  - two ranks, one per namespace, each pinned to one of --cpus, for every
    --syncs value (step, auto, outer:H).
Each run lasts --seconds; samples/s is the leader's `--json` step events:
the samples of the steps after the first one counted over the time between
them, counting from WARMUP_S after the first step (and, for auto, from its
first outer round: the measured steady state, not its first choice).
Medians of --runs, runs interleaved; every ratio is against one rank alone
in the same run. Several builds (NAME=BUILD, e.g. main=… new=…): every
two-rank setup runs in each, interleaved within each run, against one rank
alone in the first build (the router is the first build's too). Prints a markdown table (auto's last choice of the first
run beside its figure) and (--json) every run.

--rt PRIO (on a shared machine): this script, the router and every rank
run at SCHED_FIFO PRIO, so other load cannot reach them (the kernel's
real-time throttle still leaves it 5 %; keep such runs to a few minutes),
except each rank's compute threads (rlx-worker, rlx-kernels-N,
rlx-cpu-cnn), which run at PRIO - 1: a rank's network threads preempt its
compute the moment a packet arrives, as the normal scheduler's wake-up
preemption lets them, instead of waiting (at one FIFO priority) until the
compute thread blocks, which an outer round's inner steps never do — that
would serialise every exchange behind a round's compute.
"""
import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "remote"))
import rlxnet  # noqa: E402

WARMUP_S = 3.0
COMPUTE_THREADS = ("rlx-worker", "rlx-kernels-", "rlx-cpu-cnn")


class Demoter:
    """--rt: puts every spawned rank's compute threads one FIFO priority below the rest."""

    def __init__(self, net, prio):
        self.net, self.prio, self.done = net, prio, set()
        self.quit = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        low = os.sched_param(self.prio - 1)
        while not self.quit.wait(0.05):
            for p in list(self.net.procs):
                pid = p.p.pid
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in tids:
                    if (pid, tid) in self.done:
                        continue
                    try:
                        with open(f"/proc/{pid}/task/{tid}/comm") as f:
                            comm = f.read().strip()
                        if comm.startswith(COMPUTE_THREADS):
                            os.sched_setscheduler(int(tid), os.SCHED_FIFO, low)
                            self.done.add((pid, tid))
                    except OSError:
                        pass

    def close(self):
        self.quit.set()
        self.t.join()


def topology(build, rate, delay_ms):
    net = rlxnet.Net("outer")
    sh = rlxnet.sh
    h1, rt, h2 = net.add_ns("h1"), net.add_ns("rt"), net.add_ns("h2")
    net._veth(h1, "eth0", rt, "ra")
    net._veth(rt, "rb", h2, "eth0")
    sh("ip", "addr", "add", "10.80.0.1/24", "dev", "eth0", ns=h1)
    sh("ip", "addr", "add", "10.80.0.2/24", "dev", "ra", ns=rt)
    sh("ip", "addr", "add", "10.81.0.2/24", "dev", "rb", ns=rt)
    sh("ip", "addr", "add", "10.81.0.1/24", "dev", "eth0", ns=h2)
    sh("ip", "route", "add", "default", "via", "10.80.0.2", ns=h1)
    sh("ip", "route", "add", "default", "via", "10.81.0.2", ns=h2)
    for k in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
              "net.ipv4.conf.default.rp_filter=0"):
        sh("sysctl", "-qw", k, ns=rt)
    for name, ns, ip in (("h1", h1, "10.80.0.1"), ("h2", h2, "10.81.0.1"), ("rt", rt, "10.80.0.2")):
        net.hosts[name] = {"ns": ns, "ip": ip, "dir": net._host_dir(name)}
    r = net.spawn("router", "rt", [os.path.join(build, "tests", "remote", "tun-delay-router"),
                                   "--dev", "dly0", "--delay-ms", str(delay_ms)])
    deadline = time.monotonic() + 10
    while not any("router ready" in l for l in r.lines):
        if time.monotonic() > deadline or r.p.poll() is not None:
            raise RuntimeError("tun-delay-router did not start\n" + r.tail())
        time.sleep(0.05)
    sh("ip", "link", "set", "dly0", "up", ns=rt)
    sh("sysctl", "-qw", "net.ipv4.conf.dly0.rp_filter=0", ns=rt)
    for dev in ("ra", "rb"):
        sh("ip", "rule", "add", "iif", dev, "lookup", "100", ns=rt)
    sh("ip", "route", "add", "default", "dev", "dly0", "table", "100", ns=rt)
    if rate:
        for ns in (h1, h2):
            sh("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate,
               "burst", "256kb", "latency", "100ms", ns=ns)
    return net


def rank(build, cpu, *extra):
    return ["nice", "-n", "5", "taskset", "-c", str(cpu),
            os.path.join(build, "tools", "rlx-rank"), "join", "--json", "--backend", "cpu",
            "--threads", "1", "--steps", "1000000"] + list(extra)


def rate_of(p, sync):
    """samples/s of the leader's step events in the steady state."""
    steps = [(e, t) for e, t in zip(p.events, p.times) if e.get("event") == "step"]
    if sync == "auto":
        outer = [i for i, (e, _) in enumerate(steps) if e.get("sync") == "outer"]
        steps = steps[outer[0]:] if outer else []
    if steps:
        t0 = steps[0][1] + WARMUP_S
        first = [i for i, (_, t) in enumerate(steps) if t >= t0]
        steps = steps[first[0]:] if first else []
    if len(steps) < 3:
        return None, len(steps)
    samples = sum(e["samples"] for e, _ in steps[1:])
    return samples / (steps[-1][1] - steps[0][1]), len(steps)


def stop(procs, net):
    for p in procs:
        p.kill(signal.SIGTERM)
    for p in procs:
        try:
            p.wait_exit(30)
        except TimeoutError:
            p.kill()


def one_alone(a, net, model, run):
    common = ["--model", model, "--batch", "256"]
    p = net.spawn(f"alone-{model}-{run}", "h1",
                  rank(a.build, a.cpus[0], "--local", "--cohort", f"a{run}-{model}", *common))
    p.wait_event("step", 60)
    time.sleep(a.seconds)
    stop([p], net)
    return rate_of(p, "step"), None


def one_pair(a, net, model, sync, run, build, bi):
    common = ["--model", model, "--batch", "256", "--sync", sync, "--deadline-floor-ms", "5000"]
    tag = f"{model}-{sync.replace(':', '')}-{run}-{bi}"
    f = net.spawn(f"lead-{tag}", "h1",
                  rank(build, a.cpus[0], "--host", "10.80.0.1:7400", "--show-invite",
                       "--cohort", f"c{run}-{tag}", "--wait-members", "2",
                       *common))
    inv = f.wait_event("invite", 30)["invite"]
    b = net.spawn(f"mem-{tag}", "h2", rank(build, a.cpus[1 % len(a.cpus)], inv, *common))
    f.wait_event("step", 120, key="members", minimum=2)
    time.sleep(a.seconds)
    stop([f, b], net)
    chose = [e for e in f.find("sync") if e.get("mode") == "outer"]
    return rate_of(f, sync), (chose[-1].get("reason") if chose else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="+", help="BUILD, or several as NAME=BUILD")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--models", default="mnist-mlp,mnist-mlp-xl")
    ap.add_argument("--syncs", default="step,auto,outer:50")
    ap.add_argument("--rate", default="200mbit", help="tc tbf rate on each host's egress ('' none)")
    ap.add_argument("--delay-ms", type=int, default=25, help="each way, at the router")
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--rt", type=int, default=0, metavar="PRIO",
                    help="SCHED_FIFO PRIO for everything, compute threads PRIO - 1 (2-98)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.rt and not 2 <= a.rt <= 98:
        ap.error("--rt takes a priority from 2 to 98")
    a.builds = [(b.split("=", 1) if "=" in b else [os.path.basename(b.rstrip("/")), b])
                for b in a.build]
    a.builds = [(name, os.path.abspath(path)) for name, path in a.builds]
    a.build = a.builds[0][1]
    a.cpus = [int(c) for c in a.cpus.split(",")]
    rlxnet.need_root_and_netns()
    if a.rt:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(a.rt))
    net = topology(a.build, a.rate, a.delay_ms)
    demoter = Demoter(net, a.rt) if a.rt else None
    models = a.models.split(",")
    syncs = a.syncs.split(",")
    names = [name for name, _ in a.builds]
    setups = [("alone", names[0])] + [(s, name) for s in syncs for name in names]
    res = {(m, s, b): [] for m in models for s, b in setups}
    alone = {(m, run): None for m in models for run in range(a.runs)}
    why = {}
    log = []
    for run in range(a.runs):
        for m in models:
            for bi, (s, b) in enumerate(setups):
                (r, n), reason = one_alone(a, net, m, run) if s == "alone" else \
                    one_pair(a, net, m, s, run, dict(a.builds)[b], bi)
                log.append({"model": m, "sync": s, "build": b, "run": run, "samples_per_s": r,
                            "steps_counted": n, "reason": reason})
                print(json.dumps(log[-1]), file=sys.stderr, flush=True)
                if r is not None:
                    res[(m, s, b)].append(r)
                    if s == "alone":
                        alone[(m, run)] = r
                    elif alone[(m, run)]:
                        log[-1]["ratio"] = r / alone[(m, run)]
                if reason:
                    why.setdefault((m, s, b), reason)
    if demoter:
        demoter.close()
    net.close()
    if a.json:
        with open(a.json, "w") as fp:
            json.dump(log, fp, indent=1)
    print(f"two namespaces, QUIC, {a.rate or 'no rate cap'} (tbf each way), "
          f"{2 * a.delay_ms} ms round trip (router); batch 256, one BLAS thread per rank, "
          f"cpus {a.cpus}{f', SCHED_FIFO {a.rt} (compute {a.rt - 1})' if a.rt else ''}; medians of {a.runs} × {a.seconds:.0f} s\n")
    print("| model | setup | samples/s | vs one rank (per run) | auto's choice |")
    print("|---|---|---|---|---|")
    for m in models:
        ref = statistics.median(res[(m, "alone", names[0])]) if res[(m, "alone", names[0])] else None
        for s, b in setups:
            v = res[(m, s, b)]
            if not v:
                print(f"| {m} | {s} {b} | — (too few steps) | — | |")
                continue
            med = statistics.median(v)
            per_run = ", ".join(f"{e['ratio']:.2f}" for e in log
                                if (e["model"], e["sync"], e["build"]) == (m, s, b) and "ratio" in e)
            ratio = (f"**{med / ref:.2f}×**" + (f" ({per_run})" if per_run else "")) if ref else "—"
            label = "one rank alone" if s == "alone" else f"two ranks, --sync {s}"
            if len(names) > 1:
                label += f" ({b})"
            print(f"| {m} | {label} | {med:,.0f} ({min(v):,.0f}–{max(v):,.0f}) | {ratio} | "
                  f"{why.get((m, s, b), '')} |")


if __name__ == "__main__":
    main()
