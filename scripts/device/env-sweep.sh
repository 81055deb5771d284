#!/bin/bash
# scripts/device/env-sweep.sh — run THERE (the device machine), with
# .devcarry carried (scripts/device/prepare.sh makes it here):
#
#   command: RLX_SW_VAR=RLX_VK_FILL_THREADS RLX_SW_VALUES="262144 524288" \
#            bash scripts/device/env-sweep.sh          carry: [".devcarry"]
#
# One setting of the Vulkan backend against others, as `rlx-rank bench`
# (one rank's training step, no cohort) measures it: for each value of
# RLX_SW_VALUES ("-" leaves RLX_SW_VAR unset: the default), RLX_SW_ROUNDS (3)
# interleaved rounds of RLX_SW_SECONDS (2) each, on RLX_SW_MODELS
# ("model:batch ...", default mnist-mlp-xl at 4096). Medians and each
# value's ratio to the first, per round; raw lines in $OUT/env-sweep.jsonl.
# RLX_SW_BACKEND: the backend (default vulkan, the machine's GPU).
set -u -o pipefail
OUT=${OUT:-/tmp/rlx-device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/env-sweep.txt") 2>&1
C=$PWD/.devcarry
RANK=$C/rlx-rank
say () { echo "=== $*"; }
VAR=${RLX_SW_VAR:?set RLX_SW_VAR to the variable to sweep}
VALUES=${RLX_SW_VALUES:?set RLX_SW_VALUES to its values ("-": unset)}
ROUNDS=${RLX_SW_ROUNDS:-3}
SECONDS_EACH=${RLX_SW_SECONDS:-2}
MODELS=${RLX_SW_MODELS:-"mnist-mlp-xl:4096"}
BACKEND=${RLX_SW_BACKEND:-vulkan}   # a dry run here: vulkan:llvmpipe
RES=$OUT/env-sweep.jsonl
. "$(dirname "$0")/vulkan-env.sh"
for round in $(seq 1 "$ROUNDS"); do
  for m in $MODELS; do
    IFS=: read -r model batch <<< "$m"
    for v in $VALUES; do
      if [ "$v" = - ]; then envs=(env -u "$VAR"); else envs=(env "$VAR=$v"); fi
      line=$("${envs[@]}" timeout 60 "$RANK" bench --model "$model" --batch "$batch" \
               --backend "$BACKEND" --seconds "$SECONDS_EACH" --json 2>/dev/null | grep '^{' | tail -1)
      echo "{\"round\": $round, \"model\": \"$model\", \"batch\": $batch, \"value\": \"$v\", \"bench\": ${line:-null}}" >> "$RES"
      say "$model $batch $VAR=$v round $round: $(echo "$line" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["samples_per_second"]))' 2>/dev/null)"
    done
  done
done
python3 - "$RES" "$VAR" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ok = [r for r in rows if r.get("bench")]
for m in sorted({(r["model"], r["batch"]) for r in ok}):
    vals = []
    for r in ok:
        if (r["model"], r["batch"]) == m and r["value"] not in vals:
            vals.append(r["value"])
    rate = lambda v, k: [r["bench"]["samples_per_second"] for r in ok
                         if (r["model"], r["batch"]) == m and r["value"] == v and r["round"] == k]
    rounds = sorted({r["round"] for r in ok})
    print(f"| {m[0]} {m[1]}: {sys.argv[2]} | samples/s (median) | / {vals[0]} (per round) |")
    print("|---|---|---|")
    for v in vals:
        med = st.median([x for k in rounds for x in rate(v, k)])
        per = [round(rate(v, k)[0] / rate(vals[0], k)[0], 3) for k in rounds
               if rate(v, k) and rate(vals[0], k)]
        print(f"| {v} | {med:,.0f} | {st.median(per) if per else float('nan'):.3f} {per} |")
PY
