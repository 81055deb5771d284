#!/usr/bin/env bash
# scripts/screenshot.sh [OUT.png] — the README's picture (docs/screenshot.png),
# taken as a person would see it: the desktop app under Xvfb, joined to a
# local cohort of its own with 2 local ranks (--add-ranks) training on
# Fashion-MNIST for RLX_SHOT_SECONDS (default 40: the local ranks take a while to start), then the window captured
# (xwd), cropped to it and written as a small PNG. Private XDG folders and
# settings, so nothing of the user's own cohorts or preferences shows.
# Needs a build (build/, or RLX_BUILD_DIR), Xvfb, xwd, xwininfo, dbus-run-session and
# ImageMagick's convert (apt install xvfb x11-apps x11-utils dbus-x11 imagemagick
# python3-pyatspi gir1.2-atspi-2.0 at-spi2-core).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RLX_BUILD_DIR:-build}
out=$(realpath -m "${1:-docs/screenshot.png}")
seconds=${RLX_SHOT_SECONDS:-40}
height=${RLX_SHOT_HEIGHT:-960}
app=$build/app/rlx-cluster
[[ -x $app ]] || { echo "screenshot.sh: no $app: build first (meson setup $build && ninja -C $build)" >&2; exit 1; }
for p in Xvfb xwd xwininfo convert dbus-run-session /usr/bin/python3; do
  command -v "$p" >/dev/null || { echo "screenshot.sh: $p is missing (see this script's first comment)" >&2; exit 1; }
done

tmp=$(mktemp -d)
xvfb=
cleanup () { [[ -n $xvfb ]] && kill "$xvfb" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
for d in runtime state data config/glib-2.0/settings cache; do mkdir -p -m 0700 "$tmp/$d"; done
# the window as the README shows it: 1280 wide, Fashion-MNIST, f16 on the wire
cat > "$tmp/config/glib-2.0/settings/keyfile" <<KEYS
[io/github/rlx/Cluster]
window-width=1280
window-height=$height
dataset='fashion-mnist'
precision='f16'
KEYS

# a free display number
n=77
while [[ -e /tmp/.X11-unix/X$n || -e /tmp/.X$n-lock ]]; do n=$((n + 1)); done
Xvfb ":$n" -noreset -screen 0 1280x${height}x24 >"$tmp/xvfb.log" 2>&1 &
xvfb=$!
for _ in $(seq 100); do [[ -e /tmp/.X11-unix/X$n ]] && break; sleep 0.1; done
[[ -e /tmp/.X11-unix/X$n ]] || { cat "$tmp/xvfb.log" >&2; echo "screenshot.sh: Xvfb did not start" >&2; exit 1; }

export DISPLAY=:$n GSETTINGS_BACKEND=keyfile XDG_RUNTIME_DIR=$tmp/runtime XDG_STATE_HOME=$tmp/state \
       XDG_DATA_HOME=$tmp/data XDG_CONFIG_HOME=$tmp/config XDG_CACHE_HOME=$tmp/cache
echo "screenshot.sh: the app on :$n with 2 local ranks, ${seconds} s of training" >&2
# Inside one private session bus: start the app, open the panel's details
# (the per-rank rates and the membership timeline) through its accessible
# action, as a screen reader would press it, train, capture, then SIGTERM
# (the app leaves the cohort and stops its ranks, as on Ctrl+Q).
drive='
import subprocess, sys, time
import pyatspi
from gi.repository import GLib
app_path, tmp, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
def spin(s):
    end = time.monotonic() + s
    while time.monotonic() < end:
        GLib.MainContext.default().iteration(False)
        time.sleep(0.02)
def fail(why):
    print("screenshot.sh:", why, "(the app log:", tmp + "/app.log)", file=sys.stderr)
    proc.kill()
    sys.exit(1)
proc = subprocess.Popen([app_path, "--cohort", "readme", "--join", "--add-ranks", "2"],
                        stdout=open(tmp + "/app.log", "w"), stderr=subprocess.STDOUT)
start = time.monotonic()
def find(a, pred):
    try:
        if pred(a):
            return a
        for c in a:
            r = c and find(c, pred)
            if r:
                return r
    except Exception:
        pass
    return None
def expanded(a):
    return a.getState().contains(pyatspi.STATE_EXPANDED)
details = None
while not (details and expanded(details)):
    if time.monotonic() - start > 60:
        fail("the details (the expander that names the membership timeline) did not open")
    spin(0.5)
    if proc.poll() is not None:
        fail("the app exited early")
    app = find(pyatspi.Registry.getDesktop(0), lambda a: a.get_process_id() == proc.pid)
    details = app and find(app, lambda a: a.getState().contains(pyatspi.STATE_EXPANDABLE)
                           and find(a, lambda l: "membership timeline" in (l.name or "")))
    if details and not expanded(details):
        details.queryAction().doAction(0)
        spin(1.0)
        print("screenshot.sh: opened the details:", expanded(details), file=sys.stderr)
spin(max(0.0, seconds - (time.monotonic() - start)))
if proc.poll() is not None:
    fail("the app exited early")
subprocess.run(["xwd", "-root", "-silent", "-out", tmp + "/shot.xwd"], check=True)
with open(tmp + "/tree.txt", "w") as f:
    subprocess.run(["xwininfo", "-root", "-tree"], stdout=f, check=True)
proc.terminate()
proc.wait(timeout=60)
'
dbus-run-session -- /usr/bin/python3 -c "$drive" "$app" "$tmp" "$seconds" 2> >(grep -v '^dbus-daemon\|^SpiRegistry' >&2)

# crop to the app's window (the largest top-level one named RLX Cluster)
geom=$(awk '/"RLX Cluster"/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+x[0-9]+\+/) print $i }' "$tmp/tree.txt" |
       sort -t x -k1,1nr | head -1)
[[ -n $geom ]] || { cat "$tmp/tree.txt" >&2; echo "screenshot.sh: no window named RLX Cluster" >&2; exit 1; }
size=${geom%%+*}; rest=${geom#*+}; x=${rest%%+*}; y=${rest#*+}
convert "xwd:$tmp/shot.xwd" -crop "${size}+${x}+${y}" +repage -strip \
  -define png:compression-level=9 -define png:compression-filter=5 "$out"
echo "screenshot.sh: $out, window $geom, $(stat -c %s "$out") bytes" >&2
