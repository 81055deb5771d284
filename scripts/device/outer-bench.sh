#!/bin/bash
# scripts/device/outer-bench.sh — issue 28's figures on the device machine's
# 16 cores, in one call (scripts/device/outer-bench.py does the work and
# says what each figure is):
#
#   here:   bash scripts/device/prepare.sh && bash scripts/device/prepare-outer.sh
#   device: command 'bash scripts/device/outer-bench.sh'  carry [".devcarry-cpu"]
#           kind nvidia-h200   timeout_s 600
#
# Knobs: RLX_OB_PLAN (rate | accuracy | all | none: the fidelity run alone; default all), RLX_OB_REPS (3),
# RLX_OB_SECONDS (measuring window of a rate run, 8), RLX_OB_MIN_COMMITS (a
# window holds more commits than this, 6), RLX_OB_MAX_WINDOW (... unless it
# reached these seconds, 15), RLX_OB_WARMUP (6),
# RLX_OB_MODELS ("mnist-mlp,mnist-mlp-xl"), RLX_OB_CORES (all), RLX_OB_RANKS_MAX
# (8), RLX_OB_ACC_MAX (seconds a cohort may take to the target, 150),
# RLX_OB_ACC_EPOCHS (the one rank's epochs that set it, 2), RLX_OB_ACC_RANKS
# ("2,4"), RLX_OB_ACC_VARIANTS (more cohorts, JSON: outer-bench.py --help),
# RLX_OB_DDP (1: PyTorch DDP beside, in RLX_OB_DDP_REPS repetitions, 1), RLX_OB_RANK (an rlx-rank to use instead
# of the carried one: a dry run here), RLX_OB_RATE_CONFIGS / RLX_OB_RATE_EXTRA
# (JSON lists: the rate plan's configurations instead of its own / beside
# them; outer-bench.py's header), RLX_OB_FIDELITY ("MODEL:EPOCHS:SEEDS", e.g.
# "mnist-mlp-xl:5:0,1,2": scripts/outer-fidelity.py after the bench, its
# cohorts side by side, RLX_OB_FID_H the outer H, 50; RLX_OB_FID_VARIANT, e.g.
# --fixed-inner-lr: a second outer:H setup with those join arguments). Everything goes to
# $OUT: log.txt, results.jsonl (a line a run), table.md, fidelity.md.
#
# A small dry run here (2 cores, the local build):
#   OUT=/tmp/ob RLX_OB_RANK=build/tools/rlx-rank RLX_OB_REPS=1 RLX_OB_SECONDS=3 \
#   RLX_OB_WARMUP=2 RLX_OB_MODELS=mnist-mlp RLX_OB_RANKS_MAX=2 RLX_OB_PLAN=all \
#   RLX_OB_ACC_EPOCHS=0.1 RLX_OB_ACC_RANKS=2 RLX_OB_ACC_MAX=30 RLX_OB_DDP=0 \
#   bash scripts/device/outer-bench.sh
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/log-setup.sh"
C=${RLX_OB_CARRY:-$PWD/.devcarry-cpu}
RANK=${RLX_OB_RANK:-}
if [ -z "$RANK" ]; then
  [ -x "$C/rlx-rank" ] || { say "no $C/rlx-rank: run scripts/device/prepare.sh and prepare-outer.sh here and carry .devcarry-cpu"; exit 1; }
  cat "$C/MANIFEST" 2>/dev/null
  . "$here/carry-libs.sh"
  say "carried libraries in use: $(ls "$C/use" | tr '\n' ' ')"
  RANK=$C/rlx-rank
  . "$here/fashion-unpack.sh"
fi
say "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
ddp=()
ref=${RLX_OB_TORCH_REF:-$C/torch_ref.py}
if [ "${RLX_OB_DDP:-1}" = 1 ] && [ -f "$ref" ] && python3 -c 'import torch' 2>/dev/null; then
  ddp=(--torch-ref "$ref" --ddp-reps "${RLX_OB_DDP_REPS:-1}")
fi
py=python3
cores=${RLX_OB_CORES:-$(nproc)}
if [ "${RLX_OB_PLAN:-all}" != none ]; then
  say "outer-bench.py: plan ${RLX_OB_PLAN:-all}, $cores cores"
  timeout "${RLX_OB_TIMEOUT:-560}" "$py" "$here/outer-bench.py" "$RANK" --out "$OUT" \
    --plan "${RLX_OB_PLAN:-all}" --reps "${RLX_OB_REPS:-3}" --cores "$cores" \
    --seconds "${RLX_OB_SECONDS:-8}" --warmup "${RLX_OB_WARMUP:-6}" \
    --min-commits "${RLX_OB_MIN_COMMITS:-6}" --max-window "${RLX_OB_MAX_WINDOW:-15}" \
    --acc-epochs "${RLX_OB_ACC_EPOCHS:-2}" --acc-ranks "${RLX_OB_ACC_RANKS:-2,4}" \
    --acc-variants "${RLX_OB_ACC_VARIANTS:-}" \
    --models "${RLX_OB_MODELS:-mnist-mlp,mnist-mlp-xl}" --ranks-max "${RLX_OB_RANKS_MAX:-8}" \
    --acc-max-seconds "${RLX_OB_ACC_MAX:-150}" \
    --rate-configs "${RLX_OB_RATE_CONFIGS:-}" --rate-extra "${RLX_OB_RATE_EXTRA:-}" "${ddp[@]}"
  rc=$?
  say "outer-bench.py exit $rc"
  if [ "$rc" != 0 ] && [ -s "$OUT/results.jsonl" ]; then
    say "the table of what finished:"
    "$py" "$here/outer-bench.py" - --table "$OUT/results.jsonl" | tee "$OUT/table.md"
  fi
fi
if [ -n "${RLX_OB_FIDELITY:-}" ]; then
  IFS=: read -r fm fe fs <<< "$RLX_OB_FIDELITY"
  say "outer-fidelity.py: $fm, $fe epochs, seeds $fs, outer:${RLX_OB_FID_H:-50}"
  timeout "${RLX_OB_FID_TIMEOUT:-300}" "$py" "$here/../outer-fidelity.py" - --rank "$RANK" \
    --model "$fm" --epochs "$fe" --seeds "$fs" --h "${RLX_OB_FID_H:-50}" --parallel \
    --json "$OUT/fidelity.json" --nice 0 ${RLX_OB_FID_VARIANT:+"--outer-variant=$RLX_OB_FID_VARIANT"} \
    | tee "$OUT/fidelity.md"
  say "outer-fidelity.py exit ${PIPESTATUS[0]}"
fi
