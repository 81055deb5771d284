#!/bin/bash
# scripts/device/gpu-cohort.sh — run THERE (the device machine), in the repo
# root, with .devcarry carried (scripts/device/prepare.sh makes it here):
#
#   command: bash scripts/device/gpu-cohort.sh   carry: [".devcarry"]
#   kind: nvidia-h200-x2 (one GPU: the two-rank runs are skipped)   timeout_s: 600
#
# One call, at most ~9 minutes (RLX_DC_BUDGET seconds, default 520: a step
# that would not fit is skipped and says so). Everything goes to $OUT:
#   log.txt        all output, in order
#   results.jsonl  one JSON object per measurement (appended as it is made)
#   ddp.txt        torch_ref.py ddp output
#   devices.txt    nvidia-smi and rlx-rank devices
#   tests.txt      tests/gpu/test-resident and test-round on the GPU (bit-identity,
#                  the leader's round, the device hash, validation layer)
#   summary.md     medians and ratios (scripts/device/summarize.py)
# What it measures (the issue's numbers), for mnist-mlp at 1024, mnist-cnn at
# 1024 and mnist-mlp-xl at 4096 per rank, in RLX_DC_ROUNDS (3) interleaved
# rounds: `rlx-rank bench` against a one-rank cohort (`rlx-rank join --local
# --backend vulkan`, samples/s from its event stream: cohort-rate.py), the
# one-rank cohort at f16 and f8e4m3 against f32 (and at f32 with
# RLX_VK_PRESUBMIT=0, "one-f32-plain": without its next update made ahead),
# and two ranks on two GPUs (vulkan:0 + vulkan:1) at f32 and f16 against one; then PyTorch DDP on the
# same models and batches (`torch_ref.py ddp --device cuda --ranks 1,2`).
# Before that, once: the resident-parameter and round tests on the GPU, a
# mixed CPU + GPU cohort's hashes, bench-gpu's step breakdown for each path a
# cohort takes (plain; a member's step, zero-copy and copying; a one-rank
# leader's round with the next slice queued and without; a leader with one
# member's bucket — at f32 and f8e4m3), and each model's per-dispatch profile
# (for the overlap of gradient sending with the backward pass).
#
# Knobs for a shorter call: RLX_DC_ONCE=0 skips the once-only part (tests,
# mixed cohort, breakdown, profile); RLX_DC_ONE_EXTRA=0 skips the one-rank
# runs beside one-f32 (plain, f16, f8e4m3); RLX_DC_BREAKDOWN=0 keeps the
# once-only tests and mixed cohort but skips the breakdown and profile;
# RLX_DC_DDP=0 skips PyTorch. Two ranks run at f32, f16 and f8e4m3
# (RLX_DC_TWO="vulkan:0 vulkan:0": both on one GPU).
#
# One failure never loses the rest: no `set -e`, every command has its own
# timeout and its outcome is logged, files are appended as results come.
#
# For a dry run anywhere (how it was tested here, on lavapipe):
#   OUT=/tmp/dc RLX_DC_DRY=1 RLX_DC_BACKEND=vulkan:llvmpipe RLX_DC_TWO="vulkan:llvmpipe cpu" \
#   RLX_DC_SCALE=100 RLX_DC_SECONDS=0.5 RLX_DC_TORCH_DEVICE=cpu RLX_DC_ROUNDS=1 \
#   bash scripts/device/gpu-cohort.sh
set -u -o pipefail

