#!/usr/bin/env bash
# The desktop app's figures (BENCHMARKS.md, "Desktop app"), under Xvfb with a
# private session bus, each measured REPS times (median reported):
#   ui     rlx-cluster --benchmark SECONDS --add-ranks 3: the app's own rank
#          plus three local ranks (mnist-mlp, Fashion-MNIST, batch 32 per rank,
#          CPU), all training at full speed; frame time (frame clock: frame
#          start to end of paint) p50/p99, frame interval, UI-thread CPU, and
#          the CPU of the thread the app's node runs on (reported apart).
#          Reference in the same run: the same four-rank cohort with a
#          headless rlx-rank in the app's place, steps per second.
#   chart  rlx-cluster --benchmark-chart: 100,000 points at 1200 x 400; the
#          plot rebuilt into a snapshot (p50/p99) and real frames.
# Usage: scripts/bench-app.sh BUILD_DIR [REPS] [SECONDS]
# GSK_RENDERER defaults to cairo: GTK 4.8's GL renderer on Xvfb's software GL
# waits ~250 ms in every buffer swap on this machine (see BENCHMARKS.md).
set -euo pipefail
BUILD=${1:?usage: scripts/bench-app.sh BUILD_DIR [REPS] [SECONDS]}
REPS=${2:-3}
SECONDS_UI=${3:-20}
APP=$(cd "$BUILD" && pwd)/app/rlx-cluster
RANK=$(cd "$BUILD" && pwd)/tools/rlx-rank
export GSK_RENDERER=${GSK_RENDERER:-cairo}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# one isolated environment per run: runtime/state/data/config dirs and settings
fresh_env () {
  local d
  d=$(mktemp -d -p "$OUT")
  for x in run state data config; do mkdir -m 700 -p "$d/$x"; done
  mkdir -p "$d/config/glib-2.0/settings"
  printf "[io/github/rlx/Cluster]\nmodel='mnist-mlp'\ndataset='fashion-mnist'\nbackend='cpu'\nbatch=uint32 32\nevaluate-every=uint32 500\nwindow-width=1280\nwindow-height=800\n" \
    > "$d/config/glib-2.0/settings/keyfile"
  echo "$d"
}

run_xvfb () {   # DIR CMD...
  local d=$1; shift
  XDG_RUNTIME_DIR=$d/run XDG_STATE_HOME=$d/state XDG_DATA_HOME=$d/data XDG_CONFIG_HOME=$d/config \
  GSETTINGS_BACKEND=keyfile GSETTINGS_SCHEMA_DIR=$(cd "$BUILD" && pwd)/data \
    xvfb-run -a -s "-noreset -screen 0 1280x800x24" dbus-run-session -- "$@"
}

# The reference: four headless ranks, steps/s over the same window.
reference () {
  local d pids=() n0 n1
  d=$(fresh_env)
  for i in 1 2 3 4; do
    XDG_RUNTIME_DIR=$d/run XDG_DATA_HOME=$d/data "$RANK" join --local --json --cohort ref \
      --dataset fashion-mnist --backend cpu --batch 32 --threads 1 --checkpoint-every 0 \
      > "$d/r$i.jsonl" 2>/dev/null &
    pids+=($!)
  done
  # warm up until four members commit steps, then count for the window
  for _ in $(seq 1 600); do
    grep -q '"members":4' "$d/r1.jsonl" 2>/dev/null && break
    sleep 0.1
  done
  n0=$(grep -c '"event":"step"' "$d/r1.jsonl" || true)
  sleep "$SECONDS_UI"
  n1=$(grep -c '"event":"step"' "$d/r1.jsonl" || true)
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  python3 -c "import json; print(json.dumps({'benchmark': 'reference', 'steps_per_s': ($n1 - $n0) / $SECONDS_UI}))"
}

for r in $(seq 1 "$REPS"); do
  run_xvfb "$(fresh_env)" "$APP" --cohort bench-ui --benchmark "$SECONDS_UI" --add-ranks 3 \
    > "$OUT/ui.$r.json" 2>"$OUT/ui.$r.err" || { cat "$OUT/ui.$r.err" >&2; exit 1; }
  reference > "$OUT/ref.$r.json"
  run_xvfb "$(fresh_env)" "$APP" --cohort bench-chart --benchmark-chart \
    > "$OUT/chart.$r.json" 2>"$OUT/chart.$r.err" || { cat "$OUT/chart.$r.err" >&2; exit 1; }
