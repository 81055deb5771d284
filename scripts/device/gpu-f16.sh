#!/bin/bash
# scripts/device/gpu-f16.sh — run THERE (the device machine, an H200), in the
# repo root, with the carry folder made here by
# `RLX_PREP_F16=1 scripts/device/prepare.sh` (RLX_F16_CARRY names it, default
# .devcarry; Fashion-MNIST in $C/fashion-mnist/ for the accuracy runs; no
# validation layer in it, hence RLX_F16_VALIDATE=0):
#
#   command: RLX_F16_VALIDATE=0 bash scripts/device/gpu-f16.sh
#   carry: [".devcarry"]   kind: nvidia-h200   timeout_s: 600
#
# Issue 27's measurements, in one call, at most RLX_F16_BUDGET seconds
# (default 540; a part that would not fit is skipped and says so), each
# part logged even when another fails. Everything goes to $OUT:
#   log.txt        all output, in order
#   results.jsonl  one JSON object per measurement
#   devices.txt    nvidia-smi and rlx-rank devices (cooperative matrix shapes)
#   check.txt      test-compute on the GPU: the f16 step's gradients against
#                  the CPU emulating f16, all three models, batches 7 to
#                  8192, within core/rlx-backend-check.h's f16 bound, and
#                  both (device, emulation) distances from the f32 CPU
#   profile-*.txt  RLX_VK_PROFILE=1 rlx-rank bench: every dispatch's time
#   summary.md     medians of the rounds and the ratios (gpu-f16-summary.py)
# In order: the check; the GEMMs alone at mnist-mlp-xl's step shapes (8192
# and 4096) against cuBLAS sgemm (TF32 off) and hgemm in the same call; then
# RLX_F16_ROUNDS (3) interleaved rounds of one-rank cohorts (`rlx-rank join
# --local`, cohort-rate.py) at --compute f32 and f16 and PyTorch CUDA steps
# in FP32 and autocast f16 (torch-f16.py steps) for mnist-mlp-xl 4096 and
# 8192, mnist-mlp 1024 and mnist-cnn 1024; then Fashion-MNIST, 2 epochs,
# batch 64, lr 0.05, at --compute f32 and f16 (RLX_F16_FASHION_MODELS,
# default "mnist-mlp mnist-mlp-xl").
# Knobs: RLX_F16_PARTS="check gemm steps fashion" (the default) picks the
# parts; RLX_F16_DATA the Fashion-MNIST folder (default $C/fashion-mnist);
# RLX_F16_BUDGET, RLX_F16_ROUNDS; RLX_F16_MODELS="model:batch:steps …";
# RLX_F16_CHECK="- RLX_VK_CM_VEC=0 …" runs the gradient check with the
# defaults ("-") and with each setting; RLX_F16_VALIDATE=0 runs it without
# the validation layer; RLX_F16_COHORT_TIMEOUT (90) caps a cohort run;
# RLX_F16_GEMM_BATCHES ("8192 4096") the profiled batches;
# RLX_F16_CM_VARIANTS="RLX_VK_CM_BK=64 …" adds, for each setting, an f16
# profile and an f16 cohort per model and round under it (label
# one-f16:SETTING) beside the defaults'. torch-f16.py
# finds torch_ref.py through RLX_TORCH_REF_DIR (set here to the carry).
set -u -o pipefail

