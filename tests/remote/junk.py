#!/usr/bin/env python3
"""junk.py — send garbage to a signalling port or to UDP (ICE/QUIC) ports.

    junk.py tcp HOST PORT        junk bytes, a bad HTTP request, a WebSocket
                                 upgrade followed by junk frames, an endless
                                 header; then a proper request must still get
                                 an answer (the server survived)
    junk.py udp IP:PORT …        random datagrams, fake STUN, fake QUIC
                                 Initials; exits 1 if anything comes back
"""

import os
import random
import select
import socket
import struct
import sys
import time

rnd = random.Random(1234)


def tcp_case(host, port, payload, read=True):
    s = socket.create_connection((host, port), timeout=10)
    try:
        s.sendall(payload)
        if read:
            s.settimeout(10)
            try:
                while s.recv(65536):
                    pass
            except (socket.timeout, ConnectionResetError):
                pass
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        s.close()


def tcp(host, port):
    port = int(port)
    cases = [
        bytes(rnd.getrandbits(8) for _ in range(5000)) + b"\r\n\r\n",
        b"GET /rlx/signal HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET / HTTP/1.1\r\n" + b"X-Long: " + b"a" * 200000 + b"\r\n\r\n",
        (b"GET /rlx/signal HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n" +
         bytes(rnd.getrandbits(8) for _ in range(20000))),
    ]
    for c in cases:
        tcp_case(host, port, c)
    # The server still answers a plain request.
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    s.settimeout(10)
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    if b"404" not in data:
        print(f"the signalling server did not answer after the junk: {data[:200]!r}")
        sys.exit(1)
    print("tcp: junk sent, the server still answers")


def datagrams():
    out = []
    for i in range(150):
        n = rnd.randrange(1, 1400)
        out.append(bytes(rnd.getrandbits(8) for _ in range(n)))
    # Fake STUN binding requests (no valid integrity).
    for i in range(30):
        body = bytes(rnd.getrandbits(8) for _ in range(24))
        out.append(struct.pack("!HHI", 0x0001, len(body), 0x2112A442) + os.urandom(12) + body)
    # Fake QUIC v1 Initials.
    for i in range(30):
        pkt = bytes([0xc3, 0, 0, 0, 1, 8]) + os.urandom(8) + bytes([8]) + os.urandom(8) + \
            bytes([0, 0x44, 0xd0]) + os.urandom(1200)
        out.append(pkt)
    return out


def udp(targets):
    got = []
    socks = []
    for t in targets:
        ip, port = t.rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        for d in datagrams():
            try:
                s.sendto(d, (ip, int(port)))
            except BlockingIOError:
                pass
        socks.append((t, s))
    # Anything coming back within 1.5 s is an answer to junk (no wait on a
    # condition is possible for "nothing happens"; this window is bounded).
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        r, _, _ = select.select([s for _, s in socks], [], [], 0.1)
        for s in r:
            data, addr = s.recvfrom(65536)
            got.append((addr, len(data)))
    if got:
        print(f"udp: junk got answers: {got[:5]}")
        sys.exit(1)
    print(f"udp: {len(targets)} ports, no answer to junk")


if __name__ == "__main__":
    if sys.argv[1] == "tcp":
        tcp(sys.argv[2], sys.argv[3])
    else:
        udp(sys.argv[2:])
