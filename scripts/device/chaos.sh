#!/bin/bash
# scripts/device/chaos.sh — issue 29's chaos run on the device machine's 16
# cores with at least 8 ranks: scripts/chaos.py against the carried rlx-rank
# (CPU backend, the synthetic data), in one call.
#
#   here:   bash scripts/device/prepare.sh --no-debs &&
#           RLX_PREP_OUT=.devcarry-chaos RLX_PREP_DATA=0 bash scripts/device/prepare-outer.sh
#           (RLX_PREP_NET=1 as well for --netns in RLX_CHAOS_ARGS: ranks on
#           network-namespace hosts, with the carried ip; root on the device)
#   device: command 'bash scripts/device/chaos.sh'  carry [".devcarry-chaos"]
#           kind nvidia-h200   timeout_s 600
#
# Knobs: RLX_CHAOS_SECONDS (seconds of faults, 240), RLX_CHAOS_SEED (30),
# RLX_CHAOS_RANKS (ranks at the start, 10), RLX_CHAOS_MIN (never kill below,
# 8), RLX_CHAOS_MAX (never spawn above, 14), RLX_CHAOS_BASELINE (seconds of
# each live count without faults, for the throughput retained; 6),
# RLX_CHAOS_RANK (an rlx-rank to use instead of the carried one: a dry run
# here), RLX_CHAOS_ARGS (more chaos.py options, split on spaces: e.g.
# "--cuts --heartbeat-timeout-ms 1500"). Everything goes to $OUT: log.txt, chaos.json (the report),
# faults.log, and on a failure tails.log (each rank's last events).
#
# A small dry run here:
#   OUT=/tmp/dc RLX_CHAOS_RANK=build/tools/rlx-rank RLX_CHAOS_SECONDS=10 RLX_CHAOS_RANKS=3 \
#   RLX_CHAOS_MIN=2 RLX_CHAOS_MAX=4 RLX_CHAOS_BASELINE=0 bash scripts/device/chaos.sh
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/log-setup.sh"
root=$(cd "$here/../.." && pwd)
C=${RLX_CHAOS_CARRY:-$PWD/.devcarry-chaos}
RANK=${RLX_CHAOS_RANK:-}
if [ -z "$RANK" ]; then
  [ -x "$C/rlx-rank" ] || { say "no $C/rlx-rank: see the top of this script"; exit 1; }
  cat "$C/MANIFEST" 2>/dev/null
  . "$here/carry-libs.sh"
  RANK=$C/rlx-rank
fi
# --netns: the carried iproute2 (the image has none of its own)
[ -x "$C/net/ip" ] && export PATH=$C/net:$PATH
say "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; $(python3 --version)"
"$RANK" join --help >/dev/null 2>&1 || { say "$RANK does not run"; exit 1; }
tmp=$(mktemp -d)
timeout "${RLX_CHAOS_TIMEOUT:-570}" python3 "$root/scripts/chaos.py" --rank "$RANK" \
  --duration "${RLX_CHAOS_SECONDS:-240}" --seed "${RLX_CHAOS_SEED:-30}" \
  --ranks "${RLX_CHAOS_RANKS:-10}" --min-ranks "${RLX_CHAOS_MIN:-8}" \
  --max-ranks "${RLX_CHAOS_MAX:-14}" --baseline-seconds "${RLX_CHAOS_BASELINE:-6}" \
  ${RLX_CHAOS_ARGS:-} --out "$tmp" --json "$OUT/chaos.json"
rc=$?
say "chaos.py exit $rc"
for f in faults.log tails.log; do
  [ -f "$tmp/$f" ] && cp "$tmp/$f" "$OUT/"
done
rm -rf "$tmp"
exit $rc
