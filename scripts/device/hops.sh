#!/bin/bash
# scripts/device/hops.sh — run THERE (the device machine), in the repo root,
# with .devcarry carried (scripts/device/prepare.sh makes it here):
#
#   command: bash scripts/device/hops.sh   carry: [".devcarry"]
#   kind: nvidia-h200-x2   timeout_s: 600
#
# Where a two-GPU round's time goes, and what busy polling does to it:
#   1. tests/p2p/hop-probe: one hand-off between threads or processes on this
#      host, sleeping and polling (hops.jsonl);
#   2. for each model (on a host of one GPU the two ranks share it), in RLX_HOPS_ROUNDS (2) interleaved rounds, cohorts of
#      one rank (vulkan:I) and of two (vulkan:I + vulkan:J) at f32 with busy
#      polling off and on (RLX_BUSY_POLL=0/1), two ranks also at f8e4m3 with
#      it on: samples/s from the leader's step events (cohort-rate.py), and
#      for the two-rank runs the round's path from both ranks' RLX_TRACE
#      files (round-trace.py): results.jsonl, summary in log.txt.
# RLX_HOPS_BUSY: the busy-polling settings to run (default "0 1").
# RLX_HOPS_MODELS: "model:batch per rank:steps ..." (default below).
set -u -o pipefail

OUT=${OUT:-/tmp/rlx-device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1

C=$PWD/.devcarry
RANK=$C/rlx-rank
RATE="python3 $PWD/scripts/device/cohort-rate.py $RANK"
RESULTS=$OUT/results.jsonl
ROUNDS=${RLX_HOPS_ROUNDS:-2}
MODELS=${RLX_HOPS_MODELS:-"mnist-mlp:1024:6000 mnist-cnn:1024:4000 mnist-mlp-xl:4096:400"}
T0=$(date +%s)
say () { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }

[ -x "$RANK" ] || { say "no $RANK: run scripts/device/prepare.sh here first"; exit 1; }
cat "$C/MANIFEST" 2>/dev/null
. "$(dirname "$0")/vulkan-env.sh"
if [ -z "$TWO" ] && [ "$NGPU" -ge 1 ]; then
  g=$(echo "$GPUS" | head -1)
  TWO="vulkan:$g vulkan:$g"
  say "one NVIDIA device: the two-rank runs share it ($TWO)"
fi
ONE=${TWO%% *}

say "hop-probe"
"$C/hop-probe" 20000 | tee "$OUT/hops.jsonl"

# run LABEL MODEL BATCH STEPS PRECISION BUSY ROUND BACKEND...
run () {
  local label=$1 model=$2 batch=$3 steps=$4 prec=$5 busy=$6 round=$7 args=() out tr
  shift 7
  for b in "$@"; do args+=(--backend "$b"); done
  tr=$(mktemp -d)
  out=$(RLX_BUSY_POLL=$busy RLX_TRACE=$tr timeout 100 $RATE --label "$label" --model "$model" \
          --batch "$batch" --steps "$steps" --precision "$prec" --timeout 90 "${args[@]}")
  echo "$out" | cut -c1-300
  if [ $# -ge 2 ]; then
    python3 "$PWD/scripts/device/round-trace.py" "$tr" --label "$label $model busy=$busy"
    path=$(python3 "$PWD/scripts/device/round-trace.py" "$tr" --json)
  else
    path='{}'
  fi
  python3 -c 'import json,sys
d=json.loads(sys.argv[1]) if sys.argv[1].strip() else {"error": "no result"}
d.update(round=int(sys.argv[2]), busy=int(sys.argv[3]), path=json.loads(sys.argv[4]))
print(json.dumps(d))' "$out" "$round" "$busy" "$path" >> "$RESULTS" ||
    echo "{\"label\": \"$label\", \"model\": \"$model\", \"error\": \"no result\"}" >> "$RESULTS"
  rm -rf "$tr"
}

for round in $(seq 1 "$ROUNDS"); do
  for m in $MODELS; do
    IFS=: read -r model batch steps <<< "$m"
    for busy in ${RLX_HOPS_BUSY:-0 1}; do
      say "round $round $model busy=$busy"
      run one-f32 "$model" "$batch" "$steps" f32 "$busy" "$round" "$ONE"
      # shellcheck disable=SC2086
      run two-f32 "$model" "$batch" "$steps" f32 "$busy" "$round" $TWO
    done
    # shellcheck disable=SC2086
    run two-f8e4m3 "$model" "$batch" "$steps" f8e4m3 1 "$round" $TWO
  done
done

say "summary (medians over rounds; samples/s)"
python3 - "$RESULTS" <<'EOF'
import json, statistics, sys
from collections import defaultdict
rates, rounds = defaultdict(list), defaultdict(list)
for line in open(sys.argv[1]):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if "samples_per_s" not in d:
        continue
    k = (d["model"], d["label"], d.get("busy"))
    rates[k].append(d["samples_per_s"])
    if d.get("path", {}).get("round_us"):
        rounds[k].append(d["path"]["round_us"])
print("| model | run | busy | samples/s | round µs (trace) |")
print("|---|---|---|---|---|")
for k in sorted(rates):
    r = statistics.median(rates[k])
    t = "%.0f" % statistics.median(rounds[k]) if rounds[k] else ""
    print("| %s | %s | %s | %.3f M | %s |" % (k[0], k[1], k[2], r / 1e6, t))
for m in sorted({k[0] for k in rates}):
    for b in (0, 1):
        one, two = rates.get((m, "one-f32", b)), rates.get((m, "two-f32", b))
        if one and two:
            print("%s busy=%d: two/one %.2f" % (m, b, statistics.median(two) / statistics.median(one)))
EOF
say "done"
