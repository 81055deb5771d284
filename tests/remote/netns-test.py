#!/usr/bin/env python3
"""netns-test.py — cohorts across hosts, each host a network namespace.

    netns-test.py mesh      three hosts on a bridge, one of them behind NAT
                            (nftables masquerade), one running a second local
                            rank: one cohort, 200 steps at mixed precisions,
                            identical hashes; then the leader's host process is
                            killed and no committed step is lost
    netns-test.py cut       a host's link goes down (ip link set … down): it is
                            removed within the heartbeat timeout and the cohort
                            goes on; the link comes back and it rejoins by itself
    netns-test.py turn      a host that reaches the others only through a TURN
                            relay (coturn, started here) joins and trains
    netns-test.py stun      two hosts behind two different NATs pair with each
                            other through the addresses a STUN server (coturn)
                            told them (--stun): their private addresses are
                            unreachable from each other, so only server-
                            reflexive candidates can make that link
    netns-test.py hostile   a wrong key is refused with a message that says so
                            (it finds its key's room empty on the founder's
                            server) and nothing of it reaches the cohort;
                            garbage to the signalling port and to every QUIC
                            port gets nothing back and breaks nothing: both
                            ranks are alive right after it, no link drops, and
                            the cohort commits 20 more steps with both members
                            and one hash
    netns-test.py signal    `rlx-rank signal` serves alone and prints an invite
                            two hosts join and train with; a malformed invite
                            is refused showing the expected form

Needs root and `ip netns` (CI runs as root); otherwise it exits 77 (skip)
saying why. Namespaces are removed on every exit path.
"""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlxnet  # noqa: E402

RANK = rlxnet.rlx_rank()
PORT = 7400
HB_MS = 2000


def join_args(*extra, steps=200, precision="f32", json_out=True):
    a = [RANK, "join", "--backend", "cpu", "--threads", "1", "--steps", str(steps),
         "--precision", precision, "--heartbeat-timeout-ms", str(HB_MS), "--checkpoint-every", "0"]
    if json_out:
        a.append("--json")
    return a + list(extra)


def founder(net, host, cohort, *extra, **kw):
    h = net.hosts[host]
    p = net.spawn(f"{host}-founder", host,
                  join_args("--host", f"{h['ip']}:{PORT}", "--cohort", cohort, "--show-invite",
                            *extra, **kw))
    inv = p.wait_event("invite", 20)["invite"]
    assert inv.startswith(f"rlx://{h['ip']}:{PORT}/{cohort}#"), inv
    return p, inv


def check(cond, what, *procs):
    if not cond:
        detail = "\n".join(p.tail() for p in procs)
        raise AssertionError(f"{what}\n{detail}")


def final_hash(p):
    done = p.wait_event("done", 120)
    check(done.get("success"), f"{p.label} finished without success: {done}", p)
    return done["step"], done["hash"]


# ── mesh ──────────────────────────────────────────────────────────────────


