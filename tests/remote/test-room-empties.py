#!/usr/bin/python3
"""A joiner whose welcome listed a node that then leaves the room founds
once the room is empty, instead of giving up after its 30 s join timeout
("no member could be reached"; a netns chaos run's final resume check,
spawned as a cut of its host ended, failed so: the server still listed
nodes killed behind the cut until its pong timeout).

A standalone `rlx-rank signal` on 127.0.0.1; a founds there (alone in the
room) and is frozen; b joins (its welcome lists a, who cannot answer); a is
killed, so its signalling connection closes and the server says it left.
b must report `signalling` "empty" and lead within 10 s of the kill, and
exit 0 after its steps. (Before: it waited the 30 s out and exited 1.)

Environment: RLX_RANK (rlx-rank).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    """A TCP port on 127.0.0.1 where nothing listens (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(tmp, name):
    env = dict(os.environ)
    env.pop("RLX_INVITE", None)
    for d in ("runtime", "data", "state", "config", "cache"):
        os.makedirs(os.path.join(tmp, name, d), 0o700)
    env.update(XDG_RUNTIME_DIR=f"{tmp}/{name}/runtime", XDG_DATA_HOME=f"{tmp}/{name}/data",
               XDG_STATE_HOME=f"{tmp}/{name}/state", XDG_CONFIG_HOME=f"{tmp}/{name}/config",
               XDG_CACHE_HOME=f"{tmp}/{name}/cache")
    return env


def spawn(argv, env, events, lab):
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def read():
        for line in p.stdout:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            e["_t"] = time.monotonic()
            events.setdefault(lab, []).append(e)
    threading.Thread(target=read, daemon=True).start()
    return p


def wait(events, lab, pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for e in events.get(lab, []):
            if pred(e):
                return e
        time.sleep(0.05)
    return None


def main():
    rank = os.environ["RLX_RANK"]
    events, procs = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            sig = spawn([rank, "signal", "--port", str(free_port()), "--address", "127.0.0.1", "--cohort", "empties",
                         "--json", "--show-invite"], env_for(tmp, "sig"), events, "sig")
            procs.append(sig)
            serving = wait(events, "sig", lambda e: e.get("event") == "serving", 20)
            if serving is None:
                print("FAIL: the signalling server did not serve")
                return 1
            inv = os.path.join(tmp, "invite")
            fd = os.open(inv, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(serving["invite"] + "\n")
            join = [rank, "join", "--invite-file", inv, "--json", "--threads", "1", "--backend", "cpu",
                    "--batch", "8"]
            a = spawn(join, env_for(tmp, "a"), events, "a")
            procs.append(a)
            if wait(events, "a", lambda e: e.get("event") == "step", 30) is None:
                print("FAIL: a did not found and step alone in the room")
                return 1
            os.kill(a.pid, signal.SIGSTOP)
            b = spawn(join + ["--steps", "30"], env_for(tmp, "b"), events, "b")
            procs.append(b)
            welcome = wait(events, "b", lambda e: e.get("event") == "signalling" and
                           e.get("state") == "joined", 20)
            if welcome is None or welcome.get("peers", 0) < 1:
                print("FAIL: b's welcome did not list a (%s)" % welcome)
                return 1
            time.sleep(1.0)
            os.kill(a.pid, signal.SIGKILL)
            killed = time.monotonic()
            empty = wait(events, "b", lambda e: e.get("event") == "signalling" and
                         e.get("state") == "empty", 10)
            led = wait(events, "b", lambda e: e.get("event") == "leader", 10)
            try:
                rc = b.wait(timeout=60)
            except subprocess.TimeoutExpired:
                rc = None
            done = wait(events, "b", lambda e: e.get("event") == "done", 1)
            print("b: welcome listed %d; empty %s; led %s; exit %s (%s)" % (
                welcome.get("peers", 0),
                "%.2f s after the kill" % (empty["_t"] - killed) if empty else "never",
                "%.2f s after the kill" % (led["_t"] - killed) if led else "not within 10 s",
                rc, (done or {}).get("message", "no done event")))
            if empty is None or led is None or rc != 0:
                print("FAIL: b did not found once the room emptied")
                return 1
            print("ok")
            return 0
        finally:
            for p in procs:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    p.kill()
                except OSError:
                    pass
                p.wait()


sys.exit(main())
