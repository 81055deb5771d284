#!/bin/bash
# scripts/device/two-gpu-link.sh — run THERE (the device machine, kind
# nvidia-h200-x2), after gpu-cohort.sh's setup, with .devcarry carried:
#
#   command: bash scripts/device/two-gpu-link.sh    carry: [".devcarry"]
#
# Two ranks on two GPUs (vulkan:0 + vulkan:1), the members' buckets and the
# leader's updates over the local bus's socket against the same frames as
# sealed memfds (RLX_LINK_SHM=BYTES: frames of at least that size), in
# RLX_TL_ROUNDS interleaved rounds, for RLX_TL_MODELS; one-rank runs beside
# them for the two/one ratio. RLX_TL_VAR names another variable to vary in
# the same way (RLX_TL_VAR=RLX_LINK_RING: the shared ring), over the values
# of RLX_TL_SHM ("0 262144" by default); RLX_TL_PRECISION: the wire precision
# of the runs (f32 by default). Everything goes to $OUT/two-gpu-link.jsonl and
# a table on stdout (medians). RLX_TL_BUDGET seconds at most (default 300).
set -u -o pipefail
OUT=${OUT:-/tmp/rlx-device-out}
mkdir -p "$OUT"
C=$PWD/.devcarry
RATE="python3 $PWD/scripts/device/cohort-rate.py $C/rlx-rank"
RES=$OUT/two-gpu-link.jsonl
ROUNDS=${RLX_TL_ROUNDS:-3}
BUDGET=${RLX_TL_BUDGET:-300}
SHM=${RLX_TL_SHM:-"0 262144"}
VAR=${RLX_TL_VAR:-RLX_LINK_SHM}
PREC=${RLX_TL_PRECISION:-f32}
MODELS=${RLX_TL_MODELS:-"mnist-mlp-xl:4096:300 mnist-mlp:1024:3000 mnist-cnn:1024:3000"}
# the two ranks' backends (a dry run here: RLX_TL_TWO="cpu cpu"; both on one
# GPU: RLX_TL_TWO="vulkan:0 vulkan:0")
read -r -a TWO <<< "${RLX_TL_TWO:-vulkan:0 vulkan:1}"
T0=$(date +%s)
left () { echo $(( BUDGET - ($(date +%s) - T0) )); }

if [[ "${TWO[*]}" == *vulkan* ]] && ! ldconfig -p | grep 'libvulkan\.so\.1' >/dev/null; then
  for f in "$C"/gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
# our libraries the machine lacks, as gpu-cohort.sh unpacks them (a fresh
# machine, or one where gpu-cohort.sh has not run)
[ -d "$C/use" ] || . "$(dirname "$0")/carry-libs.sh"

for round in $(seq 1 "$ROUNDS"); do
  for m in $MODELS; do
    IFS=: read -r model batch steps <<< "$m"
    for shm in one $SHM; do
      [ "$(left)" -lt 40 ] && { echo "out of time: $model $shm round $round skipped"; continue; }
      if [ "$shm" = one ]; then
        backends=(--backend "${TWO[0]}"); shm_env=0
      else
        backends=(--backend "${TWO[0]}" --backend "${TWO[1]}"); shm_env=$shm
      fi
      out=$(env "$VAR=$shm_env" timeout 100 $RATE --label "$shm" --model "$model" --batch "$batch" \
              --steps "$steps" --precision "$PREC" --timeout 90 "${backends[@]}")
      python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["round"]=int(sys.argv[2]); d["shm"]=sys.argv[3]; print(json.dumps(d))' \
        "$out" "$round" "$shm" >> "$RES" 2>/dev/null || echo "{\"error\": \"no result\", \"model\": \"$model\", \"shm\": \"$shm\"}" >> "$RES"
      echo "$model $shm round $round: $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d.get("samples_per_s",0)), "samples/s", d.get("step_us"), "us/step, hashes agree:", d.get("hashes_agree"))' 2>/dev/null)"
    done
  done
done

python3 - "$RES" "$VAR" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    if "samples_per_s" in r and r.get("ok", True):
        by.setdefault((r["model"], r["shm"]), []).append(r["samples_per_s"])
models = sorted({k[0] for k in by})
shms = sorted({k[1] for k in by if k[1] != "one"}, key=int)
print("| model | one rank | " + " | ".join(f"two, {sys.argv[2]}={s} | two/one" for s in shms) + " |")
print("|---|---|" + "---|---|" * len(shms))
for m in models:
    one = st.median(by.get((m, "one"), [float("nan")]))
    cells = []
    for s in shms:
        v = st.median(by.get((m, s), [float("nan")]))
        cells += [f"{v/1e6:.3f} M", f"{v/one:.2f}"]
    print(f"| {m} | {one/1e6:.3f} M | " + " | ".join(cells) + " |")
PY
