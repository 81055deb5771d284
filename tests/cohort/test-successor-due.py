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
times a out at 0.6 s and follows s at a's term; its heartbeat reaches s by
~1.4 s. In each of ATTEMPTS attempts s leads within TAKEOVER_S of a's
freeze (before the change: at its own 2.4 s + 0.3 s, after m had given up
waiting at 1.8 s and looked for its cohort again), and m follows s without
rejoining.
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


def attempt(root, n):
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
            p = subprocess.Popen([RANK, "join", "--local", "--json", "--threads", "1", "--backend", "cpu",
                                  "--cohort", "due", "--node", lab, "--batch", "8",
                                  "--heartbeat-timeout-ms", str(TO_MS), "--checkpoint-every", "0",
                                  "--wait-members", "3" if i == 0 else "1"],
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
        os.kill(procs["a"].pid, signal.SIGSTOP)
        frozen = time.monotonic()
        time.sleep(4)
        ev = {lab: [e for e in events.get(lab, []) if e["_t"] >= frozen] for lab in "sm"}
        led = [e["_t"] - frozen for e in ev["s"] if e.get("event") == "leader" and
               e.get("node") == "s" and e.get("term", 0) > term]
        rejoined = [e for e in ev["m"] if e.get("event") == "rejoining"]
        notable = [(round(e["_t"] - frozen, 2), lab, e.get("event"), e.get("node"), e.get("term"),
                    (e.get("reason") or e.get("message") or "")[:90])
                   for lab in "sm" for e in ev[lab]
                   if e.get("event") in ("rejoining", "member-left", "leader", "joined", "error")]
        return (led[0] if led else None), rejoined, sorted(notable)
    finally:
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
        led, rejoined, notable = attempt(root, n)
        bad = []
        if led is None or led > TAKEOVER_S:
            bad.append("s did not lead within %.1f s of a's freeze (%s)" % (
                TAKEOVER_S, "at %.2f s" % led if led is not None else "not within 4 s"))
        if rejoined:
            bad.append("m rejoined instead of following s: %s" % (
                rejoined[0].get("reason") or "")[:120])
        print("attempt %d: s led %s after a froze%s" % (
            n, "%.2f s" % led if led is not None else "never", ": " + "; ".join(bad) if bad else ""))
        if bad:
            fails += 1
            for x in notable:
                print("   ", x)
finally:
    shutil.rmtree(root, ignore_errors=True)
if fails:
    print("FAIL: %d of %d attempts" % (fails, ATTEMPTS))
    sys.exit(1)
print("ok: %d attempts" % ATTEMPTS)
