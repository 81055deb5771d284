#!/usr/bin/env bash
# Every figure in BENCHMARKS.md, measured side by side with its reference in
# one run. Called by `./rlx bench [AREA…]` with the (release) build dir first.
#   AREA: vision wire kernels gpu p2p cohort remote app (default: all that run on this machine)
set -euo pipefail
BUILD=${1:?usage: scripts/bench.sh BUILD_DIR [AREA…]}
shift
RANK="$BUILD/tools/rlx-rank"
SHARED=${RLX_SHARED_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/shared}
TORCH_REF="$SHARED/bench/torch_ref.py"
AREAS=${*:-vision wire kernels p2p cohort remote gpu app}
want () { [[ " $AREAS " == *" $1 "* ]]; }
echo "# machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(date -u +%F)"

# --- vision ------------------------------------------------------------------
if want vision; then
  echo "## vision"
  # rlx-rank bench --backend cpu vs torch_ref.py speed (best of --threads 1/2),
  # interleaved, medians of 3; the same per CPU-second with one thread each;
  # then Fashion-MNIST accuracy after 2 epochs.
  python3 "$(dirname "$0")/bench-vision.py" "$RANK" "$TORCH_REF" speed --reps 3 --seconds 1
  python3 "$(dirname "$0")/bench-vision.py" "$RANK" "$TORCH_REF" cputime --reps 3 --seconds 1
  python3 "$(dirname "$0")/bench-vision.py" "$RANK" "$TORCH_REF" accuracy
fi
# --- end vision --------------------------------------------------------------

# --- wire --------------------------------------------------------------------
if want wire; then
  echo "## wire"
  # Single-thread GB/s of f32 data through rlx-rank's codec and through the
  # seed's own JavaScript (tests/wire/seed-codec.mjs under Node.js), on the
  # same vector (same generator; the "sum" fields prove it), for the
  # mnist-mlp and mnist-mlp-xl bucket sizes; memcpy of the same bytes beside.
  # Each figure is a median (C: of 7 samples, JS: of 5), each sample ≥ 20 ms
  # (C) / 50 ms (JS). The pair is measured three times, alternating, and the
  # median of the three is reported.
  NODE=$(command -v node || command -v nodejs || true)
  HARNESS="$(cd "$(dirname "$0")/.." && pwd)/tests/wire/seed-codec.mjs"
  if [[ -z "$NODE" ]]; then
    echo "wire: Node.js not found (install nodejs): the seed's figures need it" >&2
    exit 1
  fi
  WIRE_TMP=$(mktemp -d)
  for n in 101770 1863690; do
    for round in 1 2 3; do
      "$RANK" wire bench --json --size "$n" --reps 7 > "$WIRE_TMP/c.$n.$round"
      RLX_SHARED_DIR="$SHARED" "$NODE" "$HARNESS" bench "$n" 5 > "$WIRE_TMP/js.$n.$round"
    done
  done
  python3 - "$WIRE_TMP" <<'PY'
import json, statistics, sys, os
d = sys.argv[1]
goals = {"f16": (6, 6), "f8e4m3": (3, 6), "f8e5m2": (3, 6), "f32": (0, 0)}
print("| bucket | path | C encode | seed encode | × | C decode | seed decode | × | goal enc/dec |")
print("|---|---|---|---|---|---|---|---|---|")
for n in (101770, 1863690):
    cs = [json.load(open(os.path.join(d, f"c.{n}.{r}"))) for r in (1, 2, 3)]
    js = [json.load(open(os.path.join(d, f"js.{n}.{r}"))) for r in (1, 2, 3)]
    assert all(abs(c["sum"] - j["sum"]) <= 1e-12 * max(1, abs(j["sum"])) for c, j in zip(cs, js)), "C and JS benched different vectors"
    med = lambda xs: statistics.median(xs)
    size = f"{n} floats ({n * 4 / 1e6:.2f} MB)"
    print(f"| {size} | memcpy | {med([c['memcpy_gbs'] for c in cs]):.1f} | | | | | | |")
    for p in ("f32", "f16", "f8e4m3", "f8e5m2"):
        ce = med([c[p]["encode_gbs"] for c in cs]); cd = med([c[p]["decode_gbs"] for c in cs])
        je = med([j[p]["encode_gbs"] for j in js]); jd = med([j[p]["decode_gbs"] for j in js])
        ge, gd = goals[p]
        goal = f"≥{ge}/≥{gd}, ≥5×" if ge else "—"
        print(f"| {size} | {p} | {ce:.2f} | {je:.2f} | {ce / je:.1f} | {cd:.2f} | {jd:.2f} | {cd / jd:.1f} | {goal} |")