def test_mesh():
    net = rlxnet.Net("mesh")
    net.host("h1", 1)
    net.host("h2", 2)
    net.natted_host("h3", 3, 78)
    cohort = "mesh"
    # Slow steps a little so the kill lands mid-run on a loaded machine too.
    slow = ["--fault-slow-ms", "5"]
    a, inv = founder(net, "h1", cohort, "--wait-members", "4", *slow, precision="f32")
    a2 = net.spawn("h1-local", "h1", join_args(inv, *slow, precision="f16"))
    b = net.spawn("h2", "h2", join_args(inv, *slow, precision="f8e4m3"))
    c = net.spawn("h3-natted", "h3", join_args(inv, *slow, precision="f8e5m2"))
    procs = [a, a2, b, c]

    # Everyone is in, over the right kind of link.
    a.wait_event("step", 60, key="members", minimum=4)
    ids = {p.label: p.node_id() for p in procs}
    check(all(ids.values()), f"every node joined: {ids}", *procs)
    # The second rank on h1 reaches the founder over the local bus, never remotely.
    check(not a.find("link-up", where=lambda e: e["node"] == ids["h1-local"]),
          "the second local rank came over the local bus, not a remote link", a)
    # The natted host's peers see it from the router's address (masquerade).
    # (A cohort can count a member before every pair of its members is linked.)
    up = b.wait_event("link-up", 60, where=lambda e: e["node"] == ids["h3-natted"])
    check("10.77.0.3" in up["path"], f"h2 reaches h3 through its NAT: {up}", b, c)

    # Kill the leader's host process mid-run.
    a.wait_event("step", 60, key="step", minimum=40)
    a.kill(signal.SIGKILL)
    a.wait_exit(10)
    killed = a.step_hashes()
    last = max(killed)
    survivors = [a2, b, c]
    results = [final_hash(p) for p in survivors]
    check(len({r for r in results}) == 1, f"identical final hashes: {results}", *survivors)
    check(results[0][0] >= 200, f"200 steps: {results}", *survivors)
    for p in survivors:
        mine = p.step_hashes()
        lost = [s for s in killed if s not in mine or mine[s] != killed[s]]
        check(not lost, f"{p.label} lost or changed steps the killed leader committed: "
              f"{lost[:5]} (its last was {last})", p)
        steps = [e["step"] for e in p.find("step")]
        check(steps == sorted(steps), f"{p.label}'s steps never go back: {steps[-20:]}", p)
    for p in survivors:
        check(p.wait_exit(30) == 0, f"{p.label} exits 0", p)
    print(f"mesh: 4 ranks on 3 hosts (one natted), leader killed after step {last}, "
          f"{results[0][0]} steps, hash {results[0][1]} everywhere")
    net.close()


# ── cut ───────────────────────────────────────────────────────────────────


def test_cut():
    net = rlxnet.Net("cut")
    for i, h in enumerate(("h1", "h2", "h3"), 1):
        net.host(h, i)
    slow = ["--fault-slow-ms", "5"]
    a, inv = founder(net, "h1", "cut", "--wait-members", "3", *slow, steps=100000)
    b = net.spawn("h2", "h2", join_args(inv, *slow, steps=100000))
    c = net.spawn("h3", "h3", join_args(inv, *slow, steps=100000))
    a.wait_event("step", 60, key="members", minimum=3)
    cid = c.node_id()

    net.link("h3", False)
    t0 = time.monotonic()
    left = a.wait_event("member-left", 30, where=lambda e: e["node"] == cid)
    took = time.monotonic() - t0
    # Within the heartbeat timeout (plus scheduling slack on a loaded machine).
    check(took <= HB_MS / 1000 + 3, f"h3 removed {took:.1f} s after its link went down "
          f"(heartbeat timeout {HB_MS} ms): {left}", a)
    # The cohort goes on without it.
    n = len(a.find("step"))
    a.wait_for(lambda evs: len([e for e in evs if e.get("event") == "step"]) >= n + 20, 30,
               "20 more steps without h3")

    net.link("h3", True)
    t1 = time.monotonic()
    try:
        a.wait_event("member-joined", 90,
                     where=lambda e: e["node"] == cid and e["step"] > left["step"])
    except TimeoutError as e:
        # What the cut host itself saw (its events other than steps, and
        # its last lines): the founder's view alone does not say why.
        with c.cond:
            seen = [x for x in c.events if x.get("event") != "step"]
        raise TimeoutError(f"{e}\n--- h3's events other than steps:\n" +
                           "\n".join(json.dumps(x) for x in seen[-40:]) +
                           f"\n{c.tail(30)}") from None
    back = time.monotonic() - t1
    b.wait_event("member-joined", 60, where=lambda e: e["node"] == cid and e["step"] > left["step"])
    # And it contributes again, on the cohort's parameters.
    c.wait_event("step", 60, where=lambda e: e.get("contributed") and e["step"] > left["step"])
    print(f"cut: h3 removed {took:.1f} s after its link went down, back {back:.1f} s after it "
          "came up")
    for p in (a, b, c):
        p.kill(signal.SIGTERM)
    net.close()


