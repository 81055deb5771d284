#!/usr/bin/env python3
"""signal-attack.py — keyless attacks on a real `rlx-rank signal`, measured.

Issue 29, items 1-4. Starts `rlx-rank signal` on 127.0.0.1, runs one attack
at a time from loopback addresses 127.0.1.2 and up (every 127/8 address is
loopback on Linux, so per-address caps act as on a network), and meanwhile
has a legitimate client (from 127.0.0.1) join every second. Reports, per
attack, the server's RSS before, at its peak and after, and the slowest and
median join. Everything is bounded: counts below, DURATION seconds each,
loopback only.

  idle      IDLE idle TCP connections, reopened as the server closes them
  slowloris SLOW connections trickling one header line every 5 s, reopened
  deaf      DEAF clients that join a room and never read, one sender
            broadcasting bodies at the cap at the server's message rate
  rooms     MEMBERS fake members of the legitimate client's room from one
            address (an attacker who knows the room's name: with signalling
            v2 it is derived from the cohort key), then ROOMS rooms of its
            own from every address; all answer pings so that they stay

  scripts/signal-attack.py --rank build/tools/rlx-rank [--attacks idle,deaf]
      [--duration 20] [--addresses 50] [--json]
"""
import argparse
import asyncio
import base64
import json
import os
import random
import resource
import socket
import statistics
import struct
import subprocess
import sys
import time

KEY = base64.b64encode(os.urandom(16)).decode()
UPGRADE = ("GET /rlx/signal HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
           "Sec-WebSocket-Version: 13\r\n\r\n" % KEY).encode()
VERSION = 2
BODY = 12000 - 400          # RLX_SIGNAL_MAX_BODY, less the sealed fields


def attacker(i, n):
    k = i % n
    return "127.0.%d.%d" % (1 + k // 250, 2 + k % 250)


def frame(text):
    """A masked client text frame."""
    data = text.encode()
    mask = os.urandom(4)
    n = len(data)
    if n < 126:
        head = struct.pack("!BB", 0x81, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x81, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))


