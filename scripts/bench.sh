#!/usr/bin/env bash
# Every figure in BENCHMARKS.md, measured side by side with its reference in
# one run. Called by `./rlx bench [AREA…]` with the (release) build dir first.
#   AREA: vision wire gpu p2p cohort (default: all that run on this machine)
set -euo pipefail
BUILD=${1:?usage: scripts/bench.sh BUILD_DIR [AREA…]}
shift
RANK="$BUILD/tools/rlx-rank"
SHARED=${RLX_SHARED_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/shared}
TORCH_REF="$SHARED/bench/torch_ref.py"
AREAS=${*:-vision wire p2p cohort gpu}
want () { [[ " $AREAS " == *" $1 "* ]]; }
echo "# machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(date -u +%F)"

# --- vision ------------------------------------------------------------------
if want vision; then
  echo "## vision"
fi
# --- end vision --------------------------------------------------------------

# --- wire --------------------------------------------------------------------
if want wire; then
  echo "## wire"
fi
# --- end wire ----------------------------------------------------------------

# --- p2p ---------------------------------------------------------------------
if want p2p; then
  echo "## p2p"
  # Local bus: 4 MiB frames between two processes over RlxLocalBus (this
  # process sends, a spawned p2p-helper sink counts and answers), against a
  # raw blocking write/read over a socketpair between two processes, measured
  # in the same run. 64 frames (256 MiB) per run, 7 runs, medians.
  "$BUILD/tests/p2p/p2p-helper" bench 64 4 7
fi
# --- end p2p -----------------------------------------------------------------

# --- cohort ------------------------------------------------------------------
if want cohort; then
  echo "## cohort"
fi
# --- end cohort --------------------------------------------------------------

# --- gpu ---------------------------------------------------------------------
if want gpu; then
  echo "## gpu"
fi
# --- end gpu -----------------------------------------------------------------
