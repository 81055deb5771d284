#!/bin/bash
# scripts/device/remote-cohort.sh — run THERE (the device machine), in the
# repo root, with .devcarry carried (scripts/device/prepare.sh makes it here,
# iproute2's ip included):
#
#   command: bash scripts/device/remote-cohort.sh   carry: [".devcarry"]
#   kind: nvidia-h200 (no GPU is used)   timeout_s: 600
#
# Issue 10's remote figures on a quiet machine (the dev machine is two cores
# that the suite and other engineers share): scripts/bench-remote.py between
# network namespaces on a bridge, with the carried release rlx-rank —
#   cohort  two CPU ranks (mnist-mlp, f8e4m3, batch 32 each) in two
#           namespaces over RlxRemoteLink against the same two on the local
#           bus, interleaved; pinned to two cores (taskset, like the dev
#           machine) and then with all of the machine's cores
#   join    from `rlx-rank join INVITE` in a third namespace to its first
#           contributed gradient
#   kept    one more remote run whose processes' output is kept ($OUT/kept:
#           step events, the QUIC connection's statistics once a second)
# Output: $OUT/log.txt (everything) and $OUT/remote.md (the tables).
# Knobs: RLX_RC_RUNS (5), RLX_RC_STEPS (3000), RLX_RC_CPUS ("0,1"),
# RLX_RC_CCS (the congestion controllers of the cohort runs, "default" for
# rlx-rank's own choice: "default"),
# RLX_RC_SKIP_PINNED, RLX_RC_SKIP_ALL_CORES, RLX_RC_SKIP_JOIN, RLX_RC_SKIP_KEPT
# (set: skip those), RLX_RC_KEEP_CC,
# RLX_RC_SHAPED (e.g. "cubic,bbr2": also the shaped one-link bench with those),
# RLX_RC_THROUGHPUT (e.g. "default cubic": the unshaped one-link bench with each).
set -u -o pipefail

OUT=${OUT:-/tmp/rlx-device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1

C=$PWD/.devcarry
RUNS=${RLX_RC_RUNS:-5}
STEPS=${RLX_RC_STEPS:-3000}
CPUS=${RLX_RC_CPUS:-0,1}
T0=$(date +%s)
say () { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }

[ -x "$C/rlx-rank" ] || { say "no $C/rlx-rank: run scripts/device/prepare.sh here first and carry .devcarry"; exit 1; }
[ -x "$C/net/ip" ] || { say "no $C/net/ip: run scripts/device/prepare.sh (this version) first"; exit 1; }
cat "$C/MANIFEST"
. "$(dirname "$0")/carry-libs.sh"
export PATH=$C/net:$PATH
# bench-remote.py takes a build folder: BUILD/tools/rlx-rank
B=$(mktemp -d)
mkdir -p "$B/tools"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$C/rlx-rank" > "$B/tools/rlx-rank"
mkdir -p "$B/tests/remote"
for p in remote-bench udp-delay-relay; do
  printf '#!/bin/sh\nexec "%s" "$@"\n' "$C/$p" > "$B/tests/remote/$p"
done
chmod +x "$B/tools/rlx-rank" "$B/tests/remote/"*
"$B/tools/rlx-rank" --version 2>&1 | head -2
say "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

{
  echo "## Remote figures on the device machine ($(nproc) cores), $(date -u +%FT%TZ)"
  echo
  echo "$(head -1 "$C/MANIFEST")"
  echo
} > "$OUT/remote.md"
run () {
  local title=$1; shift
  say "$title: $*"
  echo "### $title" >> "$OUT/remote.md"
  echo '```' >> "$OUT/remote.md"
  echo "$*" >> "$OUT/remote.md"
  echo '```' >> "$OUT/remote.md"
  timeout 240 "$@" | tee -a "$OUT/remote.md"
  echo "rc ${PIPESTATUS[0]}" | tee -a "$OUT/remote.md"
  echo >> "$OUT/remote.md"
}
# a controller's flag: none for "default" (what rlx-rank picks by itself)
ccflag () { [ "$1" = default ] || echo "--quic-cc $1"; }
for cc in ${RLX_RC_CCS:-default}; do
  # shellcheck disable=SC2046
  [ -n "${RLX_RC_SKIP_PINNED-}" ] || run "cohort, pinned to cores $CPUS, QUIC $cc" \
    taskset -c "$CPUS" python3 scripts/bench-remote.py "$B" cohort --runs "$RUNS" --steps "$STEPS" \
    $(ccflag "$cc")
  # shellcheck disable=SC2046
  [ -n "${RLX_RC_SKIP_ALL_CORES-}" ] || run "cohort, all $(nproc) cores, QUIC $cc" \
    python3 scripts/bench-remote.py "$B" cohort --runs "$RUNS" --steps "$STEPS" $(ccflag "$cc")
done
[ -z "${RLX_RC_SHAPED-}" ] || run "one link, 200 Mbit/s (tbf), 50 ms RTT (udp-delay-relay)" \
  python3 scripts/bench-remote.py "$B" shaped --runs "$RUNS" --ccs "$RLX_RC_SHAPED" --no-nice
for cc in ${RLX_RC_THROUGHPUT-}; do
  # shellcheck disable=SC2046
  run "one link, unshaped, QUIC $cc" \
    python3 scripts/bench-remote.py "$B" throughput --runs "$RUNS" $(ccflag "$cc")
done
[ -n "${RLX_RC_SKIP_JOIN-}" ] || run "join, pinned to cores $CPUS" \
  taskset -c "$CPUS" python3 scripts/bench-remote.py "$B" join --runs "$RUNS"
# one more remote run that keeps its processes' output: every step event and,
# once a second, the QUIC connection's view (srtt, cwnd, pacing, wake-ups)
[ -z "${RLX_RC_SKIP_KEPT-}" ] || { say "done"; exit 0; }
say "one run kept, with G_MESSAGES_DEBUG=rlx-quic"
before=$(ls -d /tmp/rlxnet-cohort-* 2>/dev/null)
# shellcheck disable=SC2046
RLXNET_KEEP=1 G_MESSAGES_DEBUG=rlx-quic timeout 120 \
  python3 scripts/bench-remote.py "$B" cohort --runs 1 --steps "$STEPS" \
  $(ccflag "${RLX_RC_KEEP_CC:-default}") > "$OUT/kept.md"
for d in /tmp/rlxnet-cohort-*; do
  case " $before " in *" $d "*) continue ;; esac
  mkdir -p "$OUT/kept"
  for f in "$d"/*.stdout "$d"/*.stderr; do cp "$f" "$OUT/kept/"; done
done
ls -la "$OUT/kept" 2>/dev/null
say "done"
