#!/usr/bin/env python3
"""chaos.py — random faults against a cohort of real rlx-rank processes.

After PCCL's stress test (arXiv 2505.14065: for hours, every 0.5-2 s spawn a
peer or SIGKILL one) and torchft's synthetic failures. It starts a cohort of
local ranks (`rlx-rank join --local --json`, CPU backend, mixed wire
precisions) in a private XDG_RUNTIME_DIR / XDG_DATA_HOME and, every 0.5-2 s
at random:

  spawn      starts a rank (at a random precision);
  kill       SIGKILLs one (the leader in about a third of the kills), never
             the only rank that holds the newest committed step, nor one cut
             off (--cuts) that is not back in a cohort yet, nor one whose
             recent steps no other live rank holds (a group of one);
  freeze     SIGSTOPs one (the leader in about a third) for 1-10 s, then
             SIGCONTs it;
  precision  switches a rank's wire precision (SIGUSR1: the next one);
  cut        (--cuts) cuts a rank off for 1-15 s: it closes and refuses
             every link (rlx-rank's test switch --fault-partition), as if
             its host's link went down; with --netns N, the ranks live on N
             network-namespace hosts and a cut takes a host's link down
             (`ip link set eth0 down`) for 1-15 s: every rank on it loses its
             remote links, and keeps its local ones.

With --netns N (root, iproute2) the cohort spans N hosts (network
namespaces on a bridge, tests/remote/rlxnet.py): ranks on one host meet
over its local bus, ranks on two hosts over ICE and QUIC after signalling
through a standalone `rlx-rank signal` on a host of its own that is never
faulted; every rank joins with --invite-file.

It checks, from every node's event stream (--json):

  divergence   no step number with two hashes, unless every hash but one
               was discarded by a reported `merged` event of a node whose
               state held it before it loaded the kept group's snapshot:
               its own report since its last load, or what that load
               carried, followed back through the snapshots and
               checkpoints it and their senders loaded (scripts/chaoslog.py's
               carried()) (a hash nobody committed whose every holder was
               killed with it as its last step report is counted apart,
               `died_uncommitted`: no live replica holds it, and a killed
               rank reports nothing);
  lost         no committed step (a leader's `step` event) lost: neither
               replaced by another hash nor left behind by the surviving
               history without a `merged` report;
  stall        no stretch without a new committed step (the first report of
               it, by its leader or by a member that applied it) longer than the
               heartbeat timeout + 2 s after the last kill or freeze of the
               leader or of the next in line (a failover), while a rank
               lives that can go on: awake, in the cohort (not alone) and
               holding the newest committed step, or nobody is frozen. Time
               when every such rank is frozen or dead is not counted (an
               alone rank rightly waits for frozen peers before it founds);
               the raw longest gap is reported too;
  rss          no long-lived rank's private RSS (VmRSS less RssShmem, the
               shared rings of its local links, which grow with its peers'
               number and are reported apart) grows by more than
               --rss-growth-mb over what it had 20 s after it started;
  exits        no rank exits by itself, and every rank leaves cleanly when
               asked (SIGTERM) at the end;
  orphans      no process of the run is left once it is over;
  resume       the final checkpoint resumes: a new rank reports `resumed` at
               the final committed step with its hash, and commits on.

It reports the faults by kind, the longest stall, the steps discarded by
merges and, with --baseline-seconds (which turns --event-logs on), the
throughput retained: useful samples — those of the steps the final
checkpoint descends from, each step once, first reported while the faults
ran (scripts/chaoslog.py follows the final leader's state back through
the snapshots and checkpoints it and its senders loaded; a branch a merge
or a rejoin discarded counts nothing) — against what the same numbers of
live ranks (alive, frozen or not) commit without faults, each count
measured for that long after the run and weighted by the time the run
spent at it. It puts each stretch without a step of that history (over
--gap-s) down to the worst fault acting as it began, and says how much of
it a discarded branch was committing, and the longest stall as above but
on that history (a step of a branch discarded later is no progress). When the harness's own loop stands still for over a second
(a loaded machine), it injects no fault for a second after: until its
readers catch up, it does not know who holds which step (it counts these
as harness_stalls).

Exit status: 0 when every check holds, 1 when one fails (the report says
which), 2 on a usage error. Example (what CI runs, `meson test chaos-short`):

  scripts/chaos.py --rank build/tools/rlx-rank --duration 60

Judge a finished run's event logs again (the same judge, replayed):

  scripts/chaos.py --judge OUT/chaos/logs

A long run, nice'd:

  nice -n 5 scripts/chaos.py --rank build/tools/rlx-rank --duration 3600 \\
      --baseline-seconds 20 --out /tmp/chaos-long
"""
import argparse
import ctypes
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaoslog  # noqa: E402

RLXNET_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "remote")
SIGNAL_PORT = 7460

PRECISIONS = ["f32", "f16", "f8e4m3", "f8e5m2"]
COHORT = "chaos"
WINDOW = 100000          # steps of hash history kept (older steps are judged and dropped)

_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    # PR_SET_PDEATHSIG: a rank never outlives the harness (a CI timeout
    # kills the harness; its ranks go with it).
    _libc.prctl(1, signal.SIGKILL)


def rss_kb(pid):
    """(private kB, shared kB) of @pid's resident memory, or None: VmRSS
    less RssShmem, and RssShmem — the shared rings of its local links (a
    memfd each way per link, 4 MiB and up, rlx-link-ring.h), which grow
    with the number of peers it is linked to, not with time."""
    rss = shmem = None
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("RssShmem:"):
                    shmem = int(line.split()[1])
    except OSError:
        return None
    if rss is None:
        return None
    return (rss - (shmem or 0), shmem or 0)


