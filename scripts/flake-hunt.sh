#!/usr/bin/env bash
# flake-hunt.sh — run the test suite again and again and count what fails.
#
#   scripts/flake-hunt.sh [-n N] [--load K] [--suite S]... [BUILD]
#
#   -n N        runs (default 10)
#   --load K    keep K busy loops running meanwhile (default 0; they are
#               killed when the script ends, however it ends)
#   --suite S   only this meson suite (may be repeated; default: all)
#   BUILD       the configured build directory (default build)
#
# Each run is `meson test` as ./rlx test runs it, its log kept as
# BUILD/meson-logs/flake-hunt-I.json (and .txt). At the end it prints, for
# every test program and every GLib test case that failed, in how many runs
# it failed, and the total. Exit status 1 when any run failed. It also checks
# after every run that /dev/null is still a character device: a test that
# replaces it (an atomic write renamed over it, as root) breaks every later
# test that reads or writes it.
set -euo pipefail
cd "$(dirname "$0")/.."

usage () {
  echo "usage: scripts/flake-hunt.sh [-n N] [--load K] [--suite S]... [BUILD]" >&2
  exit 2
}
need_count () {
  [[ "$2" =~ ^[0-9]+$ ]] || { echo "flake-hunt: $1 needs a whole number, not '$2'" >&2; usage; }
}

runs=10
load=0
build=build
suites=()
while (($#)); do
  case "$1" in
    -n) (($# >= 2)) || usage; need_count -n "$2"; runs=$2; shift 2 ;;
    --load) (($# >= 2)) || usage; need_count --load "$2"; load=$2; shift 2 ;;
    --suite) (($# >= 2)) || usage; suites+=(--suite "$2"); shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "flake-hunt: unknown option '$1'" >&2; usage ;;
    *) build=$1; shift ;;
  esac
done
((runs > 0)) || { echo "flake-hunt: -n must be at least 1" >&2; usage; }
if [[ ! -f "$build/build.ninja" ]]; then
  echo "flake-hunt: $build is not a configured build directory; run ./rlx test (or meson setup $build) first" >&2
  exit 2
fi

# The busy loops and the meson test in progress; killed however the script
# ends (meson runs in the background so that a signal is handled at once).
busy=()
stop_load () {
  for pid in "${busy[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  busy=()
}
trap stop_load EXIT
trap 'exit 130' INT TERM

ninja -C "$build" >/dev/null
for ((k = 0; k < load; k++)); do
  (while :; do :; done) &
  busy+=($!)
done

rm -f "$build"/meson-logs/flake-hunt-*
logs=()
lost=0
echo "flake-hunt: $runs runs of meson test ${suites[*]:-(all suites)} in $build, $load busy loops"
for ((i = 1; i <= runs; i++)); do
  t0=$SECONDS
  meson test -C "$build" --no-rebuild --num-processes "$(nproc)" --logbase "flake-hunt-$i" \
    "${suites[@]}" >/dev/null 2>&1 &
  busy+=($!)
  wait "${busy[-1]}" || true
  unset 'busy[-1]'
  log="$build/meson-logs/flake-hunt-$i.json"
  if [[ -s "$log" ]]; then
    logs+=("$log")
    outcome=$(python3 scripts/test-summary.py "$log" | grep -v ' test programs$' || true)
  else
    lost=$((lost + 1))
    outcome="FAILED: meson test wrote no log (see $build/meson-logs/flake-hunt-$i.txt)"
  fi
  printf 'run %d/%d (%ds): %s\n' "$i" "$runs" $((SECONDS - t0)) "${outcome//$'\n'/$'\n    '}"
  if [[ ! -c /dev/null ]]; then
    echo "flake-hunt: after run $i /dev/null is no longer a character device: a test replaced it." >&2
    echo "  Restore it (rm /dev/null; mknod -m 666 /dev/null c 1 3) and find the test that writes over it." >&2
    lost=$((lost + 1))
    break
  fi
done

status=0
if ((${#logs[@]})); then
  python3 scripts/test-summary.py --count "${logs[@]}" || status=1
fi
if ((lost)); then
  echo "flake-hunt: $lost runs left no usable result"
  status=1
fi
exit $status