done

python3 - "$OUT" "$REPS" "$GSK_RENDERER" <<'PY'
import json, statistics, sys, os
d, reps, renderer = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(kind):
    out = []
    for r in range(1, reps + 1):
        text = open(os.path.join(d, f"{kind}.{r}.json")).read()
        # the object the app printed (GTK may add lines of its own after it)
        out.append(json.JSONDecoder().raw_decode(text[text.index("{"):])[0])
    return out
ui, ref, chart = load("ui"), load("ref"), load("chart")
for u in ui:
    if "error" in u:
        sys.exit(f"ui benchmark failed: {u['error']}")
med = lambda xs: statistics.median(xs)
rng = lambda xs: f"{min(xs):.2f}–{max(xs):.2f}"
def row(name, xs, unit, goal=""):
    print(f"| {name} | **{med(xs):.2f} {unit}** | {rng(xs)} | {goal} |")
print(f"load average at the end: {open('/proc/loadavg').read().split()[:3]}")
print(f"renderer: {renderer}; {reps} runs; {ui[0]['ranks']} ranks; {ui[0]['seconds']:.0f} s watching, then {ui[0]['seconds']:.0f} s hovering\n")
print("| figure | median | range | goal |")
print("|---|---|---|---|")
for phase, what in (("watch", "watching (no input)"), ("hover", "hovering (readout moves every frame)")):
    row(f"{what}: frame time p99, wall clock", [u[f"{phase}_frame_ms_p99"] for u in ui], "ms", "≤ 16 ms")
    row(f"{what}: frame time p50, wall clock", [u[f"{phase}_frame_ms_p50"] for u in ui], "ms")
    row(f"{what}: frame time p99, UI thread CPU", [u[f"{phase}_frame_cpu_ms_p99"] for u in ui], "ms")
    row(f"{what}: frames' share of a core (GTK's own work)", [u[f"{phase}_frames_cpu_ms_total"] / 10 / u["seconds"] for u in ui], "%", "≤ 10 %" if phase == "watch" else "")
    row(f"{what}: frames per second", [u[f"{phase}_frames_per_s"] for u in ui], "")
    row(f"{what}: frame interval p99", [u[f"{phase}_interval_ms_p99"] for u in ui], "ms")
    row(f"{what}: UI thread CPU, all of it (GTK + the window's handling of the node's batched results)", [u[f"{phase}_ui_thread_cpu_percent"] for u in ui], "% of a core", "≤ 10 %" if phase == "watch" else "")
    row(f"{what}: node thread CPU (the node's protocol, off the UI thread)", [u[f"{phase}_node_thread_cpu_percent"] for u in ui], "% of a core")
    row(f"{what}: whole app process CPU", [u[f"{phase}_process_cpu_percent"] for u in ui], "% of a core")
    row(f"{what}: cohort steps/s", [u[f"{phase}_steps_per_s"] for u in ui], "")
row("reference: same cohort, headless rlx-rank in the app's place, steps/s", [r["steps_per_s"] for r in ref], "")
print(f"| ratio app (watching) / reference | **{med([u['watch_steps_per_s'] for u in ui]) / med([r['steps_per_s'] for r in ref]):.2f}** | | |")
row("chart plot rebuilt with 100,000 points, p50, wall clock", [c["snapshot_ms_p50"] for c in chart], "ms")
row("chart plot rebuilt with 100,000 points, p99, wall clock", [c["snapshot_ms_p99"] for c in chart], "ms", "≤ 4 ms")
row("chart plot rebuilt with 100,000 points, p50, CPU", [c["snapshot_cpu_ms_p50"] for c in chart], "ms")
row("chart plot rebuilt with 100,000 points, p99, CPU", [c["snapshot_cpu_ms_p99"] for c in chart], "ms", "≤ 4 ms")
row("chart frame (rebuild + GTK render + Xvfb), p50, wall clock", [c["redraw_frame_ms_p50"] for c in chart], "ms")
row("chart frame (rebuild + GTK render + Xvfb), p99, wall clock", [c["redraw_frame_ms_p99"] for c in chart], "ms")
row("chart frame (rebuild + GTK render + Xvfb), p99, CPU", [c["redraw_frame_cpu_ms_p99"] for c in chart], "ms")
print(f"\nchart: {chart[0]['points']} points → {chart[0]['columns']} columns at {chart[0]['width']}×{chart[0]['height']}")
PY