print(f"\nkernels: {cs[0]['kernels']}; C decode allocates the float array (decode_into, into a caller's buffer, is within a few % of it)")
PY
  rm -rf "$WIRE_TMP"
fi
# --- end wire ----------------------------------------------------------------

# --- kernels -----------------------------------------------------------------
if want kernels; then
  echo "## kernels"
  # core/rlx-kernels against the plain single-threaded path it replaces (the
  # coordinator's loops over core/wire), GB/s of f32 parameters, median of 5,
  # pools of 1 thread and of one per core, at mnist-mlp-xl's and mnist-mlp's
  # sizes.
  for n in 1863690 101770; do
    "$BUILD/tests/kernels/bench-kernels" --size "$n" --reps 5
    echo
  done
fi
# --- end kernels -------------------------------------------------------------

# --- p2p ---------------------------------------------------------------------
if want p2p; then
  echo "## p2p"
  # Local bus: 4 MiB frames between two processes over RlxLocalBus (this
  # process sends, a spawned p2p-helper sink counts and answers), against a
  # raw blocking write/read over a socketpair between two processes, measured
  # in the same run. 64 frames (256 MiB) per run, 7 runs, medians.
  "$BUILD/tests/p2p/p2p-helper" bench 64 4 7
  # Socket vs memfd for bulk frames of 64 KiB .. 8 MiB, alternating, to a
  # process that reads every byte: MB/s, µs per frame, round trip, CPU.
  "$BUILD/tests/p2p/p2p-helper" shm-bench 5
fi
# --- end p2p -----------------------------------------------------------------

# --- cohort ------------------------------------------------------------------
if want cohort; then
  echo "## cohort"
  # Real `rlx-rank join` processes in private XDG dirs (scripts/bench-cohort.py).
  COHORT_PY="$(dirname "$0")/bench-cohort.py"
  # A one-rank cohort against `rlx-rank bench` (same model, batch, threads),
  # interleaved, medians of 3: mnist-mlp at 1024, mnist-mlp-xl at 256.
  python3 "$COHORT_PY" "$RANK" speed --runs 3 --threads "$(nproc)" \
    --configs mnist-mlp:1024,mnist-mlp-xl:256
  # Two ranks of mnist-mlp-xl at f32, f16, f8e4m3 (interleaved, same runs).
  python3 "$COHORT_PY" "$RANK" precision --runs 3 --ranks 2 --model mnist-mlp-xl --batch 256
  # The leader's main-loop time per round with four ranks of mnist-mlp-xl.
  python3 "$COHORT_PY" "$RANK" mainloop --runs 3 --ranks 4 --model mnist-mlp-xl --batch 64
  # Coordinator overhead per round: 4 local ranks, mnist-mlp, f32.
  python3 "$COHORT_PY" "$RANK" overhead --ranks 4 --runs 5 --steps 3000
  # Join: spawn beside a running 2-rank cohort -> first contributed gradient.
  python3 "$COHORT_PY" "$RANK" join --runs 5
  # Fidelity: Fashion-MNIST mnist-mlp, global batch 64, lr 0.05, 2 epochs;
  # 1 rank f32 vs 4 ranks at f32, f16, f8e4m3 with and without error feedback.
  if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    python3 "$COHORT_PY" "$RANK" fidelity --ranks 4 --batch 64 --lr 0.05 --epochs 2
  else
    echo "fidelity: skipped (install dataset-fashion-mnist)"
  fi
