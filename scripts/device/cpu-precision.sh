#!/bin/bash
# scripts/device/cpu-precision.sh — run THERE (the device machine), with
# .devcarry carried (scripts/device/prepare.sh makes it here):
#
#   command: bash scripts/device/cpu-precision.sh      carry: [".devcarry"]
#
# Two CPU ranks of a model at f32, f16 and f8e4m3 through the local bus
# (the shared ring by default), as bench-cohort.py's `precision` measures
# them on the dev machine, but on the device machine's many cores: does
# compression keep up with f32 when the error feedback's passes have cores
# of their own? For each BLAS thread count in RLX_CP_THREADS ("1 4"),
# RLX_CP_RUNS (5) interleaved runs of RLX_CP_SECONDS (6) on RLX_CP_MODEL
# (mnist-mlp-xl) at RLX_CP_BATCH (256) per rank. Output in $OUT/cpu-precision.txt.
set -u -o pipefail
OUT=${OUT:-/tmp/rlx-device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/cpu-precision.txt") 2>&1
C=$PWD/.devcarry
say () { echo "=== $*"; }
. "$(dirname "$0")/carry-libs.sh"
say "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) processors"
for t in ${RLX_CP_THREADS:-1 4}; do
  say "BLAS threads per rank: $t"
  timeout 400 python3 scripts/bench-cohort.py "$C/rlx-rank" precision --runs "${RLX_CP_RUNS:-5}" \
    --ranks 2 --model "${RLX_CP_MODEL:-mnist-mlp-xl}" --batch "${RLX_CP_BATCH:-256}" \
    --seconds "${RLX_CP_SECONDS:-6}" --threads "$t"
done
