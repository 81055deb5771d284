#!/usr/bin/env python3
"""Remote-peer figures of BENCHMARKS.md, between network namespaces (root).

  bench-remote.py BUILD throughput [--runs 3] [--ref-build OLD_BUILD] [--quic-cc CC] [--no-nice]
      One remote link, one stream: RlxRemoteLink (ICE + QUIC + TLS) against
      libnice's reliable mode (pseudo-TCP over the same ICE), interleaved, two
      namespaces on a bridge with no shaping — at MTU 1500 (QUIC's default
      payload, PMTU-probed up to 1444 bytes) and at MTU 9000 (payload 8952).
      With the CPU time per MB each side spent, and with --ref-build a build
      of the code before a change runs interleaved beside this one.
  bench-remote.py BUILD shaped [--runs 3] [--ccs cubic,bbr2] [--no-nice]
      The same over a 200 Mbit/s link (tc tbf on the sender's egress) with a
      50 ms round trip (udp-delay-relay, 25 ms each way, in a namespace
      between them): QUIC with CUBIC and with BBRv2, and libnice reliable.
  bench-remote.py BUILD join [--runs 5]
      From spawning `rlx-rank join INVITE` in a third namespace beside a
      running 2-host cohort to its first contributed gradient.
  bench-remote.py BUILD cohort [--runs 3] [--steps 600] [--quic-cc CC]
      samples/s of a cohort of two ranks (mnist-mlp, f8e4m3) in two
      namespaces against the same two ranks on the local bus, interleaved.

Medians; every figure beside its reference from the same run.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "remote"))
import rlxnet  # noqa: E402


def link_bench(build, net, mode, mib, s_host, r_host, extra=(), via=None, relay=None,
               timeout=300, recv_wrap=(), send_wrap=()):
    """One transfer; the sender's JSON line with the receiver's costs added
    under "recv" (CPU seconds, datagrams in, receive-buffer drops)."""
    tool = os.path.join(build, "tests", "remote", "remote-bench")
    d = os.path.join(net.dir, f"x{time.monotonic_ns()}")
    os.makedirs(d)
    common = ["--dir", d, "--mode", mode, "--mib", str(mib), "--timeout", str(timeout)] + list(extra)
    r = net.spawn(f"recv-{mode}", r_host,
                  list(recv_wrap) + [tool, "recv", "--name", "r", "--peer", "s"] + common)
    go = os.path.join(d, "go")
    s = net.spawn(f"send-{mode}", s_host,
                  list(send_wrap) + [tool, "send", "--name", "s", "--peer", "r"] + common +
                  (["--via", via, "--wait-file", go] if via else []))
    relay_proc = None
    if relay:
        # Wait for the receiver's candidates, aim the relay at the one on its
        # side, then let the sender read them (it replaces them by the relay).
        path = os.path.join(d, "r.ice")
        deadline = time.monotonic() + 30
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise TimeoutError("the receiver wrote no candidates\n" + r.tail())
            time.sleep(0.02)
        text = open(path).read()
        m = re.search(rf"{re.escape(relay['to_ip'])} (\d+) typ host", text)
        if not m:
            raise RuntimeError(f"no candidate of the receiver on {relay['to_ip']}:\n{text}")
        relay_proc = net.spawn("relay", relay["host"],
                               [os.path.join(build, "tests", "remote", "udp-delay-relay"),
                                "--a", relay["a"], "--b", relay["b"],
                                "--to", f"{relay['to_ip']}:{m.group(1)}",
                                "--delay-ms", str(relay["delay_ms"])])
        relay_proc.wait_for(lambda evs: any("relay ready" in l for l in relay_proc.lines), 10,
                            "relay ready")
        open(go, "w").close()
    rc = s.wait_exit(timeout + 30)
    if rc != 0:
        raise RuntimeError(f"remote-bench send failed ({rc})\n{s.tail()}\n{r.tail()}")
    out = json.loads([l for l in s.lines if l.startswith("{")][-1])
    try:
        out["recv"] = r.wait_for(lambda evs: [e for e in evs if e.get("side") == "recv"], 30,
                                 "receiver's costs")[-1]
    except TimeoutError:
        out["recv"] = None
    if recv_wrap:
        r.wait_exit(timeout)   # let the wrapper (valgrind) write its output
    r.kill()
    if relay_proc:
        relay_proc.kill()
    return out


def med(xs):
    return statistics.median(xs)


def cpu_ms_per_mb(x, side):
    """CPU milliseconds (user + system) per MB moved, one side of a run."""
    r = x if side == "send" else (x.get("recv") or {})
    if "cpu_user" not in r:
        return float("nan")
    return 1000 * (r["cpu_user"] + r["cpu_sys"]) / (x["bytes"] / 1e6)


def span(xs, fmt="{:.0f}"):
    return f"{fmt.format(min(xs))}–{fmt.format(max(xs))}"


def builds(a):
    """(label, build dir) pairs to run side by side: --ref-build first."""
    out = []
    if a.ref_build:
        out.append(("before", os.path.abspath(a.ref_build)))
    out.append(("this build" if a.ref_build else "", a.build))
    return out


def throughput(a):
    rows = []
    for mtu, payload in ((1500, 0), (9000, 8952)):
        net = rlxnet.Net("tp")
        net.host("h1", 1, mtu if mtu != 1500 else None)
        net.host("h2", 2, mtu if mtu != 1500 else None)
        q = {label: [] for label, _ in builds(a)}
        n = []
        for i in range(a.runs):
            extra = (["--payload", str(payload)] if payload else []) + \
                (["--cc", a.quic_cc] if a.quic_cc else [])
            for label, build in builds(a):
                q[label].append(link_bench(build, net, "quic", 512 if payload else 256, "h2", "h1",
                                           extra))
            if mtu == 1500 and not a.no_nice:
                n.append(link_bench(a.build, net, "nice", 128, "h2", "h1"))
        net.close()
        rows.append((mtu, payload or "PMTUD ≤ 1444", q, n))
    if a.quic_cc:
        print(f"QUIC congestion control: {a.quic_cc}\n")
    print("| MTU | QUIC payload | build | RlxRemoteLink (QUIC), MB/s | receiver CPU ms/MB | "
          "sender CPU ms/MB | libnice reliable, MB/s | QUIC / libnice | ping RTT QUIC / libnice |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mtu, payload, q, n in rows:
        for label, runs in q.items():
            qm = med([x["mbps"] for x in runs])
            rc = [cpu_ms_per_mb(x, "recv") for x in runs]
            sc = [cpu_ms_per_mb(x, "send") for x in runs]
            qp = med([x["ping_us"] for x in runs])
            if n:
                nm = med([x["mbps"] for x in n])
                nice_s, ratio = f"{nm:.0f}", f"{qm / nm:.1f}×"
                np_s = f"{med([x['ping_us'] for x in n])} µs"
            else:
                nice_s = ratio = np_s = "—"
            print(f"| {mtu} | {payload} | {label} | **{qm:.0f}** ({span([x['mbps'] for x in runs])}) "
                  f"| {med(rc):.2f} ({span(rc, '{:.2f}')}) | {med(sc):.2f} ({span(sc, '{:.2f}')}) "
                  f"| {nice_s} | {ratio} | {qp} µs / {np_s} |")
        if a.ref_build:
            ref, new = (med([x["mbps"] for x in v]) for v in q.values())
            print(f"| {mtu} | {payload} | this build / before | **{new / ref:.2f}×** | | | | | |")


def shaped(a):
    net = rlxnet.Net("shaped")
    s = net.add_ns("s")
    relay = net.add_ns("relay")
    r = net.add_ns("r")
    net._veth(s, "eth0", relay, "ra")
    net._veth(relay, "rb", r, "eth0")
    rlxnet.sh("ip", "addr", "add", "10.80.0.1/24", "dev", "eth0", ns=s)
    rlxnet.sh("ip", "addr", "add", "10.80.0.2/24", "dev", "ra", ns=relay)
    rlxnet.sh("ip", "addr", "add", "10.81.0.2/24", "dev", "rb", ns=relay)
    rlxnet.sh("ip", "addr", "add", "10.81.0.1/24", "dev", "eth0", ns=r)
    # 200 Mbit/s on the way out of the sender; a queue of ~100 ms.
    rlxnet.sh("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "200mbit",
              "burst", "256kb", "latency", "100ms", ns=s)
    for name, ns, ip in (("s", s, "10.80.0.1"), ("r", r, "10.81.0.1"), ("relay", relay, "10.80.0.2")):
        net.hosts[name] = {"ns": ns, "ip": ip, "dir": net._host_dir(name)}
    rl = {"host": "relay", "a": "10.80.0.2:5000", "b": "10.81.0.2:5001", "to_ip": "10.81.0.1",
          "delay_ms": 25}
    ccs = a.ccs.split(",")
    res = {f"quic {cc}": [] for cc in ccs}
    res["nice"] = []
    if a.ref_build:
        res = {"quic cubic, before": [], **res}
    for i in range(a.runs):
        if a.ref_build:
            res["quic cubic, before"].append(
                link_bench(os.path.abspath(a.ref_build), net, "quic", 64, "s", "r",
                           ["--cc", "cubic"], via=rl["a"], relay=rl))
        for cc in ccs:
            res[f"quic {cc}"].append(link_bench(a.build, net, "quic", 64, "s", "r", ["--cc", cc],
                                                via=rl["a"], relay=rl))
        if i == 0 and not a.no_nice:
            res["nice"].append(link_bench(a.build, net, "nice", 8, "s", "r", [], via=rl["a"],
                                          relay=rl, timeout=600))
    net.close()
    link = 200e6 / 8 / 1e6
    print("| 200 Mbit/s (tbf), 50 ms RTT (relay) | MB/s | of the link (25 MB/s) | ping RTT |")
    print("|---|---|---|---|")
    for k, v in res.items():
        if not v:
            continue
        m = med([x["mbps"] for x in v])
        print(f"| {k} | **{m:.2f}** ({min(x['mbps'] for x in v):.2f}–{max(x['mbps'] for x in v):.2f}) "
              f"| {100 * m / link:.0f} % | {med([x['ping_us'] for x in v]) / 1000:.1f} ms |")


def rank_args(*extra):
    return [os.path.join(os.path.abspath(sys.argv[1]), "tools", "rlx-rank"), "join", "--json",
            "--backend", "cpu", "--threads", "1"] + list(extra)


def join(a):
    times = []
    for i in range(a.runs):
        net = rlxnet.Net("join")
        for h, n in (("h1", 1), ("h2", 2), ("h3", 3)):
            net.host(h, n)
        f = net.spawn("h1", "h1", rank_args("--host", f"10.77.0.1:7400", "--show-invite", "--cohort", "j",
                                            "--wait-members", "2", "--steps", "100000"))
        inv = f.wait_event("invite", 20)["invite"]
        b = net.spawn("h2", "h2", rank_args(inv, "--steps", "100000"))
        f.wait_event("step", 60, key="members", minimum=2)
        t0 = time.monotonic()
        c = net.spawn("h3", "h3", rank_args(inv, "--steps", "100000"))
        c.wait_event("step", 60, where=lambda e: e.get("contributed"))
        first = [t for e, t in zip(c.events, c.times)
                 if e.get("event") == "step" and e.get("contributed")][0]
        times.append(first - c.spawned)
        net.close()
    print(f"| join from `rlx-rank join INVITE` to the first contributed gradient | "
          f"**{med(times) * 1000:.0f} ms** (runs {min(times) * 1000:.0f}–{max(times) * 1000:.0f}) "
          f"| target ≤ 3 s |")


def samples_per_s(p, skip=20):
    steps = [(e, t) for e, t in zip(p.events, p.times) if e.get("event") == "step"]
    steps = steps[skip:]
    if len(steps) < 10:
        raise RuntimeError("too few steps\n" + p.tail())
    samples = sum(e["samples"] for e, _ in steps[1:])
    return samples / (steps[-1][1] - steps[0][1])


PATH_FIELDS = (("round_ms", "round"), ("compute_ms", "slowest compute"),
               ("coordinator_ms", "leader's handlers"), ("cpu_ms", "leader's CPU, all threads"))


def path_of(leader, member):
    """Where a round went: the leader's "done" fields, ms a round, and the
    member's time waiting for its next job, ms a step."""
    d = leader.find("done")
    d = d[-1] if d else {}
    out = {k: d.get(k) for k, _ in PATH_FIELDS}
    md = member.find("done")
    out["member_wait_ms"] = md[-1].get("worker_wait_ms") if md else None
    return out


