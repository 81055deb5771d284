#!/usr/bin/env python3
"""frame-pin.py — how much memory a peer makes a real rank hold with frames it never finishes.

Issue 29 (a peer with the key, or any process of the same user on the local
bus): a frame announced on a link and sent all but its last byte is held
by the receiver until the frame completes or the link closes. This starts
a real `rlx-rank join --local` (CPU backend, waiting for a member, so its
own memory stands still) in private XDG directories, then opens CONNS
connections to its bus socket from this script, and on each (after the
bus handshake, unless the attack is "unhandshaken") sends a frame of SIZE
bytes on LANE but its last bytes: one record that says more follows
(rlx-link-stream.h), so the frame stays open, then a byte more every
0.5 s (a link that brings no bytes is dropped after the heartbeat
timeout, 3 s; any byte keeps it alive, but the frame must come at 64 KiB/s,
at most 15 s behind: rlx-frame-clock.h), never the last one. It reports the
rank's RSS (/proc/PID/status VmRSS) before, held (the median of the last
ten samples of HOLD seconds after the last byte went out, every 50 ms)
and its peak then (buffers that grow pass through a copy), the held
growth per connection, how many connections the rank refused (closed, or the send
failed), how long into the hold it closed them, and how many closes it
logged with their reason. A hold past the grace (--hold 20) shows the
deadline; RLX_LINK_FRAME_GRACE_MS in the environment reaches the rank.

Attacks (each against a fresh rank):
  control-64m   control lane, 64 MiB - 1 (the bulk lane's cap)
  control-1m    control lane, 1 MiB (RLX_LINK_MAX_CONTROL_FRAME)
  bulk-64m      bulk lane, 64 MiB - 1 (RLX_UNIX_LINK_DEFAULT_MAX_FRAME)
  bulk-16m      bulk lane, 16 MiB (RLX_WIRE_DEFAULT_MAX_FRAME: what a node's
                links take since they take what its parser does)
  both-64m      control-64m, then bulk-64m on the same connection
  both-caps     control-1m, then bulk-16m on the same connection
  unhandshaken  control lane, 64 MiB - 1, before the bus handshake
                (held until the bus's 5 s handshake timeout at most)

  scripts/frame-pin.py --rank build/tools/rlx-rank [--conns 4] [--hold 6]
      [--attacks control-64m,bulk-16m,…] [--json]
"""
import argparse
import glob
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
# name: ([(lane, announced bytes), …] on each connection, bus handshake first)
ATTACKS = {
    "control-64m": ([(0, 64 * MIB - 1)], True),
    "control-1m": ([(0, MIB)], True),
    "bulk-64m": ([(1, 64 * MIB - 1)], True),
    "bulk-16m": ([(1, 16 * MIB)], True),
    "both-64m": ([(0, 64 * MIB - 1), (1, 64 * MIB - 1)], True),
    "both-caps": ([(0, MIB), (1, 16 * MIB)], True),
    "unhandshaken": ([(0, 64 * MIB - 1)], False),
}
CHUNK = bytes(64 * 1024)


def word(lane, length, more=False):
    return struct.pack("<I", length | (1 << 29 if more else 0) | (1 << 30 if lane else 0))


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        got = s.recv(n - len(out))
        if not got:
            raise ConnectionError("closed")
        out += got
    return out