async def read_frame(r):
    h = await r.readexactly(2)
    n = h[1] & 0x7f
    if n == 126:
        n = struct.unpack("!H", await r.readexactly(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", await r.readexactly(8))[0]
    return h[0] & 0x0f, await r.readexactly(n)


async def connect(port, src, rcvbuf=0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((src, 0))
    s.setblocking(False)
    await asyncio.get_running_loop().sock_connect(s, ("127.0.0.1", port))
    return s


class Ws:
    """A WebSocket client of the signalling server that answers pings."""

    async def open(self, port, src, room, node, rcvbuf=0, timeout=5.0):
        s = await asyncio.wait_for(connect(port, src, rcvbuf), timeout)
        self.r, self.w = await asyncio.open_connection(sock=s)
        self.w.write(UPGRADE)
        head = await asyncio.wait_for(self.r.readuntil(b"\r\n\r\n"), timeout)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise ConnectionError(head.split(b"\r\n")[0].decode(errors="replace"))
        self.send({"op": "join", "v": VERSION, "room": room, "node": node})
        while True:
            op = await asyncio.wait_for(self.next_op(), timeout)
            if op is None:
                raise ConnectionError("closed before the welcome")
            if op.get("op") == "welcome":
                return self
            if op.get("op") == "error" and op.get("fatal"):
                raise ConnectionError(op.get("reason"))

    def send(self, o):
        self.w.write(frame(json.dumps(o)))

    async def next_op(self):
        """The next envelope; pings are answered on the way."""
        while True:
            try:
                opcode, data = await read_frame(self.r)
            except (asyncio.IncompleteReadError, ConnectionError):
                return None
            if opcode == 8:
                return None
            if opcode != 1:
                continue
            op = json.loads(data)
            if op.get("op") == "ping":
                self.send({"op": "pong", "n": op["n"]})
                continue
            return op

    async def serve(self):
        while await self.next_op() is not None:
            pass

    def close(self):
        try:
            self.w.close()
        except Exception:
            pass


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


async def legit_joins(port, stop, times, errors):
    k = 0
    while not stop.is_set():
        k += 1
        t0 = time.monotonic()
        ws = Ws()
        try:
            await ws.open(port, "127.0.0.1", "legit-room", "legit%d" % k, timeout=5.0)
            times.append(time.monotonic() - t0)
        except Exception as e:
            errors.append("%s: %s" % (type(e).__name__, e))
            times.append(time.monotonic() - t0)
        ws.close() if hasattr(ws, "w") else None
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except asyncio.TimeoutError:
            pass


async def churn(port, src_of, count, stop, body):
    """Keep @count connections open, each running @body, reopened when the
    server closes them."""
    async def one(i):
        while not stop.is_set():
            try:
                s = await asyncio.wait_for(connect(port, src_of(i)), 5.0)
            except Exception:
                await asyncio.sleep(0.2)
                continue
            try:
                await body(s, stop)
            except Exception:
                pass
            finally:
                s.close()
            await asyncio.sleep(0.05)
    await asyncio.gather(*(one(i) for i in range(count)))


async def idle_body(s, stop):
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        try:
            if not await asyncio.wait_for(loop.sock_recv(s, 4096), 0.5):
                return
        except asyncio.TimeoutError:
            pass


async def slow_body(s, stop):
    loop = asyncio.get_running_loop()
    lines = [b"GET /rlx/signal HTTP/1.1\r\n", b"Host: x\r\n", b"Upgrade: websocket\r\n"]
    k = 0
    while not stop.is_set():
        await loop.sock_sendall(s, lines[min(k, 2)] if k < 3 else b"X-Slow-%d: 1\r\n" % k)
        k += 1
        try:
            if not await asyncio.wait_for(loop.sock_recv(s, 4096), 5.0):
                return
        except asyncio.TimeoutError:
            pass


async def attack_deaf(port, args, stop):
    socks = []
    for i in range(args.deaf):
        s = await connect(port, attacker(i, args.addresses), rcvbuf=4096)
        s.setblocking(True)
        s.sendall(UPGRADE + frame(json.dumps({"op": "join", "v": VERSION, "room": "deaf-room",
                                               "node": "deaf%d" % i})))
        s.setblocking(False)
        socks.append(s)
    sender = await Ws().open(port, attacker(args.deaf, args.addresses), "deaf-room", "sender")
    reader = asyncio.ensure_future(sender.serve())
    body = {"c": "A" * BODY}
    sent = 0
    while not stop.is_set():
        sender.send({"op": "send", "to": "*", "data": body})
        sent += 1
        await sender.w.drain()
        await asyncio.sleep(1 / 50)     # the server's default rate
    reader.cancel()
    sender.close()
    for s in socks:
        s.close()
    return "%d deaf clients, %d broadcasts of %d bytes" % (args.deaf, sent, BODY)


async def attack_rooms(port, args, stop):
    held = []
    refused = 0

    async def try_join(src, room, node):
        nonlocal refused
        try:
            ws = await Ws().open(port, src, room, node)
            held.append((ws, asyncio.ensure_future(ws.serve())))
        except Exception:
            refused += 1
    # Fake members of the legitimate client's room, from one address: the
    # room is named by the cohort key (signalling v2), so an attacker who
    # knows it is one who saw it; rooms of its own from every address.
    await asyncio.gather(*(try_join(attacker(0, 1), "legit-room", "fake%d" % i)
                           for i in range(args.members)))
    fakes = len(held)
    await asyncio.gather(*(try_join(attacker(i, args.addresses), "junk%d" % i, "x")
                           for i in range(args.rooms)))
    await stop.wait()
    for ws, t in held:
        t.cancel()
        ws.close()
    return ("%d fake members from one address tried, %d in; %d rooms from %d addresses "
            "tried, %d made; %d refused" % (args.members, fakes, args.rooms, args.addresses,
                                            len(held) - fakes, refused))


async def run_attack(name, port, pid, args):
    stop = asyncio.Event()
    times, errors = [], []
    # The room the legitimate clients join already has its founder in it.
    founder = await Ws().open(port, "127.0.0.1", "legit-room", "founder")
    founder_task = asyncio.ensure_future(founder.serve())
    await asyncio.sleep(0.5)
    rss0 = rss(pid)
    fds0 = len(os.listdir("/proc/%d/fd" % pid))
    peak = [rss0]

    async def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss(pid))
            await asyncio.sleep(0.1)
    sampler = asyncio.ensure_future(sample())
    if name == "idle":
        attack = churn(port, lambda i: attacker(i, args.addresses), args.idle, stop, idle_body)
    elif name == "slowloris":
        attack = churn(port, lambda i: attacker(i, args.addresses), args.slow, stop, slow_body)
    elif name == "deaf":
        attack = attack_deaf(port, args, stop)
    else:
        attack = attack_rooms(port, args, stop)
    attack_task = asyncio.ensure_future(attack)
    await asyncio.sleep(2.0)            # let it build up
    joins = asyncio.ensure_future(legit_joins(port, stop, times, errors))
    await asyncio.sleep(args.duration - 2.0)
    stop.set()
    what = await attack_task
    await joins
    sampler.cancel()
    founder_task.cancel()
    founder.close()
    await asyncio.sleep(3.0)            # the server lets go of it all
    after = rss(pid)
    fds1 = len(os.listdir("/proc/%d/fd" % pid))
    return {
        "fds_before": fds0, "fds_after": fds1,
        "attack": name, "detail": what if isinstance(what, str) else "",
        "rss_before_mb": round(rss0 / 1e6, 1), "rss_peak_mb": round(peak[0] / 1e6, 1),
        "rss_after_mb": round(after / 1e6, 1),
        "rss_growth_mb": round((peak[0] - rss0) / 1e6, 1),
        "joins": len(times), "join_failures": len(errors),
        "join_max_ms": round(max(times) * 1000) if times else None,
        "join_median_ms": round(statistics.median(times) * 1000) if times else None,
        "errors": errors[:3],
    }


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


async def main_async(args):
    port = free_port()
    proc = subprocess.Popen([args.rank, "signal", "--port", str(port), "--address", "127.0.0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log = open(args.log, "w") if args.log else None

    def drain():
        # Its event lines, so that it never blocks on a full pipe.
        for line in proc.stdout:
            if log:
                log.write(line.decode(errors="replace"))
    try:
        proc.stdout.readline()          # "serving signalling on …"
        asyncio.get_running_loop().run_in_executor(None, drain)
        results = []
        for name in args.attacks.split(","):
            res = await run_attack(name, port, proc.pid, args)
            results.append(res)
            if args.json:
                print(json.dumps(res), flush=True)
            else:
                print("%-9s RSS %5.1f → peak %5.1f → after %5.1f MB (growth %4.1f MB); "
                      "%d joins, slowest %s ms, median %s ms, %d failed; descriptors %d → %d  [%s]" % (
                          name, res["rss_before_mb"], res["rss_peak_mb"], res["rss_after_mb"],
                          res["rss_growth_mb"], res["joins"], res["join_max_ms"],
                          res["join_median_ms"], res["join_failures"], res["fds_before"],
                          res["fds_after"], res["detail"]),
                      flush=True)
                for e in res["errors"]:
                    print("          join error: %s" % e)
        bad = [r for r in results if r["rss_growth_mb"] >= 20 or r["join_failures"]
               or (r["join_max_ms"] or 0) > 3000]
        return 1 if bad else 0
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="Exits 1 when an attack grew the server by 20 MB or more, "
                                 "failed a legitimate join, or slowed one past 3 s.")
    ap.add_argument("--rank", default="build/tools/rlx-rank",
                    help="the rlx-rank whose `signal` is attacked (default: %(default)s)")
    ap.add_argument("--attacks", default="idle,slowloris,deaf,rooms",
                    help="which, comma-separated, in order (default: %(default)s)")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per attack (max 120)")
    ap.add_argument("--addresses", type=int, default=50, help="attacker addresses (max 1000)")
    ap.add_argument("--idle", type=int, default=500,
                    help="idle: connections held open (max 2000; default %(default)s)")
    ap.add_argument("--slow", type=int, default=200,
                    help="slowloris: connections trickling headers (max 2000; default %(default)s)")
    ap.add_argument("--deaf", type=int, default=20,
                    help="deaf: clients that join and never read (max 2000; default %(default)s)")
    ap.add_argument("--rooms", type=int, default=300,
                    help="rooms: rooms of its own, over all addresses (max 2000; default "
                    "%(default)s)")
    ap.add_argument("--members", type=int, default=100,
                    help="rooms: fake members of the legitimate room from one address (max 2000; "
                    "default %(default)s)")
    ap.add_argument("--json", action="store_true", help="one JSON object per attack")
    ap.add_argument("--log", help="write the server's event lines to this file")
    args = ap.parse_args()
    args.duration = min(max(args.duration, 4.0), 120.0)
    args.addresses = min(max(args.addresses, 1), 1000)
    for k in ("idle", "slow", "deaf", "rooms", "members"):
        setattr(args, k, min(getattr(args, k), 2000))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sys.exit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
