# scripts/device/log-setup.sh — sourced (not run) by the device scripts after
# `set -u -o pipefail`: $OUT (default /tmp/rlx-device-out) made, everything the
# script prints from here on also appended to $OUT/log.txt, T0 its start, and
# `say MSG` a line stamped with the seconds since T0.
OUT=${OUT:-/tmp/rlx-device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
say () { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