OUT=${OUT:-/tmp/rlx-device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1

C=$PWD/.devcarry
RANK=$C/rlx-rank
BENCH=$C/bench-gpu
RATE="python3 $PWD/scripts/device/cohort-rate.py $RANK"
RESULTS=$OUT/results.jsonl
BUDGET=${RLX_DC_BUDGET:-520}
ROUNDS=${RLX_DC_ROUNDS:-3}
SCALE=${RLX_DC_SCALE:-1}
SECONDS_BENCH=${RLX_DC_SECONDS:-2}
BACKEND=${RLX_DC_BACKEND:-vulkan}
TORCH_DEVICE=${RLX_DC_TORCH_DEVICE:-cuda}
# model:batch per rank:steps of a cohort run (about 3 s each on an H200)
MODELS=${RLX_DC_MODELS:-"mnist-mlp:1024:6000 mnist-cnn:1024:5000 mnist-mlp-xl:4096:400"}
T0=$(date +%s)

# left, say, have N WHAT
. "$(dirname "$0")/budget.sh"
record () { echo "$1" >> "$RESULTS"; }

say "setup in $PWD; budget ${BUDGET}s"
[ -x "$RANK" ] || { say "no $RANK: run scripts/device/prepare.sh here first and carry .devcarry"; exit 1; }
cat "$C/MANIFEST" 2>/dev/null

. "$(dirname "$0")/vulkan-env.sh"
# the tests open several backends in one process: pin them to one GPU
TEST_SPEC=$BACKEND
[ "$NGPU" -ge 1 ] && [ "$BACKEND" = vulkan ] && TEST_SPEC=vulkan:$(echo "$GPUS" | head -1)
say "NVIDIA Vulkan devices: $NGPU; two-rank runs on: ${TWO:-none}"

# ── once: correctness on this GPU ────────────────────────────────────────
if [ "${RLX_DC_ONCE:-1}" = 1 ]; then
for t in test-resident test-round; do
  if have 120 "$t on the GPU" && [ -x "$C/bin/$t" ]; then
    say "$t on $TEST_SPEC (validation layer on)"
    RLX_TEST_VULKAN=$TEST_SPEC RLX_VK_VALIDATE=1 timeout 120 "$C/$t" 2>&1 |
      grep -v 'DEBUG: rlx-vk: .* buffer, ' >> "$OUT/tests.txt"
    echo "$t exit ${PIPESTATUS[0]}" >> "$OUT/tests.txt"
  fi
done
# the host copies of codes in pieces (as the -par-copy meson tests run them)
if have 60 "the bit-identity tests with the copies split" && [ -x "$C/test-resident" ]; then
  say "test-resident and test-round with RLX_COPY_PAR_MIN=4096"
  RLX_COPY_PAR_MIN=4096 RLX_TEST_VULKAN=$TEST_SPEC RLX_VK_VALIDATE=1 timeout 120 "$C/test-resident" \
    -p /backend/resident/vulkan/apply-bits -p /backend/resident/vulkan/grads-wire 2>&1 |
    grep -v 'DEBUG: rlx-vk: .* buffer, ' >> "$OUT/tests.txt"
  echo "test-resident (copies split) exit ${PIPESTATUS[0]}" >> "$OUT/tests.txt"
  RLX_COPY_PAR_MIN=4096 RLX_TEST_VULKAN=$TEST_SPEC RLX_VK_VALIDATE=1 timeout 120 "$C/test-round" \
    -p /backend/round/vulkan/bits -p /backend/round/vulkan/mnist-mlp -p /backend/zero-copy/vulkan 2>&1 |
    grep -v 'DEBUG: rlx-vk: .* buffer, ' >> "$OUT/tests.txt"
  echo "test-round (copies split) exit ${PIPESTATUS[0]}" >> "$OUT/tests.txt"
fi
# the wire codec's and round kernels' vector sets against the portable C on
# this machine's CPU (a set the CPU lacks is skipped, and says so)
if have 60 "the codec kernels on this CPU" && [ -x "$C/bin/test-wire-simd" ]; then
  say "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  for t in test-wire-simd test-kernels; do
    timeout 60 "$C/$t" >> "$OUT/tests.txt" 2>&1
    echo "$t exit $?" >> "$OUT/tests.txt"
  done
fi
grep -E '^(ok|not ok)|exit|fallback|Vulkan tests|SKIP' "$OUT/tests.txt"
if have 60 "mixed CPU + GPU cohort"; then
  say "mixed cohort: cpu + $BACKEND, f16, equal hashes"
  r=$(timeout 90 $RATE --label mixed-cpu-gpu --model mnist-mlp --batch 256 --precision f16 \
        --steps $(( 300 / (SCALE > 10 ? 10 : SCALE) )) --backend cpu --backend "$BACKEND" --timeout 80)
  echo "$r"; record "$r"
fi
if [ "${RLX_DC_BREAKDOWN:-1}" = 1 ] && have 90 "bench-gpu breakdown of each path"; then
  for m in $MODELS; do
    IFS=: read -r model batch steps <<< "$m"
    for mode in "plain f32" "member f32" "member f8e4m3" "member-copy f32" "leader f32" \
                "leader f8e4m3" "leader-sync f32" "leader-member f32" "leader-member f8e4m3"; do
      read -r mo pr <<< "$mode"
      have 20 "bench-gpu $model $mode" || break
      say "bench-gpu $model $batch --mode $mo --precision $pr"
      timeout 30 "$BENCH" --backend "$BACKEND" --models "$model" --batches "$batch" \
        --seconds 0.7 --mode "$mo" --precision "$pr"
    done
  done
fi

# the overlap question (issue: send the last layers' gradient while the first
# layers' backward runs): how long the backward runs after each layer's
# gradient is complete, per dispatch (RLX_VK_PROFILE puts a timestamp after
# every dispatch and prints them at exit)
if [ "${RLX_DC_BREAKDOWN:-1}" = 1 ] && have 40 "per-dispatch profile"; then
  for m in $MODELS; do
    IFS=: read -r model batch steps <<< "$m"
    say "RLX_VK_PROFILE=1 rlx-rank bench $model $batch"
    RLX_VK_PROFILE=1 timeout 60 "$RANK" bench --model "$model" --batch "$batch" \
      --backend "$BACKEND" --seconds 1 2>&1 | grep -v '^{'
  done
fi
fi  # RLX_DC_ONCE

# ── rounds ───────────────────────────────────────────────────────────────
bench_one () {   # model batch round
  local out
  out=$(timeout 60 "$RANK" bench --model "$1" --batch "$2" --backend "$BACKEND" \
          --seconds "$SECONDS_BENCH" --json 2>&1 | tail -1)
  echo "$out"
  if [[ $out == \{* ]]; then
    record "$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(label="bench", round=int(sys.argv[2])); print(json.dumps(d))' "$out" "$3")"
  else
    record "{\"label\": \"bench\", \"model\": \"$1\", \"round\": $3, \"error\": \"bench failed\"}"
  fi
}
cohort_one () {  # label model batch steps precision round backends...
  local label=$1 model=$2 batch=$3 steps=$4 prec=$5 round=$6 out args=()
  shift 6
  for b in "$@"; do args+=(--backend "$b"); done
  # never past the budget, however a run goes
  local t=$(( $(left) - 15 ))
  [ "$t" -gt 110 ] && t=110
  if [ "$t" -lt 20 ]; then
    have 1000000 "$label $model round $round"
    return
  fi
  out=$(timeout $(( t + 10 )) $RATE --label "$label" --model "$model" --batch "$batch" \
          --steps "$steps" --precision "$prec" --timeout "$t" "${args[@]}")
  echo "$out"
  record "$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["round"]=int(sys.argv[2]); print(json.dumps(d))' "$out" "$round" 2>/dev/null ||
            echo "{\"label\": \"$label\", \"model\": \"$model\", \"round\": $round, \"error\": \"no result\"}")"
}
ddp_all () {
  local ranks=1
  [ -n "$TWO" ] && ranks=1,2
  for m in $MODELS; do
    IFS=: read -r model batch steps <<< "$m"
    have 45 "torch ddp $model" || continue
    say "torch_ref.py ddp $model batch/rank $batch ranks $ranks"
    timeout 120 python3 "$C/torch_ref.py" ddp --device "$TORCH_DEVICE" --ranks "$ranks" \
      --models "$model" --batch "$batch" --seconds "$SECONDS_BENCH" 2>&1 | tee -a "$OUT/ddp.txt"
  done
}

for round in $(seq 1 "$ROUNDS"); do
  for m in $MODELS; do
    IFS=: read -r model batch steps <<< "$m"
    steps=$(( steps / SCALE > 20 ? steps / SCALE : 20 ))
    have 40 "round $round $model" || continue
    say "round $round: $model batch $batch ($steps cohort steps)"
    bench_one "$model" "$batch" "$round"
    cohort_one one-f32 "$model" "$batch" "$steps" f32 "$round" "$BACKEND"
    [ "${RLX_DC_ONE_EXTRA:-1}" = 1 ] && RLX_VK_PRESUBMIT=0 cohort_one one-f32-plain "$model" "$batch" "$steps" f32 "$round" "$BACKEND"
    # RLX_DC_AB="VAR=VALUE": the one-rank f32 cohort again with that setting
    # ("one-f32-ab"), for a same-round comparison of a switch
    if [ -n "${RLX_DC_AB-}" ]; then
      env "$RLX_DC_AB" bash -c true && \
        eval "$RLX_DC_AB cohort_one one-f32-ab \"\$model\" \"\$batch\" \"\$steps\" f32 \"\$round\" \"\$BACKEND\""
    fi
    if [ "${RLX_DC_ONE_EXTRA:-1}" = 1 ]; then
      cohort_one one-f16 "$model" "$batch" "$steps" f16 "$round" "$BACKEND"
      cohort_one one-f8e4m3 "$model" "$batch" "$steps" f8e4m3 "$round" "$BACKEND"
    fi
    if [ -n "$TWO" ]; then
      # shellcheck disable=SC2086
      cohort_one two-f32 "$model" "$batch" "$steps" f32 "$round" $TWO
      # shellcheck disable=SC2086
      cohort_one two-f16 "$model" "$batch" "$steps" f16 "$round" $TWO
      # shellcheck disable=SC2086
      cohort_one two-f8e4m3 "$model" "$batch" "$steps" f8e4m3 "$round" $TWO
      # and the two-rank f32 cohort with RLX_DC_AB's setting ("two-f32-ab")
      if [ -n "${RLX_DC_AB-}" ]; then
        eval "$RLX_DC_AB cohort_one two-f32-ab \"\$model\" \"\$batch\" \"\$steps\" f32 \"\$round\" $TWO"
      fi
    fi
  done
  # the PyTorch anchor after the first round, so that it is there even when
  # the later rounds run out of time
  [ "$round" = 1 ] && [ "${RLX_DC_DDP:-1}" = 1 ] && ddp_all
done

say "summary"
python3 "$PWD/scripts/device/summarize.py" "$RESULTS" "$OUT/ddp.txt" > "$OUT/summary.md" 2>&1
cat "$OUT/summary.md"
say "done in $(( $(date +%s) - T0 ))s"
exit 0
