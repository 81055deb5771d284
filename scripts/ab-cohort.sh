#!/bin/bash
# scripts/ab-cohort.sh ROUNDS NEW_RLX_RANK REF_RLX_RANK [OTHER_RLX_RANK...] — a
# refactor's speed against the build before it, on this machine: ROUNDS
# interleaved rounds, each running for every build (in the order given) a
# two-rank and a one-rank CPU cohort of mnist-mlp-xl at batch 256 a rank,
# 300 steps (scripts/device/cohort-rate.py), then per build the median over
# rounds of its samples/s over REF's in the same round. Raw lines in
# ${RLX_AB_OUT:-ab-cohort.jsonl}. On a shared machine run it as
#   chrt -f 50 bash scripts/ab-cohort.sh 8 NEW REF
# so the cohorts preempt everything else (the kernel's real-time throttle
# still leaves others 5 %): both builds meet the same quiet machine.
set -euo pipefail
rounds=${1:?usage: ab-cohort.sh ROUNDS NEW REF [OTHER...]}
shift
[ $# -ge 2 ] || { echo "ab-cohort.sh: give at least a new and a reference rlx-rank" >&2; exit 2; }
for b in "$@"; do [ -x "$b" ] || { echo "ab-cohort.sh: $b is not an executable rlx-rank" >&2; exit 2; }; done
here=$(cd "$(dirname "$0")" && pwd)
out=${RLX_AB_OUT:-ab-cohort.jsonl}
: > "$out"
for r in $(seq 1 "$rounds"); do
  for b in "$@"; do
    for be in "--backend cpu --backend cpu" "--backend cpu"; do
      # shellcheck disable=SC2086
      res=$(python3 "$here/device/cohort-rate.py" "$b" --model mnist-mlp-xl --batch 256 --steps 300 $be) || true
      printf '{"round": %d, "build": "%s", "res": %s}\n' "$r" "$b" "${res:-null}" >> "$out"
    done
  done
done
python3 - "$out" "$2" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ref = sys.argv[2]
rate = {}
for r in rows:
    if r["res"]:
        rate[(r["round"], r["build"], r["res"]["ranks"])] = r["res"]["samples_per_s"]
agree = all(r["res"] and r["res"]["hashes_agree"] for r in rows)
for b in dict.fromkeys(r["build"] for r in rows):
    if b == ref:
        continue
    for ranks in (2, 1):
        q = [rate[(k, b, ranks)] / rate[(k, ref, ranks)] for k in {r["round"] for r in rows}
             if (k, b, ranks) in rate and (k, ref, ranks) in rate]
        if q:
            print(f"{b}: {ranks} rank(s) {statistics.median(q):.3f} of the reference "
                  f"({min(q):.3f}-{max(q):.3f}, {len(q)} rounds)")
print("hashes agreed" if agree else "HASHES DISAGREED or a run failed")
sys.exit(0 if agree else 1)
PY
