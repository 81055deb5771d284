#!/usr/bin/env bash
# The README's first command, `./rlx run`, as a new user types it:
#   1. with a display (this test runs under xvfb-run), it opens the app: a
#      window titled "RLX Cluster" appears on the X server;
#   2. with no display, it says why, prints the headless command and runs it
#      (here with --steps 20 appended, so it ends soon).
# Usage: test-rlx-run.sh SOURCE_ROOT BUILD_DIR
set -euo pipefail
SRC=$1 BUILD=$2
WORK=$(mktemp -d)
app_pid=
cleanup () {
  [[ -n "$app_pid" ]] && kill "$app_pid" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail () { echo "test-rlx-run: $*" >&2; exit 1; }

# a private home for the local cohort: bus, state, checkpoint, settings
# (a fresh one per part, so the headless run does not resume the app's cohort)
private_home () {
  for d in runtime state data config cache; do mkdir -p -m 0700 "$WORK/$1/$d"; done
  export XDG_RUNTIME_DIR=$WORK/$1/runtime XDG_STATE_HOME=$WORK/$1/state \
         XDG_DATA_HOME=$WORK/$1/data XDG_CONFIG_HOME=$WORK/$1/config XDG_CACHE_HOME=$WORK/$1/cache
}
export RLX_BUILD_DIR=$BUILD
unset WAYLAND_DISPLAY GDK_BACKEND

# 1. a display: the window opens
[[ -n "${DISPLAY:-}" ]] || fail "run me under xvfb-run (DISPLAY is not set)"
private_home app
"$SRC/rlx" run >"$WORK/run.out" 2>"$WORK/run.err" &
app_pid=$!
found=
for _ in $(seq 1 600); do
  if xwininfo -root -tree 2>/dev/null | grep '"RLX Cluster"' >/dev/null; then found=1; break; fi
  kill -0 "$app_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -z "$found" ]]; then
  cat "$WORK/run.out" "$WORK/run.err" >&2
  fail "./rlx run with DISPLAY=$DISPLAY opened no window titled \"RLX Cluster\""
fi
grep -q "no display" "$WORK/run.err" && fail "./rlx run said there is no display although one opened"
echo "ok: ./rlx run opened the window on DISPLAY=$DISPLAY"
kill -TERM "$app_pid"
for _ in $(seq 1 300); do kill -0 "$app_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$app_pid" 2>/dev/null && fail "the app did not quit within 30 s of SIGTERM"
app_pid=

# 2. no display: says why, prints the headless command and runs it
private_home headless
status=0
env -u DISPLAY "$SRC/rlx" run --steps 20 >"$WORK/headless.out" 2>"$WORK/headless.err" || status=$?
cat "$WORK/headless.out" "$WORK/headless.err"
[[ $status -eq 0 ]] || fail "./rlx run with no display exited $status"
grep -q "no display to open the desktop app on: neither WAYLAND_DISPLAY nor DISPLAY is set" \
  "$WORK/headless.err" || fail "./rlx run with no display did not say why"
grep -q "rlx-rank join --local --cohort default --dataset fashion-mnist" "$WORK/headless.err" ||
  fail "./rlx run with no display did not print the headless command"
grep -q "^done at step 20" "$WORK/headless.out" "$WORK/headless.err" ||
  fail "./rlx run with no display did not run the headless command to its end"
echo "ok: with no display ./rlx run printed the headless command and ran it"