class Rank:
    """One rlx-rank process and what its event stream said."""

    def __init__(self, run, idx, precision, extra=(), launch=True, host=None):
        self.run = run
        self.idx = idx
        self.host = host             # --netns: the namespace host it runs on
        self.bit = 1 << idx
        self.precision = precision
        self.node_id = None
        self.joined = False
        self.alive = True
        self.frozen = False
        self.stopping = False        # asked to leave (SIGTERM)
        self.killed = False
        self.cut_pending = False     # cut off, and not yet back in a cohort through a snapshot
        self.loads = []              # (t, step, sender rank idx or None, seq, the time whose
                                     #  state of the sender it is, hash): snapshots and resumes
        self.seq = 0                 # events read (their order, for the judge)
        self.leader = None           # whom it follows (its last `leader` event)
        self.leader_at = 0.0         # when it said so
        self.joined_at = None        # its last `joined` (seniority: earliest first)
        self.term = 0
        self.last_step = 0
        self.top_step = 0            # the highest step it reported a `step` event for
        self.tail = deque(maxlen=200)  # last events, for a failure's dump
        self.notable = deque(maxlen=400)  # last events other than steps
        self.rss = []                # (age s, private kB: VmRSS less RssShmem)
        self.shmem_kb = 0            # the most RssShmem seen (its links' rings)
        self.done = None
        self.spawned = time.monotonic()
        if not launch:          # --judge: a rank of logs replayed
            self.proc = None
            self.pid = 0
            return
        self.err_path = os.path.join(run.out, "rank-%03d.err" % idx)
        where = (["--invite-file", run.invite_file] if run.net else
                 ["--local", "--cohort", COHORT])
        argv = [run.args.rank, "join"] + where + [
                "--json", "--threads", "1", "--backend", "cpu", "--precision", precision,
                "--checkpoint-every", str(run.args.checkpoint_every),
                "--heartbeat-timeout-ms", str(run.args.heartbeat_timeout_ms)]
        if run.args.cuts and not run.net:
            argv += ["--fault-partition", run.cut_file]
        argv += list(extra) + run.args.rank_arg
        self.argv = argv
        env = run.env
        if run.net:
            # `ip netns exec` execs the rank: the pid is the rank's
            argv = ["ip", "netns", "exec", run.net.hosts[host]["ns"]] + argv
            env = run.host_env(host)
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err,
                                         stdin=subprocess.DEVNULL, env=env,
                                         preexec_fn=_die_with_parent)
        self.pid = self.proc.pid
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        log = None
        if self.run.args.event_logs:
            log = open(os.path.join(self.run.out, "rank-%03d.jsonl" % self.idx), "w")
        for line in self.proc.stdout:
            t = time.monotonic()
            if log:
                log.write("%.3f %s" % (t - self.run.t0, line.decode(errors="replace")
                                       if isinstance(line, bytes) else line))
            try:
                ev = json.loads(line)
            except ValueError:
                self.run.note("rank %d: a line that is not JSON: %r" % (self.idx, line[:200]))
                continue
            self.run.on_event(self, t, ev)
        if log:
            log.close()
        self.proc.wait()
        self.run.on_exit(self, time.monotonic())

    def label(self):
        return "#%d %s (pid %d, %s%s)" % (self.idx, self.node_id or "?", self.pid, self.precision,
                                          ", " + self.host if self.host else "")


