#!/usr/bin/env python3
"""Remote-peer figures of BENCHMARKS.md, between network namespaces (root).

  bench-remote.py BUILD throughput [--runs 3]
      One remote link, one stream: RlxRemoteLink (ICE + QUIC + TLS) against
      libnice's reliable mode (pseudo-TCP over the same ICE), interleaved, two
      namespaces on a bridge with no shaping — at MTU 1500 (QUIC's default
      1452-byte payload) and at MTU 9000 (payload 8952).
  bench-remote.py BUILD shaped [--runs 3]
      The same over a 200 Mbit/s link (tc tbf on the sender's egress) with a
      50 ms round trip (udp-delay-relay, 25 ms each way, in a namespace
      between them): QUIC with CUBIC and with BBRv2, and libnice reliable.
  bench-remote.py BUILD join [--runs 5]
      From spawning `rlx-rank join INVITE` in a third namespace beside a
      running 2-host cohort to its first contributed gradient.
  bench-remote.py BUILD cohort [--runs 3] [--steps 600]
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
               timeout=300):
    tool = os.path.join(build, "tests", "remote", "remote-bench")
    d = os.path.join(net.dir, f"x{time.monotonic_ns()}")
    os.makedirs(d)
    common = ["--dir", d, "--mode", mode, "--mib", str(mib), "--timeout", str(timeout)] + list(extra)
    r = net.spawn(f"recv-{mode}", r_host, [tool, "recv", "--name", "r", "--peer", "s"] + common)
    go = os.path.join(d, "go")
    s = net.spawn(f"send-{mode}", s_host, [tool, "send", "--name", "s", "--peer", "r"] + common +
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
    r.kill()
    if relay_proc:
        relay_proc.kill()
    return out


def med(xs):
    return statistics.median(xs)


def throughput(a):
    rows = []
    for mtu, payload in ((1500, 0), (9000, 8952)):
        net = rlxnet.Net("tp")
        net.host("h1", 1, mtu if mtu != 1500 else None)
        net.host("h2", 2, mtu if mtu != 1500 else None)
        q, n = [], []
        for i in range(a.runs):
            extra = ["--payload", str(payload)] if payload else []
            q.append(link_bench(a.build, net, "quic", 512 if payload else 256, "h2", "h1", extra))
            if mtu == 1500:
                n.append(link_bench(a.build, net, "nice", 128, "h2", "h1"))
        net.close()
        rows.append((mtu, payload or 1452, q, n))
    print("| MTU | QUIC payload | RlxRemoteLink (QUIC), MB/s | libnice reliable, MB/s | ratio | "
          "ping RTT QUIC / libnice |")
    print("|---|---|---|---|---|---|")
    for mtu, payload, q, n in rows:
        qm = med([x["mbps"] for x in q])
        qr = f"{min(x['mbps'] for x in q):.0f}–{max(x['mbps'] for x in q):.0f}"
        qp = med([x["ping_us"] for x in q])
        if n:
            nm = med([x["mbps"] for x in n])
            nice_s, ratio, np_s = f"{nm:.0f}", f"{qm / nm:.1f}×", f"{med([x['ping_us'] for x in n])} µs"
        else:
            nice_s = ratio = np_s = "—"
        print(f"| {mtu} | {payload} | **{qm:.0f}** ({qr}) | {nice_s} | {ratio} | {qp} µs / {np_s} |")


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
    res = {"quic cubic": [], "quic bbr2": [], "nice": []}
    for i in range(a.runs):
        res["quic cubic"].append(link_bench(a.build, net, "quic", 64, "s", "r", ["--cc", "cubic"],
                                            via=rl["a"], relay=rl))
        res["quic bbr2"].append(link_bench(a.build, net, "quic", 64, "s", "r", ["--cc", "bbr2"],
                                           via=rl["a"], relay=rl))
        if i == 0:
            res["nice"].append(link_bench(a.build, net, "nice", 8, "s", "r", [], via=rl["a"],
                                          relay=rl, timeout=600))
    net.close()
    link = 200e6 / 8 / 1e6
    print("| 200 Mbit/s (tbf), 50 ms RTT (relay) | MB/s | of the link (25 MB/s) | ping RTT |")
    print("|---|---|---|---|")
    for k, v in res.items():
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
        f = net.spawn("h1", "h1", rank_args("--host", f"10.77.0.1:7400", "--cohort", "j",
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


def cohort(a):
    remote, local = [], []
    steps = str(a.steps)
    common = ["--model", "mnist-mlp", "--precision", "f8e4m3", "--steps", steps]
    for i in range(a.runs):
        net = rlxnet.Net("cohort")
        net.host("h1", 1)
        net.host("h2", 2)
        f = net.spawn("h1", "h1", rank_args("--host", "10.77.0.1:7400", "--cohort", "c",
                                            "--wait-members", "2", *common))
        inv = f.wait_event("invite", 20)["invite"]
        b = net.spawn("h2", "h2", rank_args(inv, *common))
        f.wait_event("done", 600)
        b.wait_exit(60)
        remote.append(samples_per_s(f))
        # The same two ranks on the local bus, in one namespace.
        l1 = net.spawn("l1", "h1", rank_args("--local", "--cohort", "l", "--wait-members", "2",
                                             *common))
        l2 = net.spawn("l2", "h1", rank_args("--local", "--cohort", "l", *common))
        l1.wait_event("done", 600)
        l2.wait_exit(60)
        local.append(samples_per_s(l1))
        net.close()
    rm, lm = med(remote), med(local)
    print("| 2 ranks, mnist-mlp, f8e4m3, batch 32 each | samples/s | vs local bus |")
    print("|---|---|---|")
    print(f"| two namespaces, RlxRemoteLink | **{rm:,.0f}** ({min(remote):,.0f}–{max(remote):,.0f}) "
          f"| **{rm / lm:.2f}×** |")
    print(f"| one namespace, local bus | {lm:,.0f} ({min(local):,.0f}–{max(local):,.0f}) | 1 |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("what", choices=["throughput", "shaped", "join", "cohort"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=600)
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    rlxnet.need_root_and_netns()
    {"throughput": throughput, "shaped": shaped, "join": join, "cohort": cohort}[a.what](a)
