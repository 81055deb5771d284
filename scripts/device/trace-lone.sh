#!/bin/bash
# scripts/device/trace-lone.sh — run THERE (the device machine), with
# .devcarry carried (scripts/device/prepare.sh makes it here):
#
#   command: bash scripts/device/trace-lone.sh    carry: [".devcarry"]
#
# One-rank GPU cohorts with RLX_TRACE (core/p2p/rlx-trace.h): the leader's
# worker ops (L.own, L.finish and their ends), when the main loop queued
# them (L.q.*) and when it took each finish's result (L.fin), for
# RLX_TRL_MODELS ("model:batch:steps ..."), to $OUT/trace-MODEL/ for
# scripts/device/lone-trace.py (here) to say where the slow steps went.
set -u -o pipefail
OUT=${OUT:-/tmp/rlx-device-out}
mkdir -p "$OUT"
C=$PWD/.devcarry
RANK=$C/rlx-rank
say () { echo "=== $*"; }
. "$(dirname "$0")/vulkan-env.sh" > /dev/null
MODELS=${RLX_TRL_MODELS:-"mnist-mlp:1024:6000 mnist-cnn:1024:3000"}
for m in $MODELS; do
  IFS=: read -r model batch steps <<< "$m"
  mkdir -p "$OUT/trace-$model"
  RLX_TRACE=$OUT/trace-$model timeout 100 "$RANK" join --local --cohort "trace-$model-$$" \
    --backend vulkan --model "$model" --batch "$batch" --steps "$steps" --checkpoint-every 0 \
    --json 2>&1 | tail -1 | cut -c1-200
done
