"""rlxnet — network namespaces as hosts, and rlx-rank processes on them.

Used by tests/remote/netns-test.py (CI) and scripts/bench-remote.py.

A Net owns a set of namespaces named rlxt-PID-NAME: a "switch" namespace
holding a bridge, and hosts attached to it by veth pairs (10.77.0.0/24), or
behind a NAT router (nftables masquerade) on their own subnet. Everything is
torn down by Net.close(), which also runs from atexit and on SIGTERM/SIGINT,
and namespaces left behind by a dead run (its PID gone) are removed first.

A Proc is one process in a namespace whose stdout is read on a thread, line
by line; JSON lines become events. Every wait has a timeout and raises
TimeoutError saying what it waited for.
"""

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
PREFIX = "rlxt-"


def need_root_and_netns():
    """Exit with the skip status and a reason when these tests cannot run."""
    if os.geteuid() != 0:
        print("SKIP: network-namespace tests need root (CI runs as root)")
        sys.exit(SKIP)
    if shutil.which("ip") is None:
        print("SKIP: the 'ip' command (iproute2) is not installed")
        sys.exit(SKIP)
    probe = f"{PREFIX}probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"SKIP: 'ip netns add' does not work here: {r.stderr.strip()}")
        sys.exit(SKIP)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def sh(*args, check=True, ns=None, quiet=False):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return r.stdout


def remove_stale_namespaces():
    """Namespaces of earlier runs whose process is gone."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = re.match(rf"{PREFIX}(\d+)-", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


class Proc:
    """One process in a namespace; JSON lines on stdout become events."""

    def __init__(self, net, label, ns, argv, env):
        self.label = label
        self.ns = ns
        self.events = []
        self.times = []
        self.lines = []
        self.cond = threading.Condition()
        self.spawned = time.monotonic()
        self.eof = False
        cmd = ["ip", "netns", "exec", ns] + argv if ns else argv
        self.errpath = os.path.join(net.dir, f"{label}.stderr")
        self.errf = open(self.errpath, "w")
        self.outf = open(os.path.join(net.dir, f"{label}.stdout"), "w")
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.errf, env=env,
                                  text=True, bufsize=1, start_new_session=True)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            now = time.monotonic()
            ev = None
            if line.startswith("{"):
                try:
                    ev = json.loads(line)
                except ValueError:
                    ev = None
            self.outf.write(line)
            self.outf.flush()
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                if ev is not None:
                    self.events.append(ev)
                    self.times.append(now)
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def wait_for(self, pred, timeout, what):
        """Wait until pred(events) is true; returns its value."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                v = pred(self.events)
                if v:
                    return v
                left = deadline - time.monotonic()
                if left <= 0 or (self.eof and not pred(self.events)):
                    if self.eof:
                        raise TimeoutError(f"{self.label} ended before {what}\n{self.tail()}")
                    raise TimeoutError(f"{self.label}: no {what} within {timeout} s\n{self.tail()}")
                self.cond.wait(min(left, 0.5))

    def wait_event(self, name, timeout, key=None, minimum=None, where=None):
        def pred(evs):
            for e in evs:
                if e.get("event") != name:
                    continue
                if key is not None and not (isinstance(e.get(key), (int, float)) and e[key] >= minimum):
                    continue
                if where is not None and not where(e):
                    continue
                return e
            return None
        return self.wait_for(pred, timeout, f"'{name}' event")

    def find(self, name, where=None):
        with self.cond:
            return [e for e in self.events if e.get("event") == name and (where is None or where(e))]

    def wait_exit(self, timeout):
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{self.label} did not exit within {timeout} s\n{self.tail()}")
        self.t.join(timeout=10)
        return rc

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass

    def node_id(self):
        j = self.find("joined")
        return j[0]["node"] if j else None

    def step_hashes(self):
        return {e["step"]: e["hash"] for e in self.find("step")}

    def tail(self, n=15):
        try:
            with open(self.errpath) as f:
                err = f.read()[-3000:]
        except OSError:
            err = ""
        with self.cond:
            out = "\n".join(self.lines[-n:])
        return f"--- {self.label} stdout (last lines):\n{out}\n--- {self.label} stderr:\n{err}"