fi
# --- end cohort --------------------------------------------------------------

# --- remote ------------------------------------------------------------------
if want remote; then
  echo "## remote"
  # Network namespaces as hosts (needs root): one remote link's throughput
  # against libnice's reliable mode, unshaped and at 200 Mbit/s with 50 ms
  # RTT (tc tbf + a user-space delay relay), join time, and a two-host
  # cohort against the same ranks on the local bus.
  if [[ $(id -u) -ne 0 ]]; then
    echo "remote: skipped (network namespaces need root)"
  else
    for what in throughput shaped join cohort; do
      python3 "$(dirname "$0")/bench-remote.py" "$BUILD" "$what"
    done
  fi
fi
# --- end remote --------------------------------------------------------------

# --- gpu ---------------------------------------------------------------------
if want gpu; then
  echo "## gpu"
  # bench-gpu: median step time (10 warm-up steps, then ≥ --seconds), samples/s,
  # TFLOP/s, and the GPU-timestamp breakdown (upload / compute / download) of a
  # step. Always: lavapipe beside the CPU backend at batch 64, interleaved, 3
  # rounds (sizes CI; software Vulkan is slow). With a hardware Vulkan device:
  # rlx-rank bench --backend vulkan beside torch_ref.py speed --device cuda
  # (TF32 off, grads to host), 3 rounds in the same run, plus the breakdowns.
  BENCH_GPU="$BUILD/tests/gpu/bench-gpu"
  for round in 1 2 3; do
    echo "# round $round: cpu, then lavapipe"
    "$BENCH_GPU" --backend cpu --models mnist-mlp,mnist-cnn,mnist-mlp-xl --batches 64 --seconds 1
    "$BENCH_GPU" --backend vulkan:llvmpipe --models mnist-mlp,mnist-cnn,mnist-mlp-xl --batches 64 --seconds 1 || true
  done
  if "$RANK" devices --backend vulkan >/dev/null 2>&1; then
    for round in 1 2 3; do
      echo "# round $round: vulkan (hardware), then PyTorch CUDA"
      "$BENCH_GPU" --backend vulkan --models mnist-mlp,mnist-cnn --batches 64,1024 --seconds 2
      "$BENCH_GPU" --backend vulkan --models mnist-mlp-xl --batches 1024,8192 --seconds 2
      for m in mnist-mlp:1024 mnist-cnn:1024 mnist-mlp-xl:8192; do
        "$RANK" bench --model "${m%:*}" --batch "${m#*:}" --backend vulkan --seconds 2
      done
      # mnist-cnn paths: the fused direct convolutions (default) against the
      # GEMM path (RLX_VK_CNN=gemm)
      echo -n "RLX_VK_CNN=gemm "
      RLX_VK_CNN=gemm "$RANK" bench --model mnist-cnn --batch 1024 --backend vulkan --seconds 2
      if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        python3 "$TORCH_REF" speed --device cuda --models mnist-mlp,mnist-cnn --batches 64,1024
        python3 "$TORCH_REF" speed --device cuda --models mnist-mlp-xl --batches 1024,8192
      fi
    done
  else
    echo "gpu: no hardware Vulkan device here; the H200 figures in BENCHMARKS.md come from the device machine"
  fi
fi
# --- end gpu -----------------------------------------------------------------

# --- app ---------------------------------------------------------------------
if want app; then
  echo "## app"
  # The desktop app under Xvfb: frame time and UI-thread CPU with four ranks
  # training at full speed (watching, then hovering over the chart), the
  # cohort's steps/s against a headless rank in the app's place (same run),
  # and the chart with 100,000 points. Medians of 3.
  if [[ -x "$BUILD/app/rlx-cluster" ]]; then
    bash "$(dirname "$0")/bench-app.sh" "$BUILD" 3 20
  else
    echo "app: $BUILD/app/rlx-cluster was not built (GTK 4 / libadwaita missing)"
  fi
fi
# --- end app -----------------------------------------------------------------
