#!/bin/bash
# scripts/device/chaos-gpu.sh — two device runs that need different parts of
# the machine, side by side in one call (device time is short; a call costs
# a machine's start): scripts/device/chaos.sh (issue 29: the CPU cohort under
# faults, at least 8 ranks) on cores 0..N-5, and scripts/device/gpu-f16.sh
# (issue 27: the GPU, fed by cores N-4..N-1) — one rank of the GPU runs needs
# a core or two, and the chaos ranks never touch the GPU.
#
#   here:   RLX_PREP_F16=1 bash scripts/device/prepare.sh
#   device: command 'bash scripts/device/chaos-gpu.sh'  carry [".devcarry"]
#           kind nvidia-h200   timeout_s 600
#
# Both scripts take their own knobs (RLX_CHAOS_*, RLX_F16_*; see their
# headers); RLX_CG_GPU_CORES (4) is how many cores the GPU runs get. The
# device tool returns at most 8 files, so each run writes into a folder of
# its own and everything is packed into $OUT/chaos-gpu.tar.xz, beside the
# two logs and the chaos report.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/rlx-device-out}
mkdir -p "$OUT"
n=$(nproc)
g=${RLX_CG_GPU_CORES:-4}
[ "$n" -gt $(( g + 4 )) ] || { echo "chaos-gpu.sh: $n cores: too few to split"; exit 1; }
work=$(mktemp -d)
echo "chaos on cores 0-$(( n - g - 1 )), the GPU runs on $(( n - g ))-$(( n - 1 ))"
( export OUT=$work/chaos RLX_CHAOS_CARRY=${RLX_CHAOS_CARRY:-$PWD/.devcarry}
  taskset -c 0-$(( n - g - 1 )) bash "$here/chaos.sh" ) > /dev/null 2>&1 &
chaos=$!
( export OUT=$work/gpu
  taskset -c $(( n - g ))-$(( n - 1 )) bash "$here/gpu-f16.sh" ) > /dev/null 2>&1 &
gpu=$!
wait $gpu; grc=$?
wait $chaos; crc=$?
echo "gpu-f16.sh exit $grc, chaos.sh exit $crc"
cp "$work/chaos/log.txt" "$OUT/chaos-log.txt" 2>/dev/null
cp "$work/chaos/chaos.json" "$OUT/chaos.json" 2>/dev/null
cp "$work/gpu/log.txt" "$OUT/gpu-log.txt" 2>/dev/null
cp "$work/gpu/summary.md" "$OUT/gpu-summary.md" 2>/dev/null
tar -C "$work" -cJf "$OUT/chaos-gpu.tar.xz" chaos gpu
tail -40 "$OUT/chaos-log.txt" 2>/dev/null
cat "$OUT/gpu-summary.md" 2>/dev/null
exit $(( grc != 0 || crc != 0 ))