class Net:
    def __init__(self, tag="t"):
        remove_stale_namespaces()
        self.id = f"{PREFIX}{os.getpid()}-"
        self.dir = tempfile.mkdtemp(prefix=f"rlxnet-{tag}-")
        self.namespaces = []
        self.procs = []
        self.hosts = {}
        self.closed = False
        self.sw = self.add_ns("sw")
        sh("ip", "link", "add", "br0", "type", "bridge", ns=self.sw)
        sh("ip", "link", "set", "br0", "up", ns=self.sw)
        atexit.register(self.close)
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, self._on_signal)

    def _on_signal(self, signum, frame):
        self.close()
        sys.exit(128 + signum)

    def add_ns(self, name):
        ns = self.id + name
        sh("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        sh("ip", "link", "set", "lo", "up", ns=ns)
        return ns

    def _veth(self, a_ns, a_if, b_ns, b_if):
        sh("ip", "link", "add", a_if, "netns", a_ns, "type", "veth", "peer", "name", b_if,
           "netns", b_ns)
        sh("ip", "link", "set", a_if, "up", ns=a_ns)
        sh("ip", "link", "set", b_if, "up", ns=b_ns)

    def host(self, name, addr, mtu=None):
        """A host on the switch: namespace NAME with eth0 = 10.77.0.ADDR/24."""
        ns = self.add_ns(name)
        self._veth(self.sw, name, ns, "eth0")
        sh("ip", "link", "set", name, "master", "br0", ns=self.sw)
        ip = f"10.77.0.{addr}"
        sh("ip", "addr", "add", f"{ip}/24", "dev", "eth0", ns=ns)
        if mtu:
            sh("ip", "link", "set", "eth0", "mtu", mtu, ns=ns)
            sh("ip", "link", "set", name, "mtu", mtu, ns=self.sw)
        self.hosts[name] = {"ns": ns, "ip": ip, "dir": self._host_dir(name)}
        return self.hosts[name]

    def natted_host(self, name, router_addr, inside_net):
        """A host behind a NAT router: router on the switch at 10.77.0.ROUTER_ADDR,
        host at 10.INSIDE.0.2 behind it, nftables masquerade on the way out."""
        r = self.add_ns(name + "nat")
        self._veth(self.sw, name + "nat", r, "out")
        sh("ip", "link", "set", name + "nat", "master", "br0", ns=self.sw)
        sh("ip", "addr", "add", f"10.77.0.{router_addr}/24", "dev", "out", ns=r)
        ns = self.add_ns(name)
        self._veth(r, "in", ns, "eth0")
        sh("ip", "addr", "add", f"10.{inside_net}.0.1/24", "dev", "in", ns=r)
        sh("ip", "addr", "add", f"10.{inside_net}.0.2/24", "dev", "eth0", ns=ns)
        sh("ip", "route", "add", "default", "via", f"10.{inside_net}.0.1", ns=ns)
        sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=r)
        rules = ("table ip nat {\n"
                 " chain post { type nat hook postrouting priority 100; oifname \"out\" masquerade; }\n"
                 "}\n")
        path = os.path.join(self.dir, f"{name}-nat.nft")
        with open(path, "w") as f:
            f.write(rules)
        sh("nft", "-f", path, ns=r)
        ip = f"10.{inside_net}.0.2"
        self.hosts[name] = {"ns": ns, "ip": ip, "dir": self._host_dir(name), "router": r}
        return self.hosts[name]

    def firewall(self, name, allow):
        """Let host NAME send only to the (ip, proto, port|None) in ALLOW."""
        ns = self.hosts[name]["ns"]
        rules = ["table inet fw {", " chain out { type filter hook output priority 0; policy drop;",
                 "  oifname \"lo\" accept;", "  ct state established,related accept;"]
        for ip, proto, port in allow:
            rules.append(f"  ip daddr {ip} {proto} dport {port} accept;" if port
                         else f"  ip daddr {ip} meta l4proto {proto} accept;")
        rules += [" }", " chain in { type filter hook input priority 0; policy drop;",
                  "  iifname \"lo\" accept;", "  ct state established,related accept;", " }", "}"]
        path = os.path.join(self.dir, f"{name}-fw.nft")
        with open(path, "w") as f:
            f.write("\n".join(rules) + "\n")
        sh("nft", "-f", path, ns=ns)

    def _host_dir(self, name):
        d = os.path.join(self.dir, name)
        for sub in ("run", "config", "data"):
            os.makedirs(os.path.join(d, sub), mode=0o700, exist_ok=True)
        return d

    def env(self, host):
        d = self.hosts[host]["dir"] if host else self.dir
        e = dict(os.environ)
        e.update({
            "XDG_RUNTIME_DIR": os.path.join(d, "run"),
            "XDG_CONFIG_HOME": os.path.join(d, "config"),
            "XDG_DATA_HOME": os.path.join(d, "data"),
            "OPENBLAS_NUM_THREADS": "1",
            "G_DEBUG": "fatal-criticals",
        })
        return e

    def spawn(self, label, host, argv):
        ns = self.hosts[host]["ns"] if host else None
        p = Proc(self, label, ns, argv, self.env(host))
        self.procs.append(p)
        return p

    def link(self, host, up):
        sh("ip", "link", "set", "eth0", "up" if up else "down", ns=self.hosts[host]["ns"])

    def close(self):
        if self.closed:
            return
        self.closed = True
        for p in self.procs:
            p.kill()
        for p in self.procs:
            try:
                p.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if os.environ.get("RLXNET_KEEP") is None:
            shutil.rmtree(self.dir, ignore_errors=True)


def rlx_rank():
    path = os.environ.get("RLX_RANK")
    if not path:
        here = os.path.dirname(os.path.abspath(__file__))
        path = os.path.join(here, "..", "..", "build", "tools", "rlx-rank")
    return os.path.abspath(path)