OUT=${OUT:-/tmp/rlx-f16-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1

HERE=$(cd "$(dirname "$0")" && pwd)
C=$PWD/${RLX_F16_CARRY:-.devcarry}
RANK=$C/rlx-rank
RESULTS=$OUT/results.jsonl
BUDGET=${RLX_F16_BUDGET:-540}
ROUNDS=${RLX_F16_ROUNDS:-3}
MODELS=${RLX_F16_MODELS:-"mnist-mlp-xl:4096:300 mnist-mlp-xl:8192:200 mnist-mlp:1024:4000 mnist-cnn:1024:3000"}
PARTS=" ${RLX_F16_PARTS:-check gemm steps fashion} "
CM_VARIANTS=${RLX_F16_CM_VARIANTS:-}
DATA=$PWD/${RLX_F16_DATA:-${RLX_F16_CARRY:-.devcarry}/fashion-mnist}
part () { [[ $PARTS == *" $1 "* ]]; }
T0=$(date +%s)
export PYTHONUNBUFFERED=1 RLX_TORCH_REF_DIR=$C

# left, say, have N WHAT
. "$(dirname "$0")/budget.sh"

say "setup in $PWD; carry $C; budget ${BUDGET}s"
[ -x "$RANK" ] || { say "no $RANK: run scripts/device/prepare.sh here first and carry it"; exit 1; }
cat "$C/MANIFEST" 2>/dev/null
. "$HERE/vulkan-env.sh"
GPU=vulkan:$(echo "$GPUS" | head -1)
[ "$NGPU" -ge 1 ] || GPU=vulkan
say "device: $GPU"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

# ── 1. the f16 step against the CPU ───────────────────────────────────────
# RLX_F16_CHECK="-" (the default) checks the defaults; "- RLX_VK_CM_VEC=0 …"
# each setting too (validation on for the first only)
first=1
for v in ${RLX_F16_CHECK:--}; do
  part check && have 50 "the f16 gradient check ($v)" || break
  say "test-compute on $GPU (RLX_TEST_COOP) with ${v/#-/the defaults}"
  val=0; [ $first = 1 ] && val=${RLX_F16_VALIDATE:-1}
  ( [ "$v" != - ] && export "${v?}"; RLX_TEST_COOP=$GPU RLX_VK_VALIDATE=$val timeout 150 \
      "$C/test-compute" --verbose -p /gpu/compute/f16-gradients ) > "$OUT/check.txt.part" 2>&1
  echo "test-compute ($v) exit $?" >> "$OUT/check.txt.part"
  cat "$OUT/check.txt.part" >> "$OUT/check.txt"
  grep -E '^(ok|not ok)|f16-check|exit|ERROR|validation|Bail' "$OUT/check.txt.part"
  grep 'f16-check' "$OUT/check.txt.part" | python3 -c '
import json, re, sys
for l in sys.stdin:
    m = re.search(r"f16-check (\S+) batch (\d+): against the CPU emulating f16 max\|dg\|/max\|g\| (\S+) "
                  r"\(bound (\S+)\), \|dloss\|/loss (\S+) \(bound (\S+)\); against f32: this device (\S+), "
                  r"the CPU.s f16 emulation ([^;]+);", l)
    if m:
        print(json.dumps({"label": "f16-check", "setting": sys.argv[1], "model": m[1], "batch": int(m[2]),
                          "grad_ratio": float(m[3]), "grad_bound": float(m[4]), "loss_ratio": float(m[5]),
                          "loss_bound": float(m[6]), "f32_device": float(m[7]), "f32_emulation": float(m[8]),
                          "ok": "OUT OF BOUNDS" not in l}))' "$v" >> "$RESULTS"
  rm -f "$OUT/check.txt.part"
  first=0
done

# ── 2. the GEMMs alone against cuBLAS ─────────────────────────────────────
for nb in ${RLX_F16_GEMM_BATCHES:-8192 4096}; do
  part gemm || break
  for cc in f32 f16 $(for v in $CM_VARIANTS; do echo "f16:$v"; done); do
    comp=${cc%%:*}; cv=${cc#f16:}; [ "$cv" = "$cc" ] && cv=
    have 12 "profile mnist-mlp-xl $nb $cc" || continue
    say "RLX_VK_PROFILE=1 rlx-rank bench mnist-mlp-xl $nb --compute $comp ${cv}"
    ( [ -n "$cv" ] && export "$cv"; RLX_VK_PROFILE=1 timeout 60 "$RANK" bench --model mnist-mlp-xl \
      --batch $nb --backend "$GPU" --compute $comp --seconds 1 ) > "$OUT/profile-$nb-${cc//[:=]/-}.txt" 2>&1
    grep -E 'profile|tile|samples/s|error|cannot' "$OUT/profile-$nb-${cc//[:=]/-}.txt"
    timeout 90 python3 "$HERE/torch-f16.py" gemm "$OUT/profile-$nb-${cc//[:=]/-}.txt" |
      python3 -c 'import json,sys
for l in sys.stdin:
    try: d = json.loads(l)
    except ValueError: print(l, end=""); continue
    d["variant"] = sys.argv[1]; print(json.dumps(d), flush=True)' "$cv" | tee -a "$RESULTS"
  done
done

# ── 3. steps: ours (one-rank cohorts) and PyTorch, interleaved rounds ──────
cohort_one () {  # label model batch steps compute round [VAR=VALUE]
  local t=$(( $(left) - 15 ))
  [ "$t" -gt "${RLX_F16_COHORT_TIMEOUT:-90}" ] && t=${RLX_F16_COHORT_TIMEOUT:-90}
  [ "$t" -lt 8 ] && { have 1000000 "$1 $2 $3 round $6"; return; }
  local out
  out=$( [ -n "${7:-}" ] && export "$7"; timeout $(( t + 10 )) python3 "$HERE/cohort-rate.py" "$RANK" --label "$1" --model "$2" \
          --batch "$3" --steps "$4" --precision f32 --compute "$5" --backend "$GPU" --timeout "$t")
  echo "$out"
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["round"]=int(sys.argv[2]); print(json.dumps(d))' \
    "$out" "$6" >> "$RESULTS" 2>/dev/null ||
    echo "{\"label\": \"$1\", \"model\": \"$2\", \"batch\": $3, \"round\": $6, \"error\": \"no result\"}" >> "$RESULTS"
}
torch_models=$(for m in $MODELS; do IFS=: read -r model batch steps <<< "$m"; printf '%s:%s,' "$model" "$batch"; done)
for round in $(seq 1 "$ROUNDS"); do
  part steps || break
  for m in $MODELS; do
    IFS=: read -r model batch steps <<< "$m"
    have 25 "round $round $model $batch" || continue
    say "round $round: $model batch $batch"
    cohort_one one-f32 "$model" "$batch" "$steps" f32 "$round"
    cohort_one one-f16 "$model" "$batch" "$steps" f16 "$round"
    for cv in $CM_VARIANTS; do   # (mnist-cnn: no GEMM on the tensor cores)
      [ "$model" = mnist-cnn ] || cohort_one "one-f16:$cv" "$model" "$batch" "$steps" f16 "$round" "$cv"
    done
  done
  if have 20 "torch round $round"; then
    say "torch round $round"
    timeout 120 python3 "$HERE/torch-f16.py" steps --models "${torch_models%,}" --rounds 1 \
      --seconds 1.5 | python3 -c 'import json,sys
for l in sys.stdin:
    try: d = json.loads(l)
    except ValueError: print(l, end=""); continue
    d["round"] = int(sys.argv[1]); print(json.dumps(d), flush=True)' "$round" | tee -a "$RESULTS"
  fi
done

# ── 4. Fashion-MNIST, 2 epochs, f16 against f32 ───────────────────────────
# (the training images travel as .xz, the smaller: unpacked and gzipped here)
FM=/usr/share/datasets/fashion-mnist
if part fashion && [ -d "$DATA" ]; then
  mkdir -p "$FM"
  cp -n "$DATA"/*.gz "$FM"/ 2>/dev/null
  for x in "$DATA"/*.xz; do
    [ -f "$x" ] || continue
    n=$(basename "${x%.xz}")
    [ -f "$FM/$n.gz" ] || python3 -c "import gzip,lzma,sys; gzip.open(sys.argv[2],'wb',compresslevel=1).write(lzma.open(sys.argv[1]).read())" "$x" "$FM/$n.gz"
  done
  ls -la "$FM"
fi
for model in ${RLX_F16_FASHION_MODELS:-mnist-mlp mnist-mlp-xl}; do
  part fashion || break
  for comp in f32 f16; do
    have 12 "fashion-mnist $model $comp" || continue
    say "rlx-rank train $model fashion-mnist 2 epochs --compute $comp"
    out=$(timeout $(( $(left) > 10 ? $(left) : 10 )) "$RANK" train --model $model --dataset fashion-mnist --batch 64 --lr 0.05 \
            --epochs 2 --seed 1 --backend "$GPU" --compute $comp --json 2>&1 | tail -1)
    echo "$out"
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(label="fashion", model=sys.argv[2], compute=sys.argv[3]); print(json.dumps(d))' \
      "$out" "$model" "$comp" >> "$RESULTS" 2>/dev/null ||
      echo "{\"label\": \"fashion\", \"model\": \"$model\", \"compute\": \"$comp\", \"error\": \"no result\"}" >> "$RESULTS"
  done
done

say "summary"
python3 "$HERE/gpu-f16-summary.py" "$RESULTS" > "$OUT/summary.md" 2>&1
cat "$OUT/summary.md"
say "done in $(( $(date +%s) - T0 ))s"
exit 0