# ── turn ──────────────────────────────────────────────────────────────────


def start_coturn(net, host):
    ip = net.hosts[host]["ip"]
    conf = os.path.join(net.dir, "turnserver.conf")
    with open(conf, "w") as f:
        f.write(f"listening-ip={ip}\nrelay-ip={ip}\nlistening-port=3478\n"
                "lt-cred-mech\nuser=rlx:secret\nrealm=rlx\nno-tls\nno-dtls\nno-cli\n"
                "min-port=49152\nmax-port=49400\nfingerprint\nno-multicast-peers\n"
                "simple-log\nlog-file=stdout\nallow-loopback-peers\n"
                f"pidfile={net.dir}/turnserver.pid\nuserdb={net.dir}/turndb\n")
    p = net.spawn("coturn", host, ["turnserver", "-c", conf, "-n"] if False else
                  ["turnserver", "-c", conf])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        r = subprocess.run(["ip", "netns", "exec", net.hosts[host]["ns"], "ss", "-lun"],
                           capture_output=True, text=True).stdout
        if f"{ip}:3478" in r:
            return p, ip
        time.sleep(0.1)
    raise TimeoutError("coturn did not listen on UDP 3478 within 15 s\n" + p.tail())


def test_turn():
    net = rlxnet.Net("turn")
    net.host("h1", 1)
    net.host("h2", 2)
    net.host("relay", 10)
    net.host("h4", 4)
    coturn, turn_ip = start_coturn(net, "relay")
    # h4 can reach only the TURN server (UDP) and the signalling port (TCP).
    net.firewall("h4", [(turn_ip, "udp", 3478), ("10.77.0.1", "tcp", PORT)])
    # The password never in the arguments: a file (0600) for the founder,
    # RLX_TURN_PASSWORD for the others.
    turn = ["--turn", f"{turn_ip}:3478", "--turn-user", "rlx"]
    pw_file = os.path.join(net.dir, "turn-password")
    with open(os.open(pw_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write("secret\n")
    a, inv = founder(net, "h1", "turn", "--wait-members", "3", *turn,
                     "--turn-password-file", pw_file, steps=200)
    os.environ["RLX_TURN_PASSWORD"] = "secret"
    try:
        b = net.spawn("h2", "h2", join_args(inv, *turn, steps=200))
        d = net.spawn("h4-turn-only", "h4", join_args(inv, *turn, "--relay-only", steps=200))
    finally:
        del os.environ["RLX_TURN_PASSWORD"]
    a.wait_event("step", 90, key="members", minimum=3)
    did = d.node_id()
    ups = a.find("link-up", where=lambda e: e["node"] == did)
    check(ups and "relay" in ups[0]["path"] or ups and turn_ip in ups[0]["path"],
          f"h1 reaches h4 through the relay: {ups}", a, d)
    results = [final_hash(p) for p in (a, b, d)]
    check(len(set(results)) == 1, f"identical hashes with a TURN-only host: {results}", a, b, d)
    print(f"turn: h4 (TURN only) trained {results[0][0]} steps, hash {results[0][1]} everywhere")
    coturn.kill(signal.SIGTERM)
    net.close()


# ── stun ──────────────────────────────────────────────────────────────────


def test_stun():
    net = rlxnet.Net("stun")
    net.host("h1", 1)
    net.host("stun", 10)
    # Two hosts behind two NATs: 10.78.0.2 and 10.79.0.2 are not routed on
    # the switch, so neither can reach the other's host candidate, and no
    # check from one reaches the other to teach it a peer-reflexive one: only
    # the public addresses STUN reports can pair them. (Full-cone NATs, so
    # pairing does not hang on which check leaves first; see rlxnet.)
    net.natted_host("h2", 2, 78, full_cone=True)
    net.natted_host("h3", 3, 79, full_cone=True)
    coturn, stun_ip = start_coturn(net, "stun")
    stun = ["--stun", f"{stun_ip}:3478"]
    a, inv = founder(net, "h1", "stun", "--wait-members", "3", *stun, steps=120)
    b = net.spawn("h2-natted", "h2", join_args(inv, *stun, steps=120))
    c = net.spawn("h3-natted", "h3", join_args(inv, *stun, steps=120))
    a.wait_event("step", 90, key="members", minimum=3)
    cid = c.node_id()
    bid = b.node_id()
    # The natted hosts reach each other at their routers' addresses (the
    # server-reflexive ones STUN gave them, or the peer-reflexive one the
    # first check through the NAT revealed: same address and port).
    up_b = b.wait_event("link-up", 60, where=lambda e: e["node"] == cid)
    up_c = c.wait_event("link-up", 60, where=lambda e: e["node"] == bid)
    check("10.77.0.3" in up_b["path"] and "10.77.0.2" in up_c["path"],
          f"h2 and h3 pair through their NATs' public addresses: {up_b} / {up_c}", b, c)
    results = [final_hash(p) for p in (a, b, c)]
    check(len(set(results)) == 1 and results[0][0] >= 120,
          f"identical hashes with two natted hosts: {results}", a, b, c)
    print(f"stun: two hosts behind two NATs paired via STUN ({up_b['path']}), "
          f"{results[0][0]} steps, hash {results[0][1]} everywhere")
    coturn.kill(signal.SIGTERM)
    net.close()


# ── hostile ───────────────────────────────────────────────────────────────


def test_hostile():
    net = rlxnet.Net("hostile")
    net.host("h1", 1)
    net.host("h2", 2)
    net.host("evil", 66)
    a, inv = founder(net, "h1", "hostile", "--wait-members", "2", steps=100000)
    b = net.spawn("h2", "h2", join_args(inv, steps=100000))
    a.wait_event("step", 60, key="members", minimum=2)

    # A wrong key: same cohort, same server, another key.
    head, key = inv.split("#")
    wrong = head + "#" + ("A" if key[0] != "A" else "B") + key[1:-1] + "A"
    m = net.spawn("evil-wrong-key", "evil", join_args(wrong, steps=100000, json_out=False))
    rc = m.wait_exit(30)
    err = open(m.errpath).read()
    check(rc == 1 and "key" in err and "invite" in err,
          f"a wrong key is refused with a message that says so (rc {rc}): {err}", m)
    # Its key names another room: nothing of it reaches the founder.
    check(not a.find("rejected"), "nothing of the wrong key reaches the founder", a)

    # Garbage to the signalling port: raw TCP junk, a bad WebSocket, huge headers.
    evil_ns = net.hosts["evil"]["ns"]
    junk_tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "junk.py")
    subprocess.run(["ip", "netns", "exec", evil_ns, sys.executable, junk_tool, "tcp",
                    net.hosts["h1"]["ip"], str(PORT)], check=True, timeout=60)
    # Garbage to every UDP port the ranks listen on (ICE/QUIC): nothing comes back.
    ports = set()
    for host in ("h1", "h2"):
        out = subprocess.run(["ip", "netns", "exec", net.hosts[host]["ns"], "ss", "-lunp"],
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            if "rlx-rank" in line:
                addr = line.split()[3]
                ip, port = addr.rsplit(":", 1)
                if ip.startswith("10.77."):
                    ports.add((ip, int(port)))
    check(ports, "found the ranks' UDP ports", a, b)
    r = subprocess.run(["ip", "netns", "exec", evil_ns, sys.executable, junk_tool, "udp"] +
                       [f"{ip}:{port}" for ip, port in sorted(ports)],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"garbage to UDP ports got no answer: {r.stdout}{r.stderr}", a, b)
    # (That check waits a bounded 1.5 s for answers: "nothing happens" has no
    # event to wait on. What follows does.)

    # The ranks survived the junk...
    check(a.p.poll() is None and b.p.poll() is None, "both ranks still run after the junk", a, b)
    # ... and the cohort is unharmed: it keeps committing with both members,
    # on one hash, without losing its link.
    n = len(a.find("step"))
    a.wait_for(lambda evs: len([e for e in evs if e.get("event") == "step"
                                and e.get("members") == 2]) >= n + 20, 30,
               "20 more steps with both members after the abuse")
    after = [e["step"] for e in a.find("step")][n:]
    b.wait_event("step", 30, key="step", minimum=after[-1])
    ha, hb = a.step_hashes(), b.step_hashes()
    check(all(ha[s] == hb.get(s) for s in after if s in hb) and
          sum(1 for s in after if s in hb) >= 15,
          f"one hash on both ranks after the junk: {[(s, ha[s], hb.get(s)) for s in after[:5]]}",
          a, b)
    for p in (a, b):
        check(not p.find("member-left") and not p.find("link-failed"),
              f"{p.label} lost no member or link to the junk: "
              f"{p.find('member-left') + p.find('link-failed')}", p)
    check(a.p.poll() is None and b.p.poll() is None, "both ranks still run", a, b)
    print(f"hostile: wrong key refused, junk to signalling and {len(ports)} UDP ports answered "
          "by nothing, cohort unharmed")
    for p in (a, b):
        p.kill(signal.SIGTERM)
    net.close()


# ── signal ────────────────────────────────────────────────────────────────


def test_signal():
    net = rlxnet.Net("signal")
    net.host("sig", 9)
    net.host("h1", 1)
    net.host("h2", 2)
    # A standalone signalling server prints an invite; no node serves.
    s = net.spawn("signal", "sig", [RANK, "signal", "--port", str(PORT), "--cohort", "standalone",
                                    "--json", "--show-invite"])
    inv = s.wait_event("serving", 20)["invite"]
    check(inv.startswith(f"rlx://10.77.0.9:{PORT}/standalone#"), f"the server's invite: {inv}", s)
    # Whichever reaches the empty room first founds the cohort: both wait for two.
    a = net.spawn("h1", "h1", join_args(inv, "--wait-members", "2", steps=60))
    b = net.spawn("h2", "h2", join_args(inv, "--wait-members", "2", steps=60))
    results = [final_hash(p) for p in (a, b)]
    check(len(set(results)) == 1 and results[0][0] >= 60, f"one hash: {results}", a, b)
    check(s.find("joined"), "the server saw the joins", s)
    # A malformed invite is refused with the expected form, exit status 2.
    bad = net.spawn("bad-invite", "h1", join_args(inv.split("#")[0] + "#short", json_out=False))
    rc = bad.wait_exit(30)
    err = open(bad.errpath).read()
    check(rc == 2 and "rlx://HOST:PORT/COHORT#KEY" in err, f"a bad invite (rc {rc}): {err}", bad)
    print(f"signal: two nodes joined through `rlx-rank signal`, {results[0][0]} steps, "
          f"hash {results[0][1]}; a malformed invite refused with the form")
    s.kill(signal.SIGTERM)
    net.close()


TESTS = {"mesh": test_mesh, "cut": test_cut, "turn": test_turn, "stun": test_stun,
         "hostile": test_hostile, "signal": test_signal}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in TESTS:
        print(f"usage: {sys.argv[0]} {' | '.join(TESTS)}", file=sys.stderr)
        sys.exit(2)
    rlxnet.need_root_and_netns()
    if sys.argv[1] in ("turn", "stun") and subprocess.run(["which", "turnserver"],
                                                capture_output=True).returncode != 0:
        print("SKIP: coturn (turnserver) is not installed (scripts/deps.sh installs it)")
        sys.exit(rlxnet.SKIP)
    random.seed(1)
    TESTS[sys.argv[1]]()
