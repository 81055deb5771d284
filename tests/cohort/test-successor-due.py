#!/usr/bin/env python3
"""The next in line takes over once a member that lost the leader waits for
it and the leader has been silent for the plain heartbeat timeout there too
— not only once its own timeout for the leader passes, which a slow link
stretches (8 × the link's round trip, 4 × a gap it saw). In a 300 s chaos
run across namespace hosts (seed 7) the members timed a frozen leader out
and waited for the next in line, whose timeout for it was longer: it had
not taken over 2.1 s into the freeze, when it froze in turn, and the cohort
stood still 3.5 s.

Three real ranks on the local bus, a 600 ms heartbeat timeout: a founds, s
(next in line) joins with RLX_LINK_SHAPE delay=300ms on what it receives (a
round trip of ~300 ms: its timeout for a is 2.4 s), then m. a freezes. m
times a out at 0.6 s and follows s at a's term; its next heartbeat reaches
s 0.3 s later. In each of ATTEMPTS attempts s leads within TAKEOVER_S of a's
freeze (before the change: at its own 2.4 s + 0.3 s, after m had given up
waiting at 1.8 s and looked for its cohort again), says why (m waits for
it), and m follows s without rejoining.

And a leader that lives keeps its place, s never leading and a committing
on for 4 s: with m's link to a cut alone (--fault-partition "m: m s"), m
loses a and waits for s (a drops m from its roster, and s counts m no
more); and with m's heartbeats saying from the start that it follows s
(--fault-claim-follows s: s hears it before a's roster without m comes,
and only the leader's silence stops it — taking over at once failed here).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

RANK = os.environ.get("RLX_RANK", "build/tools/rlx-rank")
TO_MS = 600
DELAY_MS = 300
TAKEOVER_S = 2.0
ATTEMPTS = int(os.environ.get("RLX_SUCCESSOR_ATTEMPTS", "3"))


def attempt(root, n, cut=False, claim=False):
    part = os.path.join(root, "partition%d" % n)
    rt = os.path.join(root, "rt%d" % n)
    data = os.path.join(root, "data%d" % n)
    os.makedirs(rt, mode=0o700)
    os.makedirs(data)
    procs, events = {}, {}

    def reader(lab, p):
        for line in p.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            ev["_t"] = time.monotonic()
            events.setdefault(lab, []).append(ev)
    try:
        for i, lab in enumerate("asm"):
            env = dict(os.environ, XDG_RUNTIME_DIR=rt, XDG_DATA_HOME=data)
            env.pop("RLX_INVITE", None)
            env.pop("RLX_LINK_SHAPE", None)
            if lab == "s":
                env["RLX_LINK_SHAPE"] = "delay=%dms" % DELAY_MS
            extra = ["--fault-claim-follows", "s"] if claim and lab == "m" else []
            p = subprocess.Popen([RANK, "join", "--local", "--json", "--threads", "1", "--backend", "cpu",
                                  "--cohort", "due", "--node", lab, "--batch", "8",
                                  "--heartbeat-timeout-ms", str(TO_MS), "--checkpoint-every", "0",
                                  "--fault-partition", part,
                                  "--wait-members", "3" if i == 0 else "1"] + extra,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
            procs[lab] = p
            threading.Thread(target=reader, args=(lab, p), daemon=True).start()
            time.sleep(1.0)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(
                any(e.get("event") == "step" for e in events.get(lab, [])) for lab in "asm"):
            time.sleep(0.2)
        if not all(any(e.get("event") == "step" for e in events.get(lab, [])) for lab in "asm"):
            return None, None, ["the three ranks did not all step within 30 s"]
        time.sleep(3)       # s's round trip estimate settles
        term = max((e.get("term", 0) for e in events.get("m", []) if e.get("event") == "leader"),
                   default=0)
        if claim:
            pass
        elif cut:
            with open(part + ".tmp", "w") as f:
                f.write("m: m s\n")
            os.rename(part + ".tmp", part)
        else:
            os.kill(procs["a"].pid, signal.SIGSTOP)
        frozen = time.monotonic()
        time.sleep(4)
        ev = {lab: [e for e in events.get(lab, []) if e["_t"] >= frozen] for lab in "asm"}
        led = [e["_t"] - frozen for e in (events.get("s", []) if claim else ev["s"])
               if e.get("event") == "leader" and e.get("node") == "s" and
               (claim or e.get("term", 0) > term)]
        why = [e.get("reason") or "" for e in ev["s"] if e.get("event") == "member-left" and
               e.get("node") == "a"]
        rejoined = [e for e in ev["m"] if e.get("event") == "rejoining"]
        notable = [(round(e["_t"] - frozen, 2), lab, e.get("event"), e.get("node"), e.get("term"),
                    (e.get("reason") or e.get("message") or "")[:90])
                   for lab in "asm" for e in ev[lab]
                   if e.get("event") in ("rejoining", "member-left", "leader", "joined", "error")]
        if cut or claim:
            waited = claim or any(e.get("event") == "leader" and e.get("node") == "s" for e in ev["m"])
            late = [e["_t"] - frozen for e in ev["a"] if e.get("event") == "step" and
                    e.get("leader") == "a"]
            return (led[0] if led else None), waited, (late[-1] if late else None), sorted(notable)
        return (led[0] if led else None), rejoined, why, sorted(notable)
    finally:
        try:
            os.unlink(part)
        except OSError:
            pass
        for p in procs.values():
            try:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            except OSError:
                pass
        for p in procs.values():
            p.wait()


if not os.access(RANK, os.X_OK):
    sys.exit("test-successor-due.py: no rlx-rank at %s (set RLX_RANK)" % RANK)
root = tempfile.mkdtemp(prefix="rlx-due-")
fails = 0
try:
    for n in range(ATTEMPTS):
        led, rejoined, why, notable = attempt(root, n)
        bad = []
        if led is None or led > TAKEOVER_S:
            bad.append("s did not lead within %.1f s of a's freeze (%s)" % (
                TAKEOVER_S, "at %.2f s" % led if led is not None else "not within 4 s"))
        elif not any("waits for this node" in w for w in why):
            bad.append("s timed a out on its own timeout, not for m's wait: %s" % why)
        if rejoined:
            bad.append("m rejoined instead of following s: %s" % (
                rejoined[0].get("reason") or "")[:120])
        print("attempt %d: s led %s after a froze%s" % (
            n, "%.2f s" % led if led is not None else "never", ": " + "; ".join(bad) if bad else ""))
        if bad:
            fails += 1
            for x in notable:
                print("   ", x)
    for n, mode in enumerate(["cut", "claim", "claim"], ATTEMPTS):
        led, waited, last, notable = attempt(root, n, cut=mode == "cut", claim=mode == "claim")
        bad = []
        if led is not None:
            bad.append("s led (%.2f s from the mark) while a lived: %s" % (
                led, "m alone was cut from a" if mode == "cut" else "m's heartbeats said it "
                "followed s from the start"))
        if not waited:
            bad.append("m never waited for s (the cut did not act)")
        if last is None or last < 3.0:
            bad.append("a stopped committing (last step %s)" % (
                "%.2f s after the mark" % last if last is not None else "none after the mark"))
        print("%s %d: m %s for s; s %s; a's last commit %s s after the mark%s" % (
            mode, n, "waited" if waited else "did not wait", "led" if led is not None else "did not lead",
            "%.2f" % last if last is not None else "-", ": " + "; ".join(bad) if bad else ""))
        if bad:
            fails += 1
            for x in notable:
                print("   ", x)
finally:
    shutil.rmtree(root, ignore_errors=True)
if fails:
    print("FAIL: %d of %d attempts" % (fails, ATTEMPTS))
    sys.exit(1)
print("ok: %d freezes of the leader, 3 runs with it alive" % ATTEMPTS)
