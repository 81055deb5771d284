#!/bin/bash
# scripts/device/ab-build.sh — run THERE (the device machine), with .devcarry
# (prepare.sh) and .devcarry-ref (prepare-ref.sh REF) carried:
#
#   command: bash scripts/device/ab-build.sh   carry: [".devcarry", ".devcarry-ref"]
#
# This build against a reference build, in one call, the way a refactor must
# show it moved no figure: RLX_AB_ROUNDS (3) interleaved rounds, each running
# for both builds `rlx-rank bench` (RLX_AB_BENCH_SECONDS, 2), a one-rank
# cohort and a two-rank cohort (two ranks on the same backend), for each of
# RLX_AB_CONFIGS ("backend:model:batch:steps ..."); then (RLX_AB_TESTS=1,
# the default) the GPU tests under the validation layer (this build), each
# within RLX_AB_TEST_TIMEOUT seconds (150). RLX_AB_BUDGET (seconds, 0: none)
# starts no further configuration once that much of the call has passed, so
# a short call still ends with its table. Each figure's ratio new/ref is
# taken per round; the table gives the medians. Raw lines in $OUT/ab.jsonl,
# the table in $OUT/ab.md.
set -u -o pipefail
OUT=${OUT:-/tmp/rlx-device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/ab.txt") 2>&1
C=$PWD/.devcarry
RANK=$C/rlx-rank
REF=$PWD/.devcarry-ref/rlx-rank
ROUNDS=${RLX_AB_ROUNDS:-3}
CONFIGS=${RLX_AB_CONFIGS:-"vulkan:mnist-mlp:1024:6000 vulkan:mnist-cnn:1024:5000 vulkan:mnist-mlp-xl:4096:400 cpu:mnist-mlp-xl:256:400 cpu:mnist-mlp:1024:1500"}
RES=$OUT/ab.jsonl
T0=$(date +%s)
say () { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
[ -x "$RANK" ] && [ -x "$REF" ] || { say "carry .devcarry and .devcarry-ref (prepare.sh, prepare-ref.sh)"; exit 1; }
cat "$C/MANIFEST" .devcarry-ref/MANIFEST 2>/dev/null
. "$(dirname "$0")/vulkan-env.sh"
GPU=vulkan
[ "$NGPU" -ge 1 ] && GPU=vulkan:$(echo "$GPUS" | head -1)
rec () { echo "$1" >> "$RES"; }
BUDGET=${RLX_AB_BUDGET:-0}
BENCH_S=${RLX_AB_BENCH_SECONDS:-2}
for round in $(seq 1 "$ROUNDS"); do
  for cfg in $CONFIGS; do
    if [ "$BUDGET" -gt 0 ] && [ $(( $(date +%s) - T0 )) -ge "$BUDGET" ]; then
      say "budget of ${BUDGET}s spent: round $round $cfg and later not run"; break 2
    fi
    IFS=: read -r be model batch steps <<< "$cfg"
    [ "$be" = vulkan ] && be=$GPU
    order="new ref"; [ $((round % 2)) = 0 ] && order="ref new"   # neither build always first
    for build in $order; do
      bin=$RANK; [ $build = ref ] && bin=$REF
      b=$(timeout 60 "$bin" bench --model "$model" --batch "$batch" --backend "$be" --seconds "$BENCH_S" --json 2>/dev/null | grep '^{' | tail -1)
      rec "{\"round\": $round, \"build\": \"$build\", \"kind\": \"bench\", \"cfg\": \"$cfg\", \"r\": ${b:-null}}"
      for n in 1 2; do
        args=(--backend "$be"); [ $n = 2 ] && args+=(--backend "$be")
        c=$(timeout 130 python3 "$PWD/scripts/device/cohort-rate.py" "$bin" --model "$model" --batch "$batch" \
              --steps "$steps" --timeout 110 --label "$build-$n" "${args[@]}")
        rec "{\"round\": $round, \"build\": \"$build\", \"kind\": \"cohort$n\", \"cfg\": \"$cfg\", \"r\": ${c:-null}}"
      done
      say "round $round $cfg $build done"
    done
  done
done
python3 - "$RES" > "$OUT/ab.md" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def rate(r):
    x = r.get("r") or {}
    return x.get("samples_per_second") or x.get("samples_per_s")
cfgs = list(dict.fromkeys(r["cfg"] for r in rows))
print("| backend:model:batch | what | new samples/s | ref samples/s | new/ref (median of rounds) | per round | hashes agree |")
print("|---|---|---|---|---|---|---|")
for c in cfgs:
    for k in ("bench", "cohort1", "cohort2"):
        per, nv, rv, agree = [], [], [], True
        for rd in sorted({r["round"] for r in rows}):
            n = [rate(r) for r in rows if r["cfg"] == c and r["kind"] == k and r["round"] == rd and r["build"] == "new"]
            f = [rate(r) for r in rows if r["cfg"] == c and r["kind"] == k and r["round"] == rd and r["build"] == "ref"]
            if n and f and n[0] and f[0]:
                per.append(n[0] / f[0]); nv.append(n[0]); rv.append(f[0])
        for r in rows:
            if r["cfg"] == c and r["kind"] == k and r.get("r") and r["r"].get("hashes_agree") is False:
                agree = False
        if per:
            print(f"| {c} | {k} | {st.median(nv):,.0f} | {st.median(rv):,.0f} | **{st.median(per):.3f}** | {[round(p, 3) for p in per]} | {agree if k != 'bench' else '-'} |")
        else:
            print(f"| {c} | {k} | - | - | no result | | |")
PY
cat "$OUT/ab.md"
if [ "${RLX_AB_TESTS:-1}" = 1 ]; then
  for t in test-resident test-round; do
    say "$t on $GPU (validation layer on)"
    RLX_TEST_VULKAN=$GPU RLX_VK_VALIDATE=1 timeout "${RLX_AB_TEST_TIMEOUT:-150}" "$C/$t" 2>&1 |
      grep -v 'DEBUG: rlx-vk: .* buffer, ' > "$OUT/tests-$t.txt"
    echo "$t exit ${PIPESTATUS[0]}" | tee -a "$OUT/tests-$t.txt"
    grep -cE '^ok' "$OUT/tests-$t.txt"; grep -E '^not ok|VUID|Validation' "$OUT/tests-$t.txt" | head -5
  done
fi
say "done"
