#!/usr/bin/env python3
"""A node that yielded in a merge never resumes the checkpoint of the branch
it discarded. In a 60-minute chaos run across namespace hosts a leader's
branch was discarded in a merge, but its host's checkpoint still held it
(step 385,401); the node, now a member of the kept group at 361,628, froze,
thawed alone, founded — and resumed that checkpoint, above its own state.
The kept group met it, counted fewer steps, and yielded in turn: 24,825 of
its committed steps discarded for a branch already discarded.

Three real ranks on the local bus, a 1 s heartbeat timeout; c has its own
data folder (its host's checkpoint), a and b share another. While the
partition file says "a b / c", c founds alone and trains fast, checkpointing
every 50 steps; a and b (each gradient 20 ms slower) found a group of two.
The partition goes: c yields to the larger group (`merged`) and follows a,
far below its own checkpoint's step. c is frozen past the timeout, a and b
are killed meanwhile, and c thaws alone: it must found on the state it holds
(no `resumed` of its discarded checkpoint), and commit on from there.
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
TO_MS = 1000


def main():
    root = tempfile.mkdtemp(prefix="rlx-disc-")
    rt = os.path.join(root, "rt")
    os.makedirs(rt, mode=0o700)
    part = os.path.join(root, "partition")
    with open(part, "w") as f:
        f.write("a b\nc\n")
    procs, events = {}, {}

    def reader(lab, p):
        for line in p.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            ev["_t"] = time.monotonic()
            events.setdefault(lab, []).append(ev)

    def find(lab, pred, since=0.0):
        return [e for e in events.get(lab, []) if e["_t"] >= since and pred(e)]

    def wait(lab, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = find(lab, pred)
            if got:
                return got[0]
            time.sleep(0.05)
        raise AssertionError("%s: not within %.0f s" % (what, timeout))

    def step_of(lab):
        s = [e["step"] for e in events.get(lab, []) if e.get("event") == "step"]
        return s[-1] if s else 0

    try:
        for lab, data, extra in (("c", "data-c", ["--wait-members", "1"]),
                                 ("a", "data-ab", ["--wait-members", "2", "--fault-slow-ms", "20"]),
                                 ("b", "data-ab", ["--wait-members", "1", "--fault-slow-ms", "20"])):
            env = dict(os.environ, XDG_RUNTIME_DIR=rt, XDG_DATA_HOME=os.path.join(root, data))
            env.pop("RLX_INVITE", None)
            env.pop("RLX_LINK_SHAPE", None)
            p = subprocess.Popen([RANK, "join", "--local", "--json", "--threads", "1", "--backend", "cpu",
                                  "--cohort", "disc", "--node", lab, "--batch", "8",
                                  "--heartbeat-timeout-ms", str(TO_MS), "--checkpoint-every", "50",
                                  "--fault-partition", part] + extra,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
            procs[lab] = p
            threading.Thread(target=reader, args=(lab, p), daemon=True).start()
            time.sleep(0.5)
        wait("c", lambda e: e.get("event") == "checkpoint" and e.get("step", 0) >= 1000, 60,
             "c checkpointing its own branch past step 1000")
        wait("a", lambda e: e.get("event") == "step" and e.get("members") == 2, 60,
             "a and b in a group of two")
        ckpt = max(e["step"] for e in find("c", lambda e: e.get("event") == "checkpoint"))
        os.unlink(part)
        merged = wait("c", lambda e: e.get("event") == "merged", 30, "c yielding to a's group")
        followed = wait("c", lambda e: e.get("event") == "step" and e.get("leader") == "a" and
                        e["_t"] >= merged["_t"], 30, "c following a after the merge")
        time.sleep(1.0)
        held = step_of("c")
        if held >= ckpt:
            raise AssertionError("c holds step %d, not below its checkpoint's %d: nothing to test"
                                 % (held, ckpt))
        os.kill(procs["c"].pid, signal.SIGSTOP)
        time.sleep(0.3)
        for lab in "ab":
            procs[lab].kill()
        time.sleep(2.5 * TO_MS / 1000)
        thaw = time.monotonic()
        os.kill(procs["c"].pid, signal.SIGCONT)
        led = wait("c", lambda e: e.get("event") == "leader" and e.get("node") == "c" and
                   e["_t"] >= thaw, 20, "c leading alone after its thaw")
        resumed = find("c", lambda e: e.get("event") == "resumed", merged["_t"])
        after = wait("c", lambda e: e.get("event") == "step" and e.get("leader") == "c" and
                     e["_t"] >= led["_t"], 20, "c committing alone")
        print("c's branch checkpointed at %d; merged at %s (discarded %s, %s-%s); held %d before its "
              "freeze; after its thaw it %s, first step %d" % (
                  ckpt, followed["step"], merged.get("discarded"), merged.get("from_step"),
                  merged.get("to_step"), held,
                  "resumed step %d" % resumed[0]["step"] if resumed else "resumed nothing",
                  after["step"]))
        bad = []
        if resumed:
            bad.append("c resumed its discarded checkpoint (step %d) over the %d it held"
                       % (resumed[0]["step"], held))
        if after["step"] >= ckpt or after["step"] < held:
            bad.append("c's first step alone, %d, is not on from the %d it held" % (after["step"], held))
        if bad:
            print("FAIL: " + "; ".join(bad))
            return 1
        print("ok")
        return 0
    except AssertionError as e:
        print("FAIL: %s" % e)
        for lab in "abc":
            for e in events.get(lab, [])[-8:]:
                print("   ", lab, {k: v for k, v in e.items() if k != "_t"})
        return 1
    finally:
        for p in procs.values():
            try:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            except OSError:
                pass
        for p in procs.values():
            p.wait()
        shutil.rmtree(root, ignore_errors=True)


if not os.access(RANK, os.X_OK):
    sys.exit("test-discarded-checkpoint.py: no rlx-rank at %s (set RLX_RANK)" % RANK)
sys.exit(main())