def closed_by_peer(s):
    """Whether the rank closed @s (what it sent before, its hello and
    heartbeats, is read and dropped)."""
    try:
        while True:
            if s.recv(65536, socket.MSG_DONTWAIT) == b"":
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def attack(args, name):
    frames, handshake = ATTACKS[name]
    trickles = int(args.hold / 0.5) + 1
    root = tempfile.mkdtemp(prefix="frame-pin-")
    env = dict(os.environ, XDG_RUNTIME_DIR=os.path.join(root, "run"),
               XDG_DATA_HOME=os.path.join(root, "data"))
    os.makedirs(env["XDG_RUNTIME_DIR"], mode=0o700)
    os.makedirs(env["XDG_DATA_HOME"], mode=0o700)
    err = open(os.path.join(root, "rank.err"), "wb")
    rank = subprocess.Popen([args.rank, "join", "--local", "--json", "--cohort", "pin",
                             "--backend", "cpu", "--threads", "1", "--wait-members", "2"],
                            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                            env=env)
    conns = []
    try:
        pattern = os.path.join(env["XDG_RUNTIME_DIR"], "rlx-cluster", "pin", "*.sock")
        deadline = time.monotonic() + 20
        while not glob.glob(pattern):
            if time.monotonic() > deadline or rank.poll() is not None:
                raise RuntimeError("the rank made no bus socket (see %s)" % err.name)
            time.sleep(0.05)
        path = glob.glob(pattern)[0]
        time.sleep(2.0)   # its start-up allocations settle
        before = 0
        for _ in range(10):
            before = max(before, rss_kb(rank.pid))
            time.sleep(0.05)
        refused = 0
        for i in range(args.conns):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            conns.append(s)
            if handshake:
                hello = ("rlx-bus/1 hello attacker-%d" % i).encode()
                s.sendall(word(0, len(hello)) + hello)
                w = struct.unpack("<I", recv_exact(s, 4))[0]
                reply = recv_exact(s, w & 0x1fffffff)
                if b" accept " not in reply:
                    raise RuntimeError("handshake declined: %r" % reply)
            try:
                for lane, size in frames:
                    # one record of all but the trickle's bytes and one,
                    # the frame left open (MORE), so the next frame's
                    # record can follow
                    left = size - 1 - trickles
                    s.sendall(word(lane, left, more=True))
                    while left > 0:
                        left -= s.send(CHUNK[:min(left, len(CHUNK))])
            except OSError:
                refused += 1
        peak = before
        samples = []
        start = time.monotonic()
        end = start + args.hold
        next_trickle = 0
        closed_after = {}
        while time.monotonic() < end:
            samples.append(rss_kb(rank.pid))
            peak = max(peak, samples[-1])
            for i, s in enumerate(conns):
                if i not in closed_after and closed_by_peer(s):
                    closed_after[i] = time.monotonic() - start
            if time.monotonic() >= next_trickle and trickles > 0:
                trickles -= 1
                # a byte more of the open frame every 0.5 s: bytes keep a
                # link alive, so the heartbeat timeout never drops it
                next_trickle = time.monotonic() + 0.5
                for s in conns:
                    try:
                        s.send(word(frames[-1][0], 1, more=True) + b"\0", socket.MSG_DONTWAIT)
                    except OSError:
                        pass
            time.sleep(0.05)
        held = sorted(samples[-10:])[len(samples[-10:]) // 2]
        closed = sum(1 for i, s in enumerate(conns) if i in closed_after or closed_by_peer(s))
        alive = rank.poll() is None
    finally:
        for s in conns:
            s.close()
        rank.send_signal(signal.SIGTERM)
        try:
            rank.wait(timeout=10)
        except subprocess.TimeoutExpired:
            rank.kill()
            rank.wait()
        err.close()
        with open(err.name, errors="replace") as f:
            logged = [l.strip() for l in f if " closed: " in l]
        shutil.rmtree(root, ignore_errors=True)
    return {"attack": name, "lane": "+".join("bulk" if l else "control" for l, _ in frames),
            "announced": sum(n for _, n in frames),
            "handshake": handshake, "conns": args.conns, "rss_before_kb": before,
            "rss_peak_kb": peak, "rss_held_kb": held,
            "held_per_conn_mib": (held - before) / 1024 / args.conns,
            "closed_by_rank": closed, "send_failed": refused, "rank_alive": alive,
            "closed_after_s": sorted(closed_after.values()),
            "logged": logged}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rank", required=True)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--hold", type=float, default=6.0)
    ap.add_argument("--attacks", default=",".join(ATTACKS))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [attack(args, a) for a in args.attacks.split(",")]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print("%-13s %-12s %10s %5s %30s %10s %8s %6s" % (
        "attack", "lanes", "bytes", "conns", "RSS before -> held (peak)", "held/conn",
        "refused", "logged"))
    for r in rows:
        print("%-13s %-12s %10d %5d %8.1f -> %6.1f (%6.1f) MB %6.1f MiB %5d/%d %6d" % (
            r["attack"], r["lane"], r["announced"], r["conns"], r["rss_before_kb"] / 1024,
            r["rss_held_kb"] / 1024, r["rss_peak_kb"] / 1024, r["held_per_conn_mib"],
            max(r["closed_by_rank"], r["send_failed"]), r["conns"], len(r["logged"])))
    for r in rows:
        if r["closed_after_s"]:
            print("%s: closed %.1f-%.1f s into the hold" % (
                r["attack"], r["closed_after_s"][0], r["closed_after_s"][-1]))
        for line in r["logged"][:1]:
            print("%s: %s" % (r["attack"], line))
    return 0 if all(r["rank_alive"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