class Run:
    def __init__(self, args, root, name, faults=True):
        self.args = args
        self.name = name
        self.faults_on = faults
        self.dir = os.path.join(root, name)
        self.out = os.path.join(self.dir, "logs")
        self.run_dir = os.path.join(self.dir, "run")
        self.data_dir = os.path.join(self.dir, "data")
        for d in (self.out, self.run_dir, self.data_dir):
            os.makedirs(d, exist_ok=True)
        os.chmod(self.run_dir, 0o700)
        self.env = dict(os.environ, XDG_RUNTIME_DIR=self.run_dir, XDG_DATA_HOME=self.data_dir)
        self.env.pop("RLX_INVITE", None)
        self.rng = random.Random(args.seed)
        self.lock = threading.RLock()
        self.ranks = []
        self.t0 = time.monotonic()
        if args.event_logs:
            # the run's clock: a step event's time_us is CLOCK_MONOTONIC too
            with open(os.path.join(self.out, "t0"), "w") as f:
                f.write("%.6f\n" % self.t0)
        self.faults = Counter()
        self.events = Counter()
        self.fault_log = []          # (t, kind, rank label)
        self.notes = []
        self.failures = []
        # history[step] = {hash: [mask of ranks that reported it, committed,
        #                          discarded, last report time,
        #                          {rank idx: [(its report time, seq)]}]}
        self.history = {}
        self.node_rank = {}          # node id → rank idx (its first `joined`)
        self.max_step = 0            # highest committed step seen
        self.progress_step = 0       # highest step anyone reported
        self.samples = 0             # samples of committed steps above the high-water mark
                                     # (a baseline's measure: without faults there is one history)
        self.window = None           # (from, to) s on the run's clock: the faults' time
        self.loadavg = []            # (t, 1-minute load average), each minute
        self.first_commit = None
        self.last_progress = None
        self.stall_anchor = None
        self.last_tick_at = None
        self.critical_fault = 0.0    # last kill/freeze of the leader or its successor
        self.critical_faults = []    # the times of each (s on the run's clock)
        self.ineligible = []         # [from, to]: nobody could go on (s on the run's clock)
        self.longest_raw_stall = 0.0
        self.longest_stall = (0.0, 0.0, 0.0)   # (length, from, to)
        self.stalls_over = []
        self.divergent_steps = 0
        self.died_uncommitted = 0    # hashes of uncommitted steps whose holders were all killed
        self.lost_steps = 0
        self.lost_examples = []
        self.divergent_examples = []
        self.merges = []
        self.discarded = 0
        self.resumes = []
        self.live_time = Counter()   # live ranks → seconds
        self.unexpected_exits = []
        self.thaw_at = {}            # rank idx → time
        self.harness_stalls = 0      # times the harness's own loop stood still > 1 s
        # --cuts: while this file names a rank alone on its line, that rank
        # closes and refuses every link (rlx-rank's --fault-partition)
        self.cut_file = os.path.join(self.dir, "cut")
        self.cut_until = None
        self.cut_host = None         # --netns: the host whose link is down
        self.net = None
        self.signal_proc = None
        if faults is not None and getattr(args, "netns", 0):
            self.start_net(args.netns)

    def start_net(self, n):
        """--netns: N hosts on a bridge and a signalling server on its own."""
        sys.path.insert(0, RLXNET_DIR)
        import rlxnet  # noqa: E402
        self.net = rlxnet.Net("chaos-" + self.name)
        self.net.host("sig", 250)
        self.hostnames = []
        for i in range(1, n + 1):
            self.net.host("h%d" % i, i)
            self.hostnames.append("h%d" % i)
        self.signal_proc = self.net.spawn(
            "signal", "sig", [self.args.rank, "signal", "--port", str(SIGNAL_PORT),
                              "--cohort", COHORT, "--json", "--show-invite"])
        invite = self.signal_proc.wait_event("serving", 20)["invite"]
        self.invite_file = os.path.join(self.dir, "invite")
        fd = os.open(self.invite_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(invite + "\n")

    def host_env(self, host):
        env = self.net.env(host)
        env.pop("RLX_INVITE", None)
        env.pop("G_DEBUG", None)
        return env

    def close_net(self):
        if self.net:
            self.net.close()

    # ── events ────────────────────────────────────────────────────────────
    def note(self, text):
        with self.lock:
            self.notes.append("%7.2f  %s" % (time.monotonic() - self.t0, text))

    def fail(self, text):
        with self.lock:
            if text not in self.failures:
                self.failures.append(text)

    def on_event(self, r, t, ev):
        kind = ev.get("event")
        with self.lock:
            r.seq += 1
            r.tail.append((round(t - self.t0, 3), ev))
            if kind != "step":
                r.notable.append((round(t - self.t0, 3), ev))
            self.events[kind] += 1
            if kind == "step":
                self.on_step(r, t, ev)
            elif kind == "leader":
                r.leader = ev.get("node")
                r.term = ev.get("term", 0)
                r.leader_at = t
            elif kind == "joined":
                r.node_id = ev.get("node")
                self.node_rank.setdefault(r.node_id, r.idx)
                r.joined = True
                r.joined_at = t
                if self.cut_until is None:
                    r.cut_pending = False
            elif kind == "rejoining":
                r.joined_at = None
            elif kind == "snapshot" and "from" in ev:
                r.last_step = ev.get("step", r.last_step)
                r.loads.append((t, ev.get("step", 0), self.node_rank.get(ev["from"]), r.seq, t,
                                ev.get("hash")))
            elif kind == "merged":
                self.on_merged(r, t, ev)
            elif kind == "resumed":
                self.resumes.append((round(t - self.t0, 2), r.label(), ev.get("step"), ev.get("hash")))
                writer, written = self.checkpoint_writer(ev, t)
                r.loads.append((t, ev.get("step", 0), writer, r.seq, written, ev.get("hash")))
            elif kind == "done":
                r.done = ev

    def on_step(self, r, t, ev):
        s = ev["step"]
        h = ev["hash"]
        r.last_step = s
        r.top_step = max(r.top_step, s)
        ent = self.history.setdefault(s, {})
        rec = ent.get(h)
        if rec is None:
            rec = ent[h] = [0, False, False, t, {}]
        rec[0] |= r.bit
        rec[3] = t
        rec[4].setdefault(r.idx, []).append((t, r.seq))
        # --netns: a rank of a cut host is back once the heal is done and it
        # steps in a group larger than its host's ranks (the groups merged;
        # its own may have been kept, so it reports no `joined`)
        if r.cut_pending and self.net and self.cut_until is None and \
                ev.get("members", 0) > sum(1 for x in self.ranks if x.alive and x.host == r.host):
            r.cut_pending = False
        # Progress: a step past any reported yet, by anyone. A member reports
        # a step once it applied the leader's commit of it; the leader's own
        # report may come seconds later on a loaded machine (its events go
        # through its main loop), or never (frozen and killed first).
        if s > self.progress_step and self.first_commit is not None:
            self.progress_step = s
            self.last_progress = t
        if ev.get("leader") == r.node_id and r.node_id is not None:
            rec[1] = True
            self.last_progress = max(self.last_progress or t, t)
            if self.first_commit is None:
                self.first_commit = t
            if s > self.max_step:
                self.max_step = s
                self.samples += ev.get("samples", 0)
            self.progress_step = max(self.progress_step, s)

    def on_merged(self, r, t, ev):
        lo, hi = ev.get("from_step", 0), ev.get("to_step", -1)
        self.merges.append((round(t - self.t0, 2), r.label(), ev.get("discarded"), lo, hi,
                            ev.get("exact"), ev.get("rule")))
        self.discarded += ev.get("discarded", 0)
        # It covers the history its state carried, not every hash it ever
        # reported in the range (the rule before 2026-12-07: a hash it had
        # dropped earlier without a report was covered too). That state is
        # the one before it loaded the kept group's snapshot, which it
        # reports just before `merged`.
        seq = r.seq
        kept = self.node_rank.get(ev.get("node"))
        before = [ld for ld in r.loads if ld[3] < seq]
        if before and kept is not None and before[-1][2] == kept and \
                t - before[-1][0] <= chaoslog.MERGE_LOAD_S:
            seq = before[-1][3]
        self.credit_carried(r.idx, t, max(lo, 1), hi, seq)

    def checkpoint_writer(self, ev, t):
        """The rank whose checkpoint a `resumed` event loaded, and when: the
        last to report its step with its hash before @t (scripts/chaoslog.py's
        rule). (None, @t) when nobody did."""
        rec = self.history.get(ev.get("step", 0), {}).get(ev.get("hash"))
        best = None
        for idx, reps in (rec[4].items() if rec else ()):
            for tr, _ in reps:
                if tr <= t and (best is None or tr > best[0]):
                    best = (tr, idx)
        return (best[1], best[0]) if best else (None, t)

    def credit_carried(self, idx, t, lo, hi, seq):
        """A `merged` report covers the history the rank's state carried
        before it loaded the kept group's snapshot (@seq: that load, or the
        report), not only the hashes it reported itself: a rank that joined
        through a snapshot holds its sender's steps up to the snapshot's
        step as its sender had them at the load, and so on back through the
        senders' snapshots and the checkpoints they resumed (each writer as
        it was when it reported the checkpoint's step) — scripts/chaoslog.py's
        carried(), here on the run's live history. A group whose members all
        joined from snapshots of a leader since killed yields in a merge
        that reports steps none of them reported."""
        seen = set()
        want = None             # (step, hash) of the load that led to this sender
        while idx is not None and lo <= hi and (idx, t, seq) not in seen:
            seen.add((idx, t, seq))
            x = self.ranks[idx]
            tS, S, src, lseq, src_t, h = -1.0, 0, None, 0, -1.0, None
            for ld in x.loads:
                if (ld[3] >= seq) if seq is not None else (ld[0] > t):
                    break
                tS, S, src, lseq, src_t, h = ld
            # Followed as a sender (@seq None): a leader reports a step once
            # its members acknowledged it, so its reports of steps up to the
            # snapshot's may come after it was sent (seed 5, 60 s, --netns
            # 2: 63 steps up to 0.3 s late). The first of each such report
            # before its next load counts, when its report of the load's
            # step has the load's hash (chaoslog.carried()).
            nxt = next((ld[3] for ld in x.loads if ld[0] > t), None) if seq is None else None
            late = {}
            for s in range(max(lo, S + 1), hi + 1):
                best = None     # its latest report of @s after the load, before @seq / @t
                for hh, rec in self.history.get(s, {}).items():
                    for tr, sq in rec[4].get(idx, ()):
                        if sq <= lseq:
                            continue
                        if (sq < seq) if seq is not None else (tr <= t):
                            if best is None or sq > best[0]:
                                best = (sq, rec)
                        elif seq is None and (nxt is None or sq < nxt) and \
                                (s not in late or sq < late[s][0]):
                            late[s] = (sq, rec, hh)
                if best:
                    best[1][2] = True
                    late.pop(s, None)
            if late and not (want and want[0] in late and late[want[0]][2] != want[1]):
                for sq, rec, hh in late.values():
                    rec[2] = True
            hi = min(hi, S)
            want = (S, h)
            idx, t, seq = src, src_t, None

    def on_exit(self, r, t):
        with self.lock:
            r.alive = False
            r.frozen = False
            code = r.proc.returncode
            if not r.killed and not r.stopping:
                self.unexpected_exits.append("%s exited by itself with %s at %.1f s: %s" % (
                    r.label(), code, t - self.t0,
                    (r.done or {}).get("message", "no done event")))
            elif r.stopping and not r.killed and code != 0:
                self.unexpected_exits.append("%s asked to leave exited with %s: %s" % (
                    r.label(), code, (r.done or {}).get("message", "no done event")))

    # ── judging the history ───────────────────────────────────────────────
    def died_with_holders(self, s, rec):
        """A hash nobody committed, whose every holder was killed with it as
        the last step it reported: a member that applied a commit its
        leader never completed and was killed before it could rejoin (and
        report the step it drops). No live replica holds it, and a killed
        rank reports nothing."""
        if rec[1]:
            return False
        holders = [r for r in self.ranks if rec[0] & r.bit]
        return bool(holders) and all(r.killed and r.top_step == s for r in holders)

    def judge_step(self, s, ent, final_step=None):
        dead = [h for h, rec in ent.items() if not rec[2] and self.died_with_holders(s, rec)]
        self.died_uncommitted += len(dead)
        live = [(h, rec) for h, rec in ent.items() if not rec[2] and h not in dead]
        if len(live) >= 2:
            self.divergent_steps += 1
            if len(self.divergent_examples) < 10:
                self.divergent_examples.append(
                    "step %d: %s" % (s, ", ".join("%s by %s%s" % (h, self.ranks_of(rec[0]),
                                                                   " (committed)" if rec[1] else "")
                                                  for h, rec in ent.items())))
            # The lineage that reported the step last is the one that went on.
            winner = max(live, key=lambda hr: hr[1][3])[0]
            for h, rec in live:
                if h != winner and rec[1]:
                    self.lost_steps += 1
                    if len(self.lost_examples) < 10:
                        self.lost_examples.append("step %d hash %s (replaced by %s)" % (s, h, winner))
        if final_step is not None and s > final_step:
            for h, rec in live:
                if rec[1]:
                    self.lost_steps += 1
                    if len(self.lost_examples) < 10:
                        self.lost_examples.append("step %d hash %s (beyond the surviving step %d)"
                                                  % (s, h, final_step))

    def ranks_of(self, mask):
        return "+".join("#%d" % r.idx for r in self.ranks if mask & r.bit) or "?"

    def prune(self):
        with self.lock:
            cut = self.max_step - WINDOW
            if cut <= 0:
                return
            for s in [s for s in self.history if s < cut]:
                self.judge_step(s, self.history.pop(s))

    # ── the cohort ────────────────────────────────────────────────────────
    def spawn(self, precision=None, extra=(), host=None):
        with self.lock:
            precision = precision or self.rng.choice(PRECISIONS)
            if self.net and host is None:
                host = self.rng.choice(self.hostnames)
            r = Rank(self, len(self.ranks), precision, extra, host=host)
            self.ranks.append(r)
            return r

    def living(self):
        return [r for r in self.ranks if r.alive and not r.stopping]

    def leader_rank(self):
        """The rank the most recent term names as leader, if it lives: of
        the `leader` events at that term, the latest. Members that lost
        their leader name the next in line at the old term while it has
        not yet seen the silence itself (seed 7, 300 s, --netns 2: its
        freeze was taken for a member's, and the 3.5 s without a step
        after it for a stall after the old leader's)."""
        with self.lock:
            best = None
            for r in self.living():
                if r.leader and (best is None or (r.term, r.leader_at) > best[:2]):
                    best = (r.term, r.leader_at, r.leader)
            if best is None:
                return None
            for r in self.living():
                if r.node_id == best[2]:
                    return r
            return None

    def successor_rank(self, leader):
        """The next in line after @leader: admission order, approximated by
        when each rank last joined."""
        with self.lock:
            rest = [r for r in self.living() if r is not leader and r.joined_at is not None]
            return min(rest, key=lambda r: r.joined_at) if rest else None

    def sole_holder(self, x, live):
        """No other live rank reported the hash @x had 100 steps ago."""
        ent = self.history.get(x.last_step - 100)
        if not ent:
            return False
        others = 0
        for y in live:
            if y is not x:
                others |= y.bit
        for rec in ent.values():
            if rec[0] & x.bit:
                return not (rec[0] & others)
        return False

    def sole_branch(self, x, live):
        """No other live rank holds the history @x is on: at the latest step
        each other live rank and @x both reported (within 200 steps of the
        lower of their last ones), every one reported another hash. A split
        of several ranks on each side (--netns: a host's link cut) makes
        branches of several ranks; killing the last rank of one loses steps
        it committed that no merge will ever report (seed 5, 25 s, two
        hosts: the harness killed both ranks of the side without the old
        leader, 34 steps, while sole_holder looked 100 steps back, before
        the split)."""
        differ = False
        for y in live:
            if y is x:
                continue
            top = min(x.last_step, y.last_step)
            for s in range(top, max(0, top - 200), -1):
                ent = self.history.get(s)
                if not ent:
                    continue
                xs = {h for h, rec in ent.items() if rec[0] & x.bit}
                ys = {h for h, rec in ent.items() if rec[0] & y.bit}
                if xs and ys:
                    if xs & ys:
                        return False
                    differ = True
                    break
        return differ

    def signal(self, r, sig):
        try:
            os.kill(r.pid, sig)
            return True
        except ProcessLookupError:
            return False

    def fault(self, kind, r, detail=""):
        self.faults[kind] += 1
        self.fault_log.append((round(time.monotonic() - self.t0, 2), kind, r.label(), detail))

    def one_fault(self):
        a = self.args
        with self.lock:
            live = self.living()
            awake = [r for r in live if not r.frozen]
            choices = []
            if len(live) < a.max_ranks:
                choices += ["spawn"] * (3 if len(live) <= a.min_ranks else 1)
            if len(live) > a.min_ranks:
                choices += ["kill"]
            if awake:
                choices += ["freeze", "precision"]
            if a.cuts and self.cut_until is None and any(x.joined for x in awake):
                choices += ["cut"]
            if not choices:
                return
            kind = self.rng.choice(choices)
            leader = self.leader_rank()
            successor = self.successor_rank(leader)
            if kind == "spawn":
                r = self.spawn()
                self.fault("spawn", r)
            elif kind == "kill":
                # Never the only rank that holds the newest committed step:
                # its steps would be lost with it whatever the cohort does
                # (a cohort of one, the others still starting or frozen).
                holders = [x for x in live if x.last_step >= self.max_step and x.joined]
                # Nor a rank cut off and not back yet: while cut it trains on
                # alone (a group of one), and nobody else holds those steps.
                # Nor one whose recent steps no other live rank holds (a
                # group of one after a cut: killing it loses them, whatever
                # the cohort does), nor the last live rank of a branch.
                pool = [x for x in live if not (len(holders) == 1 and x is holders[0])
                        and not x.cut_pending and not self.sole_holder(x, live)
                        and not self.sole_branch(x, live)]
                if not pool:
                    return
                if leader in pool and self.rng.random() < 1 / 3:
                    r = leader
                else:
                    r = self.rng.choice(pool)
                r.killed = True
                self.signal(r, signal.SIGKILL)
                self.fault("kill-leader" if r is leader else "kill", r)
                if r is leader or r is successor:
                    self.critical_fault = time.monotonic()
                    self.critical_faults.append(self.critical_fault - self.t0)
            elif kind == "freeze":
                if leader in awake and self.rng.random() < 1 / 3:
                    r = leader
                else:
                    r = self.rng.choice(awake)
                secs = self.rng.uniform(a.freeze_min, a.freeze_max)
                if self.signal(r, signal.SIGSTOP):
                    r.frozen = True
                    self.thaw_at[r.idx] = time.monotonic() + secs
                    self.fault("freeze-leader" if r is leader else "freeze", r, "%.1f s" % secs)
                    if r is leader or r is successor:
                        self.critical_fault = time.monotonic()
                        self.critical_faults.append(self.critical_fault - self.t0)
            elif kind == "cut":
                ready = [x for x in awake if x.joined and x.node_id]
                if leader in ready and self.rng.random() < 1 / 3:
                    r = leader
                else:
                    r = self.rng.choice(ready)
                secs = self.rng.uniform(a.cut_min, a.cut_max)
                if self.net:
                    # the host's link: every rank on it is cut off from the rest
                    self.net.link(r.host, False)
                    self.cut_host = r.host
                    for x in live:
                        if x.host == r.host:
                            x.cut_pending = True
                else:
                    with open(self.cut_file + ".tmp", "w") as f:
                        f.write(r.node_id + "\n")
                    os.rename(self.cut_file + ".tmp", self.cut_file)
                r.cut_pending = True
                self.cut_until = time.monotonic() + secs
                self.fault("cut-leader" if r is leader else "cut", r, "%.1f s" % secs)
                if r is leader or r is successor:
                    self.critical_fault = time.monotonic()
                    self.critical_faults.append(self.critical_fault - self.t0)
            elif kind == "precision":
                # Only a rank that has joined has its SIGUSR1 handler in place.
                ready = [x for x in awake if x.joined]
                if not ready:
                    return
                r = self.rng.choice(ready)
                if self.signal(r, signal.SIGUSR1):
                    r.precision = PRECISIONS[(PRECISIONS.index(r.precision) + 1) % len(PRECISIONS)]
                    self.fault("precision", r, r.precision)

    def heal(self):
        if self.cut_until is not None:
            if self.net:
                self.net.link(self.cut_host, True)
                self.cut_host = None
            try:
                os.unlink(self.cut_file)
            except FileNotFoundError:
                pass
            self.cut_until = None

    def tick(self, now):
        """Thaw and heal what is due, sample RSS, account stalls and live time."""
        with self.lock:
            if self.cut_until is not None and now >= self.cut_until:
                self.heal()
            for r in self.ranks:
                if r.frozen and r.alive and now >= self.thaw_at.get(r.idx, now):
                    self.signal(r, signal.SIGCONT)
                    r.frozen = False
            # A rank that can go on: alive, awake, joined, and holding the
            # cohort's newest committed state (or nobody is frozen: then any
            # rank that has joined must get the cohort going).
            # A rank that is alone (cut off, or new) waits for frozen peers
            # before it founds: they may hold the newest state.
            awake = [r for r in self.ranks if r.alive and r.joined and not r.frozen]
            eligible = any(r.last_step >= self.max_step and r.joined_at is not None
                           for r in awake) or \
                (awake and not any(r.frozen and r.alive for r in self.ranks))
            if self.first_commit is not None:
                if not eligible:
                    if self.stall_anchor != self.last_tick_at or not self.ineligible:
                        self.ineligible.append([now - self.t0, now - self.t0])
                    self.ineligible[-1][1] = now - self.t0
                    self.stall_anchor = now
                else:
                    self.longest_raw_stall = max(self.longest_raw_stall,
                                                 now - max(self.last_progress, self.stall_anchor or 0))
                    start = max(self.last_progress, self.stall_anchor or 0, self.critical_fault)
                    length = now - start
                    if length > self.longest_stall[0]:
                        self.longest_stall = (length, start - self.t0, now - self.t0)
            self.last_tick_at = now

    def sample_rss(self, now):
        with self.lock:
            for r in self.ranks:
                if r.alive and not r.frozen:
                    kb = rss_kb(r.pid)
                    if kb:
                        r.rss.append((now - r.spawned, kb[0]))
                        r.shmem_kb = max(r.shmem_kb, kb[1])
                        if len(r.rss) > 4000:
                            del r.rss[1:len(r.rss):2]

    def thaw_all(self):
        with self.lock:
            self.heal()
            for r in self.ranks:
                if r.frozen and r.alive:
                    self.signal(r, signal.SIGCONT)
                r.frozen = False

    # ── the run ───────────────────────────────────────────────────────────
    def chaos(self, duration):
        a = self.args
        for _ in range(a.ranks):
            self.spawn()
        next_fault = time.monotonic() + a.warmup
        next_rss = time.monotonic()
        next_prune = time.monotonic() + 5
        end = time.monotonic() + duration
        last = time.monotonic()
        next_load = last
        self.window = (last - self.t0, end - self.t0)
        while True:
            now = time.monotonic()
            if now >= next_load:
                self.loadavg.append((round(now - self.t0, 1), os.getloadavg()[0]))
                next_load = now + 60
            with self.lock:
                self.live_time[len([r for r in self.ranks if r.alive])] += now - last
            if now - last > 1.0:
                # The harness itself stood still (a loaded machine): its
                # readers are behind, so what it knows of who holds which
                # step is stale. A kill chosen on that view killed the only
                # holder of a group's steps (seed 61: a leader of one whose
                # last 10 steps the harness had not read yet). Let them
                # catch up first.
                self.harness_stalls += 1
                next_fault = max(next_fault, now + 1.0)
            last = now
            if now >= end:
                break
            if self.faults_on and now >= next_fault:
                self.one_fault()
                next_fault = now + self.rng.uniform(a.interval_min, a.interval_max)
            self.tick(now)
            if now >= next_rss:
                self.sample_rss(now)
                next_rss = now + 1.0
            if now >= next_prune:
                self.prune()
                next_prune = now + 5
            time.sleep(0.05)

    def settle(self, timeout):
        """Thaw everything; wait until the live ranks commit together."""
        self.thaw_all()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = time.monotonic()
            self.tick(now)
            with self.lock:
                live = [r for r in self.ranks if r.alive]
                ids = {r.node_id for r in live}
                lead = self.leader_rank()
                ok = (live and lead is not None and all(r.joined for r in live)
                      and all(r.leader == lead.node_id for r in live)
                      and lead.node_id in ids
                      and self.last_progress is not None and now - self.last_progress < 0.5)
                if ok:
                    return True
            time.sleep(0.1)
        return False

    def stop_all(self, timeout=30):
        """SIGTERM the members, then the leader; each must leave with 0."""
        lead = self.leader_rank()
        with self.lock:
            order = [r for r in self.ranks if r.alive and r is not lead]
        for group in (order, [lead] if lead else []):
            for r in group:
                r.stopping = True
                self.signal(r, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for r in group:
                try:
                    r.proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.fail("%s did not leave within %d s of SIGTERM" % (r.label(), timeout))
                    r.killed = True
                    self.signal(r, signal.SIGKILL)
                    r.proc.wait()
            for r in group:
                r.reader.join(10)
        return lead

    def orphans(self):
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    env = f.read()
            except OSError:
                continue
            if (b"XDG_RUNTIME_DIR=" + self.run_dir.encode() + b"\0") in env:
                found.append(int(pid))
            elif self.net and (b"XDG_RUNTIME_DIR=" + self.net.dir.encode() + b"/") in env and \
                    (self.signal_proc is None or int(pid) != self.signal_proc.p.pid):
                found.append(int(pid))
        return found


def committed_rate(args, root, k, seconds):
    """Committed samples/s of k ranks without faults."""
    run = Run(args, root, "baseline-%d" % k, faults=False)
    rng = random.Random(args.seed + k)
    for _ in range(k):
        run.spawn(rng.choice(PRECISIONS))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with run.lock:
            lead = run.leader_rank()
            if (lead is not None and sum(1 for r in run.ranks if r.joined) == k
                    and all(r.leader == lead.node_id for r in run.ranks)):
                break
        time.sleep(0.1)
    time.sleep(1.0)
    with run.lock:
        s0, t0 = run.samples, time.monotonic()
    time.sleep(seconds)
    with run.lock:
        s1, t1 = run.samples, time.monotonic()
    run.stop_all()
    run.close_net()
    return (s1 - s0) / (t1 - t0)


def check_resume(args, run, final_step, lead=None):
    """A new rank resumes the final checkpoint and commits on (--netns: on
    the host of the last leader, whose data folder holds it)."""
    r = run.spawn("f32", extra=["--steps", str(final_step + 5)],
                  host=lead.host if lead is not None else None)
    r.stopping = True     # it exits by itself once its steps are done
    try:
        r.proc.wait(120)
    except subprocess.TimeoutExpired:
        r.killed = True
        run.signal(r, signal.SIGKILL)
        r.proc.wait()
        return "the resuming rank did not finish within 120 s"
    r.reader.join(10)
    resumed = [ev for _, ev in r.notable if ev.get("event") == "resumed"]
    if not resumed:
        return "the resuming rank reported no resumed event (exit %s)" % r.proc.returncode
    ev = resumed[0]
    want = [h for h, rec in run.history.get(final_step, {}).items() if not rec[2]]
    if ev.get("step") != final_step:
        return "resumed at step %s, the cohort had committed %d" % (ev.get("step"), final_step)
    if want and ev.get("hash") not in want:
        return "resumed step %d with hash %s, the cohort's is %s" % (final_step, ev.get("hash"), want)
    if r.proc.returncode != 0 or not (r.done or {}).get("success"):
        return "the resuming rank exited %s: %s" % (r.proc.returncode, (r.done or {}).get("message"))
    return None


def judge_logs(logdir, faults_path):
    """--judge: replay a run's event logs (--event-logs) through the live
    run's judge, in the order of their stamps, with the kills of its
    faults.log; prints and returns (divergent steps, committed steps lost).
    Steps a later history left behind are not judged (that needs the run's
    final step), nor are the harness's own kills at the end (not in
    faults.log), so died_uncommitted may differ from the live run's."""
    import glob
    import heapq
    args = argparse.Namespace(event_logs=False, seed=0, cuts=False, baseline_seconds=0)
    tmp = tempfile.mkdtemp(prefix="rlx-chaos-judge-")
    try:
        run = Run(args, tmp, "judge")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    run.t0 = 0.0
    files = {}
    for f in sorted(glob.glob(os.path.join(logdir, "rank-*.jsonl"))):
        m = re.match(r"rank-(\d+)\.jsonl$", os.path.basename(f))
        if m:
            files[int(m.group(1))] = f
    if not files:
        print("chaos.py: no rank-NNN.jsonl in %s (a run with --event-logs writes them)" % logdir,
              file=sys.stderr)
        return None
    for i in range(max(files) + 1):
        run.ranks.append(Rank(run, i, "?", launch=False))
    kills = [(t, -1, int(label.split()[0][1:]), None) for t, kind, label, _ in
             chaoslog.fault_log(faults_path) if kind.startswith("kill") and label.startswith("#")]
    kills = [k for k in kills if k[2] < len(run.ranks)]     # a rank with no log said nothing

    def lines(idx, path):
        with open(path, errors="replace") as fh:
            for line in fh:
                try:
                    t, js = line.split(" ", 1)
                    yield (float(t), idx, idx, js)
                except ValueError:
                    continue
    n = 0
    for t, order, idx, js in heapq.merge(sorted(kills), *(lines(i, f) for i, f in files.items())):
        r = run.ranks[idx]
        if js is None:
            r.killed = True
            continue
        try:
            ev = json.loads(js)
        except ValueError:
            continue
        run.on_event(r, t, ev)
        n += 1
        if n % 20000 == 0:
            run.prune()
    for s in sorted(run.history):
        run.judge_step(s, run.history[s])
    print("chaos: judged %d events of %d ranks: %d divergent steps, %d committed steps lost, "
          "%d merges discarding %d steps" % (n, len(files), run.divergent_steps, run.lost_steps,
                                             len(run.merges), run.discarded))
    for e in run.divergent_examples[:3]:
        print("chaos: divergent " + e)
    for e in run.lost_examples[:3]:
        print("chaos: lost " + e)
    return run.divergent_steps, run.lost_steps


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank", default=os.environ.get("RLX_RANK", "build/tools/rlx-rank"))
    p.add_argument("--duration", type=float, default=60, help="seconds of faults (default 60)")
    p.add_argument("--seed", type=int, default=None, help="the fault schedule's seed (default: random, printed)")
    p.add_argument("--ranks", type=int, default=3, help="ranks at the start (default 3)")
    p.add_argument("--min-ranks", type=int, default=2, help="never kill below this many (default 2)")
    p.add_argument("--max-ranks", type=int, default=6, help="never spawn above this many (default 6)")
    p.add_argument("--interval-min", type=float, default=0.5)
    p.add_argument("--interval-max", type=float, default=2.0)
    p.add_argument("--freeze-min", type=float, default=1.0)
    p.add_argument("--freeze-max", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0, help="seconds before the first fault")
    p.add_argument("--heartbeat-timeout-ms", type=int, default=3000)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--rss-growth-mb", type=float, default=48.0)
    p.add_argument("--long-lived-s", type=float, default=40.0,
                   help="ranks alive this long have their RSS growth checked (default 40)")
    p.add_argument("--baseline-seconds", type=float, default=0,
                   help="measure each live count without faults this long (0: skip)")
    p.add_argument("--cuts", action="store_true",
                   help="also cut a rank off (the leader in about a third) for --cut-min to "
                        "--cut-max s: it closes and refuses every link (rlx-rank's test switch "
                        "--fault-partition; a stand-in for a network-namespace link cut)")
    p.add_argument("--netns", type=int, default=0, metavar="N",
                   help="run the ranks on N network-namespace hosts (root): remote links over "
                        "ICE and QUIC between hosts, the local bus within one; --cuts then takes "
                        "a host's link down (default 0: every rank on this machine's local bus; "
                        "exit status 77 where namespaces cannot be made)")
    p.add_argument("--cut-min", type=float, default=1.0)
    p.add_argument("--cut-max", type=float, default=15.0)
    p.add_argument("--rank-arg", action="append", default=[], help="an extra argument of every rank")
    p.add_argument("--out", help="keep logs and the report here (default: a temporary folder, removed on success)")
    p.add_argument("--json", help="write the report as JSON to this file")
    p.add_argument("--event-logs", action="store_true",
                   help="write every rank's event stream, each line stamped with the run's clock, "
                        "to logs/rank-NNN.jsonl under --out (for reading a failure; "
                        "--baseline-seconds needs them and turns them on)")
    p.add_argument("--gap-s", type=float, default=0.25,
                   help="a stretch this long without a step of the surviving history is put "
                        "down to the worst fault acting as it began (default 0.25 s)")
    p.add_argument("--judge", metavar="LOGDIR",
                   help="run nothing: replay a finished run's event logs (OUT/chaos/logs) "
                        "through this judge of divergent and lost steps, with OUT/faults.log's kills")
    args = p.parse_args()
    if args.judge:
        res = judge_logs(args.judge, os.path.join(args.judge, "..", "..", "faults.log"))
        return 2 if res is None else (1 if any(res) else 0)
    if args.baseline_seconds > 0:
        args.event_logs = True
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    if not os.access(args.rank, os.X_OK):
        print("chaos.py: %s is not an executable rlx-rank (give --rank)" % args.rank, file=sys.stderr)
        return 2
    if args.netns and (os.geteuid() != 0 or shutil.which("ip") is None):
        # 77: the test's skip status (meson), as tests/remote/rlxnet.py's
        print("chaos.py: SKIP: --netns needs root and iproute2's ip (network namespaces)",
              file=sys.stderr)
        return 77
    if args.min_ranks < 1 or args.max_ranks < args.min_ranks or args.ranks < 1:
        print("chaos.py: need 1 <= --min-ranks <= --max-ranks and --ranks >= 1", file=sys.stderr)
        return 2
    root = args.out or tempfile.mkdtemp(prefix="rlx-chaos-")
    os.makedirs(root, exist_ok=True)
    print("chaos: seed %d, %g s, logs in %s" % (args.seed, args.duration, root), flush=True)

    run = Run(args, root, "chaos")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    run.chaos(args.duration)
    settled = run.settle(30)
    if not settled:
        run.fail("the cohort did not settle (one leader, every live rank committing) within 30 s of the last fault")
    with run.lock:
        final_step = max((r.last_step for r in run.ranks if r.alive), default=0)
    lead = run.stop_all()
    with run.lock:
        # The leader's last checkpoint (written as it leaves) is the final step.
        if lead is not None:
            ckpts = [ev.get("step") for _, ev in lead.notable if ev.get("event") == "checkpoint"]
            if ckpts:
                final_step = max(final_step, ckpts[-1])
        for s in sorted(run.history):
            run.judge_step(s, run.history[s], final_step)
    resume_err = (check_resume(args, run, final_step, lead) if final_step > 0
                  else "nothing was committed")
    time.sleep(0.5)
    orphans = run.orphans()
    run.close_net()

    # ── checks ────────────────────────────────────────────────────────────
    limit = args.heartbeat_timeout_ms / 1000 + 2
    if run.divergent_steps:
        run.fail("%d step numbers with two hashes and no merge reported, e.g. %s"
                 % (run.divergent_steps, "; ".join(run.divergent_examples[:3])))
    if run.lost_steps:
        run.fail("%d committed steps lost, e.g. %s" % (run.lost_steps, "; ".join(run.lost_examples[:3])))
    if run.longest_stall[0] > limit:
        run.fail("a stall of %.1f s (%.1f-%.1f s) > heartbeat timeout + 2 s = %.1f s"
                 % (run.longest_stall[0], run.longest_stall[1], run.longest_stall[2], limit))
    rss_report = []
    for r in run.ranks:
        life = r.rss[-1][0] if r.rss else 0
        if life < args.long_lived_s:
            continue
        base = [kb for age, kb in r.rss if age >= 20]
        if not base:
            continue
        growth = (max(base) - base[0]) / 1024
        rss_report.append((growth, r.label(), base[0] / 1024, max(base) / 1024, life))
        if growth > args.rss_growth_mb:
            run.fail("%s grew by %.1f MB (%.1f → %.1f MB over %.0f s)"
                     % (r.label(), growth, base[0] / 1024, max(base) / 1024, life))
    for e in run.unexpected_exits:
        run.fail(e)
    if orphans:
        run.fail("orphaned processes: %s" % orphans)
    if resume_err:
        run.fail("final checkpoint: " + resume_err)
    if run.first_commit is None:
        run.fail("nothing was committed")

    # Useful work: the samples of the surviving history's steps (those the
    # final checkpoint descends from, each step once) first reported while
    # the faults ran; steps of branches a merge or a rejoin discarded count
    # nothing, and neither does a cut leader of one racing ahead.
    useful = holder = None
    costs, gap, surv = {}, None, None
    if args.event_logs and run.window is not None:
        logs = chaoslog.load(run.out)
        holder = lead.idx if lead is not None else max(
            (r for r in run.ranks if r.top_step >= final_step), key=lambda r: r.idx, default=None)
        if holder is not None:
            useful = chaoslog.useful_work(logs, holder, final_step, *run.window)
            # (from the first step: the ranks start up before)
            since = (min([e[1] for e in useful.values()] or [run.window[0]]), run.window[1])
            surv = chaoslog.surviving_stall(useful, run.ineligible, run.critical_faults, *since)
            costs, gap = chaoslog.stall_costs(logs, useful, run.fault_log, *since,
                                              timeout_s=args.heartbeat_timeout_ms / 1000,
                                              gap_s=args.gap_s)
    useful_samples = sum(n for h, t, n in useful.values()) if useful is not None else None

    retained = None
    rates = {}
    base_load = []
    if args.baseline_seconds > 0:
        for k in sorted(c for c in run.live_time if c > 0):
            base_load.append(os.getloadavg()[0])
            rates[k] = committed_rate(args, root, k, args.baseline_seconds)
        expected = sum(run.live_time[k] * rates.get(k, 0) for k in run.live_time)
        if expected > 0 and useful_samples is not None:
            retained = useful_samples / expected
        for k, v in rates.items():
            if v <= 0:
                run.note("the baseline of %d ranks committed nothing in %g s (a loaded machine?): "
                         "throughput retained leaves that count out" % (k, args.baseline_seconds))

    wall = sum(run.live_time.values())
    loads = sorted(x for _, x in run.loadavg)
    report = {
        "seed": args.seed, "duration_s": args.duration, "wall_s": round(wall, 1),
        "faults": dict(run.faults), "faults_total": sum(run.faults.values()),
        "ranks_started": len(run.ranks) - 1,
        "committed_steps": run.max_step, "final_step": final_step,
        "samples_high_water": run.samples,
        "useful_steps": len(useful) if useful is not None else None,
        "useful_samples": useful_samples,
        "useful_samples_per_s": round(useful_samples / wall, 1) if wall and useful_samples else None,
        "stall_cost_by_fault": {k: {"stretches": c[0], "seconds": round(c[1], 2),
                                    "discarded_branch_committing_s": round(c[2], 2)}
                                for k, c in sorted(costs.items())},
        "longest_surviving_stall": [round(x, 2) for x in surv] if surv else None,
        "nobody_could_go_on_s": [[round(a, 2), round(b, 2)] for a, b in run.ineligible],
        "failover_faults_s": [round(x, 2) for x in run.critical_faults],
        "longest_useful_gap": ([round(gap[0], 2), round(gap[1], 2), round(gap[2], 2), gap[3]]
                               if gap else None),
        "window_s": [round(x, 2) for x in run.window] if run.window else None,
        "final_rank": holder,
        "loadavg_during": ([loads[0], loads[len(loads) // 2], loads[-1]] if loads else None),
        "loadavg_baselines": base_load,
        "longest_stall_s": round(run.longest_stall[0], 2),
        "longest_raw_stall_s": round(run.longest_raw_stall, 2),
        "longest_stall_at_s": [round(run.longest_stall[1], 2), round(run.longest_stall[2], 2)],
        "stall_limit_s": limit,
        "divergent_steps": run.divergent_steps, "lost_steps": run.lost_steps,
        "died_uncommitted": run.died_uncommitted,
        "merges": len(run.merges), "steps_discarded_by_merges": run.discarded,
        "resumes": len(run.resumes),
        "max_rss_growth_mb": round(max((g for g, *_ in rss_report), default=0), 1),
        "max_shared_rings_mb": round(max((r.shmem_kb for r in run.ranks), default=0) / 1024, 1),
        "live_ranks_time_s": {k: round(v, 1) for k, v in sorted(run.live_time.items())},
        "baseline_samples_per_s": {k: round(v, 1) for k, v in rates.items()},
        "throughput_retained": round(retained, 3) if retained is not None else None,
        "events": dict(run.events),
        "harness_stalls": run.harness_stalls,
        "failures": run.failures,
    }
    print("chaos: %d faults in %.0f s (%s)" % (report["faults_total"], wall,
          ", ".join("%s %d" % kv for kv in sorted(run.faults.items()))))
    print("chaos: committed up to step %d; longest stall %.2f s after a failover "
          "fault (limit %.1f s) at %.1f-%.1f s; longest gap %.2f s"
          % (run.max_step, run.longest_stall[0], limit,
             run.longest_stall[1], run.longest_stall[2], run.longest_raw_stall))
    if useful is not None:
        print("chaos: the surviving history got %d steps (%d samples, %.0f/s) while the faults ran"
              % (len(useful), useful_samples, useful_samples / wall if wall else 0))
        print("chaos: its longest stall after a failover fault %.2f s at %.1f-%.1f s (the stall "
              "above counts a step of any branch as progress); its longest gap %.2f s at "
              "%.1f-%.1f s (%s)" % (surv + gap))
        for k, c in sorted(costs.items(), key=lambda kc: -kc[1][1]):
            print("chaos: without a surviving step, put down to %-13s %4d stretches > %.2f s, "
                  "%7.1f s (%.1f s of it a discarded branch committing)"
                  % (k, c[0], args.gap_s, c[1], c[2]))
    print("chaos: %d divergent steps, %d committed steps lost, %d merges discarding %d steps, %d resumes"
          % (run.divergent_steps, run.lost_steps, len(run.merges), run.discarded, len(run.resumes)))
    if run.died_uncommitted:
        print("chaos: %d uncommitted step hashes died with their only holders (killed before they "
              "could rejoin and report them; not counted as divergent)" % run.died_uncommitted)
    print("chaos: largest private RSS growth of a long-lived rank: %.1f MB (shared rings, apart: "
          "at most %.1f MB)" % (report["max_rss_growth_mb"], report["max_shared_rings_mb"]))
    if run.harness_stalls:
        print("chaos: the harness itself stood still > 1 s %d times (no fault for 1 s after each)"
              % run.harness_stalls)
    if retained is not None:
        print("chaos: throughput retained %.1f%% (baseline samples/s by live ranks: %s; "
              "load average %s during the faults, %s during the baselines)"
              % (100 * retained, ", ".join("%d: %.0f" % kv for kv in sorted(rates.items())),
                 "/".join("%.1f" % x for x in report["loadavg_during"] or []),
                 ", ".join("%.1f" % x for x in base_load)))
    for m in run.merges:
        print("chaos: merged at %.1f s: %s discarded %s (steps %s-%s, exact %s, %s)" % m)
    for rs in run.resumes:
        print("chaos: resumed at %.1f s: %s at step %s (%s)" % rs)
    for e in run.notes:
        print("chaos: note " + e)
    with open(os.path.join(root, "faults.log"), "w") as f:
        for entry in run.fault_log:
            f.write("%8.2f  %-14s %s %s\n" % entry)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if run.failures:
        with open(os.path.join(root, "tails.log"), "w") as f:
            for r in run.ranks:
                f.write("--- %s exit %s argv %s\n" % (r.label(), r.proc.returncode, " ".join(r.argv[1:])))
                for t, ev in r.notable:
                    f.write("%9.3f %s\n" % (t, json.dumps(ev)))
                f.write("  last events:\n")
                for t, ev in r.tail:
                    f.write("%9.3f %s\n" % (t, json.dumps(ev)))
        for e in run.failures:
            print("chaos: FAIL " + e)
        print("chaos: logs, the fault log and each rank's last events in %s" % root)
        return 1
    print("chaos: every check holds")
    if not args.out:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
