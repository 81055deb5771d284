#!/bin/bash
# scripts/device/fidelity-sweep.sh — accuracy at equal samples (issue 28) for
# several outer H at once on the device machine's 16 cores: for each H of
# RLX_FS_H (default "50 100"), scripts/device/outer-bench.sh's fidelity run
# alone (RLX_OB_PLAN=none) of RLX_FS_MODEL (mnist-mlp-xl), RLX_FS_EPOCHS (5)
# epochs, seeds RLX_FS_SEEDS (0,1,2,3,4), with RLX_FS_VARIANT
# (--fixed-inner-lr) as a second outer setup; each H's output in $OUT/hH.
#
#   here:   bash scripts/device/prepare.sh && bash scripts/device/prepare-outer.sh
#   device: command 'bash scripts/device/fidelity-sweep.sh'  carry [".devcarry-cpu"]
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
base=${OUT:-/tmp/rlx-device-out}
for h in ${RLX_FS_H:-50 100}; do
  OUT=$base/h$h RLX_OB_PLAN=none RLX_OB_FID_H=$h \
    RLX_OB_FIDELITY="${RLX_FS_MODEL:-mnist-mlp-xl}:${RLX_FS_EPOCHS:-5}:${RLX_FS_SEEDS:-0,1,2,3,4}" \
    RLX_OB_FID_VARIANT="${RLX_FS_VARIANT---fixed-inner-lr}" \
    RLX_OB_FID_TIMEOUT=${RLX_FS_TIMEOUT:-260} bash "$here/outer-bench.sh" 2>&1 | grep -v '^  done'
done
