#!/usr/bin/python3
"""The whole app, driven through AT-SPI the way assistive technology and a
person drive it (run under Xvfb with a private session bus; see
tests/app/meson.build and shared/GUI-TESTING.md).

train:  start rlx-cluster; press Join Cohort, then Add Local Rank twice; let
        the three ranks train; switch the wire precision dropdown to f8 E4M3
        with the keyboard (the local ranks follow); read the roster's three
        rows and check each one
        against the ranks' own event streams (the local ranks' JSON logs),
        and the banner above them against the ranks' fallback reasons (one
        shared by all is said there once, the rows show a short tag);
        check the chart describes itself; save a screenshot; press Ctrl+Q
        while the ranks train and check that no process is left behind.
killed: start rlx-cluster with two local ranks, SIGKILL the app, and check
        that its ranks die with it.
invite: controls are named once ("Batch per rank", not twice); type a
        malformed invite (the error shows under the entry as you
        type, Join waits); join an invite where nothing listens: "Joining
        rlx://HOST:PORT…", then, once the node gives up, the empty page with
        the reason, and no cohort founded (no leader or joined event, no
        checkpoint); join this machine's cohort, Leave, and join a different
        invite from the empty page again (it is the one used), then Cancel.

Environment: RLX_CLUSTER (the app), RLX_RANK (rlx-rank), RLX_SCREENSHOT
(where the screenshot goes; default: beside this test in the build tree,
RLX_SCREENSHOT_DEFAULT).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

import gi

gi.require_version("Atspi", "2.0")
from gi.repository import GLib  # noqa: E402
import pyatspi  # noqa: E402

TIMEOUT = 120.0          # seconds; every wait has one
STEPS_WITH_THREE = 30    # steps trained by the three ranks before reading the roster


class Failure(Exception):
    pass


T0 = time.monotonic()


def log(*args):
    print(f"# {time.monotonic() - T0:6.1f}s", *args, flush=True)


def spin(seconds):
    """Let GLib (and so AT-SPI) events in for about @seconds."""
    end = time.monotonic() + seconds
    ctx = GLib.MainContext.default()
    while time.monotonic() < end:
        while ctx.iteration(False):
            pass
        time.sleep(0.01)


def wait_for(what, pred, timeout=TIMEOUT, interval=0.05):
    end = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < end:
        try:
            value = pred()
            if value:
                return value
        except Exception as e:  # the tree changes under us; look again
            last_error = e
        spin(interval)
    raise Failure(f"timed out after {timeout:.0f} s waiting for {what}"
                  + (f" (last error: {last_error})" if last_error else ""))


# ── the accessibility tree ────────────────────────────────────────────────

def children(acc):
    try:
        return [c for c in acc if c is not None]
    except Exception:
        return []


def walk(acc):
    yield acc
    for c in children(acc):
        yield from walk(c)


def showing(acc):
    # GTK 4.8 sets no "showing" state; hidden widgets leave the tree and the
    # rest are "visible" (the pages of a stack that are not shown included)
    try:
        return acc.getState().contains(pyatspi.STATE_VISIBLE)
    except Exception:
        return False


def find_all(root, role=None, name=None, only_showing=True):
    out = []
    for a in walk(root):
        try:
            if role and a.getRoleName() != role:
                continue
            if name is not None and a.name != name:
                continue
            if only_showing and not showing(a):
                continue
            out.append(a)
        except Exception:
            continue
    return out


def find(root, role=None, name=None):
    found = find_all(root, role, name)
    return found[0] if found else None


def labels(acc):
    return [a.name for a in walk(acc) if a.getRoleName() == "label"]


def click(acc):
    action = acc.queryAction()
    for i in range(action.nActions):
        if action.getName(i) == "click":
            action.doAction(i)
            return
    raise Failure(f"{acc.getRoleName()} '{acc.name}' has no click action")


def press(keysym_name):
    keyval = Gdk_keyval(keysym_name)
    pyatspi.Registry.generateKeyboardEvent(keyval, None, pyatspi.KEY_SYM)


def Gdk_keyval(name):
    gi.require_version("Gdk", "4.0")
    from gi.repository import Gdk
    v = Gdk.keyval_from_name(name)
    if v == 0:
        raise Failure(f"no key named {name}")
    return v


def ctrl(keysym_name):
    """Hold Control, press the key, let go (by keycode: Control_L is 37 in
    Xvfb's evdev keymap)."""
    pyatspi.Registry.generateKeyboardEvent(37, None, pyatspi.KEY_PRESS)
    spin(0.05)
    press(keysym_name)
    spin(0.05)
    pyatspi.Registry.generateKeyboardEvent(37, None, pyatspi.KEY_RELEASE)


def alt(keysym_name):
    """The same with Alt (Alt_L is 64 in Xvfb's evdev keymap)."""
    pyatspi.Registry.generateKeyboardEvent(64, None, pyatspi.KEY_PRESS)
    spin(0.05)
    press(keysym_name)
    spin(0.05)
    pyatspi.Registry.generateKeyboardEvent(64, None, pyatspi.KEY_RELEASE)


def find_app(pid):
    def look():
        desktop = pyatspi.Registry.getDesktop(0)
        for a in children(desktop):
            if a.get_process_id() == pid:
                return a
        return None
    return wait_for(f"the app (pid {pid}) on the accessibility bus", look)


# ── the app ───────────────────────────────────────────────────────────────

class App:
    def __init__(self, args, tmp, settings, env=None):
        self.env = dict(os.environ, **(env or {}))
        for k in ("XDG_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
            self.env[k] = os.path.join(tmp, k.lower())
            os.makedirs(self.env[k], mode=0o700, exist_ok=True)
        keyfile_dir = os.path.join(self.env["XDG_CONFIG_HOME"], "glib-2.0", "settings")
        os.makedirs(keyfile_dir, exist_ok=True)
        with open(os.path.join(keyfile_dir, "keyfile"), "w") as f:
            f.write("[io/github/rlx/Cluster]\n")
            for k, v in settings.items():
                f.write(f"{k}={v}\n")
        self.env["GSETTINGS_BACKEND"] = "keyfile"
        self.cohort = args[args.index("--cohort") + 1]
        self.proc = subprocess.Popen([os.environ["RLX_CLUSTER"]] + args, env=self.env)
        self.acc = find_app(self.proc.pid)

    @property
    def log_dir(self):
        return os.path.join(self.env["XDG_STATE_HOME"], "rlx-cluster", self.cohort, "ranks")

    def rank_logs(self):
        """node id → list of its JSON events"""
        out = {}
        if not os.path.isdir(self.log_dir):
            return out
        for name in sorted(os.listdir(self.log_dir)):
            if not name.endswith(".jsonl"):
                continue
            events = []
            with open(os.path.join(self.log_dir, name)) as f:
                for line in f:
                    line = line.strip()
                    if line:
                        try:
                            events.append(json.loads(line))
                        except ValueError:
                            pass   # a line being written
            out[name[:-len(".jsonl")]] = events
        return out

    def child_pids(self):
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == self.proc.pid:
                pids.append(int(entry))
        return pids

    def window(self):
        return find(self.acc, "frame", "RLX Cluster")

    def button(self, name):
        """Found once (a walk of the tree costs a D-Bus call per node, slow
        while the ranks keep both cores busy), then reused while it stays
        valid (GTK 4.8 sometimes replaces a widget's accessible object)."""
        cache = self.__dict__.setdefault("_buttons", {})
        acc = cache.get(name)
        if acc is not None:
            try:
                if acc.name == name and acc.queryAction().nActions > 0:
                    return acc
            except Exception:
                pass
        cache[name] = wait_for(f"the '{name}' button",
                               lambda: find(self.acc, "push button", name))
        return cache[name]

    def find_once(self, role, name):
        cache = self.__dict__.setdefault("_found", {})
        if (role, name) not in cache:
            cache[(role, name)] = wait_for(f"the {role} '{name}'", lambda: find(self.acc, role, name))
        return cache[(role, name)]

    def label_after(self, heading):
        """The label right after the label @heading (its value): found once,
        then read (walking the whole tree costs a D-Bus call per node)."""
        key = "_after_" + heading
        if getattr(self, key, None) is None:
            def look():
                for a in walk(self.acc):
                    if a.getRoleName() == "label" and a.name == heading:
                        sibs = children(a.parent)
                        i = [s.name for s in sibs].index(heading)
                        if i + 1 < len(sibs):
                            return sibs[i + 1]
                return None
            setattr(self, key, wait_for(f"the label after '{heading}'", look))
        return getattr(self, key)

    def ranks_text(self):
        return self.label_after("Ranks").name

    def step(self):
        return step_of(self.label_after("Loss").name)

    def roster_rows(self):
        table = self.find_once("tree table", "Roster")
        rows = []
        for lst in children(table):
            if lst.getRoleName() != "list":
                continue
            for row in children(lst):
                if row.getRoleName() == "table row":
                    rows.append([labels(cell) for cell in children(row)])
        return rows

    def roster_row_names(self):
        table = self.find_once("tree table", "Roster")
        return [row.name for lst in children(table) if lst.getRoleName() == "list"
                for row in children(lst) if row.getRoleName() == "table row"]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def step_of(label):
    # "step 123 · loss 0.4567"
    try:
        return int(label.split()[1])
    except (IndexError, ValueError, AttributeError):
        return -1


def fallback_text(fallback):
    return fallback if fallback else "none"


TAG_CHARS = 28   # RLX_ROSTER_TAG_CHARS


def fallback_tag(fallback):
    """What a row shows when every rank shares its reason (the roster's
    banner says it in full): its first clause, at most TAG_CHARS long."""
    if not fallback:
        return fallback_text(fallback)
    end = len(fallback)
    for cut in (" (", " — ", ", ", "; "):
        i = fallback.find(cut)
        if 0 < i < end:
            end = i
    head = fallback[:end]
    return head if len(head) <= TAG_CHARS else head[:TAG_CHARS - 1].rstrip() + "…"


BANNER = "Every rank passed over a faster backend for the same reason: "


# ── train: the scenario of the issue ──────────────────────────────────────

def test_train(tmp):
    settings = {
        "dataset": "'fashion-mnist'",
        "backend": "'auto'",
        "batch": "uint32 16",
        "evaluate-every": "uint32 100",
        "precision": "'f32'",
        "window-width": "1280",
        "window-height": "800",
    }
    app = App(["--cohort", f"atspi-{os.getpid()}"], tmp, settings)
    try:
        # everything the test touches, found while the app is idle (a walk of
        # the tree costs a D-Bus round trip per node, slow once it trains)
        for role, name in (("combo box", "Wire precision"), ("tree table", "Roster"),
                           ("image", "Loss chart")):
            app.find_once(role, name)
        app.button("Add Local Rank")
        app.label_after("Loss")
        app.label_after("Ranks")
        log("app up; joining")
        click(app.button("Join Cohort"))
        wait_for("the roster to show this node", lambda: app.ranks_text() == "1 rank")
        joined_at = time.monotonic()
        log("adding two local ranks")
        click(app.button("Add Local Rank"))
        wait_for("the first local rank's log", lambda: len(app.rank_logs()) == 1)
        spin(0.4)   # two clicks closer than ~300 ms merge into one
        click(app.button("Add Local Rank"))
        wait_for("the second local rank's log", lambda: len(app.rank_logs()) == 2)
        wait_for("three rows in the roster", lambda: app.ranks_text() == "3 ranks")

        start = wait_for("a step", lambda: app.step() > 0)
        wait_for(f"{STEPS_WITH_THREE} steps with three ranks",
                 lambda: app.step() >= start + STEPS_WITH_THREE)

        log("switching the wire precision to f8 E4M3 with the keyboard")
        combo = app.find_once("combo box", "Wire precision")
        toggle = [c for c in walk(combo) if c.getRoleName() == "push button"][0]
        click(toggle)
        spin(0.5)
        for key in ("Down", "Down", "Return"):
            press(key)
            spin(0.2)
        wait_for("the dropdown to show f8 E4M3",
                 lambda: "f8 E4M3" in [a.name for a in walk(combo) if a.getRoleName() == "label"
                                       and showing(a)])

        def self_row():
            for row in app.roster_rows():
                if row and row[0] and "you" in row[0][0]:
                    return row
            return None
        wait_for("this node's row to say f8 E4M3", lambda: (self_row() or [[], [], [], [], [""]])[4] == ["f8 E4M3"])

        # let every rank log a few more steps
        now = app.step()
        wait_for("ten more steps", lambda: app.step() >= now + 10)

        log("reading the roster against the ranks' own events")
        rows = app.roster_rows()
        if len(rows) != 3:
            raise Failure(f"the roster shows {len(rows)} rows, not 3: {rows}")
        logs = app.rank_logs()
        by_node = {}
        for row in rows:
            # rank | host, node | backend, device | fallback | precision | samples/s | state | sent | received
            by_node[row[1][1]] = row
        children_ids = sorted(logs)
        app_ids = [n for n in by_node if n not in children_ids]
        if len(app_ids) != 1 or sorted(n for n in by_node if n in children_ids) != children_ids:
            raise Failure(f"roster nodes {sorted(by_node)} are not this node plus the local ranks {children_ids}")
        app_id = app_ids[0]
        # a fallback reason every rank shares is said once, in the banner
        # above the roster; the rows then show a short tag
        reasons = set()
        for node in children_ids:
            reasons |= {e.get("fallback", "") for e in logs[node] if e.get("event") == "joined"}
            reasons |= {e.get("fallback", "") for e in logs[node]
                        if e.get("event") == "member-joined" and e.get("node") == app_id}
        shared = len(reasons) == 1 and "" not in reasons
        banners = [a.name for a in find_all(app.window(), "label")
                   if a.name.startswith(BANNER)]
        if shared and banners != [BANNER + next(iter(reasons))]:
            raise Failure(f"every rank says {reasons}, but the banners are {banners}")
        if not shared and banners:
            raise Failure(f"the ranks' reasons differ ({reasons}), but a banner says {banners}")
        log("shared reason:", banners[0] if banners else "none (the reasons differ)")

        def shown(fallback):
            return [fallback_tag(fallback) if shared else fallback_text(fallback)]
        for node in children_ids:
            joined = [e for e in logs[node] if e.get("event") == "joined"]
            if not joined:
                raise Failure(f"{node} logged no 'joined' event")
            j = joined[0]
            row = by_node[node]
            if j.get("node") != node:
                raise Failure(f"{node}'s log says it is {j.get('node')}")
            if row[2][0] != j["backend"]:
                raise Failure(f"row of {node} says backend {row[2][0]}, the rank says {j['backend']}")
            if row[3] != shown(j.get("fallback", "")):
                raise Failure(f"row of {node} says fallback {row[3]}, the rank says {j.get('fallback')!r}")
            # joined at f32, the local ranks follow the app's Wire dropdown
            if row[4] != ["f8 E4M3"]:
                raise Failure(f"row of {node} says precision {row[4]}: the local ranks follow the "
                              f"app's switch to f8 E4M3")
            # and the rank saw this node as the others do
            seen = [e for e in logs[node] if e.get("event") == "member-joined" and e.get("node") == app_id]
            if seen:
                s = seen[0]
                app_row = by_node[app_id]
                if app_row[2][0] != s["backend"] or app_row[3] != shown(s.get("fallback", "")):
                    raise Failure(f"this node's row {app_row} disagrees with what {node} saw: {s}")
            steps = [e for e in logs[node] if e.get("event") == "step" and e.get("members") == 3]
            if len(steps) < 5:
                raise Failure(f"{node} logged only {len(steps)} steps with three members")
        # one model: the ranks report the same hash for the same step
        hashes = {}
        for node in children_ids:
            for e in logs[node]:
                if e.get("event") == "step":
                    hashes.setdefault(e["step"], set()).add(e["hash"])
        common = [s for s, hs in hashes.items()
                  if all(any(e.get("event") == "step" and e["step"] == s for e in logs[n]) for n in children_ids)]
        bad = sorted(s for s in common if len(hashes[s]) != 1)
        if not common or bad:
            for node in children_ids:
                log(node, [json.dumps(e)[:160] for e in logs[node] if e.get("event") != "step"])
            raise Failure(f"the local ranks disagree on the parameter hash at steps {bad[:10]}"
                          f" ({len(bad)} of {len(common)})")
        app_row = by_node[app_id]
        if "you" not in app_row[0][0] or app_row[4] != ["f8 E4M3"]:
            raise Failure(f"this node's row is {app_row}")
        # each row has a spoken name (not GTK's "GtkListItemWidget")
        wait_for("three rows with spoken names", lambda: sorted(
            n.split(",")[0] for n in app.roster_row_names()) == ["Rank 0", "Rank 1", "Rank 2"])
        for name in app.roster_row_names():
            if "samples/s" not in name or not any(f", {r[2][0]}, " in name for r in rows):
                raise Failure(f"a roster row's spoken name says too little: {name!r}")
        log("roster ok:", [(n, r[2][0], r[4][0]) for n, r in by_node.items()])
        # every control on the dashboard says what it does, not GTK's class
        # name (the details expander was announced as "GtkExpander"); a
        # dropdown's inner toggle is GTK's own and says nothing. Checked once
        # the join's toast (6 s) has gone: libadwaita 1.2's toast has a
        # dismiss button whose only name is "GtkImage" (the library's, not a
        # control of ours; a plain wait, as for the screenshot below)
        spin(max(0.0, 7.0 - (time.monotonic() - joined_at)))
        controls = ("push button", "toggle button", "check box", "slider", "spin button", "combo box")
        def class_named(a):
            try:   # (a roster row may go while the walk reads it)
                return (a.getRoleName() in controls and a.name.startswith(("Gtk", "Adw"))
                        and a.parent.getRoleName() != "combo box")
            except Exception:
                return False
        unnamed = [f"{a.getRoleName()} {a.name!r}" for a in walk(app.acc) if class_named(a)]
        if unnamed:
            raise Failure(f"controls named by their GTK class: {unnamed}")

        chart = app.find_once("image", "Loss chart")
        wait_for("the chart to describe the loss", lambda: "the loss is" in chart.description)
        wait_for("the chart to describe the test accuracy", lambda: "test accuracy" in chart.description)
        log("chart says:", chart.description)

        # a screenshot of the run (the README's own comes from
        # scripts/screenshot.sh), the join's toast gone (the wait above)
        shot = os.environ.get("RLX_SCREENSHOT") or os.environ["RLX_SCREENSHOT_DEFAULT"]
        raw = os.path.join(tmp, "shot.xwd")
        with open(raw, "wb") as f:
            subprocess.run(["xwd", "-root", "-silent"], stdout=f, check=True)
        subprocess.run(["convert", f"xwd:{raw}", "-crop", "1280x800+0+0", "+repage",
                        "-strip", shot], check=True)
        log("screenshot:", shot)

        check_events_filter(app)

        log("quitting with Ctrl+Q while the ranks train")
        pids = app.child_pids()
        if len(pids) != 2:
            raise Failure(f"the app has {len(pids)} child processes, not 2: {pids}")
        ctrl("q")
        try:
            app.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise Failure("the app did not quit within the timeout after Ctrl+Q")
        if app.proc.returncode != 0:
            raise Failure(f"the app exited with status {app.proc.returncode}")
        wait_for("every local rank to be gone", lambda: not any(alive(p) for p in pids), timeout=30)
        for node, events in app.rank_logs().items():
            if not any(e.get("event") == "done" for e in events):
                raise Failure(f"{node} did not leave cleanly (no 'done' event)")
        log("quit ok: no process left, every rank left cleanly")
    finally:
        for p in app.child_pids():
            os.kill(p, signal.SIGKILL)
        app.kill()


# ── invite: joining by invite is honest ───────────────────────────────────

def check_events_filter(app):
    """The events page: the filter's three toggles each keep their kind of
    row (newest first), and no row per evaluation (one line says the last)."""
    log("the events page and its filter")
    alt("2")   # win.show-events
    lst = wait_for("the events list", lambda: find(app.acc, "list", "Events"))
    toggles = {}
    for name in ("All", "Membership", "Warnings"):
        # GTK 4.8 gives a toggle button the push button role, and "pressed"
        toggles[name] = wait_for(f"the '{name}' filter",
                                 lambda n=name: find(app.acc, "push button", n))

    def titles():
        # each row: icon, then its title and detail labels, then the time
        return [labels(row)[0] for row in children(lst) if labels(row)]

    def under(name):
        click(toggles[name])
        spin(0.4)   # clicks closer than ~300 ms merge
        wait_for(f"the '{name}' filter to be on",
                 lambda: any(toggles[name].getState().contains(st)
                             for st in (pyatspi.STATE_PRESSED, pyatspi.STATE_CHECKED)))
        spin(0.3)
        return titles()

    every = under("All")
    if any("Test accuracy" in t for t in every):
        raise Failure(f"an evaluation has a row of its own: {every}")
    wait_for("the last test accuracy above the list",
             lambda: any("Test accuracy" in a.name for a in walk(app.acc)
                         if a.getRoleName() == "label" and showing(a)))
    members = under("Membership")
    if not members or not all(any(w in t.lower() for w in ("joined", "leads", "left", "refused",
                                                           "merged")) for t in members):
        raise Failure(f"the membership filter shows {members}")
    if not any("joined" in t for t in members):
        raise Failure(f"no join under the membership filter: {members}")
    warnings = under("Warnings")
    if any("joined from" in t or "leads the cohort" in t for t in warnings):
        raise Failure(f"the warnings filter shows membership rows: {warnings}")
    if len(every) < len(members) or len(every) < len(warnings):
        raise Failure(f"All shows less than a filter: {len(every)}, {len(members)}, {len(warnings)}")
    under("All")
    log("events filter ok:", len(every), "all,", len(members), "membership,", len(warnings),
        "warnings")
    alt("1")   # back to the training page


def free_port():
    """A TCP port on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_invite(tmp):
    settings = {"dataset": "'synthetic'", "backend": "'cpu'", "batch": "uint32 8"}
    events_path = os.path.join(tmp, "events.jsonl")
    app = App(["--cohort", f"atspi-invite-{os.getpid()}"], tmp, settings,
              {"RLX_CLUSTER_EVENT_LOG": events_path})
    key = "00112233445566778899aabbccddeeff"
    port, port2 = free_port(), free_port()
    try:
        entry = wait_for(
            "the invite entry",
            lambda: [a for a in find_all(app.acc, "text") if a.name.startswith("Invite")][0])
        status = app.label_after("RLX Cluster")       # the header's subtitle
        join = app.button("Join Cohort")

        def doubled(name):
            words = name.split()
            half = len(words) // 2
            return len(words) >= 2 and len(words) % 2 == 0 and words[:half] == words[half:]

        log("controls say their names once")
        if entry.name != "Invite (optional)":
            raise Failure(f"the invite entry is called {entry.name!r}")
        ctrl("comma")
        wait_for("the preferences' Batch per rank",
                 lambda: find(app.acc, "spin button", "Batch per rank"))
        names = [a.name for a in walk(app.acc) if a.getRoleName() in
                 ("spin button", "check box", "combo box", "text", "push button")]
        if any(doubled(n) for n in names):
            raise Failure(f"doubled names: {[n for n in names if doubled(n)]}")
        press("Escape")
        wait_for("the preferences to close",
                 lambda: not find(app.acc, "spin button", "Batch per rank"))

        def type_invite(text):
            entry.queryEditableText().setTextContents(text)
            spin(0.2)

        def sensitive(acc):
            return acc.getState().contains(pyatspi.STATE_SENSITIVE)

        def failure_label():
            return next(
                (a for a in find_all(app.acc, "label") if a.name.startswith("Could not join:")),
                None)

        def join_buttons():
            # the empty page's, plus the header's when the dashboard shows
            return len(find_all(app.acc, "push button", "Join Cohort"))

        log("a malformed invite, as typed")
        type_invite(f"rlx://127.0.0.1:{port}/nowhere")
        wait_for("the error under the invite entry", lambda: any(
            "rlx://HOST:PORT/COHORT#KEY" in n and "not an invite" in n for n in labels(app.acc)))
        if sensitive(join):
            raise Failure("Join Cohort can be pressed with a malformed invite")

        log("an invite where nothing listens")
        invite = f"rlx://127.0.0.1:{port}/nowhere#{key}"
        type_invite(invite)
        wait_for("the error to go", lambda: not any("not an invite" in n for n in labels(app.acc)))
        wait_for("Join Cohort to be pressable", lambda: sensitive(join))
        click(join)
        joining = f"Joining rlx://127.0.0.1:{port}…"
        wait_for(f"'{joining}' in the header", lambda: status.name == joining)
        wait_for(f"the joining page's '{joining}'", lambda: find(app.acc, "label", joining))
        wait_for("the joining page's Cancel", lambda: find(app.acc, "push button", "Cancel"))
        if find(app.acc, "push button", "Add Local Rank") and \
           sensitive(find(app.acc, "push button", "Add Local Rank")):
            raise Failure("Add Local Rank can be pressed while joining")
        log("joining; waiting for the node to give up")
        wait_for("the empty page with the reason", failure_label, timeout=90)
        reason = failure_label().name
        wait_for("the header to say idle", lambda: status.name == "Not in a cohort")
        if "nothing was founded" not in reason or f"127.0.0.1:{port}" not in reason:
            raise Failure(f"the reason does not say what happened: {reason}")
        if join_buttons() != 1:
            raise Failure("after the failed join the dashboard shows, not the invite entry")
        with open(events_path) as f:
            events = [json.loads(line) for line in f if line.strip()]
        founded = [e for e in events if e.get("event") in ("leader", "joined", "step")]
        if founded:
            raise Failure(f"the failed join founded a cohort: {founded[:3]}")
        ckpts = [os.path.join(d, n) for d, _, ns in os.walk(app.env["XDG_DATA_HOME"]) for n in ns
                 if n.endswith(".safetensors")]
        if ckpts:
            raise Failure(f"the failed join wrote a checkpoint: {ckpts}")
        log("failed honestly:", reason)

        log("this machine's cohort, then Leave")
        type_invite("")
        wait_for("Join Cohort to be pressable", lambda: sensitive(join))
        spin(0.4)
        click(join)
        wait_for("the dashboard", lambda: "·" in status.name)
        if failure_label():
            raise Failure("the last join's failure still shows after joining")
        spin(0.4)
        click(app.button("Leave"))
        wait_for("the header to say idle", lambda: status.name == "Not in a cohort")
        wait_for("the empty page with the invite entry", lambda: join_buttons() == 1)

        log("a different invite after Leave")
        type_invite(f"rlx://127.0.0.1:{port2}/elsewhere#{key}")
        wait_for("Join Cohort to be pressable", lambda: sensitive(join))
        spin(0.4)
        click(join)
        joining2 = f"Joining rlx://127.0.0.1:{port2}…"
        wait_for(f"'{joining2}' in the header (the new invite)", lambda: status.name == joining2)
        spin(0.4)
        click(app.button("Cancel"))
        wait_for("the header to say idle after Cancel", lambda: status.name == "Not in a cohort")
        wait_for("the empty page after Cancel", lambda: join_buttons() == 1)
        if failure_label():
            raise Failure("Cancel shows a failure")
        log("invite ok: honest failure, Leave, a new invite, Cancel")
    finally:
        for p in app.child_pids():
            os.kill(p, signal.SIGKILL)
        app.kill()


# ── killed: the ranks die with the app ────────────────────────────────────

def test_killed(tmp):
    settings = {"dataset": "'synthetic'", "backend": "'cpu'", "batch": "uint32 8"}
    app = App(["--cohort", f"atspi-kill-{os.getpid()}", "--add-ranks", "2"], tmp, settings)
    try:
        wait_for("three rows in the roster", lambda: app.ranks_text() == "3 ranks")
        pids = app.child_pids()
        if len(pids) != 2:
            raise Failure(f"the app has {len(pids)} child processes, not 2: {pids}")
        os.kill(app.proc.pid, signal.SIGKILL)
        app.proc.wait()
        wait_for("the local ranks to die with the app", lambda: not any(alive(p) for p in pids), timeout=30)
        log("killed ok: no orphan")
    finally:
        for p in app.child_pids():
            os.kill(p, signal.SIGKILL)
        app.kill()


def main():
    tests = {"train": test_train, "killed": test_killed, "invite": test_invite}
    which = sys.argv[1:] or list(tests)
    failed = 0
    print(f"1..{len(which)}")
    for i, name in enumerate(which, 1):
        tmp = tempfile.mkdtemp(prefix="rlx-atspi-")
        t0 = time.monotonic()
        try:
            tests[name](tmp)
            print(f"ok {i} /app/atspi/{name} # {time.monotonic() - t0:.1f} s", flush=True)
        except Exception as e:
            failed += 1
            print(f"not ok {i} /app/atspi/{name}: {e}", flush=True)
            if not isinstance(e, Failure):
                traceback.print_exc(file=sys.stdout)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