def cohort(a):
    remote, local = [], []
    paths = {"remote": [], "local": []}
    steps = str(a.steps)
    common = ["--model", "mnist-mlp", "--precision", "f8e4m3", "--steps", steps]
    cc = ["--quic-cc", a.quic_cc] if a.quic_cc else []
    for i in range(a.runs):
        net = rlxnet.Net("cohort")
        net.host("h1", 1)
        net.host("h2", 2)
        f = net.spawn("h1", "h1", rank_args("--host", "10.77.0.1:7400", "--show-invite", "--cohort", "c",
                                            "--wait-members", "2", *common, *cc))
        inv = f.wait_event("invite", 20)["invite"]
        b = net.spawn("h2", "h2", rank_args(inv, *common, *cc))
        f.wait_event("done", 600)
        b.wait_exit(60)
        remote.append(samples_per_s(f))
        paths["remote"].append(path_of(f, b))
        # The same two ranks on the local bus, in one namespace.
        l1 = net.spawn("l1", "h1", rank_args("--local", "--cohort", "l", "--wait-members", "2",
                                             *common))
        l2 = net.spawn("l2", "h1", rank_args("--local", "--cohort", "l", *common))
        l1.wait_event("done", 600)
        l2.wait_exit(60)
        local.append(samples_per_s(l1))
        paths["local"].append(path_of(l1, l2))
        net.close()
    rm, lm = med(remote), med(local)
    print(f"| 2 ranks, mnist-mlp, f8e4m3, batch 32 each{', QUIC ' + a.quic_cc if a.quic_cc else ''}"
          " | samples/s | vs local bus |")
    print("|---|---|---|")
    print(f"| two namespaces, RlxRemoteLink | **{rm:,.0f}** ({min(remote):,.0f}–{max(remote):,.0f}) "
          f"| **{rm / lm:.2f}×** |")
    print(f"| one namespace, local bus | {lm:,.0f} ({min(local):,.0f}–{max(local):,.0f}) | 1 |")
    print()
    fields = PATH_FIELDS + (("member_wait_ms", "member waiting for its next job"),)
    print("| ms a round (medians; the leader's `done` event) | " +
          " | ".join(t for _, t in fields) + " |")
    print("|---|" + "---|" * len(fields))
    for k, v in paths.items():
        cells = []
        for f, _ in fields:
            xs = [x[f] for x in v if isinstance(x.get(f), (int, float))]
            cells.append(f"{med(xs):.3f}" if xs else "—")
        print(f"| {k} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("what", choices=["throughput", "shaped", "join", "cohort"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--quic-cc", default=None, choices=["cubic", "bbr", "bbr2", "reno"],
                    help="cohort, throughput: the congestion controller (default: the link's)")
    ap.add_argument("--ccs", default="cubic,bbr2",
                    help="shaped: the congestion controllers to compare (comma-separated)")
    ap.add_argument("--no-nice", action="store_true",
                    help="shaped, throughput: leave out libnice's reliable mode")
    ap.add_argument("--ref-build", default=None,
                    help="a build of the code before (throughput, shaped): run side by side")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    rlxnet.need_root_and_netns()
    {"throughput": throughput, "shaped": shaped, "join": join, "cohort": cohort}[a.what](a)
