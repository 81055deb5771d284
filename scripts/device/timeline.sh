#!/bin/bash
# scripts/device/timeline.sh — run THERE (the device machine), with
# .devcarry carried (scripts/device/prepare.sh makes it here):
#
#   command: bash scripts/device/timeline.sh    carry: [".devcarry"]
#
# Where a one-rank cohort's step goes on the GPU itself: RLX_VK_TIMELINE=1
# brackets every submission with two timestamps and prints, per kind of
# submission, the device's time on it and the time the device sat idle
# before it (gpu/rlx-vk-submit.c, "RLX_VK_TIMELINE"). For each model of
# RLX_TL_MODELS ("model:batch:steps ..."): `rlx-rank bench` (plain steps),
# the one-rank cohort's samples/s without the timestamps (cohort-rate.py),
# then one-rank cohorts with two rounds queued and without
# (RLX_VK_EARLY=0; RLX_TL_SWITCH=RLX_VK_FOLD_CHECK compares that switch at 1
# and 0 instead). Everything to $OUT/timeline.txt.
set -u -o pipefail
OUT=${OUT:-/tmp/rlx-device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/timeline.txt") 2>&1
C=$PWD/.devcarry
RANK=$C/rlx-rank
say () { echo "=== $*"; }
MODELS=${RLX_TL_MODELS:-"mnist-cnn:1024:3000 mnist-mlp:1024:6000"}
SWITCH=${RLX_TL_SWITCH:-RLX_VK_EARLY}
. "$(dirname "$0")/vulkan-env.sh"
for m in $MODELS; do
  IFS=: read -r model batch steps <<< "$m"
  echo "=== $model $batch: rlx-rank bench"
  RLX_VK_TIMELINE=1 timeout 60 "$C/rlx-rank" bench --model "$model" --batch "$batch" \
    --backend vulkan --seconds 2 --json 2>&1 | grep -v DEBUG
  echo "=== $model $batch: one-rank cohort's samples/s (cohort-rate.py, no timeline)"
  timeout 120 python3 "$PWD/scripts/device/cohort-rate.py" "$RANK" --label one-f32 \
    --model "$model" --batch "$batch" --steps "$steps" --precision f32 --timeout 100 \
    --backend vulkan | cut -c1-300
  for early in 1 0; do
    echo "=== $model $batch: one-rank cohort, $SWITCH=$early"
    env "$SWITCH=$early" RLX_VK_TIMELINE=1 timeout 120 "$C/rlx-rank" join --local \
      --cohort "tl-$model-$early-$$" --backend vulkan --model "$model" --batch "$batch" \
      --steps "$steps" --checkpoint-every 0 --json 2>&1 | grep -v '^{"event":"step"' |
      grep -E 'timeline|busy|"done"' | cut -c1-400
  done
done
