#!/bin/bash
# scripts/device/outer-trace.sh — where an N-rank outer round's time goes on
# the device machine's cores: RLX_TRACE (core/p2p/rlx-trace.h) on every rank
# of `--sync auto` cohorts over RLX_LINK_SHAPE, for
# scripts/device/outer-trace.py (here) to lay out round by round.
#
#   here:   bash scripts/device/prepare.sh && bash scripts/device/prepare-outer.sh
#   device: command 'bash scripts/device/outer-trace.sh'  carry [".devcarry-cpu"]
#           kind nvidia-h200   timeout_s 200
#
# RLX_OT_RUNS: "MODEL:RANKS:FIRST_CORE[:DATASET] ..." (default
# "mnist-mlp-xl:8:0 mnist-mlp:8:8": both at once on disjoint cores, each rank
# alone on its core, as outer-bench.py's rate plan runs them; DATASET
# fashion-mnist, or synthetic, whose epoch RLX_SYNTHETIC_TRAIN sizes),
# RLX_OT_SHAPE (200M50),
# RLX_OT_SYNC (auto), RLX_OT_SECONDS (8), RLX_OT_WARMUP (4). Writes
# $OUT/MODEL-RANKS-DATASET/trace-PID.tsv.gz (one a rank), run.json (outer-bench.py
# --one's result: the leader's events, what auto chose) and log.txt.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/log-setup.sh"
C=${RLX_OB_CARRY:-$PWD/.devcarry-cpu}
RANK=${RLX_OB_RANK:-}
if [ -z "$RANK" ]; then
  [ -x "$C/rlx-rank" ] || { echo "no $C/rlx-rank: carry .devcarry-cpu"; exit 1; }
  cat "$C/MANIFEST" 2>/dev/null
  . "$here/carry-libs.sh"
  RANK=$C/rlx-rank
  . "$here/fashion-unpack.sh"
fi
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores;" \
  "siblings of cpu0: $(cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>/dev/null)"
pids=()
for r in ${RLX_OT_RUNS:-"mnist-mlp-xl:8:0 mnist-mlp:8:8"}; do
  IFS=: read -r model ranks first dataset <<< "$r"
  dataset=${dataset:-fashion-mnist}
  d=$OUT/$model-$ranks-$dataset
  mkdir -p "$d"
  cfg=$(printf '{"model": "%s", "ranks": %s, "shape": "%s", "sync": "%s", "pin": %s, "dataset": "%s"}' \
    "$model" "$ranks" "${RLX_OT_SHAPE:-200M50}" "${RLX_OT_SYNC:-auto}" "$first" "$dataset")
  echo "=== $cfg"
  RLX_TRACE=$d timeout 120 python3 "$here/outer-bench.py" "$RANK" --one "$cfg" \
    --seconds "${RLX_OT_SECONDS:-8}" --warmup "${RLX_OT_WARMUP:-4}" > "$d/run.json" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; echo "=== exit $?"; done
for d in "$OUT"/*/; do
  python3 - "$d/run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(r.get("model"), r.get("ranks"), "samples/s", round(r.get("samples_per_s") or 0),
      "commits", r.get("window_commits"), "|", (r.get("sync_last") or {}).get("reason"))
PY
  gzip -9 "$d"/trace-*.tsv
  ls -la "$d" | head -12
done
du -sh "$OUT"
