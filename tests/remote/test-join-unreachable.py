#!/usr/bin/python3
"""`rlx-rank join INVITE` where nothing listens founds no cohort: it exits
non-zero with the reason (the invite's host unreachable), with no leader
event, no "joined" event and no checkpoint. (Before: after 30 s it "started
alone" and trained as the leader of a new cohort named by the invite.)

Environment: RLX_RANK (rlx-rank).
"""
import json
import os
import socket
import subprocess
import sys
import tempfile


def free_port():
    """A TCP port on 127.0.0.1 where nothing listens (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    rank = os.environ["RLX_RANK"]
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        for d in ("runtime", "data", "state", "config", "cache"):
            os.mkdir(os.path.join(tmp, d), 0o700)
        env.update(XDG_RUNTIME_DIR=f"{tmp}/runtime", XDG_DATA_HOME=f"{tmp}/data",
                   XDG_STATE_HOME=f"{tmp}/state", XDG_CONFIG_HOME=f"{tmp}/config",
                   XDG_CACHE_HOME=f"{tmp}/cache")
        port = free_port()
        invite = f"rlx://127.0.0.1:{port}/nowhere#00112233445566778899aabbccddeeff"
        p = subprocess.run([rank, "join", "--json", "--steps", "5", invite], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        names = [e.get("event") for e in events]
        ckpts = [os.path.join(d, f) for d, _, fs in os.walk(f"{tmp}/data") for f in fs
                 if f.endswith(".safetensors")]
        problems = []
        if p.returncode == 0:
            problems.append("it exited 0")
        if "leader" in names or "joined" in names or "step" in names:
            problems.append(f"it founded a cohort (events: {sorted(set(names))})")
        if ckpts:
            problems.append(f"it wrote a checkpoint: {ckpts}")
        if "could not join the cohort nowhere" not in p.stderr or \
           f"127.0.0.1:{port}" not in p.stderr or "nothing was founded" not in p.stderr:
            problems.append("its message does not say why (the host, the cohort, nothing founded)")
        unreachable = [e for e in events if e.get("event") == "signalling"]
        if not unreachable or any(e.get("state") != "unreachable" or
                                  e.get("server") != f"127.0.0.1:{port}" for e in unreachable):
            problems.append(f"its signalling events do not say the host is unreachable: "
                            f"{unreachable[:2]}")
        if problems:
            print(f"rlx-rank join {invite} (exit {p.returncode}):", "; ".join(problems))
            print("stdout:", p.stdout[-3000:])
            print("stderr:", p.stderr[-3000:])
            return 1
        print(f"ok: exit {p.returncode}, {len(unreachable)} unreachable events, nothing founded:"
              f" {p.stderr.strip()}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
